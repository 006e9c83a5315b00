"""Patched nn.LSTM: :class:`KokoroLSTM` and :func:`patch_lstm_modules` /
:func:`unpatch_lstm_modules`."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from . import packing
from .ops import (lstm_forward, lstm_forward_bidirectional, lstm_forward_packed,
                  lstm_forward_packed_bidirectional)
from .packing import ExportPackedSequence, _is_tracing

__all__ = ["KokoroLSTM", "patch_lstm_modules", "unpatch_lstm_modules"]


class KokoroLSTM(nn.RNNBase):
    """An LSTM whose forward runs the kokoro ops (one op call per layer).

    Same parameters, state_dict keys, constructor, forward signature and results as
    nn.LSTM; made by :func:`patch_lstm_modules` (which swaps an instance's class in
    place) or constructed directly. proj_size > 0 is not supported by the ops.
    It is an ``nn.RNNBase`` but not an ``nn.LSTM``: TorchDynamo refuses every
    ``nn.LSTM`` instance, so only this way does ``torch.compile`` trace it (the ops as
    one graph node each; ``fullgraph=True`` and CUDA graphs work).
    ``isinstance(m, (nn.LSTM, KokoroLSTM))`` finds both.
    When autograd records the call (grad mode on and a parameter, the input or a
    state requires grad), it runs PyTorch's own LSTM instead, so training and
    ``backward()`` work as with nn.LSTM; under ``torch.no_grad()`` /
    ``inference_mode()`` (or ``requires_grad_(False)``) it runs the kokoro engine.
    It also runs PyTorch's LSTM when the parameters, input and states are not all
    float32 or all float64 (float16 and bfloat16 modules: the ops have no
    half-precision inputs), so a patched module runs wherever the unpatched one does.
    """

    def __init__(self, *args, **kwargs):
        nn.RNNBase.__init__(self, "LSTM", *args, **kwargs)

    # nn.LSTM's own methods (nn.LSTM.forward, run when autograd records, calls them)
    get_expected_cell_size = nn.LSTM.get_expected_cell_size
    check_forward_args = nn.LSTM.check_forward_args
    permute_hidden = nn.LSTM.permute_hidden

    def forward(self, input, hx=None):  # noqa: A002 - nn.LSTM's signature
        if self.proj_size > 0:
            raise NotImplementedError("kokoro ops do not support proj_size > 0")
        if _needs_autograd(self, input, hx) or not _ops_take_dtypes(self, input, hx):
            return self._autograd_forward(input, hx)
        if isinstance(input, ExportPackedSequence):
            x = input.padded.transpose(0, 1) if input.batch_first else input.padded
            out, hidden = self._run(x, hx, input.lengths)
            if input.batch_first:
                out = out.transpose(0, 1)
            return ExportPackedSequence(out, input.lengths, input.batch_first,
                                        masked=True), hidden
        if isinstance(input, PackedSequence):
            # original batch order throughout: hx is given in that order too.
            steps, rows, padded, lengths = _unpack(input)
            out, hidden = self._run(padded, hx, lengths)
            if input.sorted_indices is not None:
                out = out.index_select(1, input.sorted_indices)
            return PackedSequence(out[steps, rows], input.batch_sizes, input.sorted_indices,
                                  input.unsorted_indices), hidden
        if input.dim() not in (2, 3):
            raise ValueError(f"LSTM: Expected input to be 2D or 3D, got {input.dim()}D instead")
        batched = input.dim() == 3
        if batched:
            if hx is not None:
                if hx[0].dim() != 3 or hx[1].dim() != 3:
                    raise RuntimeError(
                        "For batched 3-D input, hx and cx should also be 3-D but got "
                        f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors")
                self.check_forward_args(input, hx, None)
            x = input.transpose(0, 1) if self.batch_first else input
        else:
            if hx is not None:
                if hx[0].dim() != 2 or hx[1].dim() != 2:
                    raise RuntimeError(
                        "For unbatched 2-D input, hx and cx should also be 2-D but got "
                        f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors")
                hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
            x = input.unsqueeze(1)
        out, (h_n, c_n) = self._run(x, hx, None)
        if not batched:
            return out.squeeze(1), (h_n.squeeze(1), c_n.squeeze(1))
        if self.batch_first:
            out = out.transpose(0, 1)
        return out, (h_n, c_n)

    def _autograd_forward(self, input, hx):
        """PyTorch's own LSTM (same results, gradients), for when autograd records or
        the ops do not take the dtypes (half precision)."""
        if not isinstance(input, ExportPackedSequence):
            return nn.LSTM.forward(self, input, hx)
        packed = packing._orig_pack_padded_sequence(input.padded, input.lengths.cpu(),
                                            batch_first=input.batch_first, enforce_sorted=False)
        out, hidden = nn.LSTM.forward(self, packed, hx)
        T = input.padded.shape[1 if input.batch_first else 0]
        out, _ = packing._orig_pad_packed_sequence(out, batch_first=input.batch_first, total_length=T)
        return ExportPackedSequence(out, input.lengths, input.batch_first, masked=True), hidden

    def _run(self, x, hx, lengths):
        """x: [T, B, I] seq-first. Returns (out [T, B, D*H], (h_n, c_n) [L*D, B, H])."""
        L, H = self.num_layers, self.hidden_size
        D = 2 if self.bidirectional else 1
        B = x.shape[1]
        if hx is None:
            h0 = c0 = x.new_zeros((L * D, B, H))
        else:
            h0, c0 = hx
        if lengths is None:
            op = lstm_forward_bidirectional if D == 2 else lstm_forward
        else:
            op = lstm_forward_packed_bidirectional if D == 2 else lstm_forward_packed
        hs, cs = [], []
        # nn.RNNBase's _flat_weights: per layer and direction w_ih, w_hh[, b_ih, b_hh]
        w, per = self._flat_weights, 4 if self.bias else 2
        for layer in range(L):
            args = [x] if lengths is None else [x, lengths]
            args += [h0[layer * D:(layer + 1) * D], c0[layer * D:(layer + 1) * D]]
            for k in range(layer * D * per, (layer + 1) * D * per, per):
                args += w[k:k + per] if per == 4 else [w[k], w[k + 1], None, None]
            x, h_n, c_n = op(*args)
            hs.append(h_n)
            cs.append(c_n)
            if self.dropout and self.training and layer < L - 1:
                x = nn.functional.dropout(x, self.dropout, training=True)
        if L == 1:
            return x, (hs[0], cs[0])
        return x, (torch.cat(hs, 0), torch.cat(cs, 0))


def _unpack(seq: PackedSequence):
    """A PackedSequence as (step, row) of each packed row in the sorted batch, the padded
    tensor [T, B, *] and the lengths [B] (host int64), both in the original batch order.
    Index arithmetic with static shapes (pad_packed_sequence's are data-dependent, so
    TorchDynamo cannot trace it); B is data-dependent only when sorted_indices is None."""
    data, sizes = seq.data, seq.batch_sizes
    T, N = sizes.shape[0], data.shape[0]
    B = seq.sorted_indices.shape[0] if seq.sorted_indices is not None else int(sizes[0])
    ends = torch.cumsum(sizes, 0)
    steps = torch.searchsorted(ends, torch.arange(N), right=True)
    rows = torch.arange(N) - (ends - sizes)[steps]
    lengths = (sizes.unsqueeze(0) > torch.arange(B).unsqueeze(1)).sum(1)
    steps, rows = steps.to(data.device), rows.to(data.device)
    padded = data.new_zeros((T, B) + tuple(data.shape[1:])).index_put((steps, rows), data)
    if seq.unsorted_indices is not None:
        padded = padded.index_select(1, seq.unsorted_indices)
        lengths = lengths.index_select(0, seq.unsorted_indices.cpu())
    return steps, rows, padded, lengths


def _needs_autograd(module, input, hx) -> bool:
    """True when grad mode is on, autograd would record this call (a parameter, the
    input or a state requires grad) and it is not being traced for export (exported
    graphs keep one kokoro op per layer)."""
    if not torch.is_grad_enabled() or _is_tracing():
        return False
    tensors = [getattr(input, "data" if isinstance(input, PackedSequence) else "padded", input)]
    if hx is not None:
        tensors += list(hx)
    return (any(isinstance(t, Tensor) and t.requires_grad for t in tensors)
            or any(p.requires_grad for p in module._flat_weights))


def _ops_take_dtypes(module, input, hx) -> bool:
    """True when the parameters, the input and the states are all float32 or all
    float64 (float32 on CUDA), the only inputs the ops take; anything else (half
    precision, mixed dtypes) runs PyTorch's LSTM, which gives the unpatched module's result or error."""
    x = getattr(input, "data" if isinstance(input, PackedSequence) else "padded", input)
    if not isinstance(x, Tensor):
        return False
    dt = x.dtype
    if dt is not torch.float32 and (dt is not torch.float64 or x.is_cuda):
        return False
    return (all(t.dtype is dt for t in hx or () if isinstance(t, Tensor))
            and all(p.dtype is dt for p in module._flat_weights))


_patched_classes = {nn.LSTM: KokoroLSTM}
_unpatched_classes = {KokoroLSTM: nn.LSTM}


def _patched_class(cls):
    pc = _patched_classes.get(cls)
    if pc is None:
        pc = type(f"Kokoro{cls.__name__}", (KokoroLSTM, cls), {
            "__module__": "kokoro_lstm.torch_ops",
            "__doc__": f"{cls.__qualname__} patched by kokoro_lstm.torch_ops."})
        _patched_classes[cls] = pc
        _unpatched_classes[pc] = cls
    return pc


def patch_lstm_modules(model: nn.Module) -> nn.Module:
    """Swap every nn.LSTM in ``model`` (itself included) for a :class:`KokoroLSTM`.

    The swap is in place (the instance's class changes): parameters, buffers,
    state_dict keys and hooks stay, so checkpoints load before or after patching.
    Any num_layers / batch_first / bidirectional / bias; PackedSequence input works.
    LSTMs with proj_size > 0, and subclasses of nn.LSTM that override forward, are
    left alone with a warning. Returns ``model``.
    """
    for name, m in model.named_modules():
        cls = type(m)
        if not isinstance(m, nn.LSTM) or isinstance(m, KokoroLSTM):
            continue
        if m.proj_size > 0:
            warnings.warn(f"kokoro_lstm: not patching LSTM '{name}': proj_size > 0 is not "
                          "supported by the kokoro ops", stacklevel=2)
            continue
        if cls.forward is not nn.LSTM.forward:
            warnings.warn(f"kokoro_lstm: not patching '{name}' ({cls.__qualname__}): it "
                          "overrides nn.LSTM.forward", stacklevel=2)
            continue
        m.__class__ = _patched_class(cls)
    return model


def unpatch_lstm_modules(model: nn.Module) -> nn.Module:
    """Undo :func:`patch_lstm_modules`: every KokoroLSTM goes back to its class."""
    for m in model.modules():
        orig = _unpatched_classes.get(type(m))
        if orig is not None:
            m.__class__ = orig
    return model

