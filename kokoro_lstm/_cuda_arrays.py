"""CUDA arrays in the NumPy API: ``LSTM`` and ``lstm_forward`` called with a CUDA
array (anything whose ``__dlpack_device__`` says kDLCUDA) run on that GPU.

The engine writes into outputs it is given, so they are allocated with the input's
own library (torch or CuPy), on its device, and the call runs on that library's
current stream. Arrays of any other library (JAX, ...) are carried by torch (else
CuPy) through DLPack, and the outputs handed back with the input's array namespace
(``x.__array_namespace__().from_dlpack``). Host arrays among the other arguments (an ``LSTM``'s weights, h0/c0)
are copied to the device; lengths go the other way, to host memory, where the
engine plans its launches with them.
"""
import weakref

import numpy as np

from . import _core

_KDLCUDA = 2


def library_of(x):
    """"torch" or "cupy" for a CUDA array of that library, "dlpack" for one of another
    library, None for anything not on CUDA."""
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None or isinstance(x, np.ndarray):
        return None
    try:
        kind = int(dev()[0])
    except Exception:  # noqa: BLE001 - not a DLPack producer after all
        return None
    if kind != _KDLCUDA:
        return None
    lib = type(x).__module__.split(".")[0]
    return lib if lib in ("torch", "cupy") else "dlpack"


