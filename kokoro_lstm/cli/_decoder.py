"""Kokoro's decoder as ``kokoro-lstm port-decoder`` exports it.

:func:`build_decoder` makes ``kokoro.istftnet.Decoder`` from a Kokoro config, as
``KModel`` does, but with ``disable_complex=True``: the STFT runs as convolutions
(``kokoro.custom_stft.CustomSTFT``) because complex tensors do not go through TVM's
importer (``KModel`` defaults to ``disable_complex=False``, ``torch.stft`` /
``torch.istft``). :class:`DecoderPart` is the exported call::

    decoder_forward_seeded(asr f32[1,512,F], F0 f32[1,2F], N f32[1,2F], s f32[1,128],
                           seed int64[1]) -> audio f32[1,1,samples]

with the decoder's random numbers (SineGen's phases and noise, the noise branch)
drawn by ``kokoro_lstm.noise.counter_noise`` from ``seed``. The decoder needs the
``kokoro`` package (its istftnet classes have no copies in this package).
"""
from __future__ import annotations

import contextlib
import math
import warnings

from ._components import UsageError, _load_strict, _entry

__all__ = ["ISTFTNET", "FUNCTION", "SEEDED_FUNCTION", "CHECKPOINT_KEY", "decoder_classes",
           "check_decoder_config", "build_decoder", "DecoderPart", "example_inputs",
           "exportable_stft", "convert_map"]

#: Kokoro-82M's ``istftnet`` settings (its config.json).
ISTFTNET = {
    "upsample_kernel_sizes": [20, 12],
    "upsample_rates": [10, 6],
    "gen_istft_hop_size": 5,
    "gen_istft_n_fft": 20,
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "resblock_kernel_sizes": [3, 7, 11],
    "upsample_initial_channel": 512,
}
FUNCTION = "decoder_forward"
SEEDED_FUNCTION = "decoder_forward_seeded"
CHECKPOINT_KEY = "decoder"
INPUT_NAMES = ("asr", "F0", "N", "s", "seed")
#: the Decoder's asr_res reads 512 channels and its last block writes 512, whatever the config
ASR_CHANNELS = 512
#: STFT constants the checkpoint does not hold (CustomSTFT computes them)
_COMPUTED_PREFIX = "generator.stft."
#: Bounds on the istftnet values, checked before anything is allocated (Kokoro-82M's
#: values in ISTFTNET sit well inside them). Weights grow with kernel sizes and list
#: lengths, activations with the audio samples per F0 frame (prod(upsample_rates) x
#: gen_istft_hop_size: 300 for Kokoro-82M); a config line must not ask for gigabytes.
MAX_UPSAMPLES = 4
MAX_UPSAMPLE_RATE = 16
MAX_UPSAMPLE_KERNEL = 64
MAX_RESBLOCKS = 4
MAX_RESBLOCK_KERNEL = 31
MAX_DILATION = 32
MAX_N_FFT = 2048
MAX_SAMPLES_PER_F0_FRAME = 1200
#: audio samples per asr frame of Kokoro-82M (2 F0 frames x 300)
KOKORO_SAMPLES_PER_FRAME = 600


