# kokoro_lstm developer entry points. The test command is `make test`.
#
#   make venv         .venv with torch==2.13.0 (CPU), NumPy, pytest, TVM, ONNX Runtime, onnxscript, ...
#                     and this package installed editable (a stamp makes reruns instant)
#   make ext          the extension rebuilt in place (setup.py build_ext --inplace: incremental)
#   make test         venv + C core test (ctest, FAIL lines and a summary) + pytest -q -rs tests/
#                     (skip reasons listed) with KOKORO_LSTM_REQUIRE=1
#   make ctest        the C core test program (tests/c, one file per concern); python3 runs the build
#   make asan         the same under AddressSanitizer + UBSan (leak checking on), then
#                     make asan-fuzz: the dense externs' configs fuzzed (hypothesis) against
#                     the extension built with ASan + UBSan (build-c/asan-ext)
#   make debian-test  build with Debian's /usr/bin/python3 + libopenblas-dev in a
#                     separate tree (build-c/debian) and run the core Python tests there
#   make blas-scipy-test  the C test and the core Python tests against the
#                     scipy-openblas32 wheel instead of the system OpenBLAS
#   make test-aarch64 the C test cross-compiled for aarch64 (Debian's gcc-aarch64-linux-gnu,
#                     a reference BLAS) and run under qemu-aarch64: every ISA, NEON kernels
#   make ctest-portable  the C test built with -DKL_FORCE_PORTABLE: the non-Linux code paths
#                     (condvar barrier, no affinity, no getauxval) compiled and run on Linux
#   make clang-check  compile-only with clang -Werror, portable paths: every file of the C test,
#                     for the host and for aarch64
#   make wheel-test   build the wheel, auditwheel repair it, install it in a fresh venv
#                     without a compiler and run the core tests against it; then port-encoder
#                     from it and its library run without kokoro_lstm (tools/wheel_test.sh)
#   make test-gpu     on a machine with an NVIDIA GPU (the lent H100): build there, the GPU tests
#                     (tests/test_cuda.py), compute-sanitizer over tools/cuda_smoke.py and
#                     benchmarks/bench_cuda.py; logs to $$OUT (tools/gpu_check.sh); with
#                     build-c/gpu-deploy (`make gpu-deploy`, here) carried, the C++ runner on cuda
#   make demo         kokoro-lstm demo: port Kokoro's text_encoder and duration to TVM
#                     with native/tir/relax LSTMs (random weights, validated), one table
#   make bench        benchmarks/bench_lstm.py $(BENCH_ARGS) (kokoro_lstm vs PyTorch vs ONNX
#                     Runtime in one process), then benchmarks/report.py: RESULTS.md from results/
#   make bench-kernels  benchmarks/c/bench_kernels.c: ns per call of every kernel of the
#                     kernel lists this CPU can run (BENCH_KERNELS_ROUNDS rounds, default 21)
#   make clean        build outputs (keeps .venv); `make distclean` also removes .venv
#
# What is compiled, with which flags and against which BLAS, is described once in
# kl_build.py, for the extension (setup.py) and the C programs alike; the targets
# below only call it. BLAS: KOKORO_LSTM_BLAS=auto (default: the system OpenBLAS via
# pkg-config, else the scipy-openblas32 wheel from .venv), system, or
# scipy-openblas32; `ref` (C programs only) links tests/c/refblas instead.
# Every build from here has -Werror (KOKORO_LSTM_WERROR=1; a pip install has not).

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
# NVRTC (no GPU needed): tests/test_cuda.py compiles every CUDA kernel for sm_80 and sm_90a
NVRTC_PIP ?= nvidia-cuda-nvrtc==13.0.88
# nvcc (no GPU needed): tests/test_deploy_cpp.py compiles a TVM module for target cuda
NVCC_PIP ?= nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88

