"""Counter-based noise: the random numbers of Kokoro's decoder, reproducible from a seed.

Every draw is named by ``(seed, stream)``: element ``i`` of a draw depends only on
``(seed, stream, i)`` (Philox4x32-10 in the C engine, src/ops/random.h), so the numbers
are the same for any thread count, in NumPy, in PyTorch (``torch.ops.kokoro.random_uniform``
/ ``random_normal``, registered by :mod:`kokoro_lstm.torch_ops`) and in a compiled TVM
artifact (``kokoro_lstm.random_v1``), on the CPU or on a CUDA device (src/cuda/random.cu). Uniform values are multiples of 2^-24 in [0, 1);
normal values come from Box-Muller and are finite.

* :func:`uniform` / :func:`normal`: a float32 array of the draw, in row-major order.
* :func:`counter_noise`: a context manager under which every Kokoro ``SineGen`` /
  ``SourceModuleHnNSF`` of a model draws from the ops with a given seed, in eager
  PyTorch and under ``torch.export`` (the seed then a graph input):

  - stream 0: SineGen's initial phases (``rand_ini``), uniform [B, harmonics + 1], column 0
    then zeroed;
  - stream 1: SineGen's additive noise, normal, the sine waves' [B, L, harmonics + 1];
  - stream 2: SourceModuleHnNSF's noise branch, normal, uv's [B, L, 1].

``import kokoro_lstm.noise`` imports neither torch nor TVM; :func:`counter_noise` imports torch.
"""
from __future__ import annotations

import contextlib
import math
import operator

import numpy as np

from . import _core

__all__ = ["uniform", "normal", "counter_noise", "STREAM_SINE_PHASE", "STREAM_SINE_NOISE",
           "STREAM_SOURCE_NOISE", "UNIFORM", "NORMAL"]

#: The draws of Kokoro's decoder (see the module docstring).
STREAM_SINE_PHASE = 0
STREAM_SINE_NOISE = 1
STREAM_SOURCE_NOISE = 2
#: ``dist`` values of the engine (KL_RANDOM_UNIFORM / KL_RANDOM_NORMAL in src/ops/random.h).
UNIFORM = 0
NORMAL = 1

_INT64 = (-(1 << 63), (1 << 63) - 1)


def _check_seed(seed) -> int:
    try:
        s = operator.index(seed)
    except TypeError:
        raise TypeError(f"seed must be an integer, got {type(seed).__name__}") from None
    if not _INT64[0] <= s <= _INT64[1]:
        raise ValueError(f"seed must fit in int64, got {s}")
    return s


def _check_stream(stream) -> int:
    try:
        s = operator.index(stream)
    except TypeError:
        raise TypeError(f"stream must be an integer, got {type(stream).__name__}") from None
    if not 0 <= s <= _INT64[1]:
        raise ValueError(f"stream must be in 0..2^63-1, got {s}")
    return s


