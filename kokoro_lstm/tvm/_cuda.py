"""Compiling Relax modules for target ``cuda`` without a GPU: pip's nvcc, kernels saved
as cubin, the whole main function captured as one Relax CUDA graph.

* :func:`nvcc_dir`: the folder of the nvcc TVM's compile callback runs (PATH's, else the
  ``nvidia-cuda-nvcc`` wheel's); :func:`require_nvcc` raises a one-line RuntimeError
  naming the package when there is none.
* :func:`codegen_runtime`: loads TVM's CUDA runtime into the process so that TVM's CUDA
  module factory compiles the generated source at build time (without it TVM stores the
  source, which only a Python process can compile where the artifact is loaded).
* :func:`build`: ``tvm.compile`` for a cuda target with both, and with
  ``relax.backend.use_cuda_graph``.
* :func:`device`: ``tvm.cuda(0)`` when a GPU is usable here, else None.
"""
from __future__ import annotations

import os
import shutil

from .._environ import scoped

__all__ = ["nvcc_dir", "require_nvcc", "local_arch", "codegen_runtime", "build", "device",
           "is_cuda", "target_arch", "stage_inputs"]


def pip_nvcc_dir():
    """The bin folder of the nvidia-cuda-nvcc wheel (CUDA 13: nvidia/cu13/bin), or None."""
    try:
        import nvidia
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for sub in ("cu13", "cuda_nvcc"):
            d = os.path.join(root, sub, "bin")
            if os.path.exists(os.path.join(d, "nvcc")):
                return d
    return None


def nvcc_dir():
    """The folder of the nvcc a cuda build runs: PATH's, else pip's, else None."""
    found = shutil.which("nvcc")
    return os.path.dirname(found) if found else pip_nvcc_dir()


def require_nvcc():
    """nvcc's folder, or RuntimeError (one line) saying how to get one."""
    d = nvcc_dir()
    if d is None:
        raise RuntimeError("target cuda needs nvcc to compile its kernels and none is here: "
                           "pip install nvidia-cuda-nvcc (CUDA 13), or put a CUDA toolkit's "
                           "nvcc on PATH")
    return d


def is_cuda(target) -> bool:
    """Whether ``target`` (a dict, str or tvm.target.Target) is of kind cuda."""
    if isinstance(target, dict):
        return target.get("kind") == "cuda"
    if isinstance(target, str):
        return target.strip().split(" ")[0] == "cuda"
    return getattr(getattr(target, "kind", None), "name", None) == "cuda"


def target_arch(target):
    """The ``sm_XY`` a cuda target compiles for, or None."""
    import tvm

    t = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    arch = t.attrs.get("arch") if "arch" in t.attrs else None
    return str(arch) if arch else None


def convs_run(target) -> bool:
    """Whether the engine's CUDA convolutions (tensor-core kernels, sm_80 on) run on a
    cuda target's architecture (one not named: assumed to)."""
    arch = target_arch(target)
    digits = "".join(ch for ch in (arch or "").split("_")[-1] if ch.isdigit())
    return not digits or int(digits) >= 80


def local_arch():
    """``sm_XY`` of this machine's first GPU (``sm_90a`` on Hopper, whose cluster features
    the engine's kernels use), from the driver, or None without a driver or GPU."""
    import ctypes

    try:
        cu = ctypes.CDLL("libcuda.so.1")
        init = cu.cuInit  # the compile-time stub (codegen_runtime) has none
    except (OSError, AttributeError):
        return None
    major, minor = ctypes.c_int(), ctypes.c_int()
    if (init(0) != 0
            or cu.cuDeviceGetAttribute(ctypes.byref(major), 75, 0) != 0  # COMPUTE_CAPABILITY_MAJOR
            or cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, 0) != 0):
        return None
    arch = f"sm_{major.value}{minor.value}"
    return arch + "a" if major.value == 9 else arch


def arch_runs(arch, gpu) -> bool:
    """Whether cubin for ``arch`` loads on a GPU of ``gpu`` (both ``sm_XY[a]``): an
    ``a`` (or ``f``) architecture only on itself, a plain one on the same major at that
    minor or later."""
    def split(a):
        digits = a[3:].rstrip("af")
        return int(digits[:-1]), int(digits[-1]), a[3:] != digits

    (m, n, specific), (gm, gn, _) = split(arch), split(gpu)
    return (m, n) == (gm, gn) if specific else (m == gm and n <= gn)


def nvidia_lib_dir(name):
    """The folder of the NVIDIA wheels (CUDA 13's nvidia/cu13/lib, or the older
    per-library folders) that holds the library ``name``, or None."""
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13/lib", "cuda_runtime/lib", "cuda_nvrtc/lib"):
            if os.path.exists(os.path.join(root, sub, name)):
                return os.path.join(root, sub)
    return None


def _cudart():
    d = nvidia_lib_dir("libcudart.so.13")
    if d is None:
        raise RuntimeError("no libcudart.so.13 for TVM's CUDA runtime: pip install "
                           "nvidia-cuda-runtime (CUDA 13)")
    return os.path.join(d, "libcudart.so.13")


