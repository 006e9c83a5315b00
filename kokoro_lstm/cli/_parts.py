"""The nn.Module wrappers that give Kokoro's encoder modules kokoro-tvm's function
names and signatures (batch 1, static shapes); :func:`._components.build_component`
makes them. Each class names its exported function, inputs and outputs.
"""
from __future__ import annotations

import torch
from torch import nn


def f0n_heads(m, x, style):
    """Kokoro's F0 and N heads (m.F0, m.F0_proj, m.N, m.N_proj) on the shared LSTM's
    output x [1, F, 2H]: (F0, N), each [1, F]."""
    def head(blocks, proj):
        y = x.transpose(-1, -2)
        for block in blocks:
            y = block(y, style)
        return proj(y).squeeze(1)

    return head(m.F0, m.F0_proj), head(m.N, m.N_proj)


class TextEncoderPart(nn.Module):
    function = "text_encoder_forward"
    input_names = ("tokens", "lengths", "mask")
    output_names = ("t_en",)
    length_input = "seq_len"

    def __init__(self, text_encoder):
        super().__init__()
        self.text_encoder = text_encoder

    def forward(self, tokens, lengths, mask):
        return (self.text_encoder(tokens, lengths, mask),)


class DurationPart(nn.Module):
    """DurationEncoder -> predictor.lstm (packed) -> duration_proj: kokoro-tvm's
    create_duration_module, returning (duration logits, d)."""

    function = "duration_forward"
    input_names = ("d_en", "style", "lengths", "mask")
    output_names = ("duration", "d")
    length_input = "seq_len"

    def __init__(self, predictor):
        super().__init__()
        self.text_encoder = predictor.text_encoder
        self.lstm = predictor.lstm
        self.duration_proj = predictor.duration_proj

    def forward(self, d_en, style, lengths, mask):
        d = self.text_encoder(d_en, style, lengths, mask)  # [1, T, 640]
        T = d.shape[1]
        x = nn.utils.rnn.pack_padded_sequence(d, lengths, batch_first=True,
                                              enforce_sorted=False)
        x, _ = self.lstm(x)
        x, _ = nn.utils.rnn.pad_packed_sequence(x, batch_first=True, total_length=T)
        duration = self.duration_proj(x)
        return duration.squeeze(-1), d


class F0NPart(nn.Module):
    """ProsodyPredictor.F0Ntrain(en, style), with the shared LSTM packed on
    frame_lengths."""

    function = "f0n_forward"
    input_names = ("en", "style", "frame_lengths")
    output_names = ("F0", "N")
    length_input = "aligned_len"

    def __init__(self, predictor):
        super().__init__()
        self.shared = predictor.shared
        self.F0 = predictor.F0
        self.N = predictor.N
        self.F0_proj = predictor.F0_proj
        self.N_proj = predictor.N_proj

    def forward(self, en, style, frame_lengths):
        x = en.transpose(-1, -2)
        F = x.shape[1]
        x = nn.utils.rnn.pack_padded_sequence(x, frame_lengths, batch_first=True,
                                              enforce_sorted=False)
        x, _ = self.shared(x)
        x, _ = nn.utils.rnn.pad_packed_sequence(x, batch_first=True, total_length=F)
        return f0n_heads(self, x, style)


class BertPart(nn.Module):
    """CustomAlbert + bert_encoder, transposed: d_en [1, 512, T]."""

    function = "bert_forward"
    input_names = ("input_ids", "attention_mask")
    output_names = ("d_en",)
    length_input = "seq_len"

    def __init__(self, bert, bert_encoder):
        super().__init__()
        self.bert = bert
        self.bert_encoder = bert_encoder

    def forward(self, input_ids, attention_mask):
        bert_dur = self.bert(input_ids, attention_mask=attention_mask)
        return (self.bert_encoder(bert_dur).transpose(-1, -2),)


class F0NFromTokensPart(nn.Module):
    """f0n from d and frame_token (``--f0n-input d``): en = d^T @ alignment as
    Kokoro's KModel builds it, then F0NPart."""

    function = "f0n_forward"
    input_names = ("d", "frame_token", "style", "frame_lengths")
    output_names = ("F0", "N")
    length_input = "aligned_len"

    def __init__(self, predictor):
        super().__init__()
        self.f0n = F0NPart(predictor)

    def forward(self, d, frame_token, style, frame_lengths):
        T = d.shape[1]
        idx = frame_token.clamp(0, T - 1)
        alignment = (torch.arange(T)[None, :, None] == idx[:, None, :]).to(d.dtype)
        en = d.transpose(-1, -2) @ alignment  # [1, 640, F]
        return self.f0n(en, style, frame_lengths)


#: component name -> its wrapper ("f0n_d": f0n with --f0n-input d)
PARTS = {"text_encoder": TextEncoderPart, "duration": DurationPart, "f0n": F0NPart,
         "f0n_d": F0NFromTokensPart, "bert": BertPart}
