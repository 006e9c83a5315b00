"""CUDA arrays in the NumPy API: ``LSTM`` and ``lstm_forward`` called with a CUDA
array (anything whose ``__dlpack_device__`` says kDLCUDA) run on that GPU.

The engine writes into outputs it is given, so they are allocated with the input's
own library (torch or CuPy), on its device, and the call runs on that library's
current stream. Arrays of any other library (JAX, ...) are carried by torch (else
CuPy) through DLPack, and the outputs handed back with the input's array namespace
(``x.__array_namespace__().from_dlpack``). Host arrays among the other arguments (an ``LSTM``'s weights, h0/c0)
are copied to the device; lengths go the other way, to host memory, where the
engine plans its launches with them. ``Device`` is the namespace the one arrangement
of a call (``kokoro_lstm._call.run``) allocates and converts with.
"""
import weakref

import numpy as np


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

    io = np.float32  # CUDA runs in float32

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

    def x(self, x):
        return self.put(x)

    def layout(self, x, batch_first):
        return self.put(x)  # contiguous: the engine reads it in place

    def weight(self, a, name):
        return self.put(a)

    def state(self, a, name):
        return self.put(a)

    def weights_of(self, owner, weights):
        """owner's (an LSTM's) host weights on this device, copied at the first call here."""
        per = _on_device.setdefault(owner, {})
        if self.key() not in per:
            per[self.key()] = [self.put(a) for a in weights]
        return per[self.key()]

    def options(self, num_threads, owner):
        """The engine's options of a call on this device: its library's current stream."""
        return {"stream": self.stream()}

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


# LSTM objects' weights on each device, made at the first call there
_on_device = weakref.WeakKeyDictionary()
