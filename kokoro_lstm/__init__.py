"""kokoro_lstm: fast, exact LSTM inference on CPU.

- ``LSTM`` / ``lstm_forward``: torch.nn.LSTM semantics over NumPy buffers on
  the C engine (OpenBLAS input projection, SIMD recurrent kernels, GIL released).
- ``reference``: the float64 NumPy oracle.
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

from typing import Any, Dict  # noqa: E402

from . import _core  # noqa: E402
from .numpy_api import LSTM, cache_info, clear_cache, default_num_threads, lstm_forward  # noqa: E402


def build_info() -> Dict[str, Any]:
    """What this build uses: BLAS, detected and active ISA, bfloat16 support."""
    return {
        "blas": _core.blas_name(),
        "isa_detected": _core.detected_isa(),
        "isa_active": _core.get_isa(),
        "avx512_bf16": _core.has_avx512bf16(),
    }


def _register_tvm_native() -> None:
    """Make TVM modules compiled with lstm_method="native" runnable in this
    process: registers kokoro_lstm.lstm_forward with tvm-ffi now if it is
    loaded, else right after it is first imported. Imports neither tvm nor torch."""
    try:
        from .tvm import _native

        _native.register()
    except Exception:  # noqa: BLE001 - never break `import kokoro_lstm`
        pass


_register_tvm_native()

__all__ = ["LSTM", "lstm_forward", "default_num_threads", "build_info", "clear_cache", "cache_info",
           "__version__"]
