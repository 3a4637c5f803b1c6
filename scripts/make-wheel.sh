#!/usr/bin/env bash
# Builds out/wheel/mtls-<version>-py3-none-<platform>.whl: the Python bindings with the
# self-contained libmtls.so inside the package (the loader looks beside the package first).
#   scripts/make-wheel.sh BIN_DIR OUT_DIR
set -euo pipefail
bin=$1
out=$2
top=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
work=$out/wheelbuild
rm -rf "$work" && mkdir -p "$work" "$out/wheel"
cp -r "$top/bindings/python/." "$work/"
rm -rf "$work/tests" "$work/build" "$work"/src/*.egg-info
find "$work" -name __pycache__ -prune -exec rm -rf {} +
strip --strip-unneeded -o "$work/src/mtls/libmtls.so" "$bin/libmtls.so"
# The wheel carries a native library: tag it for this platform (it works with any Python 3).
platform=$("$py" -c 'import sysconfig; print(sysconfig.get_platform().replace("-", "_").replace(".", "_"))')
cat > "$work/setup.cfg" <<CFG
[bdist_wheel]
python_tag = py3
plat_name = $platform
CFG
rm -f "$out/wheel"/mtls-*.whl
"$py" -m pip wheel --quiet --no-deps --wheel-dir "$out/wheel" "$work"
ls -1 "$out/wheel"/mtls-*.whl
