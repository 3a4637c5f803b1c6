# libmtls — build, test, install, benchmark, demo.
#   make demo     build, then run the end-to-end demo (private PKI, store, mTLS server + client)
#   make test     everything: Swift tests, C tests against the installed header, Python, e2e, limbo
#   make check    the inner loop: Swift tests, the ABI check, C and Python tests (no e2e, limbo, packages)
#   make docs     the docs site (MkDocs, docs/ + generated reference pages) into out/docs
#   make bench    benchmarks, each printed as a ratio against a raw OpenSSL C baseline
#   make install PREFIX=/usr/local
SHELL := /bin/bash
PREFIX ?= /usr/local
CONFIG ?= release
VERSION := $(shell scripts/version.sh)
PYTHON ?= python3
SWIFT ?= swift
OUT := $(CURDIR)/out
TEST_PREFIX := $(OUT)/prefix
# The x509-limbo suite, vendored with its licence and provenance (scripts/refresh-limbo.sh DIR
# refreshes it); LIMBO=DIR runs another copy.
LIMBO ?= $(CURDIR)/Tests/limbo

.PHONY: deb wheel print-version
.PHONY: all deps build build-debug build-release install test test-swift test-abi test-c test-python test-e2e test-limbo soak bench demo clean
.PHONY: check test-swift-plugins bench-swift-plugins docs docc test-docs

all: build

print-version:
	@echo $(VERSION)

deps:
	@scripts/install-deps.sh

build: deps build-$(CONFIG)

build-debug:
	$(SWIFT) build -c debug --build-tests

build-release:
	$(SWIFT) build -c release

# Installs the library (with SONAME symlinks), header, pkg-config file and the mtls command.
install: build
	@bin=$$($(SWIFT) build -c $(CONFIG) --show-bin-path) && \
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin && \
	install -m 0755 $$bin/libmtls.so $(DESTDIR)$(PREFIX)/lib/libmtls.so.$(VERSION) && \
	ln -sf libmtls.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libmtls.so.0 && \
	ln -sf libmtls.so.0 $(DESTDIR)$(PREFIX)/lib/libmtls.so && \
	install -m 0755 $$bin/mtls-cli $(DESTDIR)$(PREFIX)/bin/mtls && \
	install -m 0644 include/mtls.h $(DESTDIR)$(PREFIX)/include/mtls.h && \
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$${prefix}/lib|' -e 's|@RPATH@|-Wl,-rpath,$${libdir} |' \
	    -e 's|@VERSION@|$(VERSION)|' pkgconfig/mtls.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/mtls.pc && \
	echo "installed libmtls $(VERSION) ($(CONFIG)) into $(DESTDIR)$(PREFIX)"

# One debug build serves every test stage: Swift tests, the installed C ABI, Python, e2e.
# The e2e stage spends most of its time waiting on the peers it starts, so the stages that need
# the CPU and time nothing (limbo, the docs site, the fuzz build and its time-boxed runs) run
# beside it (test-beside-e2e); each stage's output is printed whole when it ends (-Otarget).
test: deps
	$(MAKE) --no-print-directory build-debug
	$(MAKE) --no-print-directory test-swift
	$(MAKE) --no-print-directory install CONFIG=debug PREFIX=$(TEST_PREFIX) DESTDIR=
	$(MAKE) --no-print-directory deb wheel CONFIG=debug DPKG_DEB_ARGS=-z1
	$(MAKE) --no-print-directory -j3 -Otarget test-abi test-c test-python build-swift-plugins
	$(MAKE) --no-print-directory -j2 -Otarget test-e2e test-beside-e2e
	$(MAKE) --no-print-directory test-swift-plugins

.PHONY: test-beside-e2e
test-beside-e2e:
	$(MAKE) --no-print-directory test-limbo
	$(MAKE) --no-print-directory test-docs
	$(MAKE) --no-print-directory test-fuzz

# The inner loop: one debug build, the Swift tests, then the installed library's ABI check, C
# programs and Python tests (the C programs beside the Python tests, which mostly wait). No e2e,
# no limbo, no packages: `make test` runs those.
check: deps
	$(MAKE) --no-print-directory build-debug
	$(MAKE) --no-print-directory test-swift
	$(MAKE) --no-print-directory install CONFIG=debug PREFIX=$(TEST_PREFIX) DESTDIR=
	$(MAKE) --no-print-directory -j2 -Otarget test-abi test-c test-python

