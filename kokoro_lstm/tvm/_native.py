"""The ``native`` lowering's runtime side: a tvm-ffi global function that runs the
kokoro_lstm C engine on TVM tensors.

``register()`` makes ``kokoro_lstm.lstm_forward`` (:data:`FUNC_NAME`) callable from
compiled Relax modules (``R.call_dps_packed``). It imports nothing heavy: importing
``tvm_ffi`` imports torch when torch is installed, so if ``tvm_ffi`` is not imported
yet, ``register()`` installs a one-shot post-import hook that registers the function
right after ``tvm_ffi`` is first imported (by ``import tvm`` or anything else) -- i.e.
before any compiled module can call it. ``import kokoro_lstm`` therefore stays free of
tvm and torch, and a library exported with ``export_library`` runs in a fresh process
after ``import kokoro_lstm``, whatever the import order.

Calling convention (destination-passing style; all tensors on CPU, contiguous)::

    kokoro_lstm.lstm_forward(cfg: Shape, x, [lengths int64 [B]], [h0, c0],
                             *weights, y, h_n, c_n)

``cfg`` = (abi, num_layers, num_directions, has_lengths, has_hx, batch_first,
proj_size, has_bias, constant_weights) (see :class:`Config`); weights per (layer,
direction), layer-major: w_ih, w_hh, [b_ih, b_hh], [w_hr]. Inputs reach the engine
zero-copy through DLPack (``np.from_dlpack``).

Packed weights are cached across calls (LRU, :data:`CACHE_SIZE` entries) keyed on the
weights' data pointers, shapes and dtype; each entry holds references to the weight
tensors, so their memory cannot be freed and reused while the entry lives. Weights
the converter proved to be compile-time constants (``constant_weights``; immutable
in the VM) are trusted on a key hit; any other weights (``keep_params_as_input=True``
parameters, user inputs) are compared byte-for-byte against a saved copy on every
hit, so an in-place update is never served stale.
"""
from __future__ import annotations

import sys
import threading
from collections import OrderedDict, namedtuple

FUNC_NAME = "kokoro_lstm.lstm_forward"
ABI_VERSION = 1
CACHE_SIZE = 16

Config = namedtuple("Config", ["abi", "num_layers", "num_directions", "has_lengths", "has_hx",
                               "batch_first", "proj_size", "has_bias", "constant_weights"])

__all__ = ["FUNC_NAME", "ABI_VERSION", "Config", "register", "is_registered", "available",
           "clear_cache", "cache_info"]

_lock = threading.Lock()
_registered = False
_cache: "OrderedDict[tuple, tuple]" = OrderedDict()
_stats = {"hits": 0, "misses": 0, "rebuilds": 0}


# ----------------------------------------------------------------------------------
# Engine access
# ----------------------------------------------------------------------------------
def available() -> bool:
    """True when the kokoro_lstm C engine (the extension) loads."""
    try:
        import kokoro_lstm

        return hasattr(kokoro_lstm, "LSTM")
    except Exception:  # noqa: BLE001 - any load failure means "not available"
        return False


def _same_bytes(a, b) -> bool:
    """Byte equality of two arrays (the C core's memcmp, GIL released)."""
    import numpy as np

    from kokoro_lstm import _core

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return _core.bytes_equal(np.ascontiguousarray(a), np.ascontiguousarray(b))


def _state_dict(cfg: Config, weights):
    per = 2 + 2 * cfg.has_bias + (1 if cfg.proj_size else 0)
    names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if cfg.has_bias else []) + (
        ["weight_hr"] if cfg.proj_size else [])
    sd = OrderedDict()
    k = 0
    for layer in range(cfg.num_layers):
        for d in range(cfg.num_directions):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            for n in names:
                sd[n + sfx] = weights[k]
                k += 1
    assert k == len(weights) == cfg.num_layers * cfg.num_directions * per
    return sd


def _engine_for(cfg: Config, dtype: str, weights):
    """The packed engine for these weights (cached; see the module docstring)."""
    import kokoro_lstm

    key = (tuple(cfg), dtype) + tuple(
        (w.__array_interface__["data"][0], w.shape, w.strides) for w in weights)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            engine, refs, saved = hit
            if saved is None or all(_same_bytes(w, s) for w, s in zip(weights, saved)):
                _cache.move_to_end(key)
                _stats["hits"] += 1
                return engine
            del _cache[key]
            _stats["rebuilds"] += 1
        else:
            _stats["misses"] += 1
    engine = kokoro_lstm.LSTM.from_state_dict(_state_dict(cfg, weights),
                                              batch_first=bool(cfg.batch_first), dtype=dtype)
    saved = None if cfg.constant_weights else [w.copy() for w in weights]
    with _lock:
        _cache[key] = (engine, list(weights), saved)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return engine


def clear_cache() -> None:
    """Drop every packed engine (and the weight references it holds)."""
    with _lock:
        _cache.clear()


def cache_info() -> dict:
    """Entries and hit/miss/rebuild counters of the packed-weight cache."""
    with _lock:
        return dict(_stats, entries=len(_cache))


# ----------------------------------------------------------------------------------
# The packed function
# ----------------------------------------------------------------------------------
def lstm_forward_dps(cfg, *args):
    """The body of ``kokoro_lstm.lstm_forward`` (see the module docstring)."""
    import numpy as np

    cfg = Config(*(int(v) for v in cfg))
    if cfg.abi != ABI_VERSION:
        raise RuntimeError(f"{FUNC_NAME}: the compiled module uses calling convention "
                           f"v{cfg.abi}, this kokoro_lstm provides v{ABI_VERSION}; "
                           "recompile the module with this kokoro_lstm")
    for a in args:
        dev = a.device
        if dev.dlpack_device_type() != 1:  # kDLCPU
            raise RuntimeError(f"{FUNC_NAME}: kokoro_lstm runs on CPU only; got a tensor on {dev}")
    arrays = [np.from_dlpack(a) for a in args]
    y, h_n, c_n = arrays[-3:]
    x = arrays[0]
    k = 1
    lengths = None
    if cfg.has_lengths:
        lengths = arrays[k]
        k += 1
    hx = None
    if cfg.has_hx:
        hx = (arrays[k], arrays[k + 1])
        k += 2
    weights = arrays[k:-3]
    dtype = "float64" if x.dtype == np.float64 else "float32"
    engine = _engine_for(cfg, dtype, weights)
    out, (hn, cn) = engine(x, hx, lengths=lengths)
    np.copyto(y, out)
    np.copyto(h_n, hn)
    np.copyto(c_n, cn)


# ----------------------------------------------------------------------------------
# Registration
# ----------------------------------------------------------------------------------
def is_registered() -> bool:
    return _registered


def _register_now() -> None:
    global _registered
    import tvm_ffi

    with _lock:
        if _registered:
            return
        tvm_ffi.register_global_func(FUNC_NAME, lstm_forward_dps, override=True)
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
    """Register :data:`FUNC_NAME` with tvm-ffi.

    Registers at once if ``tvm_ffi`` is already imported (or ``force_import``);
    otherwise installs a hook that registers as soon as ``tvm_ffi`` gets imported, and
    imports nothing. Returns True if the function is registered on return. Idempotent.
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
