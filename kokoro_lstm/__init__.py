"""kokoro_lstm: fast, exact LSTM inference on CPU and NVIDIA GPUs.

- ``LSTM`` / ``lstm_forward``: torch.nn.LSTM semantics over NumPy buffers on
  the C engine (OpenBLAS input projection, SIMD recurrent kernels, GIL released).
- ``reference``: the float64 NumPy oracle.
- ``set_num_threads`` / ``get_num_threads``: one thread count for every front (also
  honours threadpoolctl, torch's setting and cgroup CPU quotas; see ``_threads``).
- ``kokoro_lstm.torch_ops`` (imports torch) and ``kokoro_lstm.tvm`` (imports
  TVM) are integrations, imported only when asked for.
"""


from ._version import __version__

# The scipy-openblas32 library's file name per platform (the wheel ships
# libscipy_openblas.so on Linux, libscipy_openblas.dylib on macOS).
_SHLIB_SUFFIX = {"darwin": ".dylib", "win32": ".dll", "cygwin": ".dll"}


def _preload_blas() -> None:
    """The scipy-openblas32 build finds libscipy_openblas through a relative
    rpath when installed next to the scipy_openblas32 package; load it first
    anyway (in-place builds, other layouts), as NumPy does with its own OpenBLAS."""
    try:
        from ._build_config import BLAS
    except ImportError:  # built by other means (e.g. the Makefile's C tests)
        return
    if BLAS == "scipy-openblas32":
        import ctypes
        import os
        import sys

        import scipy_openblas32

        libdir = scipy_openblas32.get_lib_dir()
        name = "lib" + scipy_openblas32.get_library() + _SHLIB_SUFFIX.get(sys.platform, ".so")
        if not os.path.exists(os.path.join(libdir, name)):  # another naming: take what is there
            found = sorted(f for f in os.listdir(libdir) if f.startswith("libscipy_openblas")
                           and f.endswith((".so", ".dylib", ".dll")))
            name = found[0] if found else name
        ctypes.CDLL(os.path.join(libdir, name), mode=ctypes.RTLD_GLOBAL)


_preload_blas()


def _find_nvrtc():
    """The nvidia-cuda-nvrtc wheel's libnvrtc when one is installed (CUDA PyTorch
    brings it), else None: the engine loads it at its first CUDA call, unless the
    user's KOKORO_LSTM_NVRTC names another."""
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        for rel in ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.13",
                    "cuda_nvrtc/lib/libnvrtc.so.12"):
            path = os.path.join(root, rel)
            if os.path.exists(path):
                return path
    return None


_NVRTC_PATH = _find_nvrtc()

from typing import Any, Dict  # noqa: E402

from . import _core, _threads  # noqa: E402

if _NVRTC_PATH:
    _core.set_nvrtc_path(_NVRTC_PATH)

from ._threads import get_num_threads, set_num_threads  # noqa: E402
from .numpy_api import LSTM, cache_info, clear_cache, default_num_threads, lstm_forward  # noqa: E402

_ISAS = ("scalar", "avx2", "avx512", "neon", "neon-bf16", "avx512-bf16", "avx512-amx")  # kl_isa_name() of every KL_ISA_*


def _check_isa_env():
    """The C core ignores a KOKORO_LSTM_ISA it does not know, and caps a known one at
    what the CPU has: say so instead of staying silent."""
    import os
    import warnings

    raw = os.environ.get("KOKORO_LSTM_ISA")
    if raw is None or raw == "":
        return

    if raw not in _ISAS:
        warnings.warn(f"KOKORO_LSTM_ISA={raw!r} is not one of {', '.join(_ISAS)} (lower "
                      f"case); ignored: using {_core.get_isa()!r}", RuntimeWarning,
                      stacklevel=3)
    elif raw != _core.get_isa():
        warnings.warn(f"KOKORO_LSTM_ISA={raw!r}: not supported by this CPU (or build), whose "
                      f"best is {_core.detected_isa()!r}; using {_core.get_isa()!r}",
                      RuntimeWarning, stacklevel=3)


def _check_f16_widen_env():
    """KOKORO_LSTM_F16_WIDEN=256|512 fixes how float16 kernels widen a single row's
    halves (the C core otherwise measures it); the core ignores other values."""
    import os
    import warnings

    raw = os.environ.get("KOKORO_LSTM_F16_WIDEN")
    if raw not in (None, "", "256", "512"):
        warnings.warn(f"KOKORO_LSTM_F16_WIDEN={raw!r} is not 256 or 512; ignored: the faster "
                      "widening is measured", RuntimeWarning, stacklevel=3)


_check_isa_env()
_check_f16_widen_env()
_threads.register_threadpoolctl()
_threads.sync_engine()


def build_info() -> Dict[str, Any]:
    """What this build uses: BLAS, detected and active ISA, bfloat16 support, the
    float32-on-AMX switch, and whether float16 single rows widen 8 halves at a time."""
    return {
        "blas": _core.blas_name(),
        "isa_detected": _core.detected_isa(),
        "isa_active": _core.get_isa(),
        "avx512_bf16": _core.has_avx512bf16(),
        "f32_amx": _core.get_f32_amx(),
        "f16_narrow_rows": _core.f16_narrow_rows(),
    }


def _register_tvm_native() -> None:
    """Make TVM modules compiled with lstm_method="native" runnable in this
    process: registers the engine's C functions with tvm-ffi now if it is
    loaded, else right after it is first imported. Imports neither tvm nor torch."""
    try:
        from .tvm import _native

        _native.register()
    except Exception:  # noqa: BLE001 - never break `import kokoro_lstm`
        pass


_register_tvm_native()

__all__ = ["LSTM", "lstm_forward", "default_num_threads", "set_num_threads", "get_num_threads",
           "build_info", "clear_cache", "cache_info", "__version__"]
