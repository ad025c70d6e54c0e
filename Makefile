# Makefile: the one build of the KDA reference and conformance suite.
# SPDX-License-Identifier: MIT
#
#   make                 library (static and shared), the kda command
#   make golden          regenerate golden/ (the certified golden sets; docs/golden.md)
#   make check           every unit test, the CLI tests, numpy interop, golden/ verified
#                        (kda golden --verify), and the same unit tests again under
#                        AddressSanitizer + UndefinedBehaviorSanitizer
#   make check-certifier the fast certifier against MPFR on every L0 and L1 case (slow)
#   make example         the main job until the runner lands: kda ref on the bundled example
#   make install PREFIX=/usr/local DESTDIR=
#
# Nothing here uses -march=native or -ffast-math; the references are compiled with
# -ffp-contract=off (SPEC.md §9) and so is everything else whose results are compared.

VERSION   := 0.1.0
BUILD     ?= build
PREFIX    ?= /usr/local
DESTDIR   ?=
CC        ?= cc
PKG_CONFIG ?= pkg-config
PYTHON    ?= python3

DEPS_STAMP := $(BUILD)/.deps-ok
# Resolve pkg-config flags lazily, after deps.sh has had its chance to install packages.
PKGS      := libzip jansson mpfr gmp zlib
PKG_CFLAGS = $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null)
CHECK_CFLAGS = $(shell $(PKG_CONFIG) --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell $(PKG_CONFIG) --libs check 2>/dev/null)

WARN      := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
OPT       ?= -O2
SAN       ?=
comma     := ,
SANFLAGS  := $(if $(SAN),-fsanitize=address$(comma)undefined -fno-omit-frame-pointer -fno-sanitize-recover=all,)
CFLAGS    ?=
BASEFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -g $(OPT) $(WARN) \
             -ffp-contract=off -fno-fast-math -fPIC $(SANFLAGS) \
             -Iref -Ivectors -Iconformance -DKDA_VERSION=\"$(VERSION)\"
ALL_CFLAGS = $(BASEFLAGS) $(PKG_CFLAGS) $(CFLAGS) $(ISA_CFLAGS)
# ISA flags go to the simd backend's kernel files only (never -march=native); the backend
# picks a kernel at run time from what the CPU has.
ISA_CFLAGS :=
$(BUILD)/conformance/backends/simd/kda_simd_avx2.o: ISA_CFLAGS := -mavx2 -mfma
$(BUILD)/conformance/backends/simd/kda_simd_avx512.o: ISA_CFLAGS := -mavx512f -mavx2 -mfma
# The fast certifier's AVX2 kernel (picked at run time; -O3 for its vectorised inner loops).
$(BUILD)/ref/kda_cert_kern_avx2.o: ISA_CFLAGS := -mavx2 -mfma -O3
ALL_LDFLAGS = $(SANFLAGS) $(LDFLAGS)

# Library: every .c directly under the library modules (tests and backends live in folders).
LIB_SRC   := $(wildcard ref/*.c) $(wildcard vectors/*.c) $(wildcard conformance/*.c)
LIB_SRC   += $(wildcard conformance/backends/*/*.c)
# Test-only backend plugins (mutants, a crashing and a hanging one), built as shared objects.
PLUGIN_SRC := $(wildcard conformance/tests/plugin_*.c)
PLUGINS   := $(PLUGIN_SRC:conformance/tests/plugin_%.c=$(BUILD)/conformance/tests/kda_plugin_%.so)
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
TOOL_SRC  := $(wildcard tools/*.c)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/%.o)
TEST_SRC  := $(wildcard ref/tests/check_*.c) $(wildcard vectors/tests/check_*.c) \
             $(wildcard conformance/tests/check_*.c) $(wildcard tools/tests/check_*.c)
TEST_BIN  := $(TEST_SRC:%.c=$(BUILD)/%)
HEADERS   := $(wildcard ref/*.h) $(wildcard vectors/*.h) $(wildcard conformance/*.h) \
             $(wildcard conformance/backends/*/*.h)
PUB_HEADERS := ref/kda_problem.h ref/kda_ref.h vectors/kda_npz.h vectors/kda_prng.h \
               vectors/kda_case.h $(wildcard ref/kda_mpfr.h) $(wildcard conformance/kda_backend.h)

LIBA      := $(BUILD)/libkda.a
LIBSO     := $(BUILD)/libkda.so
KDA       := $(BUILD)/kda

.PHONY: check-certifier
.PHONY: all check check-conform check-unit check-cli check-numpy check-asan example install clean deps fuzz conform check-golden golden
.DEFAULT_GOAL := all

all: $(LIBA) $(LIBSO) $(KDA)

