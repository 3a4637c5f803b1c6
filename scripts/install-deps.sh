#!/usr/bin/env bash
# Installs the system packages libmtls needs to build, test, benchmark and demo, when missing.
# Runs apt-get as root (or through sudo); does nothing when everything is present.
set -euo pipefail
pkgs=(
  pkg-config libssl-dev openssl libp11-kit-dev p11-kit libsqlite3-dev sqlite3
  softhsm2 opensc gnutls-bin nginx-light curl libcurl4-openssl-dev strace
  valgrind  # callgrind: instructions per handshake (bench/callgrind.sh, Tests/e2e/test_listener_instructions.py)
  python3 python3-pip ca-certificates
  publicsuffix openjdk-17-jdk-headless golang-go
  apache2-bin  # Apache httpd as a peer (Tests/e2e/test_apache.py)
  easy-rsa golang-cfssl libnss3-tools  # other producers of PKIs and PKCS#12 files (Tests/e2e/test_other_producers.py)
  pebble  # the ACME test server, with pebble-challtestsrv as its DNS (Tests/e2e/test_enroll.py)
  fcgiwrap  # the EST endpoint: nginx in front of a CGI signing with openssl (Tests/e2e/test_est.py)
  tinyproxy  # a real HTTP CONNECT proxy for the Python proxy tests (bindings/python/tests/test_proxy.py)
  erlang-nox  # an Erlang/OTP TLS 1.3 client against a listener without CA names (Tests/e2e/test_ca_names.py)
  swtpm swtpm-tools tpm2-tools tpm2-abrmd libtss2-tcti-tabrmd0 libtpm2-pkcs11-1 libtpm2-pkcs11-tools dbus  # a TPM 2.0 token: swtpm, its resource manager and tpm2-pkcs11 (Tests/e2e/test_tpm.py)
  debhelper dpkg-dev lintian help2man chrpath fakeroot binutils util-linux python3-venv
  mkdocs  # the docs site: make docs, make test-docs (mkdocs build --strict)
  postgresql postgresql-client  # psql through both tunnels to PostgreSQL's UNIX socket (Tests/e2e/test_tunnel.py)
  redis-server  # a real plaintext backend (redis-cli through both tunnels) (Tests/e2e/test_tunnel.py)
  stunnel4  # the other end of `mtls tunnel` in both directions, and its bench baseline (Tests/e2e/test_tunnel.py, bench/bench_tunnel.py)
  stress-ng  # keeps the cores busy for the no-flake proof: make test green while `stress-ng --cpu 2` runs
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Python test tools (PyPI): pytest, pytest-xdist (make test-python and test-e2e run their tests in
# parallel worker processes, `-n`), cryptography as one of the PKCS#12 producers, and requests and
# httpx (the bindings' optional HTTP extras, tested and benchmarked against nginx).
# prometheus_client: its own text parser reads `mtls serve --metrics-port`
# (Tests/e2e/test_serve_metrics_endpoint.py, test_cli_store_expiry.py).
PY=${PYTHON:-python3}
$PY - <<'PYEOF' || $PY -m pip install -q pytest pytest-xdist cryptography requests httpx prometheus_client
import pytest, xdist, cryptography, requests, httpx, prometheus_client  # noqa: F401
PYEOF
# acme2certifier (PyPI), the second ACME server of Tests/e2e/test_acme2certifier.py, in a virtual
# environment of its own (its pyOpenSSL/josepy pins stay away from the test python); the tests
# find it at this path (or MTLS_A2C_PYTHON).
A2C=${MTLS_A2C_VENV:-/opt/libmtls-tests/acme2certifier}
if ! "$A2C/bin/python" -c 'import acme2certifier.acme_srv' 2>/dev/null; then
  echo "install-deps: installing acme2certifier into $A2C"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO $PY -m venv "$A2C"
  $SUDO "$A2C/bin/pip" install -q acme2certifier==0.46.3
fi
true