# Every public declaration of the Swift API (Sources/MTLS*) has a /// doc comment; then the tests.
test-swift:
	$(PYTHON) scripts/check-swift-docs.py
	$(SWIFT) test -c debug --skip-build

# The docs site: the reference pages generated from their sources (error codes and the C API from
# include/mtls.h, the Python API from docstrings, every command's --help from the installed mtls
# when there is one), then `mkdocs build --strict` (a warning, such as a link to a missing page,
# fails) into out/docs, then every local link and #anchor of the built site checked.
MTLS_DOCS_CLI ?= $(TEST_PREFIX)/bin/mtls
docs:
	$(PYTHON) scripts/gen-docs.py $(MTLS_DOCS_CLI)
	mkdocs build --strict --quiet --site-dir $(OUT)/docs
	$(PYTHON) scripts/gen-docs.py --check-links $(OUT)/docs

# The Swift API's DocC catalog (Sources/MTLS/MTLS.docc) with the doc comments of the debug
# build's modules, into out/docc/MTLS.doccarchive; a broken ``link`` fails (--warnings-as-errors).
docc:
	$(PYTHON) scripts/build-docc.py "$$($(SWIFT) build -c debug --show-bin-path)" $(OUT)/docc

# make test runs it after the install, so the CLI reference is the built mtls's.
test-docs: docs docc

# Debian packages (libmtls0, libmtls-dev, mtls) in out/deb/, made with debhelper's tools.
deb: build
	DPKG_DEB_ARGS="$(DPKG_DEB_ARGS)" scripts/make-deb.sh "$$($(SWIFT) build -c $(CONFIG) --show-bin-path)" $(OUT)

# The Python wheel with the self-contained libmtls.so inside, in out/wheel/.
wheel: build
	PYTHON=$(PYTHON) scripts/make-wheel.sh "$$($(SWIFT) build -c $(CONFIG) --show-bin-path)" $(OUT)

# The header is the only definition of the C ABI: every declared function is exported with the
# same parameter count as its Swift definition (and nothing else is exported), and the Python
# ctypes structures have the header's sizes and offsets, and every constant (status codes and
# their names, flags, key types) in Python and Swift is the header's; every Python ctypes
# declaration (restype, argtypes, callback types) and every Swift @_cdecl parameter has the
# header's type, argument by argument.
test-abi:
	$(PYTHON) scripts/check-abi.py exports $(TEST_PREFIX)/include/mtls.h $(TEST_PREFIX)/lib/libmtls.so Sources
	$(PYTHON) scripts/check-abi.py layout $(TEST_PREFIX)/include/mtls.h bindings/python/src $(TEST_PREFIX)/lib/libmtls.so
	$(PYTHON) scripts/check-abi.py constants $(TEST_PREFIX)/include/mtls.h bindings/python/src $(TEST_PREFIX)/lib/libmtls.so Sources
	$(PYTHON) scripts/check-abi.py types $(TEST_PREFIX)/include/mtls.h bindings/python/src $(TEST_PREFIX)/lib/libmtls.so Sources

# C programs compiled against the installed header through pkg-config, run with no
# LD_LIBRARY_PATH, C_TEST_JOBS (3) at a time, each in its own temporary folder
# (scripts/test-c.sh). Every program runs, whatever failed beside it; the failed ones are named
# at the end.
test-c:
	PKG_CONFIG_PATH=$(TEST_PREFIX)/lib/pkgconfig scripts/test-c.sh $(OUT)/c

# The Python and e2e tests run in PYTEST_WORKERS worker processes (pytest-xdist); most of their
# time is spent waiting on peers, not on the CPU. Every worker has its own temporary folder and
# session fixtures; servers take ephemeral ports. Each test file stays on one worker (--dist
# loadfile), so that a module's servers and PKIs are made once. PYTEST_WORKERS=0 runs them in one
# process.
PYTEST_WORKERS ?= 4
PYTEST_ARGS = -q -p no:cacheprovider $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)

test-python:
	cd bindings/python && MTLS_LIBRARY=$(TEST_PREFIX)/lib/libmtls.so PYTHONPATH=src \
	  $(PYTHON) -m pytest $(PYTEST_ARGS) tests

