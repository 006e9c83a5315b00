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

import numpy as np
import pytest

from conftest import REQUIRE, require

tvm = require("tvm")
torch = require("torch")
tvm_ffi = require("tvm_ffi")

import kokoro_lstm.torch_ops as ko  # noqa: E402
import kokoro_lstm.tvm as kt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "deploy", "run_artifact.cc")
I, H, T = 6, 8, 7
TOL = 1e-5
DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64",
          np.dtype(np.int32): "int32", np.dtype(np.int64): "int64"}


def _libs():
    """(include dirs, [libtvm_ffi.so, libtvm_runtime.so]) of the installed wheels."""
    from tvm_ffi import libinfo

    incs = []
    for find in (libinfo.find_include_path, libinfo.find_dlpack_include_path):
        p = find()
        if p not in incs:
            incs.append(p)
    ffi_lib = libinfo.find_libtvm_ffi()
    rt = os.path.join(os.path.dirname(os.path.abspath(tvm.__file__)), "lib", "libtvm_runtime.so")
    if not os.path.exists(rt):
        raise RuntimeError(f"the apache-tvm wheel has no {rt}")
    return incs, [ffi_lib, rt]


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    cxx = shlex.split(os.environ.get("CXX", "")) or ["g++"]
    if not shutil.which(cxx[0]):
        msg = (f"no C++ compiler ({cxx[0]!r} not found; set CXX): cannot build "
               "tests/deploy/run_artifact.cc")
        if REQUIRE:
            pytest.fail(msg + " (KOKORO_LSTM_REQUIRE=1: this test must run)")
        pytest.skip(msg)
    incs, libs = _libs()
    exe = tmp_path_factory.mktemp("deploy") / "run_artifact"
    cmd = cxx + ["-std=c++17", "-O1", "-o", str(exe), SOURCE]
    cmd += [f"-I{d}" for d in incs]
    # --no-as-needed: nothing in the runner references libtvm_runtime, but loading it
    # registers the Relax VM (the executable's loader, the VM builtins).
    cmd += (["-Wl,--no-as-needed"] if sys.platform.startswith("linux") else []) + libs
    cmd += [f"-Wl,-rpath,{d}" for d in sorted({os.path.dirname(p) for p in libs})]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"building the runner failed:\n{' '.join(cmd)}\n{r.stderr}"
    return str(exe)


def _write(path, a):
    a = np.ascontiguousarray(a)
    a.astype(a.dtype.newbyteorder("<"), copy=False).tofile(path)


def _manifest(d, inputs, expected):
    lines = []
    for role, arrays in (("in", inputs), ("out", expected)):
        for k, a in enumerate(arrays):
            a = np.asarray(a)
            name = f"{role}{k}.bin"
            _write(d / name, a)
            lines.append(" ".join([role, name, DTYPES[a.dtype], str(a.ndim)] +
                                  [str(s) for s in a.shape]))
    path = d / "manifest.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run_runner(runner, lib, manifest, tol=TOL):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run([runner, str(lib), "main", str(manifest), repr(tol)], env=env,
                          capture_output=True, text=True, timeout=120)


def _errors(stdout):
    return [float(e) for e in re.findall(r"max_abs_err=(\S+)", stdout)]


# ----------------------------------------------------------------------------------
# The models: (module, example inputs) -> torch outputs (expected), exported natively
# ----------------------------------------------------------------------------------
class Plain(torch.nn.Module):
    def __init__(self, lstm):
        super().__init__()
        self.lstm = lstm

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return y, h, c


class WithState(Plain):
    def forward(self, x, h0, c0):
        y, (h, c) = self.lstm(x, (h0, c0))
        return y, h, c


class Packed(Plain):
    """Kokoro-style: batch_first, pack_padded_sequence(enforce_sorted=False)."""

    def forward(self, x, lengths):
        p = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                    enforce_sorted=False)
        y, (h, c) = self.lstm(p)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True,
                                                      total_length=x.shape[1])
        return y, h, c


def _case(name):
    torch.manual_seed(sum(map(ord, name)))
    if name == "uni-1layer":
        model = Plain(torch.nn.LSTM(I, H))
        args = (torch.randn(T, 2, I),)
    elif name == "bi-2layers":
        model = Plain(torch.nn.LSTM(I, H, num_layers=2, bidirectional=True, batch_first=True))
        args = (torch.randn(2, T, I),)
    elif name == "packed-lengths":
        model = Packed(torch.nn.LSTM(I, H, bidirectional=True, batch_first=True))
        args = (torch.randn(3, T, I), torch.tensor([5, T, 2], dtype=torch.int64))
    elif name == "h0-c0":
        model = WithState(torch.nn.LSTM(I, H, num_layers=2))
        args = (torch.randn(T, 3, I), torch.randn(2, 3, H), torch.randn(2, 3, H))
    else:
        raise KeyError(name)
    model.eval()
    with torch.no_grad():
        expected = model(*args)  # the plain nn.LSTM, before patching
    expected = [t.numpy() for t in (expected if isinstance(expected, tuple) else (expected,))]
    ko.patch_lstm_modules(model)
    with ko.exportable_packing():
        ep = torch.export.export(model, args)
    return ep, [a.numpy() for a in args], expected


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


CASES = ["uni-1layer", "bi-2layers", "packed-lengths", "h0-c0"]


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
