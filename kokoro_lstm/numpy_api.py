"""NumPy API over the C engine: ``LSTM`` (torch.nn.LSTM semantics) and
``lstm_forward`` (one layer, one direction).

Both call the engine's one entry (``_core.forward`` -> ``kl_lstm_forward``),
which packs weights once into the process-wide, never-stale weight cache (see
``src/include/kokoro_lstm.h``) and validates every tensor. A call is arranged once
for every array namespace (``_call.run``; CUDA arrays in ``_cuda_arrays``), the
engine's message coming back with the front's name in front.
"""
from __future__ import annotations

import copy
import math
import re
import itertools
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Mapping, Optional, Tuple

import numpy as np

from . import _core, _cuda_arrays, _threads
from ._call import Spec, as_array, host, renamed, run

if TYPE_CHECKING:  # annotations only (postponed by `from __future__ import annotations`)
    from numpy.typing import ArrayLike

__all__ = ["LSTM", "lstm_forward", "default_num_threads", "clear_cache", "cache_info"]

_owner_tokens = itertools.count(1)  # LSTM objects' cache owner tokens

_DTYPES = {"float32": np.float32, "float64": np.float64, "bfloat16": np.float32,
           "float16": np.float32}


def default_num_threads() -> int:
    """The thread count of a call without ``num_threads`` (kokoro_lstm.set_num_threads,
    else ``KOKORO_LSTM_NUM_THREADS``, else the usable cores; see kokoro_lstm._threads)."""
    return _threads.get_num_threads()


def _num_threads(n) -> int:
    """The count a call runs with: n validated and capped (None: the default)."""
    return _threads.effective(n, "num_threads")


def _io_dtype(dtype: str):
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def clear_cache() -> None:
    """Drop every packed LSTM from the engine's weight cache (shared by the NumPy API,
    the torch ops and TVM's native method), and free the work buffers kept for reuse
    (``cache_info()["scratch_bytes"]``, at most 256 MiB)."""
    _core.cache_clear()


def cache_info() -> dict:
    """The weight cache: entries, bytes, and hit/miss/repack counters; ``scratch_bytes``:
    calls' large work buffers (the gate buffer, T*B*D*4H floats) kept so that the next
    calls need not map and fault in fresh pages. Warns (RuntimeWarning) when
    ``KOKORO_LSTM_CACHE_MB`` is set to something the engine ignores."""
    _threads._warn_bad_env()
    return _core.cache_info()


def _expected_shapes(input_size, hidden, num_layers, bias, bidirectional, proj):
    R, D = proj or hidden, 2 if bidirectional else 1
    shapes = OrderedDict()
    for layer in range(num_layers):
        I = input_size if layer == 0 else D * R
        for suffix in ("", "_reverse")[:D]:
            shapes[f"weight_ih_l{layer}{suffix}"] = (4 * hidden, I)
            shapes[f"weight_hh_l{layer}{suffix}"] = (4 * hidden, R)
            if bias:
                shapes[f"bias_ih_l{layer}{suffix}"] = (4 * hidden,)
                shapes[f"bias_hh_l{layer}{suffix}"] = (4 * hidden,)
            if proj:
                shapes[f"weight_hr_l{layer}{suffix}"] = (proj, hidden)
    return shapes


_KEY = re.compile(r"^(weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d+)(_reverse)?$")