test-e2e:
	MTLS_OUT=$(OUT) MTLS_CLI=$(TEST_PREFIX)/bin/mtls MTLS_PREFIX=$(TEST_PREFIX) MTLS_LIBRARY=$(TEST_PREFIX)/lib/libmtls.so \
	  PYTHONPATH=bindings/python/src $(PYTHON) -m pytest $(PYTEST_ARGS) Tests/e2e

# Issue 40's load proof at its full size: Tests/e2e/test_listener_load.py with 64 clients x 10,000
# connections (640,000) against `mtls serve`, its identity replaced every 3 s until the clients are
# done (about 20 minutes on a debug build on two busy cores). `make test` runs the same test at
# 64 x 160. Uses the library installed by the last `make test` (or TEST_PREFIX).
SOAK_CLIENTS ?= 64
SOAK_HANDSHAKES ?= 10000
soak:
	MTLS_LOAD_CLIENTS=$(SOAK_CLIENTS) MTLS_LOAD_HANDSHAKES=$(SOAK_HANDSHAKES) MTLS_LOAD_ROTATE_SECONDS=3 \
	  MTLS_OUT=$(OUT) MTLS_CLI=$(TEST_PREFIX)/bin/mtls MTLS_PREFIX=$(TEST_PREFIX) MTLS_LIBRARY=$(TEST_PREFIX)/lib/libmtls.so \
	  PYTHONPATH=bindings/python/src $(PYTHON) -m pytest -q -s -p no:cacheprovider Tests/e2e/test_listener_load.py

# x509-limbo conformance: zero false accepts and at least 203 of 208 passing; then BetterTLS's
# name-constraints matrix (8,748 cases) and path-building suite (81 cases), rebuilt by
# scripts/bettertls.py: every case passing.
test-limbo:
	@if [ -x $(TEST_PREFIX)/bin/mtls ] && $(TEST_PREFIX)/bin/mtls limbo --help >/dev/null 2>&1; then \
	  $(TEST_PREFIX)/bin/mtls limbo < $(LIMBO)/limbo.json > $(OUT)/limbo-results.json && \
	  $(PYTHON) scripts/check-limbo.py $(LIMBO) $(OUT)/limbo-results.json && \
	  for s in nameconstraints pathbuilding; do \
	    $(PYTHON) scripts/bettertls.py $$s $(OUT)/bettertls-$$s.json && \
	    $(TEST_PREFIX)/bin/mtls limbo < $(OUT)/bettertls-$$s.json > $(OUT)/bettertls-$$s-results.json && \
	    { $(PYTHON) scripts/bettertls.py --score $(OUT)/bettertls-$$s.json $(OUT)/bettertls-$$s-results.json \
	        > $(OUT)/bettertls-$$s.txt; rc=$$?; tail -20 $(OUT)/bettertls-$$s.txt; [ $$rc = 0 ]; } || exit 1; \
	  done; \
	else echo "test-limbo: mtls limbo is not built yet" >&2; exit 1; fi

