"""The C++ runner's cases, shared by tests/test_deploy_cpp.py (CPU, here) and
tools/gpu_deploy.py (CUDA artifacts built here, run on a GPU machine without TVM).

A case is a small torch model around ``nn.LSTM``: its outputs (computed by the plain
``nn.LSTM`` before patching) are the expected values; the patched model is exported
with ``torch.export`` for the ``native`` lowering.
"""
import os

import numpy as np
import torch

import kokoro_lstm.torch_ops as ko

RUNNER_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_artifact.cc")
TTS_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kokoro_tts.cc")
I, H, T = 6, 8, 7
DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64",
          np.dtype(np.int32): "int32", np.dtype(np.int64): "int64"}
CASES = ["uni-1layer", "bi-2layers", "packed-lengths", "h0-c0"]
# Kokoro's shape (bidirectional 640 -> 256, batch 1): on CUDA, the cluster recurrence
KOKORO_CASE = "kokoro-bi"


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


def case(name):
    """(exported program of the patched model, NumPy inputs, expected NumPy outputs)."""
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
    elif name == KOKORO_CASE:
        model = Plain(torch.nn.LSTM(640, 256, bidirectional=True, batch_first=True))
        args = (torch.randn(1, 64, 640),)
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


def _write(path, a):
    a = np.ascontiguousarray(a)
    a.astype(a.dtype.newbyteorder("<"), copy=False).tofile(path)


def write_manifest(d, inputs, expected):
    """Write the tensors and the runner's manifest.txt into folder ``d``; its path."""
    lines = []
    for role, arrays in (("in", inputs), ("out", expected)):
        for k, a in enumerate(arrays):
            a = np.asarray(a)
            name = f"{role}{k}.bin"
            _write(os.path.join(d, name), a)
            lines.append(" ".join([role, name, DTYPES[a.dtype], str(a.ndim)] +
                                  [str(s) for s in a.shape]))
    path = os.path.join(d, "manifest.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def runtime_libs():
    """(include dirs, [libtvm_ffi.so, libtvm_runtime.so]) of the installed wheels."""
    import tvm
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


def runner_command(cxx, exe, incs, libs, rpath=True, source=RUNNER_SOURCE, opt="-O1"):
    """The compiler command that builds the runner ``exe`` (from ``source``) against
    ``libs``."""
    cmd = list(cxx) + ["-std=c++17", opt, "-o", str(exe), source]
    cmd += [f"-isystem{d}" for d in incs]
    # --no-as-needed: nothing in the runner references libtvm_runtime, but loading it
    # registers the Relax VM (the executable's loader, the VM builtins).
    cmd += ["-Wl,--no-as-needed"] + list(libs) + ["-ldl"]
    if rpath:
        cmd += [f"-Wl,-rpath,{d}" for d in sorted({os.path.dirname(p) for p in libs})]
    return cmd


def compile_cuda(ep, arch="sm_90a"):
    """The ``native`` lowering of ``ep`` compiled by TVM for target cuda with nvcc (the
    nvidia-cuda-nvcc wheel's when no nvcc is on PATH) into a binary CUDA module
    (:func:`kokoro_lstm.tvm._cuda.build`, no CUDA graph): a Relax executable whose LSTMs
    call the engine on CUDA tensors. Run in a process of its own (tools/gpu_deploy.py):
    where no driver is, the compile-time driver stub stays loaded."""
    import kokoro_lstm.tvm as kt
    from kokoro_lstm.tvm import _cuda

    target = {"kind": "cuda", "arch": arch}
    mod = kt.from_exported_program(ep, lstm_method="native", target=target)
    return _cuda.build(mod, target, cuda_graph=False)


def cuda_module_format(path):
    """The format a library's saved CUDA module carries ("cuda" = source, "cubin", "ptx",
    "fatbin"), or None without one."""
    with open(path, "rb") as f:
        blob = f.read()
    key = b"\x04\x00\x00\x00\x00\x00\x00\x00cuda"
    at = blob.find(key)
    if at < 0:
        return None
    at += len(key) + 8  # the module's byte count, then its format as a sized string
    n = int.from_bytes(blob[at:at + 8], "little")
    return blob[at + 8:at + 8 + n].decode("ascii", "replace")
