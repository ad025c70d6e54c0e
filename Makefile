# Makefile: the one build of the KDA reference and conformance suite.
# SPDX-License-Identifier: MIT
#
#   make                 the libraries (libkda, libkda-oracle: static and shared), the kda command
#   make conform         the main job: kda conform on every built-in backend
#   make golden          regenerate golden/ (the certified golden sets; docs/golden.md)
#   make check           every suite of the list below (`check:`), the unit tests again under
#                        AddressSanitizer + UndefinedBehaviorSanitizer included
#   make check-certifier the fast certifier against MPFR on every L0 and L1 case (slow)
#   make check-l2, check-zoo, check-scale, check-python-l1, check-python-install   the slow
#                        suites, not in make check
#   make check-zoo-ci    the CI-size part of check-zoo (in make check)
#   make example         kda ref on the bundled example, then kda inspect of its result
#   make check-symbols   libkda.so and libkda-oracle.so export exactly the functions of their
#                        installed headers, each compiles on its own; libkda needs no MPFR
#   make check-headers   each installed header (and kda_backend_pool.h) compiles alone as C11
#                        and as C++17, with C linkage
#   make check-layers    the rooms of docs/layout.md: no upward reference, no cycle between
#                        files, no private header of another module (nm and #include lines)
#   make check-sizes     the library's functions stay short (median, p90, max lines; ctags)
#   make install PREFIX=/usr/local DESTDIR=   (golden sets under $(PREFIX)/share/kda/golden)
#
# Every object and program records the headers it read (-MMD -MP, BUILD/.../*.d): a header
# edit rebuilds exactly what includes it.
#
# Nothing here uses -march=native or -ffast-math; the references are compiled with
# -ffp-contract=off (SPEC.md §9) and so is everything else whose results are compared.

# The version is written once, in ref/kda_version.h (KDA_VERSION_STRING); -DKDA_VERSION passes
# the same string to code written before kda_version() (prefer kda_version()).
VERSION   := $(shell sed -n 's/^\#define KDA_VERSION_STRING "\([0-9.]*\)".*/\1/p' ref/kda_version.h)
BUILD     ?= build
PREFIX    ?= /usr/local
DATADIR   ?= $(PREFIX)/share/kda
DESTDIR   ?=
CC        ?= cc
PKG_CONFIG ?= pkg-config
READELF   ?= readelf
PYTHON    ?= python3

DEPS_STAMP := $(BUILD)/.deps-ok
# The source folders, from the bottom layer up (docs/layout.md).  Three archives:
#   libkda          the reader, the runner and the references: ref/ (the problem vocabulary,
#                   the float64 and float32 references), vectors/format (the container),
#                   vectors/case (cases, the generator), vectors/catalog, conformance/ and
#                   its built-in backends; no MPFR, no GMP
#   libkda-oracle   the MPFR reference and the fast certifier (ref/oracle/) and the built-in
#                   backend `mpfr` (conformance/backends/mpfr/, added by the kda command)
#   libkda-golden   the golden pipeline (vectors/golden/): the kda command, kda-mpi and the
#                   tests link it; not installed
# Headers are included by name: every folder is on the include path, as the installed headers
# sit in one flat include/kda/.
LIB_DIRS     := ref vectors/format vectors/case vectors/catalog conformance \
                conformance/backends/ref conformance/backends/simd
ORACLE_DIRS  := ref/oracle conformance/backends/mpfr
GOLDEN_DIRS  := vectors/golden
SRC_DIRS     := ref ref/oracle vectors/format vectors/case vectors/catalog vectors/golden \
                conformance
# Resolve pkg-config flags lazily, after deps.sh has had its chance to install packages.
LIB_PKGS    := libzip jansson zlib
ORACLE_PKGS := mpfr gmp
PKG_CFLAGS  = $(shell $(PKG_CONFIG) --cflags $(LIB_PKGS) $(ORACLE_PKGS) 2>/dev/null)
LIB_LIBS    = $(shell $(PKG_CONFIG) --libs $(LIB_PKGS) 2>/dev/null)
ORACLE_LIBS = $(shell $(PKG_CONFIG) --libs $(ORACLE_PKGS) 2>/dev/null)
PKG_LIBS    = $(ORACLE_LIBS) $(LIB_LIBS)
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
             $(SRC_DIRS:%=-I%) -DKDA_VERSION=\"$(VERSION)\"
ALL_CFLAGS = $(BASEFLAGS) $(PKG_CFLAGS) $(CFLAGS) $(ISA_CFLAGS)
# ISA flags go to the simd backend's kernel files only (never -march=native); the backend
# picks a kernel at run time from what the CPU has.
ISA_CFLAGS :=
$(BUILD)/conformance/backends/simd/kda_simd_avx2.o: ISA_CFLAGS := -mavx2 -mfma
$(BUILD)/conformance/backends/simd/kda_simd_avx512.o: ISA_CFLAGS := -mavx512f -mavx2 -mfma
# The references' step loops run along j, one value column a lane: vectorised (SSE2, each lane
# the same IEEE operations in the same order as the scalar loop, no contraction), the same
# bits; -O2's cost model leaves these runtime-length loops scalar.
# (GCC's flags; clang, as for make fuzz's instrumented libraries, vectorises with its own.)
$(BUILD)/ref/kda_ref.o $(BUILD)/ref/kda_ref_f32.o $(BUILD)/conformance/kda_honest.o: ISA_CFLAGS := $(if $(findstring clang,$(CC)),,\
  -ftree-loop-vectorize -fvect-cost-model=dynamic)
