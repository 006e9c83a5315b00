"""Kokoro's exact algebra cuts: export-time rewrites of the component wrappers.

**Style fold** (``duration``): the three DurationEncoder LSTMs and ``predictor.lstm``
read ``cat(x, s)`` where ``s`` (the style, [B, 128]) is the same at every step. Split
W_ih = [W_x | W_s]; then for every valid step

    W_ih cat(x_t, s) + b_ih + b_hh = W_x x_t + (W_s s + b_ih + b_hh),

so each LSTM runs on x alone (512 of its 640 input features, 20% fewer input-projection
FLOPs) with ``W_s s`` added once per call as a gate bias (``kokoro::lstm_forward_gated``,
the engine's ``gate_bias``). Exact algebra, not an approximation: only float32 rounding
changes (the sum is taken in another order).

Where it holds, and where not:

* Kokoro masks the padded positions of ``cat(x, s)`` to 0 (``masked_fill(mask)``). With
  packed semantics the LSTMs never compute a padded step, so the fold is exact whenever
  ``mask`` marks exactly the steps past ``lengths`` (``mask == arange(T) >= length``,
  how Kokoro builds it and what the component's contract says). With ``padded``
  semantics the LSTMs run over the padding, whose style columns the mask zeroes:
  the fold would change those steps, so it is not applied.
* ``f0n``'s ``shared`` LSTM reads ``en``, an input of ``f0n_forward(en, style,
  frame_lengths)`` (kokoro-tvm's signature): nothing is known about its columns, so no
  cut applies to it (the token-rate projection needs ``d`` and the alignment, which the
  signature does not carry).

**Token-rate projection** (``f0n`` with ``--f0n-input d``): ``shared`` reads
``en = d^T @ alignment`` whose frames are copies of token rows (Kokoro's alignment is
one-hot per frame: ``frame_token``). By associativity

    W_ih en_f = W_ih d^T alignment[:, f] = (W_ih d^T)[:, frame_token[f]],

so the input projection P = d W_ih^T runs once per token ([T, 2048], both directions
in one matmul) and each frame takes its token's row (a gather), given to the engine as
layer 0's gates (``x_gates``): T/F of the input-projection FLOPs (≈1/4 at Kokoro's
rate) and no en at all. It subsumes the style fold (d's style columns are projected at
token rate too). The rows are gathered by index rather than computed as
``P^T @ alignment`` (a matmul, exact for any alignment, but T*F*2048 MACs: at 512 tokens
as costly as the projection it replaces; docs/decisions.md).

The rewritten wrapper mirrors Kokoro's ``DurationEncoder.forward`` and
``ProsodyPredictor``'s duration path line by line; ``--validate`` checks it against the
unpatched original.
"""
from __future__ import annotations

import torch
from torch import nn

from ._parts import f0n_heads

#: Cut names, as the report and the demo table give them.
STYLE_FOLD = "style_fold"
TOKEN_RATE = "token_rate_projection"