class LSTM:
    """torch.nn.LSTM forward on the C engine; weights are packed once here.

    ``dtype``: "float32" (default; any real floating input, float32 results),
    "float64" (end to end), "bfloat16" (weights in bfloat16, float32
    activations, states and accumulation; with AVX512_BF16 the input projection
    and h are rounded to bfloat16 too: about 4e-3 max-abs at Kokoro's shape,
    bound 1e-2) or "float16" (recurrent weights in IEEE half, everything else
    float32, the input projection a float32 GEMM: bound 1e-3 max-abs at Kokoro's
    shape).
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, bidirectional: bool = False, proj_size: int = 0, *,
                 dtype: str = "float32", num_threads: Optional[int] = None,
                 _weights: Optional[Mapping[str, np.ndarray]] = None) -> None:
        for name, v, lo in (("input_size", input_size, 1), ("hidden_size", hidden_size, 1),
                            ("num_layers", num_layers, 1), ("proj_size", proj_size, 0)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if proj_size >= hidden_size:
            raise ValueError(f"proj_size must be smaller than hidden_size ({hidden_size}), got {proj_size}")
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.num_layers = int(num_layers)
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.bidirectional = bool(bidirectional)
        self.proj_size = int(proj_size)
        self.dtype = dtype
        self._io = _io_dtype(dtype)
        self.num_threads = _threads.check_count(num_threads, "num_threads")  # resolved per call
        if _weights is None:
            _weights = self._random_weights()
        self._state = _weights
        self._weights = self._engine_weights()
        self._adopt()

    # -- cache ownership -----------------------------------------------------
    # The weights are private to this object, so the engine trusts its packed copy
    # without the per-call staleness check. The owner token keys that entry to this
    # live object alone: minted per object (never copied or unpickled, where it could
    # collide with another object's) and dropped with its entries when it dies.
    def _adopt(self) -> None:
        self._owner = next(_owner_tokens)
        weakref.finalize(self, _core.cache_drop_owner, self._owner)

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_owner"}

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._adopt()

    def __copy__(self) -> LSTM:
        new = object.__new__(type(self))
        new.__dict__.update(self.__getstate__())
        new._adopt()
        return new

    def __deepcopy__(self, memo) -> LSTM:
        new = object.__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__getstate__(), memo))
        new._adopt()
        return new

    # -- construction --------------------------------------------------------
    @property
    def _D(self):
        return 2 if self.bidirectional else 1

    def engine_spec(self) -> Spec:
        """The sizes and options of this object's engine calls (weights aside)."""
        return Spec(self.num_layers, self.bidirectional, self.bias, self.proj_size,
                    self.hidden_size, self.dtype)

    def expected_shapes(self) -> "OrderedDict[str, tuple]":
        """state_dict keys in PyTorch's order with their shapes."""
        return _expected_shapes(self.input_size, self.hidden_size, self.num_layers, self.bias,
                                self.bidirectional, self.proj_size)

    def _random_weights(self):
        rng = np.random.default_rng()
        k = 1.0 / math.sqrt(self.hidden_size)
        store = np.float64 if self.dtype == "float64" else np.float32
        return OrderedDict((name, rng.uniform(-k, k, size=shape).astype(store))
                           for name, shape in self.expected_shapes().items())

    def _engine_weights(self):
        """The engine's weight list (layer-major: w_ih, w_hh, [b_ih, b_hh], [w_hr]) in the
        io dtype: the arrays of the state itself when they already are."""
        kinds = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if self.bias else []) + (
            ["weight_hr"] if self.proj_size else [])
        return [np.ascontiguousarray(self._state[f"{kind}_l{layer}{suffix}"], dtype=self._io)
                for layer in range(self.num_layers) for suffix in ("", "_reverse")[:self._D]
                for kind in kinds]

    @classmethod
    def from_state_dict(cls, state_dict: Mapping[str, ArrayLike], *, batch_first: bool = False,
                        dtype: str = "float32", num_threads: Optional[int] = None) -> LSTM:
        """Builds from PyTorch nn.LSTM state_dict keys; sizes are inferred."""
        _io_dtype(dtype)
        if not callable(getattr(state_dict, "items", None)):
            raise TypeError(f"state_dict must be a mapping of nn.LSTM keys to arrays (such as "
                            f"module.state_dict()), got {type(state_dict).__name__}")
        sd = OrderedDict()
        for key, value in state_dict.items():
            if not _KEY.match(str(key)):
                raise ValueError(f"unexpected key {key!r}: expected nn.LSTM keys such as "
                                 f"'weight_ih_l0', 'bias_hh_l0_reverse', 'weight_hr_l0'")
            sd[str(key)] = as_array(value, key)
        for key in ("weight_ih_l0", "weight_hh_l0"):
            if key not in sd:
                raise ValueError(f"missing key {key!r} (expected shape (4*hidden_size, ...))")
        w_ih0 = sd["weight_ih_l0"]
        if w_ih0.ndim != 2 or w_ih0.shape[0] % 4 or w_ih0.shape[0] == 0:
            raise ValueError(f"weight_ih_l0: expected shape (4*hidden_size, input_size), got {w_ih0.shape}")
        hidden = w_ih0.shape[0] // 4
        proj = sd["weight_hr_l0"].shape[0] if "weight_hr_l0" in sd and sd["weight_hr_l0"].ndim == 2 else 0
        # layers present must be 0..L-1: bound L by the keys given before any per-layer
        # work (a stray 'weight_ih_l10000000' must not enumerate ten million layers)
        layers = {int(_KEY.match(k).group(2)) for k in sd}
        num_layers = 1 + max(layers)
        if num_layers > len(layers):
            gap = min(set(range(len(layers) + 1)) - layers)
            top = max(layers)
            raise ValueError(f"missing key 'weight_ih_l{gap}': the keys name layer {top} "
                             f"(e.g. {next(k for k in sd if int(_KEY.match(k).group(2)) == top)!r}) "
                             f"but no layer {gap}; an nn.LSTM's layers are numbered 0, 1, ...")
        bias = "bias_ih_l0" in sd
        bidirectional = any(k.endswith("_reverse") for k in sd)
        expected = _expected_shapes(w_ih0.shape[1], hidden, num_layers, bias, bidirectional, proj)
        for key, shape in expected.items():
            if key not in sd:
                raise ValueError(f"missing key {key!r} (expected shape {shape})")
            if sd[key].shape != shape:
                raise ValueError(f"{key}: expected shape {shape}, got {sd[key].shape}")
        for key in sd:
            if key not in expected:
                raise ValueError(f"unexpected key {key!r} for a {num_layers}-layer "
                                 f"{'bi' if bidirectional else 'uni'}directional LSTM"
                                 f"{'' if bias else ' without biases'}")
        weights = OrderedDict((k, np.array(sd[k], copy=True)) for k in expected)
        return cls(w_ih0.shape[1], hidden, num_layers, bias, batch_first, bidirectional, proj,
                   dtype=dtype, num_threads=num_threads, _weights=weights)

    @classmethod
    def from_torch(cls, module: Any, *, dtype: str = "float32",
                   num_threads: Optional[int] = None) -> LSTM:
        """Builds from a torch.nn.LSTM (its weights are copied and packed)."""
        for attr in ("input_size", "hidden_size", "num_layers", "bidirectional", "batch_first"):
            if not hasattr(module, attr):
                raise TypeError(f"from_torch expects a torch.nn.LSTM, got {type(module).__name__}")
        if getattr(module, "mode", "LSTM") != "LSTM":
            raise TypeError(f"from_torch expects an LSTM, got mode {module.mode!r}")
        return cls.from_state_dict(module.state_dict(), batch_first=module.batch_first,
                                   dtype=dtype, num_threads=num_threads)

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Copies of the weights as given (PyTorch key names)."""
        return OrderedDict((k, v.copy()) for k, v in self._state.items())

    def __repr__(self) -> str:
        extra = f", proj_size={self.proj_size}" if self.proj_size else ""
        return (f"kokoro_lstm.LSTM({self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"bias={self.bias}, batch_first={self.batch_first}, bidirectional={self.bidirectional}"
                f"{extra}, dtype={self.dtype!r})")

    # -- forward -------------------------------------------------------------
    def __call__(self, x: ArrayLike, hx: Optional[Tuple[ArrayLike, ArrayLike]] = None, *,
                 lengths: Optional[ArrayLike] = None, num_threads: Optional[int] = None,
                 ) -> Tuple[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
        """(output, (h_n, c_n)) with torch.nn.LSTM's shapes and semantics.

        lengths: per-sequence lengths (each in 1..T) with the semantics of
        pack_padded_sequence(enforce_sorted=False) -> LSTM -> pad_packed_sequence.
        num_threads: this call's thread count (default: the object's, else
        default_num_threads()); results are bitwise identical for any count.
        """
        nth = _num_threads(self.num_threads if num_threads is None else num_threads)
        front, spec = "kokoro_lstm.LSTM", self.engine_spec()
        lib = _cuda_arrays.library_of(x)
        if lib:  # a CUDA array: runs on its GPU, returns its library's arrays
            try:
                dev = _cuda_arrays.Device(lib, x)
                weights = dev.weights_of(self, self._weights)
            except (TypeError, ValueError, RuntimeError) as e:
                raise renamed(front, e) from None
            return _pair(run(front, dev, x, weights, hx, lengths, spec,
                             batch_first=self.batch_first))
        return _pair(run(front, host(self._io), x, self._weights, hx, lengths, spec,
                         batch_first=self.batch_first, num_threads=nth, owner=self._owner))

    forward = __call__


def lstm_forward(x: ArrayLike, w_ih: ArrayLike, w_hh: ArrayLike, b_ih: Optional[ArrayLike] = None,
                 b_hh: Optional[ArrayLike] = None, h0: Optional[ArrayLike] = None,
                 c0: Optional[ArrayLike] = None, *, reverse: bool = False,
                 lengths: Optional[ArrayLike] = None, batch_first: bool = False,
                 num_threads: Optional[int] = None, dtype: Optional[str] = None,
                 ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One LSTM layer, one direction: returns (y, h_n, c_n).

    x is [T, B, I] ([B, T, I] if batch_first, [T, I] unbatched); w_ih [4H, I],
    w_hh [4H, H], b_ih/b_hh [4H], h0/c0 [B, H] ([H] unbatched). Computes in
    float64 if ``dtype`` is "float64" (default: when x is float64), else float32.
    Weights are packed once and cached by the engine, keyed on the arrays' memory,
    never stale: a hit is used only if the weights' bytes are unchanged (arrays
    already in the compute dtype are used in place; others are converted per call).
    """
    nth = _num_threads(num_threads)
    front = "kokoro_lstm.lstm_forward"
    try:
        ns, dtype, w = _layer_weights(x, (w_ih, w_hh, b_ih, b_hh), dtype)
    except (TypeError, ValueError, RuntimeError) as e:
        raise renamed(front, e) from None
    # hidden_size is w_ih's to give (the engine refuses any w_ih that gives none)
    H = w[0].shape[0] // 4 if w[0].ndim == 2 else 0
    if (w[2] is None) != (w[3] is None):  # one bias alone: the other is zero
        w[2:] = [ns.weight(np.zeros(4 * H, ns.io), "b") if b is None else b for b in w[2:]]
    spec = Spec(1, False, w[2] is not None, 0, H, dtype)
    return run(front, ns, x, [a for a in w if a is not None], (h0, c0), lengths, spec,
               batch_first=batch_first, layer_axis=False, reverse=bool(reverse), num_threads=nth)


def _layer_weights(x, weights, dtype):
    """(namespace, dtype, [w_ih, w_hh, b_ih, b_hh] in it) of an lstm_forward call: x's
    (CUDA arrays run on their GPU in float32; host arrays in float64 when x is, by
    default)."""
    lib = _cuda_arrays.library_of(x)
    if lib:
        ns, dtype = _cuda_arrays.Device(lib, x), dtype or "float32"
    else:
        if dtype is None:
            dtype = "float64" if as_array(x, "x").dtype == np.float64 else "float32"
        ns = host(_io_dtype(dtype))
    w = [None if a is None and j >= 2 else ns.weight(a, name) for j, (name, a) in
         enumerate(zip(("w_ih", "w_hh", "b_ih", "b_hh"), weights))]
    return ns, dtype, w


def _pair(outs):
    """(y, h_n, c_n) as LSTM returns them: (y, (h_n, c_n))."""
    return outs[0], (outs[1], outs[2])
