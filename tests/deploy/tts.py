"""Kokoro's KModel with random weights for the tokens-to-WAV runner (kokoro_tts.cc):
its weights as a Kokoro .pth (what port-encoder and port-decoder read with
--checkpoint), inputs, and KModel's own audio under the counter-based noise.

The duration head ``predictor.duration_proj`` gets bias logit(k / max_dur) and its
weight scaled by ``jitter``: every token then lasts about k frames (random weights
alone give ~25), varying with the jitter so that the alignment is not uniform.
"""
import contextlib
import io
import json
import math
import warnings

import torch

from kokoro_lstm.cli._decoder import ISTFTNET  # Kokoro-82M's decoder settings

SAMPLE_RATE = 24000


def config():
    from kokoro_lstm.cli._components import DEFAULT_CONFIG

    cfg = json.loads(json.dumps(DEFAULT_CONFIG))
    cfg["istftnet"] = json.loads(json.dumps(ISTFTNET))
    cfg["vocab"] = {chr(0x41 + i): i + 1 for i in range(26)}  # KModel stores it only
    return cfg


def kmodel(weights=None, seed=0, frames_per_token=3, jitter=0.0, disable_complex=True):
    """KModel (eval): loaded from ``weights`` (.pth), or random (seeded) with the
    duration head set as the module docstring says. ``disable_complex`` True: the STFT
    as convolutions (CustomSTFT), what port-decoder compiles and kokoro-onnx exports;
    torch.stft's numbers differ where the source's spectrum is near zero (its phase)."""
    import kokoro

    cfg = config()
    if weights is None:
        torch.manual_seed(seed)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        empty = None
        if weights is None:
            import tempfile

            empty = tempfile.NamedTemporaryFile(suffix=".pth", delete=False).name
            torch.save({}, empty)
        m = kokoro.KModel(repo_id="hexgrad/Kokoro-82M", config=cfg, model=weights or empty,
                         disable_complex=disable_complex)
    m.eval().requires_grad_(False)
    if weights is None:
        import os

        os.remove(empty)
        lin = m.predictor.duration_proj.linear_layer
        p = frames_per_token / cfg["max_dur"]
        with torch.no_grad():
            lin.weight.mul_(jitter)
            lin.bias.fill_(math.log(p / (1.0 - p)))
    return m


def compressible_weights(model, seed=0, min_numel=1 << 16):
    """The model's large weights (at least ``min_numel`` elements) made compressible: row
    o of each is one random row rolled by o, with values in {-1.5, -0.5, 0.5, 1.5} times
    the weight's own standard deviation, and each weight-normed layer's gains set to
    their mean, so every row has the same norm. Exported weights (weight norm folded)
    then xz-compress to a few MB, small enough to carry to a GPU machine; the model
    still mixes every input. The duration head (under ``min_numel``) keeps its settings."""
    g = torch.Generator().manual_seed(seed)
    levels = torch.tensor([-1.5, -0.5, 0.5, 1.5])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.numel() >= min_numel:
                rows = p.reshape(p.shape[0], -1) if p.dim() > 1 else p.reshape(1, -1)
                u = levels[torch.randint(0, 4, (rows.shape[1],), generator=g)] * float(p.std())
                for o in range(rows.shape[0]):
                    rows[o] = torch.roll(u, o)
        for m in model.modules():
            if hasattr(m, "weight_g"):
                m.weight_g.fill_(float(m.weight_g.mean()))
    return model


def save(model, path):
    """The model's weights as Kokoro's .pth (one state dict per top-level module)."""
    keys = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
    torch.save({k: getattr(model, k).state_dict() for k in keys}, path)


def inputs(n_tokens, seed=0, n_token=178):
    """Token ids (0 ... 0 around random phoneme ids, as KModel.forward) and ref_s."""
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(1, n_token, (1, n_tokens), generator=g)
    ids[0, 0] = ids[0, -1] = 0
    ref_s = torch.randn(1, 256, generator=g) * 0.1
    return ids, ref_s


def durations(model, ids, ref_s, speed=1.0):
    """KModel's pred_dur and the unrounded duration sums (forward_with_tokens's math)."""
    with torch.no_grad():
        n = ids.shape[1]
        lengths = torch.tensor([n])
        mask = torch.zeros(1, n, dtype=torch.bool)
        bert_dur = model.bert(ids, attention_mask=(~mask).int())
        d_en = model.bert_encoder(bert_dur).transpose(-1, -2)
        d = model.predictor.text_encoder(d_en, ref_s[:, 128:], lengths, mask)
        x, _ = model.predictor.lstm(d)
        dur = torch.sigmoid(model.predictor.duration_proj(x)).sum(axis=-1) / speed
    return torch.round(dur).clamp(min=1).long().squeeze(0), dur.squeeze(0)