def decoder_classes():
    """(kokoro.istftnet, kokoro.custom_stft), or UsageError saying what to install."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import kokoro.custom_stft as cs
            import kokoro.istftnet as ist
    except Exception as e:  # noqa: BLE001 - not installed, or broken
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"port-decoder needs Kokoro's decoder classes from the 'kokoro' "
                         f"package (pip install kokoro==0.9.4): {first}") from None
    return ist, cs


def _int_list(v, n=None, hi=None):
    return (isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool)
                                        and x >= 1 and (hi is None or x <= hi) for x in v)
            and (n is None or len(v) == n))


def check_decoder_config(cfg, where="config"):
    """``cfg['istftnet']`` (Kokoro-82M's when absent) checked for what the Decoder can
    be built with; returns it. UsageError (one line) otherwise."""
    ist = cfg.get("istftnet", ISTFTNET)
    if not isinstance(ist, dict):
        raise UsageError(f"{where}: 'istftnet' must be a JSON object, got {ist!r:.60}")
    ist = dict(ISTFTNET, **ist)

    def bad(key, what):
        raise UsageError(f"{where}: 'istftnet.{key}' must be {what}, got {ist[key]!r:.60} "
                         f"(Kokoro-82M: {ISTFTNET[key]})")

    if cfg["hidden_dim"] != ASR_CHANNELS:
        raise UsageError(f"{where}: the decoder needs 'hidden_dim' {ASR_CHANNELS} (its asr_res "
                         f"convolution reads {ASR_CHANNELS} channels), got {cfg['hidden_dim']}")
    ch = ist["upsample_initial_channel"]
    if ch != ASR_CHANNELS:
        bad("upsample_initial_channel", f"{ASR_CHANNELS} (the Decoder's last block writes "
            f"{ASR_CHANNELS} channels)")
    rates, kernels = ist["upsample_rates"], ist["upsample_kernel_sizes"]
    if not _int_list(rates, hi=MAX_UPSAMPLE_RATE) or not 1 <= len(rates) <= MAX_UPSAMPLES:
        bad("upsample_rates", f"a list of 1 to {MAX_UPSAMPLES} integers in "
            f"1..{MAX_UPSAMPLE_RATE}")
    if not _int_list(kernels, len(rates), MAX_UPSAMPLE_KERNEL) or any(
            (k - u) % 2 or k < u for k, u in zip(kernels, rates)):
        bad("upsample_kernel_sizes", f"one integer k in u..{MAX_UPSAMPLE_KERNEL} per rate u "
            "with k - u even (the transposed convolutions then multiply the length by u "
            "exactly)")
    ks, ds = ist["resblock_kernel_sizes"], ist["resblock_dilation_sizes"]
    if (not _int_list(ks, hi=MAX_RESBLOCK_KERNEL) or not 1 <= len(ks) <= MAX_RESBLOCKS
            or any(k % 2 == 0 for k in ks)):
        bad("resblock_kernel_sizes", f"a list of 1 to {MAX_RESBLOCKS} odd integers in "
            f"1..{MAX_RESBLOCK_KERNEL}")
    if not (isinstance(ds, list) and len(ds) == len(ks)
            and all(_int_list(d, 3, MAX_DILATION) for d in ds)):
        bad("resblock_dilation_sizes", f"one list of three dilations in 1..{MAX_DILATION} "
            "per kernel size")
    n_fft, hop = ist["gen_istft_n_fft"], ist["gen_istft_hop_size"]
    if not (isinstance(n_fft, int) and not isinstance(n_fft, bool) and 2 <= n_fft <= MAX_N_FFT
            and n_fft % 2 == 0):
        bad("gen_istft_n_fft", f"an even integer in 2..{MAX_N_FFT}")
    if not (isinstance(hop, int) and not isinstance(hop, bool) and 1 <= hop <= n_fft):
        bad("gen_istft_hop_size", f"an integer in 1..gen_istft_n_fft ({n_fft})")
    per_frame = math.prod(rates) * hop
    if per_frame > MAX_SAMPLES_PER_F0_FRAME:
        raise UsageError(f"{where}: 'istftnet' makes {per_frame} audio samples per F0 frame "
                         f"(prod(upsample_rates) x gen_istft_hop_size); at most "
                         f"{MAX_SAMPLES_PER_F0_FRAME} (Kokoro-82M: 300)")
    return ist


def samples_per_frame(ist):
    """Audio samples per asr frame: 2 F0 frames, each prod(upsample_rates) x hop."""
    return 2 * math.prod(ist["upsample_rates"]) * ist["gen_istft_hop_size"]


def check_samples(ist, frame_counts, max_frames):
    """UsageError unless every frame count makes at most as many audio samples as
    Kokoro-82M's config makes at ``max_frames`` (the --seq-len bound is set for it)."""
    per = samples_per_frame(ist)
    limit = max_frames * KOKORO_SAMPLES_PER_FRAME
    for f in frame_counts:
        if f * per > limit:
            raise UsageError(f"--seq-len {f} makes {f * per} audio samples with this "
                             f"config's {per} per frame; at most {limit} (Kokoro-82M's "
                             f"{KOKORO_SAMPLES_PER_FRAME} per frame x {max_frames} frames)")


def build_decoder(cfg, ckpt=None, seed=0):
    """Kokoro's Decoder (eval, no grad, ``disable_complex=True``), random init seeded by
    ``seed`` or loaded strictly from ``ckpt``'s 'decoder' entry (the STFT's constant
    buffers, which a checkpoint does not hold, excepted)."""
    import torch

    ist_mod, _ = decoder_classes()
    ist = check_decoder_config(cfg)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight_norm's deprecation
        dec = ist_mod.Decoder(dim_in=cfg["hidden_dim"], style_dim=cfg["style_dim"],
                              dim_out=cfg["n_mels"], disable_complex=True, **ist)
    if ckpt is not None:
        sd = dict(_entry(ckpt, CHECKPOINT_KEY))
        for k, v in dec.state_dict().items():
            if k.startswith(_COMPUTED_PREFIX):
                sd.setdefault(k, v)
        _load_strict(dec, sd, CHECKPOINT_KEY)
    dec.eval().requires_grad_(False)
    return dec


def _where_phase_transform(self, waveform):
    """CustomSTFT.transform with its masked assignment (``phase[mask] = pi``, an
    index_put with a bool index that TVM's importer refuses) as ``torch.where``:
    the same numbers."""
    import torch
    import torch.nn.functional as F

    if self.center:
        pad_len = self.n_fft // 2
        waveform = F.pad(waveform, (pad_len, pad_len), mode=self.pad_mode)
    x = waveform.unsqueeze(1)
    real_out = F.conv1d(x, self.weight_forward_real, bias=None, stride=self.hop_length,
                        padding=0)
    imag_out = F.conv1d(x, self.weight_forward_imag, bias=None, stride=self.hop_length,
                        padding=0)
    magnitude = torch.sqrt(real_out**2 + imag_out**2 + 1e-14)
    phase = torch.atan2(imag_out, real_out)
    phase = torch.where((imag_out == 0) & (real_out < 0), torch.pi, phase)
    return magnitude, phase


@contextlib.contextmanager
def exportable_stft(model):
    """Within the block, every CustomSTFT in ``model`` computes its transform with
    :func:`_where_phase_transform` (for torch.export; eager results are the same)."""
    import types

    _, cs = decoder_classes()
    patched = [m for m in model.modules() if isinstance(m, cs.CustomSTFT)]
    try:
        for m in patched:
            m.transform = types.MethodType(_where_phase_transform, m)
        yield model
    finally:
        for m in patched:
            m.__dict__.pop("transform", None)


def _module_class():
    from torch import nn

    class DecoderPart(nn.Module):
        """``decoder(asr, F0, N, s)`` with its noise drawn from ``seed``."""

        function = SEEDED_FUNCTION
        input_names = INPUT_NAMES
        output_names = ("audio",)

        def __init__(self, decoder):
            super().__init__()
            self.decoder = decoder

        def forward(self, asr, F0, N, s, seed):
            from kokoro_lstm.noise import counter_noise

            with counter_noise(self.decoder, seed), exportable_stft(self.decoder):
                return self.decoder(asr, F0, N, s)

    return DecoderPart


def __getattr__(name):
    if name == "DecoderPart":
        return _module_class()
    raise AttributeError(name)


def example_inputs(cfg, frames, gen):
    """(asr, F0, N, s) at ``frames`` frames: random features and style, and an F0
    curve in Hz whose first and last quarter are unvoiced (0), the rest 80-280 Hz
    (SineGen's voiced threshold is 10 Hz), so both kinds of noise are drawn."""
    import torch

    n2 = 2 * frames
    f0 = 80.0 + 200.0 * torch.rand(1, n2, generator=gen)
    f0[:, : n2 // 4] = 0.0
    f0[:, n2 - n2 // 4:] = 0.0
    return (torch.randn(1, cfg["hidden_dim"], frames, generator=gen), f0,
            torch.randn(1, n2, generator=gen), torch.randn(1, cfg["style_dim"], generator=gen))


def _clamp_converter(kind):
    def convert(node, importer):
        """aten clamp on an integer tensor with a missing bound: TVM's importer makes
        the bound +-inf, which its integer legalization cannot hold; use the
        dtype's limits instead (the same result)."""
        import numpy as np
        from torch import fx
        from tvm import relax

        x = importer.env[node.args[0]]
        dtype = str(x.ty.dtype)
        args = list(node.args[1:])
        lo = args.pop(0) if kind in ("clamp", "clamp_min") and args else node.kwargs.get("min")
        hi = (args.pop(0) if args else node.kwargs.get("max")) if kind != "clamp_min" else None
        if not dtype.startswith(("int", "uint")) or isinstance(lo, fx.Node) or isinstance(hi, fx.Node):
            return getattr(importer, f"_{kind}")(node)
        info = np.iinfo(dtype)
        lo = int(info.min) if lo is None else max(int(info.min), math.ceil(lo))
        hi = int(info.max) if hi is None else min(int(info.max), math.floor(hi))
        return importer.block_builder.emit(relax.op.clip(x, lo, hi))

    return convert


def _cumsum_converter(node, importer):
    """aten cumsum of float32 accumulated in float64, each sum rounded to float32, as
    PyTorch's CPU kernel does (TVM's accumulates in float32). SineGen's phase is
    this cumsum times 2*pi*upsample_scale (1885 for Kokoro-82M), so one float32
    rounding of a partial sum moves a sample of its sine by up to ~1e-3."""
    from tvm import relax

    x = importer.env[node.args[0]]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if str(x.ty.dtype) != "float32" or "dtype" in node.kwargs or "out" in node.kwargs:
        return importer._cumsum(node)
    bb = importer.block_builder
    wide = bb.emit(relax.op.cumsum(bb.emit(relax.op.astype(x, "float64")), dim))
    return bb.emit(relax.op.astype(wide, "float32"))


def _upsample_linear_converter(node, importer):
    """aten upsample_linear1d.vec (align_corners False, a scale factor) as PyTorch's
    CPU kernel computes it on x86-64 (FMA): source index fma(1/scale, dst + 0.5,
    -0.5), weights l1 = src - floor(src) and l0 = 1 - l1, output fma(l0, x[i0],
    l1 * x[i1]), bit for bit. SineGen upsamples its phase (thousands of radians)
    this way; TVM's own lowering of the decomposition rounds differently, which
    moves the sine by up to ~1e-3."""
    from tvm import te, tirx

    x = importer.env[node.args[0]]
    args = list(node.args) + [None] * 4
    size, align, factors = args[1], args[2], args[3]
    shape = [int(d) for d in x.ty.shape]
    if (str(x.ty.dtype) != "float32" or align or size is not None or not factors
            or len(factors) != 1 or len(shape) != 3):
        raise NotImplementedError(f"upsample_linear1d: only float32 [N, C, L] with one scale "
                                  f"factor and align_corners=False (got size={size}, "
                                  f"align_corners={align}, scale_factors={factors})")
    import numpy as np

    n_in = shape[2]
    n_out = int(math.floor(n_in * float(factors[0])))
    scale = tirx.const(float(np.float32(1.0 / float(factors[0]))), "float32")

    def fma(a, b, c):
        # the product of two float32 is exact in float64: one rounding of the sum (then
        # to float32) is a fused multiply-add on any target, FMA instructions or not
        f64 = "float64"
        return (a.astype(f64) * b.astype(f64) + c.astype(f64)).astype("float32")

    def compute(data):
        def f(b, c, i):
            dst = i.astype("float32") + tirx.const(0.5, "float32")
            src = fma(scale, dst, tirx.const(-0.5, "float32"))
            src = tirx.max(src, tirx.const(0.0, "float32"))
            i0 = tirx.min(tirx.floor(src).astype("int64"), n_in - 1)
            i1 = tirx.min(i0 + 1, n_in - 1)
            l1 = tirx.min(tirx.max(src - i0.astype("float32"), tirx.const(0.0, "float32")),
                          tirx.const(1.0, "float32"))
            l0 = tirx.const(1.0, "float32") - l1
            return fma(l0, data[b, c, i0], l1 * data[b, c, i1])

        return te.compute((shape[0], shape[1], n_out), f, name="upsample_linear1d")

    return importer.block_builder.emit_te(compute, x, primfunc_name_hint="upsample_linear1d")


#: aten ops exported undecomposed for the converters below
KEEP_UNDECOMPOSED = ("upsample_linear1d.vec",)


def decomposition_table():
    """kokoro_lstm.tvm's table without the ops of :data:`KEEP_UNDECOMPOSED`."""
    import torch

    import kokoro_lstm.tvm as kt

    table = kt.decomposition_table()
    for name in KEEP_UNDECOMPOSED:
        packet, overload = name.split(".")
        table.pop(getattr(getattr(torch.ops.aten, packet), overload), None)
    return table


def convert_map():
    """Converters the decoder's export needs besides kokoro_lstm.tvm's
    (``custom_convert_map`` of :func:`kokoro_lstm.tvm.from_exported_program`)."""
    m = {f"{k}.default": _clamp_converter(k) for k in ("clamp", "clamp_min", "clamp_max")}
    m["cumsum.default"] = _cumsum_converter
    m["upsample_linear1d.vec"] = _upsample_linear_converter
    return m
