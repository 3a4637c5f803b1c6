#!/usr/bin/env bash
# Builds the Debian packages libmtls0, libmtls-dev and mtls into out/deb/ from a release build,
# with debhelper's own tools: dh_shlibdeps computes Depends:, dh_makeshlibs writes the shlibs
# file, dh_installman installs the man pages help2man makes from `mtls --help` and from each command's
# `mtls <command> --help`.
#   scripts/make-deb.sh BIN_DIR OUT_DIR
set -euo pipefail
bin=$1
out=$2
top=$(cd "$(dirname "$0")/.." && pwd)
version=$("$top/scripts/version.sh")
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
work=$out/debbuild
rm -rf "$work" && mkdir -p "$work/stage" "$out/deb"
cp -r "$top/packaging/debian" "$work/debian"
cat > "$work/debian/changelog" <<CHANGELOG
libmtls ($version-1) unstable; urgency=medium

  * Release $version. See CHANGELOG.md in the source for what changed.

 -- libmtls developers <libmtls@example.org>  $(date -R)
CHANGELOG

# Stage the files as `make install` would lay them out under /usr, multiarch.
tmp=$work/debian/tmp
install -d "$tmp/usr/lib/$ma/pkgconfig" "$tmp/usr/include" "$tmp/usr/bin"
install -m 0644 "$bin/libmtls.so" "$tmp/usr/lib/$ma/libmtls.so.$version"
ln -s "libmtls.so.$version" "$tmp/usr/lib/$ma/libmtls.so.0"
ln -s "libmtls.so.0" "$tmp/usr/lib/$ma/libmtls.so"
install -m 0644 "$top/include/mtls.h" "$tmp/usr/include/mtls.h"
# The system's library directory is on every search path: no -rpath in the installed mtls.pc.
sed -e "s|@PREFIX@|/usr|" -e "s|@LIBDIR@|\${prefix}/lib/$ma|" -e "s|@RPATH@||" -e "s|@VERSION@|$version|" \
    "$top/pkgconfig/mtls.pc.in" > "$tmp/usr/lib/$ma/pkgconfig/mtls.pc"
install -m 0755 "$bin/mtls-cli" "$tmp/usr/bin/mtls"
# SwiftPM links executables with RUNPATH $ORIGIN; a Debian binary carries no search path.
chrpath -d "$tmp/usr/bin/mtls"
# One man page per command (mtls-connect(1), mtls-store-import(1)...), each made by help2man from
# `mtls <command> --help` through a one-line wrapper named after the page; its NAME line is the
# first sentence of the help's OVERVIEW. The command list is the CLI's own (scripts/gen-docs.py
# reads the SUBCOMMANDS of every --help); mtls(1) names them all under SEE ALSO.
mkdir -p "$work/wrap"
"${PYTHON:-python3}" "$top/scripts/gen-docs.py" --list-commands "$tmp/usr/bin/mtls" > "$work/commands"
see_also=$(sed 's/ /-/g; s/^/.BR mtls-/; s/$/ (1),/' "$work/commands"; echo ".BR mtls (1)")
printf '[SEE ALSO]\n%s\n' "$see_also" > "$work/see-also.h2m"
help2man --no-info --name "mutual-TLS identities, trust and connections" --version-string "$version" \
    --include "$work/see-also.h2m" "$tmp/usr/bin/mtls" > "$work/stage/mtls.1"
while read -r cmd; do
    page="mtls-${cmd// /-}"
    printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$tmp/usr/bin/mtls" "$cmd" > "$work/wrap/$page"
    chmod +x "$work/wrap/$page"
    # shellcheck disable=SC2086 # $cmd is the command's words
    name=$("$tmp/usr/bin/mtls" $cmd --help | sed -n '/^OVERVIEW: /,/^$/p' | tr '\n' ' ' |
           sed -e 's/^OVERVIEW: //' -e 's/\. .*//' -e 's/ *$//' -e 's/\.$//')
    help2man --no-info --name "${name:-mtls $cmd}" --version-string "$version" \
        --include "$work/see-also.h2m" "$work/wrap/$page" > "$work/stage/$page.1"
done < "$work/commands"

cd "$work"
export DH_VERBOSE=0
dh_testdir
dh_install --sourcedir=debian/tmp
dh_installdocs
dh_installchangelogs
dh_installman
dh_strip --no-automatic-dbgsym
dh_makeshlibs -V
dh_shlibdeps -l"$work/debian/libmtls0/usr/lib/$ma"
dh_compress
dh_fixperms
dh_missing --fail-missing
dh_installdeb
dh_gencontrol
dh_md5sums
# DPKG_DEB_ARGS reaches dpkg-deb (make test passes -z1: xz at its fastest level for the test packages).
dh_builddeb --destdir="$out/deb" -- ${DPKG_DEB_ARGS:-}
ls -1 "$out/deb"/*.deb
