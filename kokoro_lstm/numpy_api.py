"""NumPy API over the C engine: ``LSTM`` (torch.nn.LSTM semantics, weights
packed once) and ``lstm_forward`` (one layer, one direction, cached packing).

Argument checking lives here so that every error names the argument and the
expected vs given shape; the C binding re-checks what it relies on.
"""
from __future__ import annotations

import math
import os
import re
import threading
from collections import OrderedDict

import numpy as np

from . import _core, _threads

__all__ = ["LSTM", "lstm_forward", "default_num_threads"]

_DTYPES = {"float32": np.float32, "float64": np.float64, "bfloat16": np.float32}


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


def _as_array(value, name: str) -> np.ndarray:
    """Array-likes (NumPy arrays, torch tensors, lists) to ndarray, real floats only."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor without importing torch
        value = value.detach().cpu()
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":
            value = value.float()
        value = value.numpy()
    try:
        a = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - report any conversion failure as a TypeError
        raise TypeError(f"{name}: cannot convert {type(value).__name__} to an array ({e})") from None
    if a.dtype.kind != "f":
        raise TypeError(f"{name}: expected a real floating-point array, got dtype {a.dtype}")
    return a


def _shape_error(name: str, expected, got) -> ValueError:
    return ValueError(f"{name}: expected shape {tuple(expected)}, got {tuple(got)}")


def _check_shape(a: np.ndarray, name: str, expected) -> None:
    if a.shape != tuple(expected):
        raise _shape_error(name, expected, a.shape)


def _prepare_x(x, input_size: int, batch_first: bool, io):
    """x -> ([T, B, I] view in the io dtype, unbatched flag)."""
    x = _as_array(x, "x")
    if x.ndim == 2:
        unbatched = True
        x3 = x[:, None, :]
    elif x.ndim == 3:
        unbatched = False
        x3 = x.transpose(1, 0, 2) if batch_first else x
    else:
        raise ValueError(
            f"x: expected a 2-D (unbatched, [T, {input_size}]) or 3-D input, got {x.ndim}-D shape {x.shape}")
    T, B, I = x3.shape
    if I != input_size:
        raise ValueError(f"x: expected input_size {input_size} in the last dimension, got shape {x.shape}")
    if T == 0:
        raise ValueError(f"x: the sequence length must be >= 1, got shape {x.shape}")
    return x3.astype(io, copy=False), unbatched


def _prepare_lengths(lengths, B: int, T: int, unbatched: bool):
    if lengths is None:
        return None
    if unbatched:
        raise ValueError("lengths: only batched (3-D) input takes lengths")
    if hasattr(lengths, "detach") and hasattr(lengths, "cpu"):
        lengths = lengths.detach().cpu().numpy()
    a = np.asarray(lengths)
    if a.dtype.kind not in "iu":
        raise TypeError(f"lengths: expected integers, got dtype {a.dtype}")
    if a.ndim != 1 or a.shape[0] != B:
        raise ValueError(f"lengths: expected shape ({B},) (one per batch element), got {a.shape}")
    if B and (a.min() < 1 or a.max() > T):
        raise ValueError(f"lengths: each must be in 1..{T} (the sequence length), got min {a.min()}, max {a.max()}")
    return np.ascontiguousarray(a, dtype=np.int64)


def _prepare_state(v, name: str, expected, unbatched: bool, io):
    a = _as_array(v, name)
    if unbatched:
        want = (expected[0], expected[2])
        _check_shape(a, name, want)
        a = a[:, None, :]
    else:
        _check_shape(a, name, expected)
    return np.ascontiguousarray(a, dtype=io)


def _run(engine, io, x3, batch_first, unbatched, h0, c0, lengths, LD, R, H, DR, nth):
    T, B, _ = x3.shape
    if batch_first and not unbatched:
        out = np.empty((B, T, DR), dtype=io)
        y = out.transpose(1, 0, 2)
    else:
        out = y = np.empty((T, B, DR), dtype=io)
    h_n = np.empty((LD, B, R), dtype=io)
    c_n = np.empty((LD, B, H), dtype=io)
    engine.run(x3, y, h0, c0, h_n, c_n, lengths, nth)
    if unbatched:
        return out[:, 0, :], h_n[:, 0, :], c_n[:, 0, :]
    return out, h_n, c_n


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
    "float64" (end to end) or "bfloat16" (weights in bfloat16, float32
    activations, states and accumulation; with AVX512_BF16 the input projection
    and h are rounded to bfloat16 too: about 4e-3 max-abs at Kokoro's shape,
    bound 1e-2).
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 bidirectional=False, proj_size=0, *, dtype="float32", num_threads=None,
                 _weights=None):
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
        self._engine = _core.Engine(
            self.input_size, self.hidden_size, self.num_layers, self.bidirectional,
            self.proj_size, dtype, self._engine_weights())

    # -- construction --------------------------------------------------------
    @property
    def _D(self):
        return 2 if self.bidirectional else 1

    @property
    def _R(self):
        return self.proj_size or self.hidden_size

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
        entries = []
        for layer in range(self.num_layers):
            for suffix in ("", "_reverse")[:self._D]:
                def get(kind):
                    v = self._state.get(f"{kind}_l{layer}{suffix}")
                    return None if v is None else np.ascontiguousarray(v, dtype=self._io)
                entries.append((get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"),
                                get("weight_hr")))
        return entries

    @classmethod
    def from_state_dict(cls, state_dict, *, batch_first=False, dtype="float32", num_threads=None):
        """Builds from PyTorch nn.LSTM state_dict keys; sizes are inferred."""
        _io_dtype(dtype)
        sd = OrderedDict()
        for key, value in state_dict.items():
            if not _KEY.match(str(key)):
                raise ValueError(f"unexpected key {key!r}: expected nn.LSTM keys such as "
                                 f"'weight_ih_l0', 'bias_hh_l0_reverse', 'weight_hr_l0'")
            sd[str(key)] = _as_array(value, key)
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
    def from_torch(cls, module, *, dtype="float32", num_threads=None):
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

    def __repr__(self):
        extra = f", proj_size={self.proj_size}" if self.proj_size else ""
        return (f"kokoro_lstm.LSTM({self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"bias={self.bias}, batch_first={self.batch_first}, bidirectional={self.bidirectional}"
                f"{extra}, dtype={self.dtype!r})")

    # -- forward -------------------------------------------------------------
    def __call__(self, x, hx=None, *, lengths=None, num_threads=None):
        """(output, (h_n, c_n)) with torch.nn.LSTM's shapes and semantics.

        lengths: per-sequence lengths (each in 1..T) with the semantics of
        pack_padded_sequence(enforce_sorted=False) -> LSTM -> pad_packed_sequence.
        num_threads: this call's thread count (default: the object's, else
        default_num_threads()); results are bitwise identical for any count.
        """
        nth = _num_threads(self.num_threads if num_threads is None else num_threads)
        x3, unbatched = _prepare_x(x, self.input_size, self.batch_first, self._io)
        T, B, _ = x3.shape
        LD, H, R = self.num_layers * self._D, self.hidden_size, self._R
        h0 = c0 = None
        if hx is not None:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise TypeError("hx: expected a tuple (h0, c0)")
            h0 = _prepare_state(hx[0], "h0", (LD, B, R), unbatched, self._io)
            c0 = _prepare_state(hx[1], "c0", (LD, B, H), unbatched, self._io)
        lengths = _prepare_lengths(lengths, B, T, unbatched)
        out, h_n, c_n = _run(self._engine, self._io, x3, self.batch_first, unbatched, h0, c0,
                             lengths, LD, R, H, self._D * R, nth)
        return out, (h_n, c_n)

    forward = __call__


# ---- lstm_forward and its weight cache ------------------------------------------

class _WeightCache:
    """Packed engines keyed by the weight arrays' address, shape, strides and
    dtype. A hit is used only after its saved copy compares byte-equal with
    the current contents, so in-place mutation or freed-and-reused memory can
    never give stale results."""

    def __init__(self, capacity=16):
        self.capacity = capacity
        self._lock = threading.Lock()
        self._entries: "OrderedDict[tuple, tuple]" = OrderedDict()

    @staticmethod
    def _key(arrays, extra):
        parts = [extra]
        for a in arrays:
            parts.append(None if a is None else
                         (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str))
        return tuple(parts)

    def get(self, arrays, extra, build):
        key = self._key(arrays, extra)
        contiguous = [None if a is None else np.ascontiguousarray(a) for a in arrays]
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                engine, saved = hit
                if all((a is None and s is None) or
                       (a is not None and s is not None and _core.bytes_equal(a, s))
                       for a, s in zip(contiguous, saved)):
                    self._entries.move_to_end(key)
                    return engine
                del self._entries[key]
        engine = build()
        saved = [None if a is None else a.copy() for a in contiguous]
        with self._lock:
            self._entries[key] = (engine, saved)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return engine

    def clear(self):
        with self._lock:
            self._entries.clear()


_cache = _WeightCache()


def lstm_forward(x, w_ih, w_hh, b_ih=None, b_hh=None, h0=None, c0=None, *, reverse=False,
                 lengths=None, batch_first=False, num_threads=None, dtype=None):
    """One LSTM layer, one direction: returns (y, h_n, c_n).

    x is [T, B, I] ([B, T, I] if batch_first, [T, I] unbatched); w_ih [4H, I],
    w_hh [4H, H], b_ih/b_hh [4H], h0/c0 [B, H] ([H] unbatched). Computes in
    float64 if ``dtype`` is "float64" (default: when x is float64), else float32.
    Weights are packed once and cached (see _WeightCache).
    """
    nth = _num_threads(num_threads)
    xa = _as_array(x, "x")
    if dtype is None:
        dtype = "float64" if xa.dtype == np.float64 else "float32"
    io = _io_dtype(dtype)
    w_ih = _as_array(w_ih, "w_ih")
    w_hh = _as_array(w_hh, "w_hh")
    if w_hh.ndim != 2 or w_hh.shape[0] % 4 or w_hh.shape[0] != 4 * w_hh.shape[1] or w_hh.shape[1] == 0:
        raise ValueError(f"w_hh: expected shape (4*H, H), got {w_hh.shape}")
    H = w_hh.shape[1]
    if w_ih.ndim != 2 or w_ih.shape[0] != 4 * H or w_ih.shape[1] == 0:
        raise ValueError(f"w_ih: expected shape ({4 * H}, input_size), got {w_ih.shape}")
    I = w_ih.shape[1]
    biases = []
    for name, b in (("b_ih", b_ih), ("b_hh", b_hh)):
        if b is not None:
            b = _as_array(b, name)
            _check_shape(b, name, (4 * H,))
        biases.append(b)
    x3, unbatched = _prepare_x(xa, I, batch_first, io)
    T, B, _ = x3.shape
    states = []
    for name, v in (("h0", h0), ("c0", c0)):
        if v is not None:
            v = _as_array(v, name)
            _check_shape(v, name, (H,) if unbatched else (B, H))
            v = np.ascontiguousarray(v, dtype=io).reshape(1, B, H)
        states.append(v)
    lengths = _prepare_lengths(lengths, B, T, unbatched)

    def build():
        as_io = [None if a is None else np.ascontiguousarray(a, dtype=io) for a in (w_ih, w_hh, *biases)]
        return _core.Engine(I, H, 1, False, 0, dtype, [(*as_io, None)], bool(reverse))

    engine = _cache.get([w_ih, w_hh, *biases], (dtype, bool(reverse)), build)
    y, h_n, c_n = _run(engine, io, x3, batch_first, unbatched, *states, lengths, 1, H, H, H, nth)
    return y, h_n[0], c_n[0]
