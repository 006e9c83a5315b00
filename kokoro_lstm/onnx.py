"""ONNX export of models whose LSTMs run the kokoro ops (for kokoro-onnx / ONNX Runtime).

``torch.onnx.export(..., dynamo=True)`` knows nothing of the ``kokoro::lstm_forward*``
custom ops that :func:`kokoro_lstm.torch_ops.patch_lstm_modules` puts in a model, and
an unpatched Kokoro module fails on ``pack_padded_sequence``. This module translates
each kokoro op into one ONNX ``LSTM`` node (opset 14+), so exact packed semantics
survive the export: ONNX's ``sequence_lens`` input gives what
``pack_padded_sequence(enforce_sorted=False)`` -> LSTM -> ``pad_packed_sequence`` gives
(outputs past a sequence's length are 0, the reverse direction starts at each
sequence's last valid step, Y_h / Y_c are each sequence's final states).

Two ways in::

    import kokoro_lstm.onnx as kx

    # 1. one call: patches the LSTMs, exports with exportable packing, unpatches
    onnx_program = kx.export(model, (tokens, lengths, mask), "text_encoder.onnx")

    # 2. by hand, with torch.onnx.export's own options
    import kokoro_lstm.torch_ops as ko
    ko.patch_lstm_modules(model)
    with ko.exportable_packing():
        torch.onnx.export(model, args, "m.onnx", dynamo=True,
                          custom_translation_table=kx.translation_table())

Per op: PyTorch's gate rows (i, f, g, o) are reordered to ONNX's (i, o, f, c); W, R
and B = [b_ih, b_hh] get a leading direction axis (2 for the bidirectional ops:
forward, reverse); lengths are cast to int32 ``sequence_lens``; h0/c0 are
``initial_h`` / ``initial_c``; Y [T, D, B, H] is transposed and reshaped to
[T, B, D*H]. A multi-layer ``nn.LSTM`` becomes one node per layer. Weights stay
initializers (the row permutation is folded into them by the exporter's optimizer).

Imports torch and onnxscript (``pip install '.[onnx]'`` in a clone); ``import
kokoro_lstm`` does not import this module.
"""
from __future__ import annotations

import contextlib

__all__ = ["translation_table", "export"]

#: ONNX opset of the export (the translations use LSTM-14, Gather, Transpose, Reshape).
OPSET = 18


def _deps():
    try:
        import onnxscript  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"kokoro_lstm.onnx needs torch and onnxscript ({e}); "
            "pip install '.[onnx]' in a clone of kokoro_lstm") from None
    import kokoro_lstm.torch_ops as ko

    return ko


def _translations():
    """{op overload: onnxscript trace-mode function}."""
    import onnx_ir as ir
    from onnxscript import opset18 as op

    ko = _deps()

    def reorder(w, H):
        # rows (i, f, g, o) -> (i, o, f, g): ONNX's iofc. One Gather with constant
        # indices, which the exporter's optimizer folds into the initializer.
        rows = [k for gate in (0, 3, 1, 2) for k in range(gate * H, (gate + 1) * H)]
        return op.Gather(w, op.Constant(value_ints=rows), axis=0)

    def stack(tensors):
        return op.Concat(*[op.Unsqueeze(t, op.Constant(value_ints=[0])) for t in tensors],
                         axis=0)

    def hidden_of(w_hh):
        shape = getattr(w_hh, "shape", None)
        try:
            return int(shape[1])
        except (TypeError, IndexError, ValueError):
            raise ValueError("kokoro_lstm.onnx: the hidden size must be static "
                             f"(weight_hh shape {shape})") from None

    def lstm(x, lengths, h0, c0, weights, bidirectional):
        dirs = [weights[:4]] + ([weights[4:]] if bidirectional else [])
        H = hidden_of(dirs[0][1])
        W = stack([reorder(d[0], H) for d in dirs])
        R = stack([reorder(d[1], H) for d in dirs])
        if dirs[0][2] is None and dirs[0][3] is None:
            B = None
        else:
            parts = []
            for d in dirs:
                b_ih, b_hh = d[2], d[3]
                # a lone bias (rejected by the ops' checks) would be zero here
                if b_ih is None:
                    b_ih = op.Sub(b_hh, b_hh)
                if b_hh is None:
                    b_hh = op.Sub(b_ih, b_ih)
                parts.append(op.Concat(reorder(b_ih, H), reorder(b_hh, H), axis=0))
            B = stack(parts)
        seq = None if lengths is None else op.Cast(lengths, to=ir.DataType.INT32)
        y, y_h, y_c = op.LSTM(x, W, R, B, seq, h0, c0,
                              direction="bidirectional" if bidirectional else "forward",
                              hidden_size=H)
        # Y [T, D, B, H] -> [T, B, D, H] -> [T, B, D*H]
        y = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]),
                       op.Constant(value_ints=[0, 0, -1]))
        return y, y_h, y_c

    def lstm_forward(input, h0, c0, weight_ih_l0, weight_hh_l0,  # noqa: A002
                     bias_ih_l0=None, bias_hh_l0=None):
        return lstm(input, None, h0, c0,
                    [weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0], False)

    def lstm_forward_bidirectional(input, h0, c0, weight_ih_l0, weight_hh_l0,  # noqa: A002
                                   bias_ih_l0, bias_hh_l0, weight_ih_l0_reverse,
                                   weight_hh_l0_reverse, bias_ih_l0_reverse=None,
                                   bias_hh_l0_reverse=None):
        return lstm(input, None, h0, c0,
                    [weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0,
                     weight_ih_l0_reverse, weight_hh_l0_reverse, bias_ih_l0_reverse,
                     bias_hh_l0_reverse], True)

    def lstm_forward_packed(input, lengths, h0, c0, weight_ih_l0, weight_hh_l0,  # noqa: A002
                            bias_ih_l0=None, bias_hh_l0=None):
        return lstm(input, lengths, h0, c0,
                    [weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0], False)

    def lstm_forward_packed_bidirectional(input, lengths, h0, c0,  # noqa: A002
                                          weight_ih_l0, weight_hh_l0, bias_ih_l0,
                                          bias_hh_l0, weight_ih_l0_reverse,
                                          weight_hh_l0_reverse, bias_ih_l0_reverse=None,
                                          bias_hh_l0_reverse=None):
        return lstm(input, lengths, h0, c0,
                    [weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0,
                     weight_ih_l0_reverse, weight_hh_l0_reverse, bias_ih_l0_reverse,
                     bias_hh_l0_reverse], True)

    return {
        ko.lstm_forward: lstm_forward,
        ko.lstm_forward_bidirectional: lstm_forward_bidirectional,
        ko.lstm_forward_packed: lstm_forward_packed,
        ko.lstm_forward_packed_bidirectional: lstm_forward_packed_bidirectional,
    }