# ---- C builds: kl_build.py ------------------------------------------------------------
export KOKORO_LSTM_WERROR ?= 1
KOKORO_LSTM_BLAS ?= auto
ifeq ($(origin CC),default)
CC := gcc
endif
# extra compiler flags for the C programs
CFLAGS_EXTRA ?=
# The driver needs only python3; the venv's python when there is one (it has
# scipy-openblas32). BLAS=scipy-openblas32 makes the venv first.
KLB = $$(test -x $(VPY) && echo $(VPY) || echo $(PYTHON)) kl_build.py
KLB_ARGS = --cc "$(CC)" --blas $(KOKORO_LSTM_BLAS) --cflags "$(CFLAGS_EXTRA)"
C_DEPS := $(if $(filter scipy-openblas32,$(KOKORO_LSTM_BLAS)),venv)
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# ---- Debian's own stack --------------------------------------------------------------------
DEB_PY := /usr/bin/python3
DEB_PKGS := python3-dev python3-numpy python3-pytest python3-setuptools libopenblas-dev pkg-config
DEB_DIR := build-c/debian
DEB_TESTS := tests/test_numpy_api.py tests/test_reference.py tests/test_one_road.py

.PHONY: all venv ext test test-gpu gpu-deploy ctest asan asan-fuzz bench-kernels debian-test blas-scipy-test demo bench clean distclean \
        test-aarch64 ctest-portable wheel-test clang-check

all: test

# ---- venv -------------------------------------------------------------------------------
venv: $(VENV_STAMP)

$(VENV_STAMP): constraints.txt pyproject.toml
	@echo "== venv: $(VENV)"
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --progress-bar off $(PIPC) $(TORCH_PIP_ARGS) torch==2.13.0
	$(PIP) install --progress-bar off $(PIPC) numpy pytest hypothesis scipy-openblas32 setuptools wheel apache-tvm \
	    onnxruntime onnx onnxscript matplotlib threadpoolctl $(NVRTC_PIP) $(NVCC_PIP)
	$(PIP) install --progress-bar off $(PIPC) $(TEST_EXTRAS)
	$(PIP) install --progress-bar off $(PIPC) --no-build-isolation -e .
	touch $@

# The editable install builds kokoro_lstm/_core*.so in the tree; setup.py rebuilds
# only what changed (a no-op run takes well under a second).
ext: venv
	$(VPY) setup.py -q build_ext --inplace

# ---- tests -------------------------------------------------------------------------------
test: venv ext
	@rc=0; \
	echo "== C core test (kl_build.py ctest; KL_TEST_VERBOSE=1 prints every PASS)"; \
	KL_TEST_QUIET=1 $(KLB) ctest $(KLB_ARGS) --run || rc=1; \
	echo "== C core test, parallel jobs on libgomp's team (LD_PRELOAD=$(GOMP))"; \
	if KL_TEST_QUIET=1 KL_TEST_POOL=openmp LD_PRELOAD=$(GOMP) $(KLB) ctest $(KLB_ARGS) --run \
	     > build-c/ctest-openmp.log 2>&1; then tail -n 2 build-c/ctest-openmp.log; \
	else tail -n 40 build-c/ctest-openmp.log; rc=1; fi; \
	echo "== pytest -q tests (KOKORO_LSTM_REQUIRE=1)"; \
	export KOKORO_LSTM_REQUIRE=1; \
	$(VPY) -m pytest -q -rs tests || rc=1; \
	if [ $$rc -ne 0 ]; then echo "make test: FAILED"; else echo "make test: all passed"; fi; \
	exit $$rc

test-gpu:
	bash tools/gpu_check.sh

# the C++ runner's TVM CUDA artifacts for `make test-gpu` (built here: TVM, pip's nvcc)
gpu-deploy: venv ext
	$(VPY) tools/gpu_deploy.py build-c/gpu-deploy

# GNU OpenMP, preloaded for the second C test run of `make test` (the engine runs its
# parallel jobs on a loaded libgomp's team, as next to PyTorch)
GOMP ?= $(shell $(CC) -print-file-name=libgomp.so.1)

ctest: $(C_DEPS)
	$(KLB) ctest $(KLB_ARGS) --run

asan: $(C_DEPS)
	$(ASAN_ENV) $(KLB) ctest --variant asan $(KLB_ARGS) --run
	$(MAKE) --no-print-directory asan-fuzz