deps: $(DEPS_STAMP)
$(DEPS_STAMP):
	@sh tools/deps.sh $@

$(BUILD)/%.o: %.c $(HEADERS) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIBA): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(LIBSO): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libkda.so.0 -o $@ $^ $(ALL_LDFLAGS) $(PKG_LIBS) -lm

$(KDA): $(TOOL_OBJ) $(LIBA)
	$(CC) -o $@ $(TOOL_OBJ) $(LIBA) $(ALL_LDFLAGS) $(PKG_LIBS) -lm

$(BUILD)/%: %.c $(LIBA) $(HEADERS) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(LIBA) $(ALL_LDFLAGS) $(PKG_LIBS) $(CHECK_LIBS) -lm

# Unit tests: each Check program runs from the repository root (fixtures are found there);
# KDA_BIN tells the CLI tests which kda to run.
check-unit: $(TEST_BIN) $(KDA) $(PLUGINS)
	@set -e; for t in $(TEST_BIN); do \
	  echo "== $$t"; KDA_BIN=$(abspath $(KDA)) CK_DEFAULT_TIMEOUT=600 $$t; done

# numpy reads what kda wrote.  Skipped (saying why) when numpy is missing, unless
# KDA_REQUIRE_NUMPY=1 (as in CI), where a missing numpy is a failure.
check-numpy: $(KDA)
	@KDA_BIN=$(abspath $(KDA)) sh vectors/tests/numpy_interop.sh

check-asan:
	$(MAKE) BUILD=$(BUILD)/asan SAN=1 OPT=-O1 check-unit

# The committed golden sets: hashes, then every file regenerated and compared byte for byte.
check-golden: $(KDA)
	$(KDA) golden --verify golden

# The fast certifier against MPFR, bit for bit, on every L0 and L1 case (make check runs the
# L0 cases and the cheaper L1 ones; SPEC.md §8.12).
check-certifier: $(BUILD)/vectors/tests/check_certifier
	KDA_CERTIFIER_CHECK=all $(BUILD)/vectors/tests/check_certifier

# Regenerate golden/ (after a change to the catalog, the generator or the MPFR reference).
golden: $(KDA)
	$(KDA) golden --write golden

# kda conform end to end on golden/L1: every mutant killed; a JUnit report with every verdict
# kind validates against conformance/tests/junit.xsd.
check-conform: $(KDA) $(PLUGINS)
	@KDA_BIN=$(abspath $(KDA)) PLUGIN_DIR=$(abspath $(BUILD)/conformance/tests) \
	  sh conformance/tests/conform_l1.sh

check: check-unit check-numpy check-golden check-conform check-asan
	@echo "make check: all suites passed"

# A plugin needs only conformance/kda_backend.h and kda_problem.h: it links nothing of ours.
$(BUILD)/conformance/tests/kda_plugin_%.so: conformance/tests/plugin_%.c $(HEADERS) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -shared -o $@ $< $(ALL_LDFLAGS) -lm

# The main job: score every built-in backend on golden/L1 (or the bundled cases) and report.
conform: $(KDA)
	$(KDA) conform --out $(BUILD)/conform

example: $(KDA)
	$(KDA) ref --backend ref-f64 golden/example/example.npz -o $(BUILD)/example-out.npz
	$(KDA) inspect $(BUILD)/example-out.npz

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/kda $(DESTDIR)$(PREFIX)/bin \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(LIBA) $(DESTDIR)$(PREFIX)/lib/libkda.a
	install -m 755 $(LIBSO) $(DESTDIR)$(PREFIX)/lib/libkda.so.$(VERSION)
	ln -sf libkda.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libkda.so.0
	ln -sf libkda.so.0 $(DESTDIR)$(PREFIX)/lib/libkda.so
	install -m 644 $(PUB_HEADERS) $(DESTDIR)$(PREFIX)/include/kda/
	install -m 755 $(KDA) $(DESTDIR)$(PREFIX)/bin/kda
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' tools/kda.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kda.pc

clean:
	rm -rf $(BUILD)

# libFuzzer run of the .npy header parser (vectors/tests/fuzz_npy.c; needs clang with
# libFuzzer): make fuzz FUZZ_SECONDS=300.  New corpus entries go to $(BUILD)/fuzz/corpus.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
fuzz:
	@mkdir -p $(BUILD)/fuzz/corpus
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  -ffp-contract=off -Iref -Ivectors vectors/tests/fuzz_npy.c vectors/kda_npy.c \
	  -o $(BUILD)/fuzz/fuzz_npy
	$(BUILD)/fuzz/fuzz_npy -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  -dict=vectors/tests/fixtures/fuzz_npy.dict $(BUILD)/fuzz/corpus vectors/tests/fixtures/fuzz_npy