def _squeeze_fixes():
    """aten.squeeze.dim/.dims for torch <= 2.13's exporter, which emits ONNX Squeeze on
    a dimension whose size is not 1 (a no-op in PyTorch, an invalid model in ONNX
    Runtime); Kokoro's ProsodyPredictor does ``duration.squeeze(-1)`` on [B, T, 50].
    Only the dimensions of static size 1 (or unknown size) are squeezed."""
    import torch
    from onnxscript import opset18 as op

    def squeeze(self, dims):
        shape = getattr(self, "shape", None)
        rank = len(shape) if shape is not None else None
        if rank is None:
            return op.Squeeze(self, op.Constant(value_ints=list(dims)))
        keep = []
        for d in dims:
            d = d + rank if d < 0 else d
            size = shape[d] if 0 <= d < rank else None
            if not isinstance(size, int) or size == 1:
                keep.append(d)
        if rank == 0 or not keep:
            return op.Identity(self)
        return op.Squeeze(self, op.Constant(value_ints=sorted(set(keep))))

    def squeeze_dim(self, dim):
        return squeeze(self, [dim])

    def squeeze_dims(self, dim):
        return squeeze(self, list(dim))

    return {torch.ops.aten.squeeze.dim: squeeze_dim, torch.ops.aten.squeeze.dims: squeeze_dims}


def translation_table() -> dict:
    """``custom_translation_table`` for ``torch.onnx.export(..., dynamo=True)``: the
    four ``kokoro::lstm_forward*`` ops (their ``.default`` overloads) -> functions
    that emit one ONNX ``LSTM`` node each. Merge it with your own entries if any."""
    return dict(_translations())


def export(model, args, f=None, *, kwargs=None, patch=True, packing=True,
           custom_translation_table=None, opset_version=OPSET, **export_kwargs):
    """``torch.onnx.export(model, args, f, dynamo=True)`` for a model with LSTMs.

    ``patch``: swap every ``nn.LSTM`` for the kokoro ops first (and back afterwards;
    already patched models are left patched). ``packing``: run the export under
    :func:`kokoro_lstm.torch_ops.exportable_packing`, so ``pack_padded_sequence`` ->
    LSTM -> ``pad_packed_sequence`` (Kokoro's TextEncoder, DurationEncoder,
    ProsodyPredictor) becomes one LSTM node with ``sequence_lens`` taken from the
    lengths input. ``aten.squeeze`` of a dimension whose size is not 1 is exported as
    the no-op it is (torch's exporter emits an invalid Squeeze for it, which Kokoro's
    ``duration.squeeze(-1)`` hits). ``custom_translation_table`` entries are added to ours; other
    keyword arguments (``input_names``, ``dynamic_shapes``, ``optimize``, ``verbose``
    -- False here unless given, ...) go to ``torch.onnx.export``. Returns its ``ONNXProgram``.
    """
    import torch

    ko = _deps()
    export_kwargs.setdefault("verbose", False)
    table = translation_table()
    table.update(_squeeze_fixes())
    table.update(custom_translation_table or {})
    before = {m: type(m) for m in model.modules()} if patch else None
    if patch:
        ko.patch_lstm_modules(model)
    try:
        with ko.exportable_packing() if packing else contextlib.nullcontext():
            return torch.onnx.export(model, args, f, kwargs=kwargs, dynamo=True,
                                     custom_translation_table=table,
                                     opset_version=opset_version, **export_kwargs)
    finally:
        if patch:
            # undo only what this call patched
            for m, cls in before.items():
                if type(m) is not cls:
                    m.__class__ = cls