# The dense externs' configs fuzzed (tests/test_dense_fuzz.py, hypothesis, derandomized)
# against the extension built with ASan + UBSan in $(ASAN_EXT); Python is not
# instrumented, so libasan is preloaded and leak checking is off. python -P: the
# tree's own kokoro_lstm (the development build) must not shadow the ASan copy.
ASAN_EXT := build-c/asan-ext
LIBASAN = $(shell $(CC) -print-file-name=libasan.so)
asan-fuzz: venv
	$(VPY) kl_build.py ext --variant asan $(KLB_ARGS) --out $(ASAN_EXT) -q
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:halt_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 LD_PRELOAD=$(LIBASAN) \
	PYTHONPATH=$(ASAN_EXT) KOKORO_LSTM_FUZZ_BUILD=$(ASAN_EXT) KOKORO_LSTM_REQUIRE=1 \
	    $(VPY) -P -m pytest -q -p no:cacheprovider tests/test_dense_fuzz.py

BENCH_KERNELS_ROUNDS ?= 21
bench-kernels: $(C_DEPS)
	$(KLB) bench-kernels $(KLB_ARGS) --run $(BENCH_KERNELS_ROUNDS)

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
# The core and its C test (tests/c) built with Debian's aarch64 cross compiler against
# the reference BLAS, run under qemu-aarch64: once with every ISA the emulated CPU has
# (qemu's `max` CPU: neon and neon-bf16), once per KOKORO_LSTM_ISA, and on a CPU without
# BF16 (cortex-a72: detection must stop at neon).
AARCH64_CC ?= aarch64-linux-gnu-gcc
QEMU_AARCH64 ?= qemu-aarch64
AARCH64_SYSROOT ?= /usr/aarch64-linux-gnu
AARCH64_PKGS := gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
AARCH64_BIN := build-c/aarch64/o2/test_core
AARCH64_PORTABLE_BIN := build-c/aarch64/portable/test_core
QEMU_RUN := $(QEMU_AARCH64) -L $(AARCH64_SYSROOT)

test-aarch64:
	@if ! command -v $(AARCH64_CC) >/dev/null || ! command -v $(QEMU_AARCH64) >/dev/null; then \
	  if [ "$$(id -u)" != 0 ]; then echo "test-aarch64 needs: $(AARCH64_PKGS) (apt-get install as root)"; exit 1; fi; \
	  echo "== apt-get install $(AARCH64_PKGS)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y --no-install-recommends $(AARCH64_PKGS) || \
	    { apt-get update && apt-get install -y --no-install-recommends $(AARCH64_PKGS); }; \
	fi
	$(KLB) ctest --cc $(AARCH64_CC) --blas ref --cflags "$(CFLAGS_EXTRA)" --out $(dir $(AARCH64_BIN))
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
	$(KLB) ctest --cc $(AARCH64_CC) --blas ref --variant portable --cflags "$(CFLAGS_EXTRA)" \
	    --out $(dir $(AARCH64_PORTABLE_BIN)) > /dev/null
	QEMU_CPU=max $(QEMU_RUN) $(AARCH64_PORTABLE_BIN) | tail -n 1

# -DKL_FORCE_PORTABLE: the code paths of non-Linux systems (macOS), built and run here.
ctest-portable: $(C_DEPS)
	$(KLB) ctest --variant portable $(KLB_ARGS) --run | tail -n 1

# Compile-only with clang (what macOS uses), the portable paths: every file of the C
# test for the host and for aarch64 (apt-get install clang; not part of CI).
CLANG ?= clang
clang-check:
	$(KLB) check $(KLB_ARGS) --cc $(CLANG) --variant portable --out build-c/clang/host
	$(KLB) check --cc "$(CLANG) --target=aarch64-linux-gnu" --blas ref --variant portable \
	    --cflags "$(CFLAGS_EXTRA)" --out build-c/clang/aarch64

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
	$(VPY) benchmarks/report.py

clean:
	rm -rf build-c build
	rm -f kokoro_lstm/_core*.so
	find . -path ./.venv -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