def _draw(dist, shape, seed, stream, num_threads):
    shape = (operator.index(shape),) if np.ndim(shape) == 0 else tuple(operator.index(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"shape must not be negative, got {shape}")
    if math.prod(shape) >= 1 << 62:
        raise ValueError(f"shape {shape} has too many elements")
    out = np.empty(shape, np.float32)
    _core.random_fill(dist, _check_seed(seed), _check_stream(stream), out,
                      num_threads=operator.index(num_threads))
    return out


def uniform(shape, seed, stream=0, *, num_threads=0) -> np.ndarray:
    """float32 array of ``shape``: the first ``prod(shape)`` values of the uniform draw
    ``(seed, stream)`` in [0, 1), row-major. ``seed``: any int64; ``stream`` >= 0."""
    return _draw(UNIFORM, shape, seed, stream, num_threads)


def normal(shape, seed, stream=0, *, num_threads=0) -> np.ndarray:
    """float32 array of ``shape``: the first ``prod(shape)`` values of the standard
    normal draw ``(seed, stream)``, row-major."""
    return _draw(NORMAL, shape, seed, stream, num_threads)


# -- Kokoro's SineGen / SourceModuleHnNSF on the counter-based ops -------------------------
def _is_kokoro_class(m, name):
    t = type(m)
    return t.__name__ == name and (t.__module__ == "kokoro.istftnet"
                                   or t.__module__.startswith("kokoro_lstm."))


def _seed_tensor(seed):
    import torch

    if isinstance(seed, torch.Tensor):
        if (seed.dtype != torch.int64 or tuple(seed.shape) != (1,)
                or seed.device.type not in ("cpu", "cuda")):
            raise ValueError(f"counter_noise: a seed tensor must be int64 of shape [1] on the CPU "
                             f"or a CUDA device, got {seed.dtype} {tuple(seed.shape)} on "
                             f"{seed.device}")
        return seed
    return torch.tensor([_check_seed(seed)], dtype=torch.int64)


def _sinegen_forward(self, f0, seed):
    """kokoro.istftnet.SineGen.forward with ``torch.rand`` (initial phases, stream 0) and
    ``torch.randn_like`` (noise, stream 1) drawn from the counter-based ops."""
    import torch
    import torch.nn.functional as F

    ops = torch.ops.kokoro
    fn = torch.multiply(f0, torch.FloatTensor([[range(1, self.harmonic_num + 2)]]).to(f0.device))
    # _f02sine (flag_for_pulse False)
    rad_values = (fn / self.sampling_rate) % 1
    rand_ini = ops.random_uniform(seed, [fn.shape[0], fn.shape[2]], STREAM_SINE_PHASE).to(fn.device)
    rand_ini[:, 0] = 0
    rad_values[:, 0, :] = rad_values[:, 0, :] + rand_ini
    rad_values = F.interpolate(rad_values.transpose(1, 2), scale_factor=1 / self.upsample_scale,
                               mode="linear").transpose(1, 2)
    phase = torch.cumsum(rad_values, dim=1) * 2 * torch.pi
    phase = F.interpolate(phase.transpose(1, 2) * self.upsample_scale,
                          scale_factor=self.upsample_scale, mode="linear").transpose(1, 2)
    sine_waves = torch.sin(phase) * self.sine_amp
    uv = self._f02uv(f0)
    noise_amp = uv * self.noise_std + (1 - uv) * self.sine_amp / 3
    noise = noise_amp * ops.random_normal(seed, list(sine_waves.shape),
                                          STREAM_SINE_NOISE).to(sine_waves.device)
    sine_waves = sine_waves * uv + noise
    return sine_waves, uv, noise


def _source_forward(self, x, seed):
    """kokoro.istftnet.SourceModuleHnNSF.forward with ``torch.randn_like(uv)`` drawn from
    stream 2."""
    import torch

    # upstream's no_grad, where it matters: SineGen has no parameters, so without an
    # input that requires grad it records nothing (and torch.export sees no grad-mode
    # switch, which TVM's importer cannot take without decompositions)
    grad = torch.is_grad_enabled() and x.requires_grad
    with torch.no_grad() if grad else contextlib.nullcontext():
        sine_wavs, uv, _ = self.l_sin_gen(x)
    sine_merge = self.l_tanh(self.l_linear(sine_wavs))
    noise = torch.ops.kokoro.random_normal(seed, list(uv.shape),
                                           STREAM_SOURCE_NOISE).to(uv.device) * self.sine_amp / 3
    return sine_merge, noise, uv


@contextlib.contextmanager
def counter_noise(model, seed):
    """Within the block, every Kokoro ``SineGen`` and ``SourceModuleHnNSF`` in ``model``
    (kokoro.istftnet's classes and kokoro_lstm's copies) draws its random numbers from
    ``torch.ops.kokoro.random_uniform`` / ``random_normal`` with ``seed`` (the streams in
    the module docstring): the same seed gives the same audio in eager PyTorch and in
    an artifact compiled from an export made inside the block. ``seed``: an int, or an
    int64 tensor of shape [1] on the CPU (pass it as an input of the exported call to
    make it a graph input under ``torch.export(strict=False)``) or on the model's CUDA
    device (the draws are then made there, the same numbers). Raises ValueError
    when ``model`` has no such module, or a SineGen with ``flag_for_pulse`` set."""
    import types

    import kokoro_lstm.torch_ops  # noqa: F401  (registers the kokoro::random_* ops)

    seed_t = _seed_tensor(seed)
    found = []
    for m in model.modules():
        if _is_kokoro_class(m, "SineGen"):
            if m.flag_for_pulse:
                raise ValueError("counter_noise: SineGen with flag_for_pulse=True is not "
                                 "supported (Kokoro's is False)")
            found.append((m, _sinegen_forward))
        elif _is_kokoro_class(m, "SourceModuleHnNSF"):
            found.append((m, _source_forward))
    if not found:
        raise ValueError(f"counter_noise: {type(model).__name__} contains no Kokoro SineGen "
                         f"or SourceModuleHnNSF")
    saved = []
    try:
        for m, fwd in found:
            saved.append((m, m.__dict__.get("forward")))

            def forward(self, x, _fwd=fwd):
                return _fwd(self, x, seed_t)
            m.forward = types.MethodType(forward, m)
        yield model
    finally:
        for m, prev in saved:
            if prev is None:
                m.__dict__.pop("forward", None)
            else:
                m.forward = prev
