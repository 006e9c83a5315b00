#!/usr/bin/env bash
# `make test-gpu` on the lent GPU machine: build the extension there, run the GPU
# test suite (the LSTM, the noise, the dense externs), the kernels under
# compute-sanitizer, and the CUDA benchmark.
# Logs (and the benchmark JSON) go to $OUT (default build-c/gpu). Wheels the
# machine lacks may be carried in .whl/ (installed to /tmp/site first); the C++
# runner's TVM CUDA artifacts in build-c/gpu-deploy (python tools/gpu_deploy.py
# build-c/gpu-deploy, on a machine with TVM).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-build-c/gpu}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export KOKORO_LSTM_CACHE_DIR=${KOKORO_LSTM_CACHE_DIR:-/tmp/kl-cuda-cache}
rc=0
{
  echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  $PY -c 'import torch; print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version())'
} | tee "$OUT/gpu_env.log"
echo "== build"
KOKORO_LSTM_BLAS=${KOKORO_LSTM_BLAS:-scipy-openblas32} KOKORO_LSTM_WERROR=1 \
  $PY setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "== pytest tests/test_cuda.py"
timeout ${TEST_TIMEOUT:-300} $PY -m pytest -q -rs tests/test_cuda.py ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/test_cuda.log" | tail -25
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
echo "== pytest tests/test_cuda_dense.py"
timeout 120 $PY -m pytest -q -rs tests/test_cuda_dense.py 2>&1 | tee "$OUT/test_cuda_dense.log" | tail -5
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
if [ -z "${NO_SANITIZER:-}" ]; then
  for tool in memcheck racecheck synccheck; do
    echo "== compute-sanitizer --tool $tool tools/cuda_smoke.py"
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $PY tools/cuda_smoke.py > "$OUT/sanitizer_$tool.log" 2>&1 || rc=1
    tail -3 "$OUT/sanitizer_$tool.log"
  done
fi
if [ -z "${NO_BENCH:-}" ]; then
  echo "== benchmarks/bench_cuda.py"
  timeout ${BENCH_TIMEOUT:-300} $PY benchmarks/bench_cuda.py --out "$OUT/cuda.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_cuda.log" | tail -12
fi
exit $rc