def _driver_stub(rt):
    """A libcuda.so.1 whose every entry TVM's CUDA runtime names returns
    CUDA_ERROR_NO_DEVICE (as CUDA toolkits ship one for linking): loaded where no driver
    is, so the runtime loads; nothing calls it while compiling."""
    import subprocess
    import tempfile

    syms = subprocess.run(["nm", "-D", "--undefined-only", rt], capture_output=True,
                          text=True, check=True).stdout.split()
    syms = sorted({s for s in syms if s.startswith("cu") and s[2:3].isupper()})
    d = tempfile.mkdtemp(prefix="kl-cuda-stub-")
    src = os.path.join(d, "stub.c")
    with open(src, "w") as f:
        f.write("".join(f"int {s}(void) {{ return 100; }}\n" for s in syms))
    so = os.path.join(d, "libcuda.so.1")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", so, src, "-Wl,-soname,libcuda.so.1"],
                   check=True)
    return so


def codegen_runtime():
    """Loads TVM's CUDA runtime (libtvm_runtime_cuda.so) into this process once, with the
    driver stub of :func:`_driver_stub` where no driver is; RuntimeError when it cannot."""
    import ctypes

    import tvm
    import tvm_ffi

    if tvm_ffi.get_global_func("ffi.Module.create.cuda", allow_missing=True) is not None:
        return
    rt = os.path.join(os.path.dirname(os.path.abspath(tvm.__file__)), "lib",
                      "libtvm_runtime_cuda.so")
    try:
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        ctypes.CDLL(_driver_stub(rt), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(_cudart(), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(rt, mode=ctypes.RTLD_GLOBAL)
    if tvm_ffi.get_global_func("ffi.Module.create.cuda", allow_missing=True) is None:
        raise RuntimeError(f"{rt} did not register its CUDA module factory")


def _nvcc_env(bin_dir):
    """PATH with ``bin_dir`` first and TVM's compile callback set to nvcc without fast
    math, for the block's length only (the callback reads these when it runs). Fast
    math would turn powf(x, 3) into exp2(3 log2 x): NaN for x < 0."""
    return scoped({"PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
                   "TVM_CUDA_COMPILE_MODE": "nvcc", "TVM_CUDA_NVCC_NO_FAST_MATH": "1"})


def build(mod, target, *, cuda_graph=True):
    """``tvm.compile(mod, target)`` for a cuda ``target`` (dict, str or Target): TVM's
    default CUDA pipeline (dlight schedules), kernels compiled by nvcc into cubin, and
    with ``cuda_graph`` each function after its inputs' copies (:func:`stage_inputs`)
    captured as a Relax CUDA graph on its first call and replayed after."""
    import tvm
    import tvm.support.nvcc  # noqa: F401 - registers tvm_callback_cuda_compile

    bin_dir = require_nvcc()
    codegen_runtime()
    tgt = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    if cuda_graph:
        mod = stage_inputs(mod)
    config = {"relax.backend.use_cuda_graph": bool(cuda_graph)}
    with _nvcc_env(bin_dir), tgt, tvm.transform.PassContext(opt_level=3, config=config):
        return tvm.compile(mod, target=tgt)


def device():
    """``tvm.cuda(0)`` when TVM sees a GPU here, else None (no driver, no device, or
    only the compile-time driver stub)."""
    import tvm

    try:
        dev = tvm.cuda(0)
        return dev if dev.exist else None
    except Exception:  # noqa: BLE001 - no CUDA runtime in this TVM build
        return None



def _copy_func(ty, name):
    """A TIR copy of a tensor of type ``ty``."""
    from tvm import te

    x = te.placeholder([int(d) for d in ty.shape.values], ty.dtype, "x")
    y = te.compute(x.shape, lambda *i: x(*i), name="y")
    return te.create_prim_func([x, y]).with_attr("global_symbol", name)


def _static_tensor(ty):
    import tvm
    from tvm import relax

    return (isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr)
            and all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values))


def stage_inputs(mod):
    """``mod`` with each Relax function's tensor inputs of static shape copied first
    thing into buffers of its own. TVM's CUDA-graph rewrite captures only calls whose
    every argument has a fixed address, which a function's inputs have not; after the
    copies, everything downstream of them is one graph."""
    from tvm import relax

    bb = relax.BlockBuilder(mod)
    copies = {}  # (shape, dtype) -> GlobalVar of its copy
    done = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        params = [relax.Var(p.name, p.ty) for p in func.params]
        bindings, bind = [], {}
        for p, q in zip(func.params, params):
            bind[p] = q
            if not _static_tensor(p.ty):
                continue
            key = (tuple(int(d) for d in p.ty.shape.values), p.ty.dtype)
            if key not in copies:
                name = f"kl_stage_input{len(copies)}"
                copies[key] = bb.add_func(_copy_func(p.ty, name), name)
            v = relax.Var(f"{p.name}_staged", p.ty)
            bindings.append(relax.VarBinding(v, relax.call_tir(copies[key], [q], p.ty)))
            bind[p] = v
        if not bindings:
            continue
        body = func.bind_params(bind).body
        # a plain block: RewriteDataflowReshape would turn the copies into views
        seq = relax.SeqExpr([relax.BindingBlock(bindings)] + list(body.blocks), body.body)
        done[gv] = relax.Function(params, seq, func.ret_ty, func.is_pure, func.attrs)
    out = bb.get()
    for gv, func in done.items():
        out[gv] = func
    return out
