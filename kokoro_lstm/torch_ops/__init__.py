"""torch.library ops and nn.LSTM patching for torch.export (the only torch-aware module).

Importing this package registers four custom ops, with kokoro-tvm's schemas::

    kokoro::lstm_forward(Tensor input, Tensor h0, Tensor c0,
        Tensor weight_ih_l0, Tensor weight_hh_l0, Tensor? bias_ih_l0, Tensor? bias_hh_l0)
        -> (Tensor output, Tensor h_n, Tensor c_n)
    kokoro::lstm_forward_bidirectional(... the same ...,
        Tensor weight_ih_l0_reverse, Tensor weight_hh_l0_reverse,
        Tensor? bias_ih_l0_reverse, Tensor? bias_hh_l0_reverse) -> (...)
    kokoro::lstm_forward_packed(Tensor input, Tensor lengths, ...)
    kokoro::lstm_forward_packed_bidirectional(Tensor input, Tensor lengths, ...)

All are one layer, seq-first: input [T, B, I], h0/c0 [D, B, H], output [T, B, D*H]
(D = 2 for the bidirectional ops). The packed ops take ``lengths`` (int64 [B], each in
1..T) and have the semantics of ``pack_padded_sequence(enforce_sorted=False)`` ->
``nn.LSTM`` -> ``pad_packed_sequence(total_length=T)``: outputs past a sequence's
length are 0, the reverse direction starts at each sequence's own last valid step, and
h_n/c_n are each sequence's final states.

Each op has a fake (meta) implementation, so ``torch.export`` and
``run_decompositions()`` keep one node per op, and a CPU implementation that runs the
kokoro_lstm C engine's one entry (``kl_lstm_forward``) on the tensors' memory without
copying (float32 or float64; a batch-major view ``x.transpose(0, 1)`` of a contiguous
batch_first tensor is also read in place). Packed weights live in the engine's weight
cache, shared with the NumPy API and TVM: keyed on the weights' memory and checked by
a fingerprint of their bytes on every call, so no update is ever served stale (in-place
ops, ``.data`` writes, writes through ``.numpy()`` views alike). The ops themselves
have no backward: calling one directly with a tensor that requires grad while grad
mode is on is an error (a patched ``nn.LSTM`` runs PyTorch's LSTM in that case).
Threads: :func:`kokoro_lstm.set_num_threads` (also :func:`set_num_threads` here), by
default ``KOKORO_LSTM_NUM_THREADS`` if set, else the usable cores, at most
``torch.get_num_threads()``; the two
directions of a bidirectional op run in parallel on one engine.

Python API:

* :func:`patch_lstm_modules` / :func:`unpatch_lstm_modules`: swap every ``nn.LSTM``
  in a model for :class:`KokoroLSTM` (same parameters, state_dict keys, forward
  signature and results; one op call per layer; PackedSequence supported) and back.
  ``torch.compile`` traces a patched LSTM without a graph break (``fullgraph=True``,
  CUDA graphs), each layer one op node.
* :func:`exportable_packing`: a context manager under which
  ``pack_padded_sequence`` / ``pad_packed_sequence`` around a patched LSTM export (and
  compile) as one packed op that takes the lengths as a real graph input.

Typical use (non-strict or strict export, static or dynamic shapes)::

    import kokoro_lstm.torch_ops as ko
    ko.patch_lstm_modules(model)
    with ko.exportable_packing():
        ep = torch.export.export(model, (tokens, lengths, mask))
    ep = ep.run_decompositions()  # one kokoro::lstm_forward_packed_bidirectional node

Its modules: ``ops`` (the table of every LSTM op's schema, the one arrangement of a call
and the fakes), ``packing`` (exportable packing), ``modules`` (KokoroLSTM, patching) and
``random`` (the noise ops). ``import kokoro_lstm`` never imports torch; only this package
does.
"""
from __future__ import annotations

from .modules import KokoroLSTM, patch_lstm_modules, unpatch_lstm_modules
from .ops import (OpArgumentError, clear_cache, get_num_threads, lstm_forward,
                  lstm_forward_bidirectional, lstm_forward_gated, lstm_forward_packed,
                  lstm_forward_packed_bidirectional, set_num_threads)
from .packing import (ExportPackedSequence, _export_pack_padded_sequence,  # noqa: F401
                      _export_pad_packed_sequence, exportable_packing)
from .random import random_normal, random_uniform

__all__ = [
    "KokoroLSTM",
    "patch_lstm_modules",
    "unpatch_lstm_modules",
    "exportable_packing",
    "lstm_forward",
    "lstm_forward_bidirectional",
    "lstm_forward_packed",
    "lstm_forward_packed_bidirectional",
    "lstm_forward_gated",
    "clear_cache",
    "set_num_threads",
    "get_num_threads",
    "ExportPackedSequence",
    "OpArgumentError",
    "random_uniform",
    "random_normal",
]

# the public classes under the package's name (reprs, pickles of patched models)
for _cls in (KokoroLSTM, ExportPackedSequence, OpArgumentError):
    _cls.__module__ = __name__
del _cls
