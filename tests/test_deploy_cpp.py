"""Deployment without Python: a C++ program (tests/deploy/run_artifact.cc) loads a
library exported with ``kokoro_lstm.tvm.export_library`` (native method: the engine is
linked in) through the TVM runtime library of the apache-tvm wheel, runs it on the Relax
VM and compares its outputs with expected values computed here by torch.nn.LSTM.

The runner is built with g++ (``CXX`` overrides) against the tvm-ffi headers of the
apache-tvm-ffi wheel and linked with ``libtvm_ffi.so`` and ``libtvm_runtime.so``; it runs
in a subprocess whose environment has no PYTHONPATH / PYTHONHOME.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import REQUIRE, require

tvm = require("tvm")
torch = require("torch")
tvm_ffi = require("tvm_ffi")

import kokoro_lstm.tvm as kt  # noqa: E402

from deploy.artifacts import CASES, case as _case, runner_command, runtime_libs  # noqa: E402
from deploy.artifacts import write_manifest  # noqa: E402

TOL = 1e-5


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    cxx = shlex.split(os.environ.get("CXX", "")) or ["g++"]
    if not shutil.which(cxx[0]):
        msg = (f"no C++ compiler ({cxx[0]!r} not found; set CXX): cannot build "
               "tests/deploy/run_artifact.cc")
        if REQUIRE:
            pytest.fail(msg + " (KOKORO_LSTM_REQUIRE=1: this test must run)")
        pytest.skip(msg)
    incs, libs = runtime_libs()
    exe = tmp_path_factory.mktemp("deploy") / "run_artifact"
    cmd = runner_command(cxx, exe, incs, libs)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"building the runner failed:\n{' '.join(cmd)}\n{r.stderr}"
    return str(exe)


def _manifest(d, inputs, expected):
    return write_manifest(str(d), inputs, expected)


def _run_runner(runner, lib, manifest, tol=TOL):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run([runner, str(lib), "main", str(manifest), repr(tol)], env=env,
                          capture_output=True, text=True, timeout=120)


def _errors(stdout):
    return [float(e) for e in re.findall(r"max_abs_err=(\S+)", stdout)]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """name -> (exported library, numpy inputs, expected outputs); one export per case."""
    d = tmp_path_factory.mktemp("artifacts")
    cache = {}

    def get(name):
        if name not in cache:
            ep, inputs, expected = _case(name)
            ex = tvm.compile(kt.from_exported_program(ep, lstm_method="native"), target="llvm")
            assert kt.uses_engine(ex), "the native method should call the kokoro_lstm engine"
            lib = d / f"{name}.so"
            kt.export_library(ex, lib)
            cache[name] = (lib, inputs, expected)
        lib, inputs, expected = cache[name]
        return lib, list(inputs), [e.copy() for e in expected]

    return get



@pytest.mark.parametrize("name", CASES)
def test_cpp_runner_matches_torch(runner, artifact, tmp_path, name):
    lib, inputs, expected = artifact(name)
    manifest = _manifest(tmp_path, inputs, expected)
    r = _run_runner(runner, lib, manifest)
    out = f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert r.returncode == 0, out
    errs = _errors(r.stdout)
    assert len(errs) == len(expected), out
    assert all(e <= TOL for e in errs), out
    assert "PASS" in r.stdout, out


def test_cpp_runner_detects_mismatch(runner, artifact, tmp_path):
    """The runner fails (exit 1) on a wrong expected value: the check is not vacuous."""
    lib, inputs, expected = artifact("uni-1layer")
    expected[1].flat[3] += 1e-3
    r = _run_runner(runner, lib, _manifest(tmp_path, inputs, expected))
    out = f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert r.returncode == 1, out
    errs = _errors(r.stdout)
    assert len(errs) == 3 and errs[0] <= TOL and errs[2] <= TOL, out
    assert abs(errs[1] - 1e-3) < 1e-5, out


def test_runner_device_argument(runner, artifact, tmp_path):
    """A bad device is a usage error; `cuda` on a machine without CUDA says why (exit 2)."""
    lib, inputs, expected = artifact("uni-1layer")
    manifest = _manifest(tmp_path, inputs, expected)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    r = subprocess.run([runner, str(lib), "main", str(manifest), "1e-5", "gpu"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "bad device 'gpu'" in r.stderr, r.stderr
    r = subprocess.run([runner, str(lib), "main", str(manifest), "1e-5", "cpu"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "main on cpu" in r.stdout, r.stdout + r.stderr
    if not os.path.exists("/dev/nvidia0"):
        r = subprocess.run([runner, str(lib), "main", str(manifest), "1e-5", "cuda"], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "CUDA" in r.stderr, r.stderr


def test_tvm_cuda_artifact_builds(tmp_path):
    """tools/gpu_deploy.py compiles the native lowering for target cuda (pip's nvcc, no
    GPU) into a library whose CUDA kernels are saved compiled (the GPU suite's C++
    runner test runs what it builds, without Python)."""
    from kokoro_lstm.tvm import _cuda

    if _cuda.nvcc_dir() is None:
        msg = "no nvcc (pip install nvidia-cuda-nvcc)"
        if REQUIRE:
            pytest.fail(msg + " (KOKORO_LSTM_REQUIRE=1: this test must run)")
        pytest.skip(msg)
    tool = os.path.join(os.path.dirname(__file__), "..", "tools", "gpu_deploy.py")
    r = subprocess.run([sys.executable, tool, str(tmp_path / "out"), "--cases", "packed-lengths"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "packed-lengths: " in r.stdout and "CUDA module cubin" in r.stdout, r.stdout
    d = tmp_path / "out"
    assert (d / "cases" / "packed-lengths" / "manifest.txt").exists()
    assert {"libtvm_ffi.so", "libtvm_runtime.so", "libtvm_runtime_cuda.so"} <= set(
        os.listdir(d / "lib"))
