"""One arrangement of a NumPy-front call (``LSTM``, ``lstm_forward``) for every array
namespace: host NumPy arrays here (``Host``), CUDA arrays in ``_cuda_arrays.Device``.

The engine is the only validator: this module turns the arguments into its tensors
(casts, the unbatched axis, lstm_forward's one-layer axis), allocates the outputs in
the input's namespace and runs ``_core.forward``; the engine's message comes back
with the front's name in front. Python checks only what the engine cannot see.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _core


class Spec(NamedTuple):
    """The sizes and options of a call that are not tensors."""
    num_layers: int
    bidirectional: bool
    has_bias: bool
    proj_size: int
    hidden: int
    dtype: str


def as_array(value, name: str) -> np.ndarray:
    """Array-likes (NumPy arrays, torch tensors, lists) to ndarray, real floats only
    (the front casts them to the compute dtype, which hides any other dtype from the
    engine)."""
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


class Host:
    """NumPy arrays in host memory; ``io``: the compute dtype's NumPy type."""

    def __init__(self, io) -> None:
        self.io = io

    def x(self, x):
        return as_array(x, "x").astype(self.io, copy=False)

    def layout(self, x, batch_first: bool):
        """x as the engine reads it in place, else a contiguous copy."""
        return x if x.ndim != 3 or _core_readable(x, batch_first) else np.ascontiguousarray(x)

    def weight(self, a, name: str):
        return _as_io(as_array(a, name), self.io)

    def state(self, a, name: str):
        return np.ascontiguousarray(as_array(a, name), dtype=self.io)

    def host_lengths(self, lengths):
        if hasattr(lengths, "detach") and hasattr(lengths, "cpu"):
            lengths = lengths.detach().cpu().numpy()
        return lengths

    def empty(self, shape):
        return np.empty(shape, dtype=self.io)

    def give(self, a):
        return a

    def options(self, num_threads: int, owner: int) -> dict:
        """``owner``: the token of an object whose private weights the engine may trust."""
        return {"num_threads": num_threads, "constant_weights": owner != 0, "owner": owner}


_HOSTS: dict = {}


def host(io) -> Host:
    """The Host namespace of compute dtype io (one per dtype)."""
    ns = _HOSTS.get(io)
    if ns is None:
        ns = _HOSTS[io] = Host(io)
    return ns


def _as_io(a: np.ndarray, io) -> np.ndarray:
    """a in the io dtype, in place when it already is and the engine reads its rows
    (unit element stride, positive row stride); else a contiguous copy."""
    if a.dtype == io and a.flags.aligned and a.dtype.byteorder in "=|" and (
            a.ndim == 1 and a.strides[0] > 0 or
            a.ndim == 2 and (a.shape[1] == 1 or a.strides[1] == a.itemsize)
            and (a.shape[0] == 1 or a.strides[0] >= a.shape[1] * a.itemsize)):
        return a
    return np.ascontiguousarray(a, dtype=io)