def _has_cuda(lib):
    """Whether the imported ``lib`` (torch or cupy) can reach a CUDA device."""
    try:
        if lib == "torch":
            import torch
            return bool(torch.cuda.is_available())
        import cupy
        return bool(cupy.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA install counts as none
        return False


def _carrier(x):
    """The library that carries other libraries' CUDA arrays: torch, else CuPy, the
    first one that has CUDA. TypeError when neither is installed, RuntimeError (the
    engine's error for a missing CUDA) when neither can reach a GPU: torch's own
    AssertionError ("Torch not compiled with CUDA enabled") is not the API's."""
    found = []
    for lib in ("torch", "cupy"):
        try:
            __import__(lib)
        except ImportError:
            continue
        if _has_cuda(lib):
            return lib
        found.append(lib)
    if not found:
        raise TypeError("CUDA arrays other than torch's or CuPy's run through torch or CuPy "
                        "(DLPack): install either")
    raise RuntimeError(f"x is a CUDA array ({type(x).__name__}) but {' and '.join(found)}, "
                       f"which would carry it, {'has' if len(found) == 1 else 'have'} no CUDA "
                       "(a CPU-only build or no usable GPU): install a CUDA build of torch "
                       "or CuPy, or pass host arrays")


class Device:
    """Allocation, copies and the current stream of one library on x's device."""

    def __init__(self, lib, x):
        self.ns = None  # the namespace outputs are handed back in (foreign arrays)
        if lib == "dlpack":
            ns = getattr(x, "__array_namespace__", None)
            self.ns = ns() if ns is not None else None
            if not hasattr(self.ns, "from_dlpack"):
                raise TypeError(f"{type(x).__name__}: a CUDA array without "
                                "__array_namespace__().from_dlpack (the outputs are handed "
                                "back through it)")
            lib = _carrier(x)
        self.lib = lib
        index = int(x.__dlpack_device__()[1])
        if lib == "torch":
            import torch
            self.m, self.device = torch, torch.device("cuda", index)
            self.f32 = torch.float32
        else:
            import cupy
            self.m, self.device = cupy, cupy.cuda.Device(index)
            self.f32 = cupy.float32

    def key(self):
        return (self.lib, str(self.device))

    def empty(self, shape):
        if self.lib == "torch":
            return self.m.empty(shape, dtype=self.f32, device=self.device)
        with self.device:
            return self.m.empty(shape, dtype=self.f32)

    def put(self, a):
        """a (host or this device's array) as a contiguous float32 array on the device."""
        if a is None:
            return None
        if library_of(a) == "dlpack":
            a = self.m.from_dlpack(a)
        if self.lib == "torch":
            t = a if isinstance(a, self.m.Tensor) else self.m.as_tensor(np.asarray(a))
            return t.to(device=self.device, dtype=self.f32).contiguous()
        with self.device:
            return self.m.ascontiguousarray(self.m.asarray(a, dtype=self.f32))

    def give(self, a):
        """An output in the caller's library."""
        return a if self.ns is None else self.ns.from_dlpack(a)

    def stream(self):
        if self.lib == "torch":
            return self.m.cuda.current_stream(self.device).cuda_stream
        with self.device:
            return self.m.cuda.get_current_stream().ptr

    def host_lengths(self, lengths):
        if lengths is None:
            return None
        if library_of(lengths) == "dlpack":
            lengths = self.m.from_dlpack(lengths)
        if self.lib == "torch" and isinstance(lengths, self.m.Tensor):
            lengths = lengths.cpu().numpy()
        elif self.lib == "cupy" and isinstance(lengths, self.m.ndarray):
            lengths = lengths.get()
        return lengths


def forward(dev, x, weights, h0, c0, lengths, *, num_layers, bidirectional, has_bias, proj_size,
            hidden, batch_first, reverse=False, dtype="float32"):
    """The engine on CUDA: x [T, B, I] ([B, T, I] if batch_first, [T, I] unbatched)
    on dev; weights, h0, c0 ([L*D, B, .]) already on dev; lengths in host memory.
    Returns (y, h_n, c_n) as dev's arrays."""
    unbatched = x.ndim == 2
    x = dev.put(x[:, None, :] if unbatched else x)
    bf = batch_first and not unbatched
    T, B = (x.shape[1], x.shape[0]) if bf else (x.shape[0], x.shape[1])
    D, R = (2 if bidirectional else 1), proj_size or hidden
    y = dev.empty((B, T, D * R) if bf else (T, B, D * R))
    h_n = dev.empty((num_layers * D, B, R))
    c_n = dev.empty((num_layers * D, B, hidden))
    _core.forward(x, lengths, h0, c0, weights, y, h_n, c_n, num_layers=num_layers,
                  bidirectional=bidirectional, has_bias=has_bias, proj_size=proj_size,
                  batch_first=bf, reverse=reverse, dtype=dtype, stream=dev.stream())
    if unbatched:
        y, h_n, c_n = y[:, 0, :], h_n[:, 0, :], c_n[:, 0, :]
    return dev.give(y), dev.give(h_n), dev.give(c_n)


# LSTM objects' weights on each device, made at the first call there
_on_device = weakref.WeakKeyDictionary()


def lstm_call(lstm, x, lib, hx, lengths, prepare_lengths):
    """kokoro_lstm.LSTM.__call__ for a CUDA x (see the module's docstring)."""
    dev = Device(lib, x)
    per = _on_device.setdefault(lstm, {})
    weights = per.get(dev.key())
    if weights is None:
        weights = per[dev.key()] = [dev.put(a) for a in lstm._weights]
    if x.ndim not in (2, 3) or x.shape[-1] != lstm.input_size:
        raise ValueError(f"x: expected a 2-D or 3-D input with input_size {lstm.input_size} last, "
                         f"got shape {tuple(x.shape)}")
    unbatched = x.ndim == 2
    B = 1 if unbatched else x.shape[0 if lstm.batch_first else 1]
    LD, H, R = lstm.num_layers * lstm._D, lstm.hidden_size, lstm._R
    h0 = c0 = None
    if hx is not None:
        if not isinstance(hx, (tuple, list)) or len(hx) != 2:
            raise TypeError("hx: expected a tuple (h0, c0)")
        h0, c0 = dev.put(hx[0]), dev.put(hx[1])
        for name, v, w in (("h0", h0, R), ("c0", c0, H)):
            want = (LD, w) if unbatched else (LD, B, w)
            if tuple(v.shape) != want:
                raise ValueError(f"{name}: expected shape {want}, got {tuple(v.shape)}")
        h0, c0 = h0.reshape(LD, B, R), c0.reshape(LD, B, H)
    lengths = prepare_lengths(dev.host_lengths(lengths), unbatched)
    y, h_n, c_n = forward(dev, x, weights, h0, c0, lengths, num_layers=lstm.num_layers,
                          bidirectional=lstm.bidirectional, has_bias=lstm.bias,
                          proj_size=lstm.proj_size, hidden=H, batch_first=lstm.batch_first,
                          dtype=lstm.dtype)
    return y, (h_n, c_n)


def lstm_forward(x, lib, w_ih, w_hh, b_ih, b_hh, h0, c0, reverse, lengths, batch_first, dtype,
                 prepare_lengths):
    """kokoro_lstm.lstm_forward for a CUDA x."""
    dev = Device(lib, x)
    w_ih, w_hh, b_ih, b_hh = (dev.put(a) for a in (w_ih, w_hh, b_ih, b_hh))
    if w_hh.ndim != 2 or w_hh.shape[0] != 4 * w_hh.shape[1] or w_hh.shape[1] == 0:
        raise ValueError(f"w_hh: expected shape (4*H, H), got {tuple(w_hh.shape)}")
    H = w_hh.shape[1]
    if (b_ih is None) != (b_hh is None):  # one bias alone: the other is zero
        b_ih, b_hh = (dev.put(np.zeros(4 * H, np.float32)) if b is None else b for b in (b_ih, b_hh))
    unbatched = x.ndim == 2
    if x.ndim not in (2, 3):
        raise ValueError(f"x: expected a 2-D or 3-D input, got shape {tuple(x.shape)}")
    B = 1 if unbatched else x.shape[0 if batch_first else 1]
    states = []
    for name, v in (("h0", h0), ("c0", c0)):
        if v is not None:
            v = dev.put(v)
            if tuple(v.shape) != ((H,) if unbatched else (B, H)):
                raise ValueError(f"{name}: expected shape {(H,) if unbatched else (B, H)}, "
                                 f"got {tuple(v.shape)}")
            v = v.reshape(1, B, H)
        states.append(v)
    lengths = prepare_lengths(dev.host_lengths(lengths), unbatched)
    weights = [a for a in (w_ih, w_hh, b_ih, b_hh) if a is not None]
    y, h_n, c_n = forward(dev, x, weights, *states, lengths, num_layers=1, bidirectional=False,
                          has_bias=b_ih is not None, proj_size=0, hidden=H, batch_first=batch_first,
                          reverse=bool(reverse), dtype=dtype or "float32")
    return y, h_n[0], c_n[0]
