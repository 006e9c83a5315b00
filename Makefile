# kokoro_lstm developer entry points. The test command is `make test`.
#
#   make venv         .venv with torch==2.13.0 (CPU), NumPy, pytest, TVM, ONNX Runtime, onnxscript, ...
#                     and this package installed editable (a stamp makes reruns instant)
#   make test         venv + C core test (ctest) + pytest -q tests/ with KOKORO_LSTM_REQUIRE=1
#   make ctest        the C core test program (src/tests/test_core.c), no Python
#   make asan         the same under AddressSanitizer + UBSan (leak checking on)
#   make debian-test  build with Debian's /usr/bin/python3 + libopenblas-dev in a
#                     separate tree (build-c/debian) and run the core Python tests there
#   make blas-scipy-test  the C test and the core Python tests against the
#                     scipy-openblas32 wheel instead of the system OpenBLAS
#   make test-aarch64 the C test cross-compiled for aarch64 (Debian's gcc-aarch64-linux-gnu,
#                     a reference BLAS) and run under qemu-aarch64: every ISA, NEON kernels
#   make ctest-portable  the C test built with -DKL_FORCE_PORTABLE: the non-Linux code paths
#                     (condvar barrier, no affinity, no getauxval) compiled and run on Linux
#   make clang-check  compile-only with clang -Werror: portable paths, aarch64 NEON files
#   make wheel-test   build the wheel, auditwheel repair it, install it in a fresh venv
#                     without a compiler and run the core tests against it (tools/wheel_test.sh)
#   make demo         kokoro-lstm demo: port Kokoro's text_encoder and duration to TVM
#                     with native/tir/relax LSTMs (random weights, validated), one table
#   make bench        benchmarks/bench_lstm.py $(BENCH_ARGS)
#   make bench-kernels  benchmarks/c/bench_kernels.c: ns per call of every kernel of the
#                     kernel lists this CPU can run (BENCH_KERNELS_ROUNDS rounds, default 21)
#   make clean        build outputs (keeps .venv); `make distclean` also removes .venv
#
# BLAS for the C test follows setup.py: KOKORO_LSTM_BLAS=auto (default: the
# system OpenBLAS via pkg-config, else the scipy-openblas32 wheel from .venv),
# system, or scipy-openblas32; `ref` (C test only) links src/tests/refblas instead.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test
.DELETE_ON_ERROR:

PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
PIP := $(VPY) -m pip --no-input
PIPC := -c constraints.txt
# extra pip arguments for the torch install (e.g. --index-url https://download.pytorch.org/whl/cpu)
TORCH_PIP_ARGS ?=
# the Kokoro TTS package: tests/test_torch_ops.py exports its real TextEncoder /
# ProsodyPredictor (random init, no network)
TEST_EXTRAS ?= kokoro==0.9.4
VENV_STAMP := $(VENV)/.kokoro-venv.stamp
EXT_STAMP := $(VENV)/.kokoro-ext.stamp

ifeq ($(origin CC),default)
CC := gcc
endif