# ---- Sanitizers. Swift code: --sanitize=address (Swift on Linux has no UBSan mode; UBSan covers
# the C test programs) or --sanitize=thread, each in its own scratch path; the Swift tests run
# there, then every Tests/c program is built with the toolchain's clang (same sanitizer runtime)
# against that library and run. Findings fail the target.
SWIFT_CLANG ?= $(dir $(realpath $(shell command -v $(SWIFT))))clang
SAN_C_TESTS ?= $(wildcard Tests/c/*.c)
comma := ,
# The toolchain's TSan runtime needs its libdispatch and BlocksRuntime.
SWIFT_LIBDIR ?= $(abspath $(dir $(SWIFT_CLANG))../lib/swift/linux)

.PHONY: test-asan test-tsan

define san_c_tests
	@mkdir -p $(OUT)/$(1)/lib $(OUT)/$(1)/c && ln -sf $(CURDIR)/.build-$(1)/debug/libmtls.so $(OUT)/$(1)/lib/libmtls.so.0 && \
	ln -sf libmtls.so.0 $(OUT)/$(1)/lib/libmtls.so && set -e; \
	for src in $(SAN_C_TESTS); do exe=$(OUT)/$(1)/c/$$(basename $$src .c); \
	  links=$$(sed -n '1s|^/\* test-c links: \(.*\) \*/$$|\1|p' $$src); \
	  rm -f $$exe; $(SWIFT_CLANG) -std=c11 -g -O1 -pthread -fno-omit-frame-pointer $(2) -Iinclude -o $$exe $$src \
	    -L$(OUT)/$(1)/lib -lmtls -Wl,-rpath,$(OUT)/$(1)/lib $$([ -z "$$links" ] || pkg-config --cflags --libs $$links) 2>&1 | { grep -v "ld.gold: warning: Cannot export local symbol" || true; }; \
	  test -x $$exe; \
	  echo "== $(1) $$exe"; env -u LD_LIBRARY_PATH MTLS_TEST_TMP=$(OUT)/$(1)/c MTLS_TEST_SANITIZER=$(1) $(3) $$exe; done
endef

test-asan: deps
	$(SWIFT) build -c debug --build-tests --sanitize=address --scratch-path .build-asan
	MTLS_TEST_SANITIZER=asan ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 $(SWIFT) test -c debug --skip-build --sanitize=address --scratch-path .build-asan
	$(call san_c_tests,asan,-fsanitize=address$(comma)undefined -fno-sanitize-recover=undefined,ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)

TSAN_SUPPRESSIONS := $(CURDIR)/Tests/tsan/suppressions.txt
TSAN_C_FLAGS = -fsanitize=thread -L$(SWIFT_LIBDIR) -ldispatch -lBlocksRuntime -Wl$(comma)-rpath$(comma)$(SWIFT_LIBDIR)

test-tsan: deps
	$(SWIFT) build -c debug --build-tests --sanitize=thread -Xswiftc -DMTLS_TSAN --scratch-path .build-tsan
	MTLS_TEST_SANITIZER=tsan TSAN_OPTIONS=halt_on_error=1:suppressions=$(TSAN_SUPPRESSIONS) \
	  $(SWIFT) test -c debug --skip-build --sanitize=thread -Xswiftc -DMTLS_TSAN --scratch-path .build-tsan
	$(call san_c_tests,tsan,$(TSAN_C_FLAGS),TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(TSAN_SUPPRESSIONS))

# `make tsan` (issue 40): only the tests that run threads — the listener's turn, parked handshakes
# and its thread, the epoll forwarder, the tunnel, async/cancel, identity and policy rotation,
# session tickets, the C programs that share handles across threads, and the Python asyncio,
# tunnel, listener and rotation tests — under ThreadSanitizer, in the same .build-tsan. Every
# report is printed (halt_on_error=0) and fails the target (exit 66). io_sync=0: TSan would
# otherwise count every write to a socket followed by a read of any socket as an ordering between
# the two threads (one sync object for all sockets), which hides races in a library whose threads
# all do socket I/O. Not part of `make test`: it is a second full build of everything; run it
# after changing code that threads share (docs/contributing.md).
TSAN_SWIFT_TESTS ?= ListenerAdmissionTests|IdleConnectionMemoryTests|TLSConnectionTests|TunnelTests|SwiftAsyncAPITests|RotationTests|RotationFailureTests
TSAN_THREAD_C_TESTS ?= $(addprefix Tests/c/,test_concurrency.c test_hostile.c test_listener_flood.c test_nonblocking_accept.c \
	test_resumption.c test_rotation.c test_rotation_client.c test_store_concurrency.c test_tls.c test_tunnel.c)
# Python (ctypes) loads the TSan library with the toolchain's TSan runtime preloaded (it needs
# the toolchain's libdispatch and BlocksRuntime); the interpreter itself is not instrumented.
TSAN_PYTHON_TESTS ?= test_asyncio.py test_tunnel.py test_listener_counters.py test_rotation.py
TSAN_RUNTIME = $(firstword $(wildcard $(dir $(SWIFT_CLANG))../lib/clang/*/lib/linux/libclang_rt.tsan-x86_64.so))
TSAN_THREAD_OPTIONS = halt_on_error=0:io_sync=0:second_deadlock_stack=1:suppressions=$(TSAN_SUPPRESSIONS)
.PHONY: tsan
tsan: SAN_C_TESTS = $(TSAN_THREAD_C_TESTS)
tsan: deps
	$(SWIFT) build -c debug --build-tests --sanitize=thread -Xswiftc -DMTLS_TSAN --scratch-path .build-tsan
	MTLS_TEST_SANITIZER=tsan TSAN_OPTIONS=$(TSAN_THREAD_OPTIONS) \
	  $(SWIFT) test -c debug --skip-build --sanitize=thread -Xswiftc -DMTLS_TSAN --scratch-path .build-tsan --filter '$(TSAN_SWIFT_TESTS)'
	$(call san_c_tests,tsan,$(TSAN_C_FLAGS),TSAN_OPTIONS=$(TSAN_THREAD_OPTIONS))
	cd bindings/python && env -u LD_LIBRARY_PATH LD_PRELOAD="$(TSAN_RUNTIME) $(SWIFT_LIBDIR)/libdispatch.so $(SWIFT_LIBDIR)/libBlocksRuntime.so" \
	  TSAN_OPTIONS=$(TSAN_THREAD_OPTIONS) MTLS_TEST_SANITIZER=tsan MTLS_LIBRARY=$(OUT)/tsan/lib/libmtls.so PYTHONPATH=src \
	  $(PYTHON) -m pytest -q -p no:cacheprovider $(addprefix tests/,$(TSAN_PYTHON_TESTS))

bench: deps
	$(SWIFT) build -c release
	$(MAKE) --no-print-directory install CONFIG=release PREFIX=$(OUT)/bench-prefix DESTDIR=
	MTLS_PREFIX=$(OUT)/bench-prefix $(PYTHON) bench/run.py

demo: deps build-release
	@bash scripts/demo.sh "$$($(SWIFT) build -c release --show-bin-path)/mtls-cli"

clean:
	rm -rf .build $(OUT)

# ---- Fuzzing (fuzz/): libFuzzer targets on the C ABI, linked against a libmtls.so built with
# AddressSanitizer and libFuzzer coverage (swiftc -sanitize=fuzzer,address; .build-fuzz). The toolchain's own clang builds
# the targets so the sanitizer runtimes match. `make fuzz` runs each target FUZZ_SECONDS;
# `make test-fuzz` (a stage of `make test`) replays fuzz/regressions/ and runs each briefly (below).
FUZZ_SECONDS ?= 600
# The network parsers have no C ABI: their targets go through mtlsfuzz_input, which only the fuzz
# build has (-DMTLS_FUZZ: Sources/MTLS/FuzzEntry.swift; fuzz/fuzz.map exports it). `make
# test` gives them 10 s each (FUZZ_NET_TEST_SECONDS), the C ABI targets 20 s.
FUZZ_ABI_TARGETS := pkcs12 cert policy chain store p11uri tls_client
FUZZ_NET_TARGETS := http_response http_request acme renewal_info est ocsp crl
FUZZ_TARGETS := $(FUZZ_ABI_TARGETS) $(FUZZ_NET_TARGETS)
FUZZ_NET_TEST_SECONDS ?= 10
FUZZ_CC ?= $(dir $(shell readlink -f $$(command -v $(SWIFT))))clang
FUZZ_BUILD := $(CURDIR)/.build-fuzz
FUZZ_OUT := $(OUT)/fuzz
FUZZ_FLAGS = -max_len=65536 -timeout=25 -rss_limit_mb=4096 -print_final_stats=1
export ASAN_OPTIONS ?= detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1

.PHONY: fuzz test-fuzz fuzz-build
fuzz-build:
	$(SWIFT) build -c debug --product mtls --scratch-path $(FUZZ_BUILD) \
	  -Xswiftc -sanitize=fuzzer,address -Xswiftc -DMTLS_FUZZ \
	  -Xlinker --version-script=$(CURDIR)/fuzz/fuzz.map
	@ln -sf libmtls.so $(FUZZ_BUILD)/debug/libmtls.so.0 && mkdir -p $(FUZZ_OUT) && set -e; \
	for t in $(FUZZ_TARGETS); do \
	  $(FUZZ_CC) -fuse-ld=lld -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude \
	    -DFUZZ_DATA='"$(CURDIR)/fuzz/data"' fuzz/fuzz_$$t.c -o $(FUZZ_OUT)/fuzz_$$t \
	    -L$(FUZZ_BUILD)/debug -lmtls -Wl,-rpath,$(FUZZ_BUILD)/debug; \
	done

# Each target: the committed seeds plus what earlier runs found (out/fuzz/corpus-<t>, first
# directory: new inputs go there), the dictionary when there is one. Log: out/fuzz/<t>.log.
# $(call fuzz_run,SECONDS,TARGETS)
define fuzz_run
	@set -e; for t in $(2); do \
	  mkdir -p $(FUZZ_OUT)/corpus-$$t $(FUZZ_OUT)/artifacts-$$t; \
	  dict=; [ -f fuzz/$$t.dict ] && dict=-dict=fuzz/$$t.dict; \
	  echo "== fuzz_$$t for $(1) s"; \
	  if ! (cd $(FUZZ_OUT) && ./fuzz_$$t $(FUZZ_FLAGS) $$(sed "s|-dict=|-dict=$(CURDIR)/|" <<< "$$dict") \
	        -max_total_time=$(1) -artifact_prefix=artifacts-$$t/ corpus-$$t $(CURDIR)/fuzz/corpus/$$t \
	        > $$t.log 2>&1); then \
	    tail -60 $(FUZZ_OUT)/$$t.log; echo "fuzz_$$t FAILED: reproducer in $(FUZZ_OUT)/artifacts-$$t" >&2; exit 1; \
	  fi; \
	  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)|cov: ' $(FUZZ_OUT)/$$t.log | tail -3; \
	done
endef

fuzz: fuzz-build
	$(call fuzz_run,$(FUZZ_SECONDS),$(FUZZ_TARGETS))

test-fuzz: fuzz-build
	@set -e; for t in $(FUZZ_TARGETS); do \
	  [ -d fuzz/regressions/$$t ] && [ -n "$$(ls fuzz/regressions/$$t)" ] || continue; \
	  echo "== regressions of fuzz_$$t"; (cd $(FUZZ_OUT) && ./fuzz_$$t -runs=1 $(CURDIR)/fuzz/regressions/$$t/*); \
	done
	@$(MAKE) --no-print-directory -j$(FUZZ_JOBS) --output-sync=target $(addprefix fuzz-test-,$(FUZZ_TARGETS))

# `make test-fuzz` runs FUZZ_JOBS targets at a time (default 2: one a core), each for its own
# time box, so each target gets the same seconds of a core as when they ran one after another.
FUZZ_JOBS ?= 2
fuzz-test-%:
	$(call fuzz_run,$(if $(filter $*,$(FUZZ_NET_TARGETS)),$(FUZZ_NET_TEST_SECONDS),20),$*)

# ---- Swift plugins (Plugins/MTLSNIOSSL): MTLSNIOSSL, libmtls for swift-nio-ssl (AsyncHTTPClient,
# NIO servers). Its own package, depending on this one by path, so that SwiftNIO is never part of
# the library's build, libmtls.so or `make demo`; it builds in Plugins/MTLSNIOSSL/.build. Its
# XCTests start nginx (Tests/support/nginx_server.py), SoftHSM2 tokens and openssl s_client
# themselves. The first build of SwiftNIO, swift-nio-ssl and AsyncHTTPClient takes minutes.
PLUGIN_NIOSSL := Plugins/MTLSNIOSSL
# The plugin's build (swift-nio-ssl's BoringSSL, NIO, AsyncHTTPClient and its own libmtls) is
# the longest compile of `make test`: there it runs beside the C and Python tests, which mostly
# wait; test-swift-plugins then finds it built.
.PHONY: build-swift-plugins
build-swift-plugins:
	@start=$$(date +%s); $(SWIFT) build -c debug --build-tests --package-path $(PLUGIN_NIOSSL) && \
	echo "build-swift-plugins: built in $$(( $$(date +%s) - start )) s"

test-swift-plugins: deps build-swift-plugins
	$(SWIFT) test -c debug --skip-build --package-path $(PLUGIN_NIOSSL)

# AsyncHTTPClient GETs to nginx with MTLSNIOSSL against swift-nio-ssl's own configuration from the
# same files, kept-alive and new connections: the ratio of median times per request. Run it alone.
BENCH_REQUESTS ?= 500
BENCH_ROUNDS ?= 7
bench-swift-plugins: deps
	$(SWIFT) build -c release --package-path $(PLUGIN_NIOSSL) --product mtls-niossl-bench
	$$($(SWIFT) build -c release --package-path $(PLUGIN_NIOSSL) --show-bin-path)/mtls-niossl-bench $(BENCH_REQUESTS) $(BENCH_ROUNDS)