class StyleFoldedLSTM(nn.Module):
    """A one-layer (bidirectional) ``nn.LSTM`` over ``cat(x, s)`` with ``s`` constant
    over time, run on ``x`` alone: W_ih's last ``n_style`` columns become a per-call
    gate bias ``W_s s``. ``forward(x [T, B, I - n_style] seq-first, s [B, n_style],
    lengths int64 [B])`` -> output [T, B, D*H], zero past each length (packed
    semantics)."""

    def __init__(self, lstm: nn.LSTM, n_style: int):
        super().__init__()
        self.D = 2 if lstm.bidirectional else 1
        self.n_x = lstm.input_size - n_style
        self.has_bias = bool(lstm.bias)
        for sfx in ("", "_reverse")[:self.D]:
            w_ih = getattr(lstm, "weight_ih_l0" + sfx).detach()
            self.register_buffer("w_x" + sfx, w_ih[:, :self.n_x].contiguous())
            self.register_buffer("w_s" + sfx, w_ih[:, self.n_x:].contiguous())
            for name in ("weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
                t = getattr(lstm, name + sfx, None) if (self.has_bias or "bias" not in name) else None
                self.register_buffer(name + sfx, None if t is None else t.detach())

    def forward(self, x, s, lengths):
        from kokoro_lstm.torch_ops import lstm_forward_gated

        sfxs = ("", "_reverse")[:self.D]
        gate_bias = torch.stack([s @ getattr(self, "w_s" + sfx).t() for sfx in sfxs])
        w = []
        for sfx in sfxs:
            w += [getattr(self, "w_x" + sfx), getattr(self, "weight_hh_l0" + sfx),
                  getattr(self, "bias_ih_l0" + sfx), getattr(self, "bias_hh_l0" + sfx)]
        return lstm_forward_gated(x, lengths, gate_bias, False, *w)[0]


def _foldable(lstm, n_x, n_style):
    """Why the style fold does not apply to ``lstm`` reading cat(x [n_x], s [n_style]),
    or None when it does."""
    if not isinstance(lstm, nn.LSTM):
        return f"not an nn.LSTM ({type(lstm).__name__})"
    if lstm.num_layers != 1 or lstm.proj_size or not lstm.batch_first:
        return "not a one-layer batch_first LSTM without projection"
    if lstm.input_size != n_x + n_style:
        return f"input_size {lstm.input_size} != {n_x} + style {n_style}"
    return None


def _duration_cut(part):
    """DurationPart -> its style-folded twin, or (None, reason)."""
    enc = part.text_encoder
    n_x, n_s = enc.d_model, enc.sty_dim
    lstms = [b for b in enc.lstms if isinstance(b, nn.LSTM)] + [part.lstm]
    for lstm in lstms:
        why = _foldable(lstm, n_x, n_s)
        if why:
            return None, why
    return StyleFoldedDurationPart(part), None


class StyleFoldedDurationPart(nn.Module):
    """``duration_forward`` with the four style-reading LSTMs folded (see the module
    docstring). Same signature, outputs and names as the DurationPart it wraps."""

    function = "duration_forward"
    input_names = ("d_en", "style", "lengths", "mask")
    output_names = ("duration", "d")
    length_input = "seq_len"

    def __init__(self, part):
        super().__init__()
        enc = part.text_encoder
        self.d_model, self.sty_dim = enc.d_model, enc.sty_dim
        self.blocks = nn.ModuleList(
            StyleFoldedLSTM(b, enc.sty_dim) if isinstance(b, nn.LSTM) else b for b in enc.lstms)
        self.lstm = StyleFoldedLSTM(part.lstm, enc.sty_dim)
        self.duration_proj = part.duration_proj

    def _encode(self, x, style, text_lengths, m):
        """kokoro DurationEncoder.forward, each LSTM run on the non-style columns."""
        masks = m
        x = x.permute(2, 0, 1)
        s = style.expand(x.shape[0], x.shape[1], -1)
        x = torch.cat([x, s], axis=-1)
        x = x.masked_fill(masks.unsqueeze(-1).transpose(0, 1), 0.0)
        x = x.transpose(0, 1)
        x = x.transpose(-1, -2)
        for block in self.blocks:
            if not isinstance(block, StyleFoldedLSTM):  # AdaLayerNorm
                x = block(x.transpose(-1, -2), style).transpose(-1, -2)
                x = torch.cat([x, s.permute(1, 2, 0)], axis=1)
                x = x.masked_fill(masks.unsqueeze(-1).transpose(-1, -2), 0.0)
            else:
                # pack -> LSTM -> pad, on cat(x, s)[valid steps]: the style is folded
                x = x.transpose(-1, -2)                       # [B, T, d_model + sty]
                xs = x[:, :, :self.d_model].transpose(0, 1)   # [T, B, d_model]
                x = block(xs, style, text_lengths).transpose(0, 1)  # [B, T, d_model]
                x = x.transpose(-1, -2)                       # dropout: identity in eval
                x_pad = torch.zeros([x.shape[0], x.shape[1], m.shape[-1]], device=x.device)
                x_pad[:, :, :x.shape[-1]] = x
                x = x_pad
        return x.transpose(-1, -2)

    def forward(self, d_en, style, lengths, mask):
        d = self._encode(d_en, style, lengths, mask)  # [1, T, 640]
        xs = d[:, :, :self.d_model].transpose(0, 1)
        x = self.lstm(xs, style, lengths).transpose(0, 1)
        duration = self.duration_proj(x)
        return duration.squeeze(-1), d


class TokenRateF0NPart(nn.Module):
    """``f0n_forward(d, frame_token, style, frame_lengths)`` with shared's input
    projection at token rate (see the module docstring); same signature, outputs and
    names as the F0NFromTokensPart it wraps."""

    function = "f0n_forward"
    input_names = ("d", "frame_token", "style", "frame_lengths")
    output_names = ("F0", "N")
    length_input = "aligned_len"

    def __init__(self, ref):
        super().__init__()
        part = ref.f0n
        shared = part.shared
        self.D = 2 if shared.bidirectional else 1
        sfxs = ("", "_reverse")[:self.D]
        # both directions' W_ih stacked: one [T, 640] x [640, D*4H] matmul
        self.register_buffer("w_cat", torch.cat(
            [getattr(shared, "weight_ih_l0" + sfx).detach() for sfx in sfxs]).contiguous())
        self._names = []
        for sfx in sfxs:
            for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
                t = getattr(shared, name + sfx, None)
                self.register_buffer(name + sfx, None if t is None else t.detach())
                self._names.append(name + sfx)
        self.F0, self.N = part.F0, part.N
        self.F0_proj, self.N_proj = part.F0_proj, part.N_proj

    def forward(self, d, frame_token, style, frame_lengths):
        from kokoro_lstm.torch_ops import lstm_forward_gated

        T = d.shape[1]
        idx = frame_token.clamp(0, T - 1)[0]                    # [F]
        P = d[0] @ self.w_cat.t()                               # [T, D*4H], token rate
        gates = P.index_select(0, idx).unsqueeze(1)             # [F, 1, D*4H]
        w = [getattr(self, n) for n in self._names]
        x = lstm_forward_gated(gates, frame_lengths, None, True, *w)[0]  # [F, 1, D*H]
        x = x.transpose(0, 1)                                   # F0NPart from here on
        return f0n_heads(self, x, style)


def _f0n_cut(model):
    shared = model.f0n.shared
    if not isinstance(shared, nn.LSTM) or shared.num_layers != 1 or shared.proj_size \
            or not shared.batch_first:
        return None, "shared is not a one-layer batch_first LSTM without projection"
    return TokenRateF0NPart(model), None


def apply_cuts(name, model, semantics):
    """(model to export, {cut: "applied" | reason it is not}) for component ``name``."""
    if name == "duration":
        if semantics != "packed":
            return model, {STYLE_FOLD: "not applied: padded semantics runs the LSTMs over "
                                       "the padding, whose style columns Kokoro masks to 0"}
        cut, why = _duration_cut(model)
        if cut is None:
            return model, {STYLE_FOLD: f"not applied: {why}"}
        cut.eval().requires_grad_(False)
        return cut, {STYLE_FOLD: "applied: DurationEncoder's 3 LSTMs and predictor.lstm "
                                 "(W_ih's style columns folded into a per-call gate bias)"}
    if name == "f0n" and "frame_token" in getattr(model, "input_names", ()):
        cut, why = _f0n_cut(model)
        if cut is None:
            return model, {TOKEN_RATE: f"not applied: {why}"}
        cut.eval().requires_grad_(False)
        return cut, {TOKEN_RATE: "applied: shared's input projection at token rate, "
                                 "gathered to frames by frame_token (x_gates)",
                     STYLE_FOLD: "not needed: the token-rate projection covers d's style "
                                 "columns"}
    if name == "f0n":
        return model, {STYLE_FOLD: "not applicable: f0n_forward takes en as an input, so "
                                   "its style columns are not known to be constant",
                       TOKEN_RATE: "not applicable: f0n_forward takes en, not d and the "
                                   "alignment (--f0n-input d)"}
    return model, {}