# ---- C sources and flags (the same per-file ISA flags as setup.py) -------------------
# Kernels of the other architecture are left out by file suffix (as in setup.py).
X86_KERNELS := %-avx2fma.c %-avx2f16c.c %-avx512f.c %-avx512bf16.c %-amx.c
ARM_KERNELS := %-neon.c %-neonbf16.c
CC_MACHINE := $(shell $(CC) -dumpmachine 2>/dev/null)
OTHER_KERNELS := $(if $(findstring x86_64,$(CC_MACHINE)),$(ARM_KERNELS),$(if $(or $(findstring aarch64,$(CC_MACHINE)),$(findstring arm64,$(CC_MACHINE))),$(X86_KERNELS),$(X86_KERNELS) $(ARM_KERNELS)))
CORE_SRCS := $(sort $(filter-out $(OTHER_KERNELS),$(wildcard src/core/*.c) $(wildcard src/kernels/*/*.c) \
                $(wildcard src/ops/*.c))) src/tvm/kl_tvm_ffi.c src/tvm/kl_tvm_dense.c
TEST_SRC := src/tests/test_core.c
HDRS := $(wildcard src/include/*.h src/core/*.h src/kernels/*.h src/kernels/*.inc src/kernels/*/*.h src/ops/*.h \
                  src/tvm/*.h)
CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread -fno-math-errno \
                 -ffp-contract=off $(CFLAGS_EXTRA)
OPT_O2 := -O2
OPT_ASAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
            -fno-omit-frame-pointer -g -O1
INCS := -Isrc/include -Isrc/core -Isrc/kernels -Isrc/ops -Isrc/third_party -Isrc/tvm
isa_flags = $(strip $(if $(filter %-avx2fma.c,$(1)),-mavx2 -mfma) \
                    $(if $(filter %-avx2f16c.c,$(1)),-mavx2 -mfma -mf16c) \
                    $(if $(filter %-avx512f.c,$(1)),-mavx512f -mfma) \
                    $(if $(filter %-avx512bf16.c,$(1)),-mavx512f -mavx512bf16 -mfma) \
                    $(if $(filter %-amx.c,$(1)),-mavx512f -mavx512bf16 -mamx-tile -mamx-bf16) \
                    $(if $(filter %-neonbf16.c,$(1)),-march=armv8.2-a+bf16))

# ---- BLAS for the C test ----------------------------------------------------------------
KOKORO_LSTM_BLAS ?= auto
HAVE_PC_OPENBLAS := $(shell pkg-config --exists openblas 2>/dev/null && echo yes)
ifeq ($(KOKORO_LSTM_BLAS),scipy-openblas32)
CBLAS := scipy-openblas32
else ifeq ($(KOKORO_LSTM_BLAS),ref)
CBLAS := ref
else ifeq ($(HAVE_PC_OPENBLAS),yes)
CBLAS := system
else ifeq ($(KOKORO_LSTM_BLAS),system)
CBLAS := missing
else
CBLAS := scipy-openblas32
endif
CBUILD := build-c/$(CBLAS)
BLAS_FLAGS := $(CBUILD)/blas.cflags $(CBUILD)/blas.libs
ifeq ($(CBLAS),scipy-openblas32)
BLAS_DEPS := $(VENV_STAMP)
else
BLAS_DEPS :=
endif

BLAS_SRCS := $(if $(filter ref,$(CBLAS)),src/tests/refblas/refblas.c)
O2_OBJS := $(patsubst %.c,$(CBUILD)/o2/%.o,$(CORE_SRCS) $(TEST_SRC) $(BLAS_SRCS))
ASAN_OBJS := $(patsubst %.c,$(CBUILD)/asan/%.o,$(CORE_SRCS) $(TEST_SRC) $(BLAS_SRCS))
O2_BIN := $(CBUILD)/o2/test_core
BENCH_SRC := benchmarks/c/bench_kernels.c
BENCH_OBJS := $(patsubst %.c,$(CBUILD)/o2/%.o,$(CORE_SRCS) $(BENCH_SRC) $(BLAS_SRCS))
BENCH_BIN := $(CBUILD)/o2/bench_kernels
ASAN_BIN := $(CBUILD)/asan/test_core

# ---- Debian's own stack --------------------------------------------------------------------
DEB_PY := /usr/bin/python3
DEB_PKGS := python3-dev python3-numpy python3-pytest python3-setuptools libopenblas-dev pkg-config
DEB_DIR := build-c/debian
DEB_TESTS := tests/test_numpy_api.py tests/test_reference.py tests/test_one_road.py

.PHONY: all venv ext test ctest asan bench-kernels debian-test blas-scipy-test demo bench clean distclean \
        test-aarch64 ctest-portable wheel-test clang-check

all: test

# ---- venv -------------------------------------------------------------------------------
venv: $(VENV_STAMP)

$(VENV_STAMP): constraints.txt pyproject.toml
	@echo "== venv: $(VENV)"
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --progress-bar off $(PIPC) $(TORCH_PIP_ARGS) torch==2.13.0
	$(PIP) install --progress-bar off $(PIPC) numpy pytest scipy-openblas32 setuptools wheel apache-tvm \
	    onnxruntime onnx onnxscript matplotlib threadpoolctl
	$(PIP) install --progress-bar off $(PIPC) $(TEST_EXTRAS)
	$(PIP) install --progress-bar off $(PIPC) --no-build-isolation -e .
	touch $@ $(EXT_STAMP)

# The editable install builds kokoro_lstm/_core*.so in the tree; rebuild it
# whenever a C source, a header or setup.py changes.
ext: $(EXT_STAMP)

$(EXT_STAMP): $(VENV_STAMP) $(CORE_SRCS) src/python/module.c $(HDRS) setup.py
	@echo "== rebuilding the extension in place"
	$(VPY) setup.py -q build_ext --inplace
	touch $@

# ---- tests -------------------------------------------------------------------------------
test: venv ext $(O2_BIN)
	@rc=0; \
	echo "== C core test ($(O2_BIN))"; \
	$(O2_BIN) || rc=1; \
	echo "== pytest -q tests (KOKORO_LSTM_REQUIRE=1)"; \
	export KOKORO_LSTM_REQUIRE=1; \
	$(VPY) -m pytest -q tests || rc=1; \
	if [ $$rc -ne 0 ]; then echo "make test: FAILED"; else echo "make test: all passed"; fi; \
	exit $$rc

ctest: $(O2_BIN)
	$(O2_BIN)

asan: $(ASAN_BIN)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	$(ASAN_BIN)

$(BLAS_FLAGS) &: $(BLAS_DEPS)
	@mkdir -p $(CBUILD)
ifeq ($(CBLAS),system)
	pkg-config --cflags openblas > $(CBUILD)/blas.cflags
	pkg-config --libs openblas > $(CBUILD)/blas.libs
else ifeq ($(CBLAS),ref)
	echo "-DKL_BLAS_REF=1 -Isrc/tests/refblas" > $(CBUILD)/blas.cflags
	: > $(CBUILD)/blas.libs
else ifeq ($(CBLAS),scipy-openblas32)
	$(VPY) -c 'import scipy_openblas32 as s; print("-DKL_BLAS_SCIPY=1 -I" + s.get_include_dir())' \
	    > $(CBUILD)/blas.cflags
	$(VPY) -c 'import scipy_openblas32 as s; d = s.get_lib_dir(); \
	    print("-L%s -l%s -Wl,-rpath,%s" % (d, s.get_library(), d))' > $(CBUILD)/blas.libs
else
	@echo "KOKORO_LSTM_BLAS=system but pkg-config finds no openblas (apt-get install libopenblas-dev pkg-config)"; exit 1
endif

$(CBUILD)/o2/%.o: %.c $(HDRS) $(BLAS_FLAGS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_COMMON) $(OPT_O2) $(call isa_flags,$<) $(INCS) $$(cat $(CBUILD)/blas.cflags) -c $< -o $@

$(CBUILD)/asan/%.o: %.c $(HDRS) $(BLAS_FLAGS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_COMMON) $(OPT_ASAN) $(call isa_flags,$<) $(INCS) $$(cat $(CBUILD)/blas.cflags) -c $< -o $@

$(O2_BIN): $(O2_OBJS) $(BLAS_FLAGS)
	$(CC) $(CFLAGS_COMMON) $(OPT_O2) -o $@ $(O2_OBJS) $$(cat $(CBUILD)/blas.libs) -lm

$(BENCH_BIN): $(BENCH_OBJS) $(BLAS_FLAGS)
	$(CC) $(CFLAGS_COMMON) $(OPT_O2) -o $@ $(BENCH_OBJS) $$(cat $(CBUILD)/blas.libs) -lm

BENCH_KERNELS_ROUNDS ?= 21
bench-kernels: $(BENCH_BIN)
	$(BENCH_BIN) $(BENCH_KERNELS_ROUNDS)

$(ASAN_BIN): $(ASAN_OBJS) $(BLAS_FLAGS)
	$(CC) $(CFLAGS_COMMON) $(OPT_ASAN) -o $@ $(ASAN_OBJS) $$(cat $(CBUILD)/blas.libs) -lm

# Debian 12's python3 (numpy 1.24, no torch) + libopenblas-dev, built in a copy of the
# tree so the venv's editable build is untouched. Torch tests skip there: no
# KOKORO_LSTM_REQUIRE for this run.
# $(call copy_tree,DIR): the source tree (tracked and untracked-not-ignored files)
# copied to DIR, to build and test it there without touching the dev build.
define copy_tree
	@echo "== copying the tree to $(1)"
	rm -rf $(1)
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	  files=$$(mktemp); \
	  git ls-files -z --cached --others --exclude-standard -- . ':!build-c' > $$files; \
	  mkdir -p $(1); \
	  while IFS= read -r -d '' f; do [ -f "$$f" ] && printf '%s\0' "$$f"; done < $$files \
	    | xargs -0 -r cp --parents -t $(1); \
	  rm -f $$files; \
	else \
	  mkdir -p $(1); \
	  tar -c --exclude=./.venv --exclude=./build --exclude=./build-c --exclude=./.git \
	    --exclude='*.so' --exclude='*.o' --exclude=__pycache__ --exclude=.pytest_cache \
	    --exclude=./kokoro_lstm/_build_config.py . | tar -x -C $(1); \
	fi
endef

# The other BLAS: the extension and the C test built against the scipy-openblas32
# wheel (what a pip-only machine gets), in build-c/scipy, with the core tests.
SCIPY_DIR := build-c/scipy-ext
blas-scipy-test: venv
	$(MAKE) --no-print-directory ctest KOKORO_LSTM_BLAS=scipy-openblas32
	$(call copy_tree,$(SCIPY_DIR))
	cd $(SCIPY_DIR) && KOKORO_LSTM_BLAS=scipy-openblas32 $(abspath $(VPY)) setup.py -q build_ext --inplace
	cd $(SCIPY_DIR) && $(abspath $(VPY)) -c 'import kokoro_lstm; b = kokoro_lstm.build_info(); \
	    print("scipy build:", b); assert b["blas"] == "scipy-openblas32", b'
	cd $(SCIPY_DIR) && $(abspath $(VPY)) -m pytest -q -p no:cacheprovider $(DEB_TESTS)

debian-test:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "debian-test needs:$$missing (apt-get install them as root)"; exit 1; fi; \
	  echo "== apt-get install$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y --no-install-recommends $$missing || \
	    { apt-get update && apt-get install -y --no-install-recommends $$missing; }; \
	fi
	$(call copy_tree,$(DEB_DIR))
	@# Debian 12's setuptools (66) predates PEP 639 license expressions and rejects
	@# pyproject.toml's metadata; this run builds and tests the extension only.
	rm -f $(DEB_DIR)/pyproject.toml
	@echo "== $(DEB_PY) setup.py build_ext --inplace (KOKORO_LSTM_BLAS=system)"
	cd $(DEB_DIR) && env -u KOKORO_LSTM_REQUIRE -u PYTHONPATH -u VIRTUAL_ENV PYTHONNOUSERSITE=1 \
	    KOKORO_LSTM_BLAS=system $(DEB_PY) setup.py -q build_ext --inplace
	cd $(DEB_DIR) && env -u KOKORO_LSTM_REQUIRE -u PYTHONPATH -u VIRTUAL_ENV PYTHONNOUSERSITE=1 \
	    $(DEB_PY) -c 'import numpy, kokoro_lstm; print("debian:", "numpy", numpy.__version__, kokoro_lstm.build_info())'
	cd $(DEB_DIR) && env -u KOKORO_LSTM_REQUIRE -u PYTHONPATH -u VIRTUAL_ENV PYTHONNOUSERSITE=1 \
	    $(DEB_PY) -m pytest -q -p no:cacheprovider $(DEB_TESTS)

# ---- aarch64 (cross-compiled, run under qemu) and the portable (non-Linux) paths ------
# The core and src/tests/test_core.c built with Debian's aarch64 cross compiler against
# the reference BLAS, run under qemu-aarch64: once with every ISA the emulated CPU has
# (qemu's `max` CPU: neon and neon-bf16), once per KOKORO_LSTM_ISA, and on a CPU without
# BF16 (cortex-a72: detection must stop at neon).
AARCH64_CC ?= aarch64-linux-gnu-gcc
QEMU_AARCH64 ?= qemu-aarch64
AARCH64_SYSROOT ?= /usr/aarch64-linux-gnu
AARCH64_PKGS := gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
AARCH64_BIN := build-c/aarch64/o2/test_core
QEMU_RUN := $(QEMU_AARCH64) -L $(AARCH64_SYSROOT)

test-aarch64:
	@if ! command -v $(AARCH64_CC) >/dev/null || ! command -v $(QEMU_AARCH64) >/dev/null; then \
	  if [ "$$(id -u)" != 0 ]; then echo "test-aarch64 needs: $(AARCH64_PKGS) (apt-get install as root)"; exit 1; fi; \
	  echo "== apt-get install $(AARCH64_PKGS)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y --no-install-recommends $(AARCH64_PKGS) || \
	    { apt-get update && apt-get install -y --no-install-recommends $(AARCH64_PKGS); }; \
	fi
	$(MAKE) --no-print-directory CC=$(AARCH64_CC) KOKORO_LSTM_BLAS=ref CBUILD=build-c/aarch64 $(AARCH64_BIN)
	@echo "== $(AARCH64_BIN) under qemu-aarch64 -cpu max (every ISA)"
	QEMU_CPU=max $(QEMU_RUN) $(AARCH64_BIN) > build-c/aarch64/max.log || { tail -n 40 build-c/aarch64/max.log; exit 1; }
	grep -E "^kokoro_lstm core test|^SKIP|passed, " build-c/aarch64/max.log
	grep -q "isa detected=neon-bf16" build-c/aarch64/max.log
	@for isa in scalar neon neon-bf16; do \
	  echo "== KOKORO_LSTM_ISA=$$isa"; \
	  QEMU_CPU=max KOKORO_LSTM_ISA=$$isa $(QEMU_RUN) $(AARCH64_BIN) | tail -n 1; \
	done
	@echo "== qemu-aarch64 -cpu cortex-a72 (no BF16): detection must give neon"
	QEMU_CPU=cortex-a72 KOKORO_LSTM_ISA=neon $(QEMU_RUN) $(AARCH64_BIN) | tee build-c/aarch64/a72.log | tail -n 1
	grep -q "isa detected=neon," build-c/aarch64/a72.log
	@echo "== the same with -DKL_FORCE_PORTABLE (no getauxval: neon assumed, as on macOS)"
	$(MAKE) --no-print-directory CC=$(AARCH64_CC) KOKORO_LSTM_BLAS=ref CBUILD=build-c/aarch64-portable \
	    CFLAGS_EXTRA=-DKL_FORCE_PORTABLE build-c/aarch64-portable/o2/test_core > /dev/null
	QEMU_CPU=max $(QEMU_RUN) build-c/aarch64-portable/o2/test_core | tail -n 1

# -DKL_FORCE_PORTABLE: the code paths of non-Linux systems (macOS), built and run here.
ctest-portable:
	$(MAKE) --no-print-directory CFLAGS_EXTRA=-DKL_FORCE_PORTABLE CBUILD=build-c/portable \
	    build-c/portable/o2/test_core
	build-c/portable/o2/test_core | tail -n 1

# Compile-only with clang (what macOS uses): the portable paths for the host, and for
# aarch64 every NEON file (apt-get install clang; not part of CI).
CLANG ?= clang
CLANG_FLAGS := -std=c11 -Wall -Wextra -Werror -pthread -O2 -DKL_FORCE_PORTABLE $(INCS)
clang-check:
	@mkdir -p build-c/clang
	for f in src/core/*.c src/kernels/*/*-scalar.c $(TEST_SRC); do \
	  $(CLANG) $(CLANG_FLAGS) -c $$f -o build-c/clang/x.o; done
	for f in src/core/*.c src/kernels/*/*-scalar.c src/kernels/*/*-neon.c $(TEST_SRC) src/tests/refblas/refblas.c; do \
	  $(CLANG) --target=aarch64-linux-gnu $(CLANG_FLAGS) -DKL_BLAS_REF -Isrc/tests/refblas -c $$f -o build-c/clang/a.o; done
	for f in src/kernels/*/*-neonbf16.c; do \
	  $(CLANG) --target=aarch64-linux-gnu $(CLANG_FLAGS) -march=armv8.2-a+bf16 -c $$f -o build-c/clang/a.o; done
	@echo "clang-check: all compiled"

wheel-test:
	PYTHON=$(PYTHON) tools/wheel_test.sh

# ---- demo / bench ----------------------------------------------------------------------
DEMO_ARGS ?=
demo: venv ext
	$(VPY) -c "import kokoro_lstm; print(kokoro_lstm.build_info())"
	$(VENV)/bin/kokoro-lstm demo $(DEMO_ARGS)

BENCH_ARGS ?=
bench: venv ext
	$(VPY) benchmarks/bench_lstm.py $(BENCH_ARGS)

clean:
	rm -rf build-c build
	rm -f kokoro_lstm/_core*.so $(EXT_STAMP)
	find . -path ./.venv -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
