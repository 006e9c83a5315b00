"""Counter-based noise (:mod:`kokoro_lstm.noise`): the engine's Philox draws as ops.

kokoro::random_uniform(seed int64 [1], shape, stream) -> float32 [*shape] in [0, 1) and
kokoro::random_normal(...) -> standard normal: element i depends only on (seed, stream, i)
(TVM lowers both to the engine's kokoro_lstm.random_v1). The draw is made on the seed's
device: the CPU, or a CUDA device, where the engine's kernel (the same bits) runs on
PyTorch's current stream and reads the seed there (no host synchronization, so a call
can be captured in a CUDA graph; a replay draws with the seed's value then)."""
from __future__ import annotations

import torch

import kokoro_lstm

from .ops import _lib

__all__ = ["random_uniform", "random_normal"]


def _check(cond, message):
    """torch._check, with a fast path for plain bools (concrete shapes)."""
    if cond is True:
        return
    if cond is False:
        raise RuntimeError(message())
    torch._check(cond, message)


_RANDOM_OPS = {"random_uniform": 0, "random_normal": 1}  # name -> dist (src/ops/random.h)
_RANDOM_SCHEMA = "(Tensor seed, SymInt[] shape, int stream) -> Tensor"


def _random_check(name, seed, shape, stream, device=None):
    """The ops' arguments; device: the device type the implementation runs on (None:
    the fake one, any)."""
    p = f"kokoro::{name}: "
    _check(seed.dtype == torch.int64 and seed.dim() == 1 and seed.shape[0] == 1,
           lambda: p + f"seed must be an int64 tensor of shape [1], got {seed.dtype} "
                       f"{tuple(seed.shape)}")
    _check(device is None or seed.device.type == device,
           lambda: p + f"seed must be on the CPU or a CUDA device, got {seed.device}")
    _check(stream >= 0, lambda: p + f"stream must be >= 0, got {stream}")
    for d in shape:
        _check(d >= 0, lambda: p + f"shape must not be negative, got {list(shape)}")


def _make_random(name, dist):
    def cpu(seed, shape, stream):
        _random_check(name, seed, shape, stream, "cpu")
        out = torch.empty(list(shape), dtype=torch.float32)
        kokoro_lstm._core.random_fill(dist, int(seed[0]), stream, out.numpy())
        return out

    def cuda(seed, shape, stream):
        _random_check(name, seed, shape, stream, "cuda")
        out = torch.empty(list(shape), dtype=torch.float32, device=seed.device)
        if out.numel():
            dev = seed.device
            kokoro_lstm._core.random_fill_cuda(dist, seed.data_ptr(), stream, out.numel(),
                                               out.data_ptr(), dev.index,
                                               torch.cuda.current_stream(dev).cuda_stream)
        return out

    def fake(seed, shape, stream):
        _random_check(name, seed, shape, stream)
        return seed.new_empty(list(shape), dtype=torch.float32)
    cpu.__name__, cuda.__name__, fake.__name__ = f"{name}_cpu", f"{name}_cuda", f"{name}_fake"
    return cpu, cuda, fake


def _register_random():
    for name, dist in _RANDOM_OPS.items():
        _lib.define(name + _RANDOM_SCHEMA)
        cpu, cuda, fake = _make_random(name, dist)
        _lib.impl(name, cpu, "CPU")
        _lib.impl(name, cuda, "CUDA")
        torch.library.register_fake(f"kokoro::{name}", fake, lib=_lib)


_register_random()

random_uniform = torch.ops.kokoro.random_uniform.default
random_normal = torch.ops.kokoro.random_normal.default
