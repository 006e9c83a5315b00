"""The ``native`` lowering's runtime side: the engine's C functions, registered with
tvm-ffi from C.

``kokoro_lstm.lstm_forward_v2`` (:data:`FUNC_NAME`) is a C function over DLTensors
(``src/tvm/kl_tvm_ffi.c``), destination-passing, that calls the engine's one entry
``kl_lstm_forward`` — the same road, validation and weight cache as the NumPy API and
the torch ops. Nothing in the call path is Python.

Who registers it:

* an exported library (:func:`kokoro_lstm.tvm.export_library`) carries the engine and
  registers the function itself when it is loaded (a C constructor), in any process:
  Python without kokoro_lstm, C++, Rust;
* in a Python process, :func:`register` hands the engine the ``libtvm_ffi`` of the
  ``tvm_ffi`` package (``_core.tvm_register``), which the C glue then calls to
  register; ``import kokoro_lstm.tvm`` (and ``import kokoro_lstm``) do it as soon as
  ``tvm_ffi`` is imported, without importing it (a one-shot post-import hook:
  importing ``tvm_ffi`` imports torch when torch is installed).

Whichever comes first registers; the other finds the name taken and leaves it.

Calling convention (v2; CPU tensors, any strides the engine reads in place)::

    kokoro_lstm.lstm_forward_v2(cfg: Shape, x, [lengths int64 [B]], [h0, c0],
                                [gate_bias [D, B, 4H]], *weights, y, h_n, c_n)

``cfg`` = :class:`Config`; weights per (layer, direction), layer-major: w_ih, w_hh,
[b_ih, b_hh], [w_hr]. ``has_gate_bias`` / ``x_gates``: layer 0's gate input augmented
(a per-call bias added to W_ih x_t) or given (x is W_ih x_t, [T, B, D*4H]) by the
caller, see ``kl_forward_args``; a cfg without these two trailing values (modules
compiled before them) means 0, 0. Weights the converter proved to be compile-time constants
(``constant_weights``) are trusted on a cache hit and kept alive by the cache while
cached; any others (``keep_params_as_input=True`` parameters, user inputs) are
fingerprinted on every call, so an in-place update is never served stale.
"""
from __future__ import annotations

import sys
import threading
from collections import namedtuple

FUNC_NAME = "kokoro_lstm.lstm_forward_v2"
ABI_VERSION = 2

Config = namedtuple("Config", ["abi", "num_layers", "num_directions", "has_lengths", "has_hx",
                               "batch_first", "proj_size", "has_bias", "constant_weights",
                               "dtype", "num_threads", "reverse", "has_gate_bias", "x_gates"],
                    defaults=(0, 0))
#: Config.dtype codes
DTYPE_CODES = {"float32": 0, "float64": 1, "bfloat16": 2, "float16": 3}

__all__ = ["FUNC_NAME", "ABI_VERSION", "Config", "DTYPE_CODES", "register", "is_registered",
           "available", "clear_cache", "cache_info"]

_lock = threading.Lock()
_registered = False


def available() -> bool:
    """True when the kokoro_lstm C engine (the extension) loads."""
    try:
        from kokoro_lstm import _core  # noqa: F401

        return True
    except Exception:  # noqa: BLE001 - any load failure means "not available"
        return False


def clear_cache() -> None:
    """Drop every packed LSTM from the engine's weight cache (shared by all fronts)."""
    from kokoro_lstm import _core

    _core.cache_clear()


def cache_info() -> dict:
    """The engine's weight cache: entries, bytes, hit/miss/repack counters."""
    from kokoro_lstm import _core

    return _core.cache_info()


def is_registered() -> bool:
    return _registered


def _register_now() -> None:
    global _registered
    import tvm_ffi.libinfo

    from kokoro_lstm import _core

    with _lock:
        if _registered:
            return
        _core.tvm_register(tvm_ffi.libinfo.find_libtvm_ffi())
        _registered = True


class _RegisteringLoader:
    """Wraps tvm_ffi's loader: runs it, restores it on the module, then registers."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        try:
            _register_now()
        except Exception:  # noqa: BLE001 - never break `import tvm_ffi`
            pass

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _TvmFfiImportHook:
    """One-shot post-import hook (a ``sys.meta_path`` finder): registers right after
    ``tvm_ffi`` is imported."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "tvm_ffi":
            return None
        _remove_hook()
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        if getattr(spec.loader, "exec_module", None) is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


def _remove_hook():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _TvmFfiImportHook)]


def register(*, force_import: bool = False) -> bool:
    """Register the engine's tvm-ffi functions (:data:`FUNC_NAME`, ...).

    Registers at once if ``tvm_ffi`` is already imported (or ``force_import``);
    otherwise installs a hook that registers as soon as ``tvm_ffi`` gets imported, and
    imports nothing. Returns True if the functions are registered on return. Idempotent.
    """
    if _registered:
        return True
    if "tvm_ffi" in sys.modules or force_import:
        _remove_hook()
        _register_now()
        return True
    if not any(isinstance(f, _TvmFfiImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _TvmFfiImportHook())
    return False
