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


def _int_list(v, n=None):
    return (isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool)
                                        and x >= 1 for x in v) and (n is None or len(v) == n))


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
    if not _int_list(rates) or not 1 <= len(rates) <= 8:
        bad("upsample_rates", "a list of 1 to 8 positive integers")
    if not _int_list(kernels, len(rates)) or any((k - u) % 2 or k < u
                                                 for k, u in zip(kernels, rates)):
        bad("upsample_kernel_sizes", "one integer k >= u per rate u with k - u even (the "
            "transposed convolutions then multiply the length by u exactly)")
    if ch >> len(rates) < 1:
        bad("upsample_rates", f"at most {int(math.log2(ch))} rates (channels halve per rate)")
    ks, ds = ist["resblock_kernel_sizes"], ist["resblock_dilation_sizes"]
    if not _int_list(ks) or not 1 <= len(ks) <= 8 or any(k % 2 == 0 for k in ks):
        bad("resblock_kernel_sizes", "a list of 1 to 8 odd positive integers")
    if not (isinstance(ds, list) and len(ds) == len(ks) and all(_int_list(d, 3) for d in ds)):
        bad("resblock_dilation_sizes", "one list of three positive dilations per kernel size")
    n_fft, hop = ist["gen_istft_n_fft"], ist["gen_istft_hop_size"]
    if not (isinstance(n_fft, int) and n_fft >= 2 and n_fft % 2 == 0 and n_fft <= 4096):
        bad("gen_istft_n_fft", "an even integer in 2..4096")
    if not (isinstance(hop, int) and 1 <= hop <= n_fft):
        bad("gen_istft_hop_size", f"an integer in 1..gen_istft_n_fft ({n_fft})")
    return ist


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


def convert_map():
    """Converters the decoder's export needs besides kokoro_lstm.tvm's
    (``custom_convert_map`` of :func:`kokoro_lstm.tvm.from_exported_program`)."""
    return {f"{k}.default": _clamp_converter(k) for k in ("clamp", "clamp_min", "clamp_max")}