def _core_readable(x, batch_first: bool) -> bool:
    """Whether the engine reads x ([T, B, I], or [B, T, I] if batch_first) in place
    (the engine's own rule, kl_input_layout_ok); anything else is copied first."""
    isz = x.itemsize
    if not x.flags.aligned or x.dtype.byteorder not in "=|" or any(s % isz for s in x.strides):
        return False
    if x.shape[2] > 1 and x.strides[2] != isz:
        return False
    t, b = (1, 0) if batch_first else (0, 1)
    return x.shape[b] == 0 or _core.input_layout_ok(x.shape[t], x.shape[b], x.strides[t] // isz,
                                                    x.strides[b] // isz, x.shape[2])


def _with_axis(a, at: int):
    """a with a new axis of size 1 before dimension ``at`` (0-D arrays as they are)."""
    return a.reshape(tuple(a.shape[:at]) + (1,) + tuple(a.shape[at:])) if a.ndim >= at else a


def host_lengths(ns, lengths, unbatched: bool):
    """lengths in host memory, integers as int64; their shape, dtype and values are the
    engine's to check."""
    if lengths is None:
        return None
    if unbatched:
        raise ValueError("lengths: only batched (3-D) input takes lengths")
    a = np.asarray(ns.host_lengths(lengths))
    return np.ascontiguousarray(a, dtype=np.int64) if a.dtype.kind in "iu" else a


def _states(ns, hx, unbatched: bool, layer_axis: bool):
    """(h0, c0) as the engine's [L*D, B, .] tensors: the batch axis added for unbatched
    input, the layer axis for lstm_forward (``layer_axis`` False)."""
    if hx is None:
        return None, None
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        raise TypeError("hx: expected a tuple (h0, c0)")
    out = []
    for name, v in zip(("h0", "c0"), hx):
        if v is None and layer_axis:  # LSTM's hx is both states (lstm_forward's: either)
            raise TypeError(f"{name}: expected an array, got None (hx is (h0, c0))")
        if v is not None:
            v = ns.state(v, name)
            if unbatched:
                v = _with_axis(v, 1 if layer_axis else 0)
            if not layer_axis:
                v = _with_axis(v, 0)
        out.append(v)
    return out[0], out[1]


def run(front: str, ns, x, weights, hx, lengths, spec: Spec, *, batch_first: bool,
        layer_axis: bool = True, reverse: bool = False, num_threads: int = 0, owner: int = 0):
    """(y, h_n, c_n) of one call in ns's arrays, with torch.nn.LSTM's shapes (h_n and
    c_n without the layer axis when ``layer_axis`` is False, as lstm_forward's);
    ``x`` and ``hx`` as the caller gave them, ``weights`` already ns's arrays."""
    try:
        return _run(ns, x, weights, hx, lengths, spec, batch_first, layer_axis, reverse,
                    num_threads, owner)
    except (TypeError, ValueError, RuntimeError) as e:
        raise renamed(front, e) from None


_PLAIN = (TypeError, ValueError, RuntimeError)


def renamed(front: str, e: Exception) -> Exception:
    """e (the engine's or an argument's error) with the front's name in front, in its
    own type; an exception of a library's own class as it is."""
    return type(e)(f"{front}: {e}") if type(e) in _PLAIN else e


def _run(ns, x, weights, hx, lengths, spec, batch_first, layer_axis, reverse, num_threads, owner):
    x = ns.x(x)
    unbatched = x.ndim == 2
    if unbatched:
        x = x[:, None, :]
    bf = batch_first and not unbatched
    x = ns.layout(x, bf)
    h0, c0 = _states(ns, hx, unbatched, layer_axis)
    lengths = host_lengths(ns, lengths, unbatched)
    # x not 3-D: any outputs do, the engine refuses x before it looks at them
    T, B = ((x.shape[1], x.shape[0]) if bf else (x.shape[0], x.shape[1])) if x.ndim == 3 else (0, 0)
    D = 2 if spec.bidirectional else 1
    R, LD = spec.proj_size or spec.hidden, spec.num_layers * D
    y = ns.empty((B, T, D * R) if bf else (T, B, D * R))
    h_n, c_n = ns.empty((LD, B, R)), ns.empty((LD, B, spec.hidden))
    _core.forward(x, lengths, h0, c0, weights, y, h_n, c_n, num_layers=spec.num_layers,
                  bidirectional=spec.bidirectional, has_bias=spec.has_bias,
                  proj_size=spec.proj_size, batch_first=bf, reverse=reverse, dtype=spec.dtype,
                  **ns.options(num_threads, owner))
    if unbatched:
        y, h_n, c_n = y[:, 0, :], h_n[:, 0, :], c_n[:, 0, :]
    if not layer_axis:
        h_n, c_n = h_n[0], c_n[0]
    give = ns.give
    return give(y), give(h_n), give(c_n)
