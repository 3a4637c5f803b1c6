#!/usr/bin/env sh
# Prints libmtls's version, MAJOR.MINOR.PATCH, from the one place it is written: the
# MTLS_VERSION_* macros of include/mtls.h (Swift reads the same macros; the Makefile, the
# packages and mtls.pc take it from here).
h=$(dirname "$0")/../include/mtls.h
v() { sed -n "s/^#define MTLS_VERSION_$1 \([0-9][0-9]*\)$/\1/p" "$h"; }
echo "$(v MAJOR).$(v MINOR).$(v PATCH)"