# The fast certifier's AVX2 kernel (picked at run time; -O3 for its vectorised inner loops).
$(BUILD)/ref/oracle/kda_cert_kern_avx2.o: ISA_CFLAGS := -mavx2 -mfma -O3
ALL_LDFLAGS = $(SANFLAGS) $(LDFLAGS)
# The installed kda finds its golden sets in $(DATADIR)/golden (tools/kda_tool_golden.c); the
# stamp recompiles that one object when PREFIX or DATADIR changes.
$(BUILD)/tools/kda_tool_golden.o: ALL_CFLAGS += -DKDA_DATADIR=\"$(DATADIR)\"
$(BUILD)/tools/kda_tool_golden.o: $(BUILD)/.datadir
# the explorer page is assembled into kda (.incbin in tools/kda_explore_page.c)
$(BUILD)/tools/kda_explore_page.o: tools/explore/explorer.html
$(BUILD)/.datadir: FORCE
	@mkdir -p $(BUILD); echo '$(DATADIR)' | cmp -s - $@ || echo '$(DATADIR)' > $@
FORCE:

# Each archive: every .c directly in its folders (tests live in tests/ folders).
srcs_in    = $(foreach d,$(1),$(wildcard $(d)/*.c))
LIB_SRC   := $(call srcs_in,$(LIB_DIRS))
ORACLE_SRC := $(call srcs_in,$(ORACLE_DIRS))
GOLDEN_SRC := $(call srcs_in,$(GOLDEN_DIRS))
# Test-only backend plugins (mutants, a crashing and a hanging one), built as shared objects.
PLUGIN_SRC := $(wildcard conformance/tests/plugin_*.c)
PLUGINS   := $(PLUGIN_SRC:conformance/tests/plugin_%.c=$(BUILD)/conformance/tests/kda_plugin_%.so)
# A plugin built against the frozen version-1 headers (SPEC.md §7.8: old plugins keep working).
PLUGINS   += $(BUILD)/conformance/tests/kda_plugin_v1.so
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
ORACLE_OBJ := $(ORACLE_SRC:%.c=$(BUILD)/%.o)
GOLDEN_OBJ := $(GOLDEN_SRC:%.c=$(BUILD)/%.o)
TOOL_SRC  := $(filter-out tools/scale/kda_mpi.c,$(wildcard tools/*.c tools/scale/*.c))
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/%.o)
# The command's files include each other's headers by name across tools/ and tools/scale/.
$(TOOL_OBJ): ALL_CFLAGS += -Itools -Itools/scale
TEST_SRC  := $(wildcard ref/tests/check_*.c) $(wildcard ref/oracle/tests/check_*.c) \
             $(wildcard vectors/tests/check_*.c) \
             $(wildcard conformance/tests/check_*.c) $(wildcard tools/tests/check_*.c)
TEST_BIN  := $(TEST_SRC:%.c=$(BUILD)/%)
# The installed headers: the whole public surface of libkda.so and of libkda-oracle.so (make
# check-symbols).
LIB_PUB_HEADERS := ref/kda_problem.h ref/kda_precision.h ref/kda_version.h ref/kda_ref.h \
               ref/kda_backward.h \
               vectors/format/kda_npz.h vectors/case/kda_prng.h vectors/case/kda_case.h \
               conformance/kda_backend.h conformance/kda_conform.h
ORACLE_PUB_HEADERS := ref/oracle/kda_mpfr.h
PUB_HEADERS := $(LIB_PUB_HEADERS) $(ORACLE_PUB_HEADERS)

LIBA      := $(BUILD)/libkda.a
LIBSO     := $(BUILD)/libkda.so
LIBMAP    := $(BUILD)/libkda.map
ORACLE_A  := $(BUILD)/libkda-oracle.a
ORACLE_SO := $(BUILD)/libkda-oracle.so
ORACLE_MAP := $(BUILD)/libkda-oracle.map
GOLDEN_A  := $(BUILD)/libkda-golden.a
# What a program of the command links, in link order.
ALL_A     := $(GOLDEN_A) $(ORACLE_A) $(LIBA)
KDA       := $(BUILD)/kda

.PHONY: FORCE all check check-certifier check-install check-conform check-unit check-numpy \
        check-asan check-golden check-symbols check-layers check-sizes example install clean deps fuzz \
        conform golden
.DEFAULT_GOAL := all

all: $(LIBA) $(LIBSO) $(ORACLE_A) $(ORACLE_SO) $(KDA)

# make check: the one list of its suites (each defined below; the slow ones have their own
# targets).  It must stay under 15 minutes on CI's 2 cores (DEVELOPERS.md).
check: check-headers check-layers check-sizes check-symbols check-unit check-numpy check-golden \
       check-conform check-grad check-zoo-correct check-zoo-ci check-install check-browser \
       check-python check-asan
	@echo "make check: all suites passed"

# Dependency files: what each object and program included, as the compiler saw it.
DEPFLAGS   := -MMD -MP
DEP_FILES   = $(wildcard $(foreach o,$(LIB_OBJ) $(ORACLE_OBJ) $(GOLDEN_OBJ) $(TOOL_OBJ) \
                $(TEST_HELPER),$(o:.o=.d)) $(TEST_BIN:=.d) $(PLUGINS:=.d) $(ZOO_PLUGINS:=.d) \
                $(ZOO_PLUGINS:=.entry.d) \
                $(KDA_MPI).d)
deps: $(DEPS_STAMP)
$(DEPS_STAMP):
	@sh scripts/build/deps.sh $@

$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(DEPFLAGS) -c $< -o $@

$(LIBA): $(LIB_OBJ)
$(ORACLE_A): $(ORACLE_OBJ)
$(GOLDEN_A): $(GOLDEN_OBJ)
$(LIBA) $(ORACLE_A) $(GOLDEN_A):
	@rm -f $@
	ar rcs $@ $^

# libkda.so exports what the installed headers declare and nothing else: a version script
# generated from them (scripts/build/kda_symbols.sh).  libkda.a keeps every symbol for the kda
# command and the tests.
SYMBOLS_ENV = CC="$(CC)" CPPFLAGS="$(BASEFLAGS) $(PKG_CFLAGS)"
$(LIBMAP): $(LIB_PUB_HEADERS) scripts/build/kda_symbols.sh | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(SYMBOLS_ENV) sh scripts/build/kda_symbols.sh map $(LIB_PUB_HEADERS) > $@.tmp && mv $@.tmp $@
$(ORACLE_MAP): $(ORACLE_PUB_HEADERS) scripts/build/kda_symbols.sh | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(SYMBOLS_ENV) sh scripts/build/kda_symbols.sh map $(ORACLE_PUB_HEADERS) > $@.tmp && mv $@.tmp $@

$(LIBSO): $(LIB_OBJ) $(LIBMAP)
	$(CC) -shared -Wl,-soname,libkda.so.0 -Wl,--version-script=$(LIBMAP) -o $@ $(LIB_OBJ) \
	  $(ALL_LDFLAGS) $(LIB_LIBS) -lm
# libkda-oracle.so needs libkda.so (the problem vocabulary, the float64 reference).
$(ORACLE_SO): $(ORACLE_OBJ) $(ORACLE_MAP) $(LIBSO)
	$(CC) -shared -Wl,-soname,libkda-oracle.so.0 -Wl,--version-script=$(ORACLE_MAP) -o $@ \
	  $(ORACLE_OBJ) $(ALL_LDFLAGS) -L$(BUILD) -lkda $(ORACLE_LIBS) -lm

# Fails on an export no installed header declares, a declared function not exported, or an
# installed header that does not compile on its own (C11, -pedantic, from one flat directory).
# libkda.so and libkda-oracle.so link no library of the other side: libkda neither MPFR nor GMP.
check-symbols: $(LIBSO) $(ORACLE_SO)
	@$(SYMBOLS_ENV) sh scripts/build/kda_symbols.sh check $(LIBSO) $(LIB_PUB_HEADERS)
	@$(SYMBOLS_ENV) KDA_SYMBOLS_WITH="$(LIB_PUB_HEADERS)" \
	  sh scripts/build/kda_symbols.sh check $(ORACLE_SO) $(ORACLE_PUB_HEADERS)
	@if $(READELF) -d $(LIBSO) | grep -E 'NEEDED.*lib(mpfr|gmp)'; then \
	  echo "check-symbols: $(LIBSO) needs MPFR or GMP" >&2; exit 1; fi
	@if nm -D --undefined-only $(LIBSO) | grep -E ' (mpfr_|__gmp)'; then \
	  echo "check-symbols: $(LIBSO) refers to MPFR or GMP" >&2; exit 1; fi
	@echo "check-symbols: $(LIBSO) needs neither MPFR nor GMP"

# Each installed header, and kda_backend_pool.h (header-only, for plugins), compiles alone as
# C11 and as C++17 (-Wall -Wextra -Werror -pedantic) with C linkage: plugins may be C++.
PLUGIN_HEADERS := conformance/kda_backend_pool.h conformance/kda_backend_half.h
.PHONY: check-headers
check-headers: | $(DEPS_STAMP)
	@CC="$(CC)" CXX="$(CXX)" CPPFLAGS="-D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE $(PKG_CFLAGS)" \
	  sh tools/tests/headers.sh $(PUB_HEADERS) $(PLUGIN_HEADERS)

# The rooms of docs/layout.md, from the objects' symbols and the sources' includes
# (scripts/build/check_layers.py; its known offences: scripts/build/layers-known.txt).
check-layers: $(LIB_OBJ) $(ORACLE_OBJ) $(GOLDEN_OBJ) $(TOOL_OBJ)
	@$(PYTHON) scripts/build/check_layers.py $(BUILD)
	@sh scripts/build/test_check_layers.sh $(BUILD)

# make check-sizes: the library's functions stay short (median, p90, max lines; docs/layout.md).
.PHONY: check-sizes
check-sizes:
	@$(PYTHON) scripts/build/function_sizes.py

$(KDA): $(TOOL_OBJ) $(ALL_A)
	$(CC) -o $@ $(TOOL_OBJ) $(ALL_A) $(ALL_LDFLAGS) $(PKG_LIBS) -lm

# Every test program links the shared test helpers (tests/kda_test.h): test code, so in
# neither libkda.a nor libkda.so.
TEST_HELPER := $(BUILD)/tests/kda_test.o
$(TEST_HELPER): ALL_CFLAGS += $(CHECK_CFLAGS)

$(BUILD)/%: %.c $(ALL_A) $(TEST_HELPER) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) $(DEPFLAGS) -MF $@.d -Itests -o $@ $< $(TEST_HELPER) \
	  $(TEST_EXTRA) $(ALL_A) $(ALL_LDFLAGS) $(PKG_LIBS) $(CHECK_LIBS) -lm

# The stored envelope's test calls the annex kda golden sets (tools/kda_golden_envelope.c).
$(BUILD)/tools/tests/check_envelope_store: $(BUILD)/tools/kda_golden_envelope.o
$(BUILD)/tools/tests/check_envelope_store: ALL_CFLAGS += -Itools
$(BUILD)/tools/tests/check_envelope_store: TEST_EXTRA := $(BUILD)/tools/kda_golden_envelope.o

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

# kda conform end to end on golden/L1: every mutant and long-sequence defect killed; a JUnit report with every verdict
# kind validates against conformance/tests/junit.xsd; the CI semantics (waivers, --strict,
# baselines, exit 5, summary.json); plugins of ABI 1 and 2 pass; bf16 buffers through the
# variant slot (conform_half.sh); hostile strings keep every report whole (conform_hostile.sh).
check-conform: $(KDA) $(PLUGINS)
	@KDA_BIN=$(abspath $(KDA)) PLUGIN_DIR=$(abspath $(BUILD)/conformance/tests) \
	  sh conformance/tests/conform_l1.sh
	@KDA_BIN=$(abspath $(KDA)) PLUGIN_DIR=$(abspath $(BUILD)/conformance/tests) \
	  sh conformance/tests/conform_long.sh
	@KDA_BIN=$(abspath $(KDA)) PLUGIN_DIR=$(abspath $(BUILD)/conformance/tests) \
	  sh conformance/tests/ci_semantics.sh
	@KDA_BIN=$(abspath $(KDA)) PLUGIN_DIR=$(abspath $(BUILD)/conformance/tests) \
	  sh conformance/tests/conform_abi.sh
	@KDA_BIN=$(abspath $(KDA)) PLUGIN_DIR=$(abspath $(BUILD)/conformance/tests) \
	  sh conformance/tests/conform_half.sh
	@KDA_BIN=$(abspath $(KDA)) PLUGIN_DIR=$(abspath $(BUILD)/conformance/tests) \
	  sh conformance/tests/conform_hostile.sh

# The backward pass scored end to end (SPEC.md §13.7): gradient cases made by kda_fixture and
# the certified golden/grad/L1; the honest float32 backwards pass, every gradient mutant fails
# (the kill table), hostile backwards are Crash / Fail, a backend without the slot is
# NotSupported.
.PHONY: check-grad
check-grad: $(KDA) $(PLUGINS) $(BUILD)/conformance/tests/kda_fixture
	@KDA_BIN=$(abspath $(KDA)) PLUGIN_DIR=$(abspath $(BUILD)/conformance/tests) \
	  sh conformance/tests/conform_grad.sh

# Slow, not in make check: kda conform --strict on the production L2 set (made by kda golden
# --write --level L2, streamed in bounded memory, SPEC.md §7.10): ref-f32 and simd pass, every
# long-sequence defect fails where conformance/tests/l2_kills.txt says it acts.
.PHONY: check-l2
check-l2: $(KDA) $(PLUGINS)
	@KDA_BIN=$(abspath $(KDA)) PLUGIN_DIR=$(abspath $(BUILD)/conformance/tests) \
	  ZOO=$(abspath $(BUILD)/$(ZOO_DIR)) sh conformance/tests/conform_l2.sh

# The study pages (kda explore, kda conform --html) in headless Chromium: no script errors;
# the explorer driven through each interactive and its step port against kda trace's bits
# (tools/tests/browser_drive.py); the report's matrix against its results.jsonl; screenshots
# kept in $(BUILD)/browser.  About 25 s wall, 7 s CPU.  Skipped, saying so, where Chromium is
# not installed (.ci/run installs it).
.PHONY: check-browser
check-browser: $(KDA)
	@KDA_BIN=$(abspath $(KDA)) sh tools/tests/browser_check.sh $(BUILD)/browser

# A plugin needs only conformance/kda_backend.h and kda_problem.h: it links nothing of ours.
$(BUILD)/conformance/tests/kda_plugin_%.so: conformance/tests/plugin_%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(DEPFLAGS) -MF $@.d -shared -o $@ $< $(ALL_LDFLAGS) -lm

# Its quoted includes resolve next to it first: the frozen kda_backend.h and kda_problem.h.
$(BUILD)/conformance/tests/kda_plugin_v1.so: conformance/tests/abi_v1/plugin_v1.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(DEPFLAGS) -MF $@.d -shared -o $@ $< $(ALL_LDFLAGS) -lm


# The honest zoo (SPEC.md §7.3, conformance/tests/zoo/): one source built twice, without and
# with fused multiply-adds; the FMA build's table lives in a file compiled without -mfma, so a
# CPU without FMA gets a refusal rather than an illegal instruction.
ZOO_DIR     := conformance/tests/zoo
ZOO_PLUGINS := $(BUILD)/$(ZOO_DIR)/kda_plugin_zoo.so $(BUILD)/$(ZOO_DIR)/kda_plugin_zoo_fma.so
$(BUILD)/$(ZOO_DIR)/kda_plugin_zoo.so: $(ZOO_DIR)/plugin_zoo.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(DEPFLAGS) -MF $@.d -shared -o $@ $(ZOO_DIR)/plugin_zoo.c \
	  $(ALL_LDFLAGS) -lm
$(BUILD)/$(ZOO_DIR)/kda_plugin_zoo_fma.so: $(ZOO_DIR)/plugin_zoo.c $(ZOO_DIR)/zoo_fma_entry.c \
    | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(DEPFLAGS) -MF $@.d -MT $@ -DZOO_FMA -mfma -ffp-contract=fast -c \
	  -o $(@:.so=_core.o) $(ZOO_DIR)/plugin_zoo.c
	$(CC) $(ALL_CFLAGS) $(DEPFLAGS) -MF $@.entry.d -MT $@ -c -o $(@:.so=_entry.o) \
	  $(ZOO_DIR)/zoo_fma_entry.c
	$(CC) $(ALL_CFLAGS) -shared -o $@ $(@:.so=_core.o) $(@:.so=_entry.o) $(ALL_LDFLAGS) -lm
.PHONY: zoo check-zoo check-zoo-ci check-zoo-correct zoo-fpr
zoo: $(ZOO_PLUGINS)
check-l2: $(ZOO_PLUGINS)
# Every zoo member is a correct KDA (small cases, every mode) and the zoo's deliberate defect
# fails: part of make check.
check-zoo-correct: $(KDA) $(ZOO_PLUGINS)
	@KDA_BIN=$(abspath $(KDA)) ZOO=$(abspath $(BUILD)/$(ZOO_DIR)) sh $(ZOO_DIR)/zoo_correct.sh
# The zoo's claim at CI size, part of make check: every member passes, --strict (a default
# Fail is a --strict one too), the long L1 cases where honest float32 evaluations come nearest
# their allowance and their serving prompts (SPEC.md §7.3: the envelope rule).
ZOO_CI_CASES := drift-lowrank t5000-long
check-zoo-ci: $(KDA) $(ZOO_PLUGINS)
	@KDA_BIN=$(abspath $(KDA)) ZOO=$(abspath $(BUILD)/$(ZOO_DIR)) sh $(ZOO_DIR)/zoo_check.sh \
	  --strict $(foreach c,$(ZOO_CI_CASES),-k $(c)) > $(BUILD)/zoo-ci.txt 2>&1 || \
	  { cat $(BUILD)/zoo-ci.txt; exit 1; }
	@tail -1 $(BUILD)/zoo-ci.txt
# The zoo on every case and serving prompt of golden/L1, default and --strict, with the
# member x case table.
check-zoo: $(KDA) $(ZOO_PLUGINS)
	@KDA_BIN=$(abspath $(KDA)) ZOO=$(abspath $(BUILD)/$(ZOO_DIR)) sh $(ZOO_DIR)/zoo_check.sh; \
	  a=$$?; KDA_BIN=$(abspath $(KDA)) ZOO=$(abspath $(BUILD)/$(ZOO_DIR)) \
	  sh $(ZOO_DIR)/zoo_check.sh --strict; b=$$?; [ $$a = 0 ] && [ $$b = 0 ]
# The false-failure rate: ZOO_FPR_N random-order kernels on the worst L1 cases and prompts.
ZOO_FPR_N ?= 64
zoo-fpr: $(KDA) $(ZOO_PLUGINS)
	@KDA_BIN=$(abspath $(KDA)) ZOO=$(abspath $(BUILD)/$(ZOO_DIR)) \
	  sh $(ZOO_DIR)/zoo_fpr.sh -n $(ZOO_FPR_N)

# The main job: score every default built-in backend on the golden sets and report.
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
	install -m 644 $(ORACLE_A) $(DESTDIR)$(PREFIX)/lib/libkda-oracle.a
	install -m 755 $(ORACLE_SO) $(DESTDIR)$(PREFIX)/lib/libkda-oracle.so.$(VERSION)
	ln -sf libkda-oracle.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libkda-oracle.so.0
	ln -sf libkda-oracle.so.0 $(DESTDIR)$(PREFIX)/lib/libkda-oracle.so
	install -m 644 $(PUB_HEADERS) $(DESTDIR)$(PREFIX)/include/kda/
	install -m 644 conformance/kda_backend_half.h $(DESTDIR)$(PREFIX)/include/kda/ # for plugins
	install -m 755 $(KDA) $(DESTDIR)$(PREFIX)/bin/kda
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@DATADIR@|$(DATADIR)|g' \
	  tools/kda.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kda.pc
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' tools/kda-oracle.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kda-oracle.pc
	cd golden && for f in SHA256SUMS $$(awk '{print $$2}' SHA256SUMS); do \
	  install -D -m 644 "$$f" "$(DESTDIR)$(DATADIR)/golden/$$f" || exit 1; done

# make install into a staging directory, then the installed kda run from elsewhere finds its
# golden sets through KDA_GOLDEN and through the compiled-in $(DATADIR) (tools/tests/install.sh).
check-install: all
	@MAKE="$(MAKE)" BUILD=$(BUILD) sh tools/tests/install.sh

clean:
	rm -rf $(BUILD)

# libFuzzer runs (need clang with libFuzzer), under ASan + UBSan, each for FUZZ_SECONDS (the
# .npy parser FUZZ_NPY_SECONDS), or for FUZZ_RUNS executions when given (make fuzz
# FUZZ_RUNS=1000000).  New corpus entries go to $(BUILD)/fuzz/.
#   fuzz-files  the whole reader path of vector files (vectors/tests/fuzz_files.c: archive,
#               members, headers, manifest, case and result loaders);
#   fuzz-npy    the .npy header parser alone (fuzz_npy.c);
#   fuzz-merge  kda conform --merge and kda golden --merge on a shard from the input
#               (tools/tests/fuzz_merge.c; its seeds: a real conform shard of L0, and the
#               inputs it once failed on, tools/tests/fixtures/fuzz_merge);
#   fuzz-ci     waiver files and baselines (conformance/tests/fuzz_ci.c);
#   fuzz-py     kda_conform.read_case under atheris (python/tests/fuzz_read_case.py; pip
#               installs atheris when it is missing, else the run is skipped, saying so).
# fuzz-merge and fuzz-ci link the command's libraries built with clang and instrumented, in
# $(BUILD)/fuzz/lib.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_NPY_SECONDS ?= 10
FUZZ_RUNS    ?=
FUZZ_STOP     = $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(1))
FUZZ_RUN     := -print_final_stats=1 -rss_limit_mb=2048 -malloc_limit_mb=1024
FUZZ_FLAGS   := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
                -ffp-contract=off -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
                $(SRC_DIRS:%=-I%) -DKDA_VERSION=\"$(VERSION)\"
# Only what the readers need: ref/ and vectors/ without the oracle or the golden pipeline.
FUZZ_LIB_SRC := $(call srcs_in,ref vectors/format vectors/case vectors/catalog)
FUZZ_LIBS    := $(ALL_A:$(BUILD)/%=$(BUILD)/fuzz/lib/%)
.PHONY: fuzz fuzz-files fuzz-npy fuzz-merge fuzz-ci fuzz-py fuzz-lib
fuzz: fuzz-files fuzz-npy fuzz-merge fuzz-ci fuzz-py
fuzz-files: $(KDA)
	@mkdir -p $(BUILD)/fuzz/files-corpus $(BUILD)/fuzz/files-seeds
	$(KDA) ref golden/example/example.npz -o $(BUILD)/fuzz/files-seeds/result.npz
	$(FUZZ_CC) $(FUZZ_FLAGS) $(PKG_CFLAGS) vectors/tests/fuzz_files.c $(FUZZ_LIB_SRC) \
	  -o $(BUILD)/fuzz/fuzz_files $(LIB_LIBS) -lm
	$(BUILD)/fuzz/fuzz_files $(call FUZZ_STOP,$(FUZZ_SECONDS)) $(FUZZ_RUN) -max_len=65536 \
	  $(BUILD)/fuzz/files-corpus $(BUILD)/fuzz/files-seeds golden/example golden/L0 golden/grad/L0 \
	  vectors/tests/fixtures
fuzz-npy:
	@mkdir -p $(BUILD)/fuzz/corpus
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  -ffp-contract=off -Iref -Ivectors/format vectors/tests/fuzz_npy.c vectors/format/kda_npy.c \
	  -o $(BUILD)/fuzz/fuzz_npy
	$(BUILD)/fuzz/fuzz_npy $(call FUZZ_STOP,$(FUZZ_NPY_SECONDS)) -print_final_stats=1 \
	  -dict=vectors/tests/fixtures/fuzz_npy.dict $(BUILD)/fuzz/corpus vectors/tests/fixtures/fuzz_npy
fuzz-lib:
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/fuzz/lib CC=$(FUZZ_CC) SAN=1 OPT=-O1 \
	  CFLAGS=-fsanitize=fuzzer-no-link $(FUZZ_LIBS)
# fuzz-merge's seeds: shard 0/1 of a conform run on two L0 cases with a failing mutant, a used
# and an unused waiver (small: the merge's time is linear in its input), its shard.json and three reports joined by "--8<--" lines (a first byte 0:
# the conform merge, 1: the golden merge).
fuzz-merge: $(KDA) $(PLUGINS) fuzz-lib
	@mkdir -p $(BUILD)/fuzz/merge-corpus $(BUILD)/fuzz/merge-seeds
	@rm -rf $(BUILD)/fuzz/merge-shard $(BUILD)/fuzz/merge-seeds && mkdir -p $(BUILD)/fuzz/merge-seeds
	@printf '{"waivers":[{"case":"l0-decay-wipe","backend":"mutant","reason":"known"},%s\n' \
	  '{"case":"nothing","reason":"r"}]}' > $(BUILD)/fuzz/merge-waivers.json
	-@$(KDA) conform -q -b ref-f64 \
	  -p $(BUILD)/conformance/tests/kda_plugin_mutants.so:mutant=transposed_state \
	  --waivers $(BUILD)/fuzz/merge-waivers.json --shard 0/1 --out $(BUILD)/fuzz/merge-shard \
	  golden/L0/l0-decay-wipe.npz golden/L0/l0-delta-overwrite.npz > /dev/null
	@cd $(BUILD)/fuzz/merge-shard && for f in shard.json results.jsonl summary.json junit.xml; \
	  do cat $$f; [ $$f = junit.xml ] || printf '\n--8<--\n'; done > ../merge-body && \
	  { printf '\000'; cat ../merge-body; } > ../merge-seeds/conform-l0 && \
	  { printf '\001'; cat ../merge-body; } > ../merge-seeds/golden-l0
	$(FUZZ_CC) $(FUZZ_FLAGS) -Itools -Itools/scale $(PKG_CFLAGS) tools/tests/fuzz_merge.c \
	  $(filter-out tools/kda.c,$(TOOL_SRC)) $(FUZZ_LIBS) -o $(BUILD)/fuzz/fuzz_merge \
	  $(PKG_LIBS) -lm
	$(BUILD)/fuzz/fuzz_merge $(call FUZZ_STOP,$(FUZZ_SECONDS)) $(FUZZ_RUN) -max_len=16384 \
	  -close_fd_mask=3 \
	  $(BUILD)/fuzz/merge-corpus $(BUILD)/fuzz/merge-seeds tools/tests/fixtures/fuzz_merge
fuzz-ci: fuzz-lib
	@mkdir -p $(BUILD)/fuzz/ci-corpus $(BUILD)/fuzz/ci-seeds
	@printf '%s\n' '{"schema":"kda-waivers/1","waivers":[{"case":"t15-*","backend":"ref-f32",' \
	  '"reason":"r\u001b x","link":"https://e/1"},{"flag":"LONG","reason":"slow"}]}' \
	  > $(BUILD)/fuzz/ci-seeds/waivers.json
	@printf '%s\n' '{"schema":"kda-baseline/2","backends":{"ref-f32":{"class":"fp32",' \
	  '"cases":{"t15-log-prob":{"o":1.5,"ht":null,"hc":0}}}}}' > $(BUILD)/fuzz/ci-seeds/baseline2.json
	@printf '%s\n' '{"schema":"kda-baseline/1","backend":"simd","class":"fp32",' \
	  '"cases":{"a":{"o":0.5}}}' > $(BUILD)/fuzz/ci-seeds/baseline1.json
	$(FUZZ_CC) $(FUZZ_FLAGS) $(PKG_CFLAGS) conformance/tests/fuzz_ci.c $(FUZZ_LIBS) \
	  -o $(BUILD)/fuzz/fuzz_ci $(PKG_LIBS) -lm
	$(BUILD)/fuzz/fuzz_ci $(call FUZZ_STOP,$(FUZZ_SECONDS)) $(FUZZ_RUN) -max_len=65536 \
	  $(BUILD)/fuzz/ci-corpus $(BUILD)/fuzz/ci-seeds
fuzz-py:
	@mkdir -p $(BUILD)/fuzz/py-corpus
	@if $(PYTHON) -c 'import atheris' 2>/dev/null || $(PYTHON) -m pip install --quiet atheris; \
	then $(PYTHON) python/tests/fuzz_read_case.py $(call FUZZ_STOP,$(FUZZ_SECONDS)) \
	  $(FUZZ_RUN) -max_len=65536 $(BUILD)/fuzz/py-corpus golden/example vectors/tests/fixtures; \
	else echo "make fuzz-py: atheris cannot be installed with pip; skipped"; fi

# The Python package kda-conform (python/): its wheel built (carrying this kda, libkda.so and
# golden L0/L1), installed into a fresh venv $(BUILD)/python-SUITE/venv, then its pytest suite
# on the CPU with numpy kernels, run from outside the repository.  check-python (in make
# check): every test but the slow ones (the plugin, five bugs, failing closed, -k, -x, --lf,
# xdist, collection time); check-python-l1 (.ci/run runs it after make check): the slow ones,
# whole golden sets through the plugin and the adapters.  Skipped (saying why) without pytest,
# hypothesis, pytest-xdist or scikit-build-core, unless KDA_REQUIRE_PYTEST=1 (as in CI).
# check-python-install (.ci/run runs it too; needs the package index): `pip install ./python`
# into a bare venv as an author runs it (an isolated build that compiles kda again), then the
# plugin on one case and one bug from outside the repository.
.PHONY: check-python check-python-l1 check-python-install
check-python: $(KDA) $(LIBSO)
	@KDA_BIN=$(abspath $(KDA)) PYTHON=$(PYTHON) sh python/tests/check_python.sh fast
check-python-l1: $(KDA) $(LIBSO)
	@KDA_BIN=$(abspath $(KDA)) PYTHON=$(PYTHON) sh python/tests/check_python.sh l1
check-python-install:
	@BUILD=$(BUILD) PYTHON=$(PYTHON) sh python/tests/check_python_install.sh

# ---- The CUDA backend plugin (conformance/backends/cuda, docs/cuda.md): built with nvcc
# when it is on the PATH, skipped with a message otherwise.  Never linked into kda or libkda.
# Static cudart, hidden visibility and a version script: kda_backend_entry is its one symbol.
# sm_90a machine code plus compute_90 PTX.  make cuda-bench builds the timing harness.
NVCC        ?= nvcc
CUDA_DIR    := conformance/backends/cuda
CUDA_SO     := $(BUILD)/$(CUDA_DIR)/libkda_cuda.so
CUDA_BENCH  := $(BUILD)/$(CUDA_DIR)/bench_cuda
CUDA_GENCODE := -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90
CUDA_FLAGS  := -std=c++17 -O3 $(CUDA_GENCODE) -Xcompiler -fPIC,-fvisibility=hidden,-Wall \
               -Iref -Iconformance -I$(CUDA_DIR) -cudart static
CUDA_DEPS   := $(wildcard $(CUDA_DIR)/*.h) ref/kda_problem.h conformance/kda_backend.h \
               conformance/kda_backend_pool.h
.PHONY: cuda cuda-bench
cuda:
	@if command -v $(NVCC) >/dev/null 2>&1; then $(MAKE) --no-print-directory $(CUDA_SO); \
	else echo "make cuda: $(NVCC) not found; the CUDA backend is not built (skipped)"; fi
$(BUILD)/$(CUDA_DIR)/%.o: $(CUDA_DIR)/%.cu $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(CUDA_FLAGS) -c $< -o $@
CUDA_KOBJ   := $(BUILD)/$(CUDA_DIR)/kda_cuda_kernels.o $(BUILD)/$(CUDA_DIR)/kda_cuda_chunk.o
$(CUDA_SO): $(BUILD)/$(CUDA_DIR)/kda_cuda.o $(CUDA_KOBJ) $(CUDA_DIR)/exports.map
	$(NVCC) $(CUDA_FLAGS) -shared -o $@ $(filter %.o,$^) -Xlinker --version-script=$(CUDA_DIR)/exports.map
cuda-bench: $(CUDA_BENCH)
$(CUDA_BENCH): $(BUILD)/$(CUDA_DIR)/bench_cuda.o $(CUDA_KOBJ)
	$(NVCC) $(CUDA_FLAGS) -o $@ $^
# The plugin is built before the unit tests (conformance/tests/check_cuda.c tests it when it
# exists); the sanitizer pass reuses the plain build's plugin.
check-unit: $(if $(SAN),,cuda)

# ---- Scale-out (docs/scale.md).  make mpi builds the MPI driver kda-mpi with mpicc when it is
# on the PATH (OpenMPI from Debian: scripts/build/deps.sh installs it), skipped with a message
# otherwise.  make check-scale: shards, merges, the Slurm steps and (with mpirun) 2 MPI ranks
# on L0, L1 and the small L2, every byte compared with the single-process --write.
MPICC      ?= mpicc
KDA_MPI    := $(BUILD)/kda-mpi
.PHONY: mpi check-scale
mpi:
	@if command -v $(MPICC) >/dev/null 2>&1; then $(MAKE) --no-print-directory $(KDA_MPI); \
	else echo "make mpi: $(MPICC) not found; kda-mpi is not built (skipped)"; fi
# kda-mpi conform runs kda conform in-process: it links the command's objects (not kda.o).
KDA_MPI_OBJ := $(filter-out $(BUILD)/tools/kda.o,$(TOOL_OBJ))
$(KDA_MPI): tools/scale/kda_mpi.c $(KDA_MPI_OBJ) $(ALL_A) | $(DEPS_STAMP)
	$(MPICC) $(ALL_CFLAGS) $(DEPFLAGS) -MF $@.d -Itools -Itools/scale -o $@ $< $(KDA_MPI_OBJ) \
	  $(ALL_A) $(ALL_LDFLAGS) $(PKG_LIBS) -lpthread -lm
check-scale: $(KDA) mpi
	@KDA_BIN=$(abspath $(KDA)) KDA_MPI=$(abspath $(KDA_MPI)) sh tools/tests/scale.sh $(BUILD)/scale

-include $(DEP_FILES)
