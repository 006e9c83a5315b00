"""Run a ``port-encoder`` library without the ``tvm`` package: only ``tvm_ffi`` (the
apache-tvm-ffi wheel), TVM's ``libtvm_runtime.so`` and the BLAS the library was linked
against. Standalone (imports nothing of this repository, nor tvm); used by
``bench_encoder.py --artifacts`` on machines that have no TVM.

What ``tvm.relax.VirtualMachine(tvm.runtime.load_module(lib), tvm.cpu())[func]`` does,
by hand: libtvm_runtime is loaded RTLD_GLOBAL (it registers the relax VM executable's
loader and exports the TVMBackend* symbols the library's kernels call; it needs
libtvm_ffi.so, which ``import tvm_ffi`` has already loaded RTLD_GLOBAL), then
``tvm_ffi.load_module`` (the executable), ``vm_load_executable()``,
``vm_initialization(kDLCPU, 0, POOLED_ALLOCATOR, kDLCPU, 0, POOLED_ALLOCATOR)`` (the
arguments tvm/runtime/vm.py passes for ``tvm.cpu()``: the device, and the CPU again for
shape functions) and the function by name.

    fn = load(lib, "text_encoder_forward", runtime="libtvm_runtime.so", threads=2)
    outputs = to_numpy(fn(*[tensor(a) for a in arrays]))
"""
from __future__ import annotations

import ctypes
import os
import sys

KDL_CPU = 1
POOLED_ALLOCATOR = 2  # tvm.runtime.vm.VirtualMachine.POOLED_ALLOCATOR
_loaded = {}
_keep = []


def preload_blas(path=None):
    """Load OpenBLAS RTLD_GLOBAL before any library that needs it, so that its soname
    (``libscipy_openblas.so``) resolves to this copy whatever the library's rpath says:
    ``path``, else the installed scipy_openblas32 wheel's. Returns the path loaded."""
    if path is None:
        import scipy_openblas32

        libdir = scipy_openblas32.get_lib_dir()
        path = os.path.join(libdir, next(f for f in sorted(os.listdir(libdir))
                                         if f.startswith("libscipy_openblas") and ".so" in f))
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    _loaded["blas"] = path
    return path


def load_runtime(runtime):
    """tvm_ffi, then libtvm_runtime.so RTLD_GLOBAL (once per process)."""
    import tvm_ffi

    if "runtime" not in _loaded:
        ctypes.CDLL(os.path.abspath(runtime), mode=ctypes.RTLD_GLOBAL)
        _loaded["runtime"] = runtime
    return tvm_ffi


def set_threads(n):
    """TVM's thread pool (``runtime.config_threadpool(0, n)``, as port-encoder does);
    the engine calls in the library use the count compiled in, else
    KOKORO_LSTM_NUM_THREADS."""
    import tvm_ffi

    tvm_ffi.get_global_func("runtime.config_threadpool")(0, int(n))


def load(lib, function, runtime, threads=None):
    """The relax VM function ``function`` of library ``lib`` on the CPU."""
    tvm_ffi = load_runtime(runtime)
    assert "tvm" not in sys.modules, "tvm was imported: this loader is for tvm-less processes"
    if threads:
        set_threads(threads)
    mod = tvm_ffi.load_module(os.path.abspath(lib))
    vm = mod["vm_load_executable"]()
    vm["vm_initialization"](KDL_CPU, 0, POOLED_ALLOCATOR, KDL_CPU, 0, POOLED_ALLOCATOR)
    fn = vm[function]
    _keep.append((mod, vm))  # the module and its VM live as long as the process
    return fn


def tensor(array):
    """A tvm_ffi tensor over a C-contiguous NumPy array (no copy; keep the array alive)."""
    import numpy as np
    import tvm_ffi

    return tvm_ffi.from_dlpack(np.ascontiguousarray(array))


def to_numpy(result):
    """The function's result (a tensor or a tuple of them) as a list of NumPy arrays."""
    import numpy as np

    items = list(result) if not hasattr(result, "__dlpack__") else [result]
    return [np.from_dlpack(t).copy() for t in items]
