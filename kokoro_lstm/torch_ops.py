"""torch.library ops and nn.LSTM patching for torch.export (the only torch-aware module).

Importing this module registers four custom ops, with kokoro-tvm's schemas::

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

``import kokoro_lstm`` never imports torch; only this module does.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import warnings
import weakref

import torch
import torch.nn.utils.rnn as _rnn_utils
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence
from torch.utils.dlpack import to_dlpack as _to_dlpack

import kokoro_lstm

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
    "random_uniform",
    "random_normal",
]

# The real functions, captured before any exportable_packing() patches them.
_orig_pack_padded_sequence = _rnn_utils.pack_padded_sequence
_orig_pad_packed_sequence = _rnn_utils.pad_packed_sequence

# --------------------------------------------------------------------------------------
# Op schemas (kokoro-tvm's)
# --------------------------------------------------------------------------------------
_W = "Tensor weight_ih_l0, Tensor weight_hh_l0, Tensor? bias_ih_l0, Tensor? bias_hh_l0"
_W_REV = ("Tensor weight_ih_l0_reverse, Tensor weight_hh_l0_reverse, "
          "Tensor? bias_ih_l0_reverse, Tensor? bias_hh_l0_reverse")
_RET = "(Tensor output, Tensor h_n, Tensor c_n)"

# name -> (schema, bidirectional, packed)
_OPS = {
    "lstm_forward": (
        f"(Tensor input, Tensor h0, Tensor c0, {_W}) -> {_RET}", False, False),
    "lstm_forward_bidirectional": (
        f"(Tensor input, Tensor h0, Tensor c0, {_W}, {_W_REV}) -> {_RET}", True, False),
    "lstm_forward_packed": (
        f"(Tensor input, Tensor lengths, Tensor h0, Tensor c0, {_W}) -> {_RET}", False, True),
    "lstm_forward_packed_bidirectional": (
        f"(Tensor input, Tensor lengths, Tensor h0, Tensor c0, {_W}, {_W_REV}) -> {_RET}",
        True, True),
}

_WEIGHT_NAMES = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
_WEIGHT_NAMES_REV = tuple(n + "_reverse" for n in _WEIGHT_NAMES)


def _split_args(args, bidirectional, packed):
    """(input, lengths|None, h0, c0, [4 or 8 weights])."""
    if packed:
        x, lengths, h0, c0, *w = args
    else:
        x, h0, c0, *w = args
        lengths = None
    assert len(w) == (8 if bidirectional else 4)
    return x, lengths, h0, c0, w


def _batch_major(x: Tensor) -> bool:
    """True if x [T, B, I] is a transpose(0, 1) view of a contiguous [B, T, I] tensor
    (and not itself contiguous): the engine reads it in place, and the output is laid
    out the same way."""
    return (not x.is_contiguous()) and x.transpose(0, 1).is_contiguous()


def _check(cond, message):
    """torch._check, with a fast path for plain bools (concrete shapes)."""
    if cond is True:
        return
    if cond is False:
        raise RuntimeError(message())
    torch._check(cond, message)


def _check_like_input(p, name, t, x):
    _check(t.dtype == x.dtype, lambda: p + f"{name} has dtype {t.dtype}, input has {x.dtype}")
    _check(t.device == x.device, lambda: p + f"{name} is on {t.device}, input on {x.device}")


def _validate(op_name, x, lengths, h0, c0, w, bidirectional):
    """Shape/dtype/device checks in torch's words (RuntimeError) for a call the engine
    refused or cannot be set up for; symbolic conditions go to torch._check."""
    D = 2 if bidirectional else 1
    p = f"kokoro::{op_name}: "
    _check(x.dim() == 3,
                 lambda: p + f"input must be 3-D [T, B, I], got shape {tuple(x.shape)}")
    _check(x.dtype in (torch.float32, torch.float64),
                 lambda: p + f"input must be float32 or float64, got {x.dtype}")
    T, B, I = x.shape
    _check(T >= 1, lambda: p + "input must have at least one time step (T >= 1)")
    names = _WEIGHT_NAMES + (_WEIGHT_NAMES_REV if bidirectional else ())
    for name, t in (("h0", h0), ("c0", c0)) + tuple(zip(names, w)):
        if t is None and not name.startswith("bias"):
            raise TypeError(p + f"{name} is required (a Tensor), got None")
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(p + f"{name} must be a Tensor or None, got {type(t).__name__}")
    for k in range(0, len(w), 4):
        if (w[k + 2] is None) != (w[k + 3] is None):
            given, missing = (names[k + 2], names[k + 3]) if w[k + 3] is None else \
                (names[k + 3], names[k + 2])
            raise ValueError(p + f"{given} is given but {missing} is None: pass both "
                                 "biases or neither")
    w_ih = w[0]
    _check(w_ih.dim() == 2,
                 lambda: p + f"weight_ih_l0 must be 2-D [4H, I], got {tuple(w_ih.shape)}")
    _check(w_ih.shape[0] % 4 == 0 and w_ih.shape[0] >= 4,
                 lambda: p + f"weight_ih_l0 must be [4H, I], got {tuple(w_ih.shape)}")
    H = w_ih.shape[0] // 4
    expect = ((4 * H, I), (4 * H, H), (4 * H,), (4 * H,)) * D
    for name, t, shape in zip(names, w, expect):
        if t is None:
            _check(not name.startswith("weight"),
                         lambda name=name: p + f"{name} is required")
            continue
        _check(t.dim() == len(shape) and all(a == b for a, b in zip(t.shape, shape)),
                     lambda name=name, t=t, shape=shape: p + (
                         f"{name} must have shape {tuple(shape)} (H={H}, I={I}), "
                         f"got {tuple(t.shape)}"))
        _check_like_input(p, name, t, x)
    if bidirectional:
        _check((w[2] is None) == (w[6] is None) and (w[3] is None) == (w[7] is None),
                     lambda: p + "forward and reverse biases must both be given or both None")
    for name, t in (("h0", h0), ("c0", c0)):
        _check(t.dim() == 3 and t.shape[0] == D and t.shape[1] == B and t.shape[2] == H,
                     lambda name=name, t=t: p + (
                         f"{name} must have shape ({D}, {B}, {H}) = (D, B, H), "
                         f"got {tuple(t.shape)}"))
        _check_like_input(p, name, t, x)
    if lengths is not None:
        _check(lengths.dim() == 1 and lengths.shape[0] == B,
                     lambda: p + f"lengths must have shape ({B},) = (B,), "
                                 f"got {tuple(lengths.shape)}")
        _check(lengths.dtype == torch.int64,
                     lambda: p + f"lengths must be int64, got {lengths.dtype}")
    return T, B, I, H, D


def _arg_names(bidirectional, packed):
    return (("input",) + (("lengths",) if packed else ()) + ("h0", "c0")
            + _WEIGHT_NAMES + (_WEIGHT_NAMES_REV if bidirectional else ()))


def _make_fake(op_name, bidirectional, packed):
    arg_names = _arg_names(bidirectional, packed)

    def fake(*args):
        """The outputs' shapes and strides (the real op validates, in C)."""
        _check_devices(op_name, arg_names, args, real=False)
        x, _, h0, c0, w = _split_args(args, bidirectional, packed)
        T, B = x.shape[0], x.shape[1]
        H, D = w[0].shape[0] // 4, 2 if bidirectional else 1
        if _batch_major(x):
            out = x.new_empty((B, T, D * H)).transpose(0, 1)
        else:
            out = x.new_empty((T, B, D * H))
        return out, h0.new_empty((D, B, H)), c0.new_empty((D, B, H))
    fake.__name__ = f"{op_name}_fake"
    return fake


# --------------------------------------------------------------------------------------
# The engine: one road (kokoro_lstm._core.forward -> kl_lstm_forward)
# --------------------------------------------------------------------------------------
def clear_cache():
    """Drop every packed LSTM from the engine's weight cache (shared with the NumPy API
    and TVM's native method)."""
    kokoro_lstm.clear_cache()


def _engine_arg(t: Tensor):
    """What the engine reads in place: the tensor's DLPack capsule (for CUDA, the ops
    run on its current stream, so no stream handshake). The ops record no autograd,
    so a parameter's capsule needs no detached copy."""
    return _to_dlpack(t)


def _stream(x: Tensor) -> int:
    """The CUstream the engine runs on: PyTorch's current stream for x's device."""
    return torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else 0


def _host_lengths(lengths):
    """lengths in host memory, as the engine plans its launches with them (like
    pack_padded_sequence, CUDA lengths are copied, which waits for the GPU)."""
    return None if lengths is None else _engine_arg(lengths.cpu().contiguous())




def set_num_threads(n):
    """Same as :func:`kokoro_lstm.set_num_threads` (one count for every front): a
    positive int, or None for the default (``KOKORO_LSTM_NUM_THREADS`` if set, else the
    usable cores, at most ``torch.get_num_threads()``); capped at the usable cores."""
    kokoro_lstm.set_num_threads(n)


def get_num_threads() -> int:
    """The thread count the next op call will use (:func:`kokoro_lstm.get_num_threads`)."""
    return kokoro_lstm.get_num_threads()


#: Device types the ops' real implementations run on; everything else fails in
#: _check_devices before any memory is read (a CUDA implementation adds "cuda" here).
_DEVICE_TYPES = ("cpu", "cuda")


def _check_devices(op_name, names, args, real=True):
    """Every tensor argument must be on the input's device (lengths may stay on the
    CPU with CUDA data), and (``real``: the
    implementation that computes) that device one the ops run on. RuntimeError naming
    the argument. Both implementations check: a call mixing meta and CPU tensors
    dispatches to the fake one, whose CPU outputs would otherwise be returned as
    results, uninitialized."""
    x = args[0]
    p = f"kokoro::{op_name}: "
    for name, t in zip(names, args):
        if name == "lengths" and isinstance(t, Tensor) and t.device.type == "cpu" and x.is_cuda:
            continue  # host lengths with CUDA data, as pack_padded_sequence takes them
        if isinstance(t, Tensor) and t.device != x.device:
            raise RuntimeError(p + f"{name} is on {t.device}, input on {x.device}: every "
                                   "tensor argument must be on the input's device")
    if real and x.device.type not in _DEVICE_TYPES:
        raise RuntimeError(p + f"input is on {x.device}; the ops run on "
                               f"{', '.join(_DEVICE_TYPES)} tensors")


def _check_no_grad(op_name, names, tensors):
    if not torch.is_grad_enabled():
        return
    for name, t in zip(names, tensors):
        if t is not None and t.requires_grad:
            raise RuntimeError(
                f"kokoro::{op_name} is inference-only (it has no backward), but '{name}' "
                "requires grad while grad mode is on. Run it under torch.inference_mode() "
                "or torch.no_grad(), or call model.requires_grad_(False).")


def _make_cpu(op_name, bidirectional, packed):
    arg_names = _arg_names(bidirectional, packed)
    D = 2 if bidirectional else 1

    def cpu(*args):
        _check_devices(op_name, arg_names, args)
        _check_no_grad(op_name, arg_names, args)
        x, lengths, h0, c0, w = _split_args(args, bidirectional, packed)
        if x.dim() != 3 or w[0] is None or w[0].dim() != 2:
            _validate(op_name, x, lengths, h0, c0, w, bidirectional)  # raises, naming the argument
        T, B, _ = x.shape
        H = w[0].shape[0] // 4
        batch_first = _batch_major(x)
        if batch_first:
            x = x.transpose(0, 1)
            out = x.new_empty((B, T, D * H))
        else:
            x = x.contiguous()
            out = x.new_empty((T, B, D * H))
        h_n, c_n = x.new_empty((D, B, H)), x.new_empty((D, B, H))
        has_bias = w[2] is not None
        if any((t is None) == has_bias for t in w[2:4] + (w[6:8] if bidirectional else [])):
            _validate(op_name, x, lengths, h0, c0, w, bidirectional)  # raises
            raise RuntimeError(f"kokoro::{op_name}: give all biases or none")
        weights = [_engine_arg(t if t.stride(-1) == 1 else t.contiguous()) for t in w if t is not None]
        try:
            kokoro_lstm._core.forward(
                _engine_arg(x), _host_lengths(lengths),
                _engine_arg(h0.contiguous()), _engine_arg(c0.contiguous()), weights,
                _engine_arg(out), _engine_arg(h_n), _engine_arg(c_n), num_layers=1, bidirectional=bidirectional,
                has_bias=has_bias, batch_first=batch_first,
                dtype="float64" if x.dtype == torch.float64 else "float32",
                num_threads=get_num_threads(), stream=_stream(x))
        except (TypeError, ValueError) as e:
            _validate(op_name, x, lengths, h0, c0, w, bidirectional)  # torch-worded, if it applies
            raise ValueError(f"kokoro::{op_name}: {e}") from None
        if batch_first:
            out = out.transpose(0, 1)
        return out, h_n, c_n
    cpu.__name__ = f"{op_name}_cpu"
    return cpu


# --------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------
def _register():
    lib = torch.library.Library("kokoro", "FRAGMENT")
    for name, (schema, bidirectional, packed) in _OPS.items():
        try:
            lib.define(name + schema)
        except RuntimeError as e:
            raise RuntimeError(
                f"kokoro_lstm.torch_ops: could not define kokoro::{name}; another library "
                f"(kokoro-tvm?) already registered it: {e}") from e
        impl = _make_cpu(name, bidirectional, packed)
        lib.impl(name, impl, "CPU")
        lib.impl(name, impl, "CUDA")  # the same road: the engine takes CUDA tensors
        torch.library.register_fake(f"kokoro::{name}", _make_fake(name, bidirectional, packed),
                                    lib=lib)
    return lib


_lib = _register()

# --------------------------------------------------------------------------------------
# kokoro_lstm's own op: layer 0's gate input given or augmented by the caller
# --------------------------------------------------------------------------------------
_GATED_SCHEMA = (
    "(Tensor input, Tensor? lengths, Tensor? gate_bias, bool x_gates, "
    "Tensor weight_ih_l0, Tensor weight_hh_l0, Tensor? bias_ih_l0, Tensor? bias_hh_l0, "
    "Tensor? weight_ih_l0_reverse=None, Tensor? weight_hh_l0_reverse=None, "
    "Tensor? bias_ih_l0_reverse=None, Tensor? bias_hh_l0_reverse=None) -> " + _RET)


_GATED_ARG_NAMES = ("input", "lengths", "gate_bias", "x_gates") + _WEIGHT_NAMES + _WEIGHT_NAMES_REV


def _gated_shapes(x, w):
    p = "kokoro::lstm_forward_gated: "
    _check(x.dim() == 3, lambda: p + f"input must be 3-D [T, B, F], got {tuple(x.shape)}")
    _check(w[0].dim() == 2 and w[0].shape[0] % 4 == 0 and w[0].shape[0] >= 4,
           lambda: p + f"weight_ih_l0 must be [4H, I], got {tuple(w[0].shape)}")
    D = 2 if len(w) > 4 and w[4] is not None else 1
    return x.shape[0], x.shape[1], w[0].shape[0] // 4, D


def _gated_fake(x, lengths, gate_bias, x_gates, *w):
    """The outputs' shapes (the real op validates, in C)."""
    _check_devices("lstm_forward_gated", _GATED_ARG_NAMES, (x, lengths, gate_bias, x_gates, *w),
                   real=False)
    T, B = x.shape[0], x.shape[1]
    H, D = w[0].shape[0] // 4, 2 if len(w) > 4 and w[4] is not None else 1
    return x.new_empty((T, B, D * H)), x.new_empty((D, B, H)), x.new_empty((D, B, H))


def _gated_cpu(x, lengths, gate_bias, x_gates, *w):
    _check_devices("lstm_forward_gated", _GATED_ARG_NAMES, (x, lengths, gate_bias, x_gates, *w))
    _check_no_grad("lstm_forward_gated", ("input", "gate_bias"), (x, gate_bias))
    T, B, H, D = _gated_shapes(x, w)
    x = x.contiguous()
    out = x.new_empty((T, B, D * H))
    h_n, c_n = x.new_empty((D, B, H)), x.new_empty((D, B, H))
    has_bias = w[2] is not None
    weights = [_engine_arg(t if t.stride(-1) == 1 else t.contiguous()) for t in w if t is not None]
    try:
        kokoro_lstm._core.forward(
            _engine_arg(x), _host_lengths(lengths), None, None, weights,
            _engine_arg(out), _engine_arg(h_n), _engine_arg(c_n), num_layers=1, bidirectional=D == 2,
            has_bias=has_bias, dtype="float64" if x.dtype == torch.float64 else "float32",
            num_threads=get_num_threads(), stream=_stream(x),
            gate_bias=None if gate_bias is None else _engine_arg(gate_bias.contiguous()),
            x_gates=bool(x_gates))
    except (TypeError, ValueError) as e:
        raise ValueError(f"kokoro::lstm_forward_gated: {e}") from None
    return out, h_n, c_n


def _register_gated():
    _lib.define("lstm_forward_gated" + _GATED_SCHEMA)
    _lib.impl("lstm_forward_gated", _gated_cpu, "CPU")
    _lib.impl("lstm_forward_gated", _gated_cpu, "CUDA")
    torch.library.register_fake("kokoro::lstm_forward_gated", _gated_fake, lib=_lib)


_register_gated()

lstm_forward = torch.ops.kokoro.lstm_forward.default
lstm_forward_bidirectional = torch.ops.kokoro.lstm_forward_bidirectional.default
lstm_forward_packed = torch.ops.kokoro.lstm_forward_packed.default
lstm_forward_packed_bidirectional = torch.ops.kokoro.lstm_forward_packed_bidirectional.default
#: kokoro::lstm_forward_gated(input [T, B, F], lengths?, gate_bias? [D, B, 4H], x_gates,
#: weights (forward, then optional reverse)) -> (output, h_n, c_n): one layer, seq-first,
#: zero initial states, layer 0's gates = W_ih x_t + gate_bias (x_gates: x + gate_bias,
#: x being the caller's W_ih x_t, [T, B, D*4H]); packed semantics when lengths is given.
#: The exact algebra cuts of ``kokoro-lstm port-encoder`` use it (kokoro_lstm's own op,
#: not kokoro-tvm's; TVM lowers it with lstm_method='native').
lstm_forward_gated = torch.ops.kokoro.lstm_forward_gated.default


# --------------------------------------------------------------------------------------
# Stand-in for PackedSequence under exportable_packing()
# --------------------------------------------------------------------------------------
class ExportPackedSequence:
    """What ``pack_padded_sequence`` returns under :func:`exportable_packing`: the
    padded tensor and the lengths, unchanged. A patched LSTM (:class:`KokoroLSTM`)
    consumes it with a packed op; ``pad_packed_sequence`` unwraps it.

    ``padded`` is [B, T, *] if ``batch_first`` else [T, B, *]; ``lengths`` is an int64
    tensor [B] in the batch's own order. ``masked``: positions past each length are
    already zero (true for an LSTM's output).
    """
    __slots__ = ("padded", "lengths", "batch_first", "masked")

    def __init__(self, padded, lengths, batch_first, masked=False):
        self.padded = padded
        self.lengths = lengths
        self.batch_first = batch_first
        self.masked = masked

    def __getattr__(self, name):
        raise AttributeError(
            f"'{name}': under kokoro_lstm.torch_ops.exportable_packing(), "
            "pack_padded_sequence returns a stand-in that only a patched LSTM "
            "(patch_lstm_modules) and pad_packed_sequence can consume; it has no "
            f"PackedSequence attribute '{name}'. Was this module patched?")

    def __repr__(self):
        return (f"ExportPackedSequence(padded={tuple(self.padded.shape)}, "
                f"batch_first={self.batch_first})")


def _time_mask(lengths, T, batch_first, ndim):
    """Bool mask, True at valid steps, broadcastable to a padded tensor."""
    steps = torch.arange(T, device=lengths.device)
    valid = steps.unsqueeze(0) < lengths.unsqueeze(1)  # [B, T]
    if not batch_first:
        valid = valid.transpose(0, 1)  # [T, B]
    return valid.reshape(tuple(valid.shape) + (1,) * (ndim - 2))


def _export_pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """pack_padded_sequence under exportable_packing(): keeps padded tensor + lengths.

    enforce_sorted is not checked (the packed ops handle any order, and checking it
    would be data-dependent); lengths must be in 1..T as for PyTorch. A thread not
    inside exportable_packing() gets the real function."""
    if not _packing_here():
        return _orig_pack_padded_sequence(input, lengths, batch_first=batch_first,
                                          enforce_sorted=enforce_sorted)
    if isinstance(lengths, Tensor):
        lengths = lengths.to(dtype=torch.int64)
    else:
        lengths = torch.as_tensor(lengths, dtype=torch.int64)
    if input.dim() < 2:
        raise ValueError("pack_padded_sequence: input must be at least 2-D")
    if lengths.dim() != 1 or lengths.shape[0] != input.shape[0 if batch_first else 1]:
        raise ValueError("pack_padded_sequence: expected one length per batch entry, got "
                         f"lengths of shape {tuple(lengths.shape)} for input "
                         f"{tuple(input.shape)} (batch_first={batch_first})")
    return ExportPackedSequence(input, lengths, bool(batch_first))


def _export_pad_packed_sequence(sequence, batch_first=False, padding_value=0.0,
                                total_length=None):
    """pad_packed_sequence under exportable_packing().

    For a stand-in: returns (padded, lengths) with padded's time dimension equal to the
    padded input's T that went into pack_padded_sequence (not max(lengths), which would
    be data-dependent), or total_length if given. Positions past each length hold
    padding_value, like PyTorch. A real PackedSequence goes to the real function."""
    if not isinstance(sequence, ExportPackedSequence):
        return _orig_pad_packed_sequence(sequence, batch_first, padding_value, total_length)
    out = sequence.padded
    if sequence.batch_first != bool(batch_first):
        out = out.transpose(0, 1)
    tdim = 1 if batch_first else 0
    T = out.shape[tdim]
    lengths = sequence.lengths
    if not sequence.masked or padding_value != 0:
        mask = _time_mask(lengths, T, bool(batch_first), out.dim())
        out = torch.where(mask, out, torch.full((), padding_value, dtype=out.dtype,
                                                device=out.device))
    if total_length is not None:
        if total_length < T:
            if not _is_tracing() and lengths.numel() and int(lengths.max()) > total_length:
                raise ValueError(
                    "Expected total_length to be at least the length of the longest "
                    f"sequence in input, but got total_length={total_length} and max "
                    f"sequence length being {int(lengths.max())}")
            out = out.narrow(tdim, 0, total_length)
        elif total_length > T:
            shape = list(out.shape)
            shape[tdim] = total_length - T
            out = torch.cat([out, out.new_full(shape, padding_value)], dim=tdim)
    return out, lengths


def _is_tracing():
    if torch.compiler.is_compiling():
        return True
    try:
        from torch._guards import detect_fake_mode
        return detect_fake_mode() is not None
    except Exception:  # pragma: no cover
        return False


_packing_lock = threading.RLock()
_packing_depth = 0
_packing_restore: list = []
# A module global is one object for every thread, so the globals stay patched while
# any thread is inside exportable_packing(); the stand-in pack_padded_sequence looks
# at this thread's own depth and gives every other thread the real function.
_packing_local = threading.local()


def _packing_here() -> bool:
    """True when the calling thread is inside exportable_packing()."""
    return getattr(_packing_local, "depth", 0) > 0


# module name -> (weakref to the module, names of its globals that held a real
# function). Scanning a module's globals costs ~10 us and there may be thousands of
# modules, so each module is scanned once.
_scanned: dict = {}


def _patch_names():
    """Replace the two functions wherever a module holds them as a global: the
    torch.nn.utils.rnn module itself (nn.utils.rnn.X lookups) and any module that did
    `from torch.nn.utils.rnn import pack_padded_sequence` (under any name)."""
    repl = {id(_orig_pack_padded_sequence): _export_pack_padded_sequence,
            id(_orig_pad_packed_sequence): _export_pad_packed_sequence}
    restore = []
    own = globals()  # keeps the real functions in _orig_*
    for modname, mod in list(sys.modules.items()):
        hit = _scanned.get(modname)
        if hit is not None and hit[0]() is mod:
            names = hit[1]
        else:
            d = getattr(mod, "__dict__", None)
            names = ()
            if isinstance(d, dict) and d is not own:
                try:
                    names = tuple(k for k, v in list(d.items())
                                  if v is _orig_pack_padded_sequence
                                  or v is _orig_pad_packed_sequence)
                except Exception:  # pragma: no cover - exotic module dicts
                    names = ()
            try:
                _scanned[modname] = (weakref.ref(mod), names)
            except TypeError:  # pragma: no cover - not weak-referenceable: rescan
                pass
        if not names:
            continue
        d = mod.__dict__
        for k in names:
            v = d.get(k)
            if id(v) in repl and (v is _orig_pack_padded_sequence
                                  or v is _orig_pad_packed_sequence):
                d[k] = repl[id(v)]
                restore.append((d, k, v))
    return restore


def _prime_dynamo():
    """TorchDynamo (strict export) skips torch.nn.utils.rnn.pack_padded_sequence by
    name, resolving its names to objects once, lazily. Resolve them now, while they
    are the real functions, so that the replacements are traced (inlined) instead."""
    try:
        from torch._dynamo import trace_rules
        trace_rules.get_torch_obj_rule_map()
    except Exception:  # pragma: no cover - private API; only strict export needs it
        pass


@contextlib.contextmanager
def exportable_packing():
    """Make ``pack_padded_sequence`` -> patched LSTM -> ``pad_packed_sequence`` exportable.

    Inside the context, ``torch.nn.utils.rnn.pack_padded_sequence`` (also as
    ``nn.utils.rnn.pack_padded_sequence`` and any module-level
    ``from torch.nn.utils.rnn import pack_padded_sequence``) returns an
    :class:`ExportPackedSequence` stand-in carrying the padded tensor and the lengths
    tensor; a patched LSTM (see :func:`patch_lstm_modules`) runs the packed op on it
    (lengths become a real input of the exported program, so one static-shape program
    serves every length), and ``pad_packed_sequence`` unwraps it.

    Difference from eager PyTorch: without ``total_length``, ``pad_packed_sequence``
    pads to the T of the padded tensor given to ``pack_padded_sequence`` instead of
    max(lengths) (data-dependent under export). The values are the same; only the
    trailing all-padding steps are kept. Modules that copy the result into a
    full-length buffer (Kokoro's TextEncoder, DurationEncoder, ProsodyPredictor) or
    pass total_length behave exactly as in eager PyTorch. ``enforce_sorted`` is not
    checked (any order gives correct results).

    The original functions are restored on exit. Works in eager mode too. Only the
    thread that entered the context gets the stand-in: other threads meanwhile run
    ``pack_padded_sequence`` as usual.
    """
    global _packing_depth, _packing_restore
    with _packing_lock:
        if _packing_depth == 0:
            _prime_dynamo()
            _packing_restore = _patch_names()
        _packing_depth += 1
    _packing_local.depth = getattr(_packing_local, "depth", 0) + 1
    try:
        yield
    finally:
        _packing_local.depth -= 1
        with _packing_lock:
            _packing_depth -= 1
            if _packing_depth == 0:
                for d, k, v in reversed(_packing_restore):
                    d[k] = v
                _packing_restore = []


# --------------------------------------------------------------------------------------
# Patched nn.LSTM
# --------------------------------------------------------------------------------------
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
        packed = _orig_pack_padded_sequence(input.padded, input.lengths.cpu(),
                                            batch_first=input.batch_first, enforce_sorted=False)
        out, hidden = nn.LSTM.forward(self, packed, hx)
        T = input.padded.shape[1 if input.batch_first else 0]
        out, _ = _orig_pad_packed_sequence(out, batch_first=input.batch_first, total_length=T)
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
    dtypes = {t.dtype for t in [x, *(hx or ())] if isinstance(t, Tensor)}
    dtypes.update(p.dtype for p in module._flat_weights)
    ok = {torch.float32} if isinstance(x, Tensor) and x.is_cuda else {torch.float32, torch.float64}
    return len(dtypes) == 1 and dtypes <= ok


_patched_classes = {nn.LSTM: KokoroLSTM}
_unpatched_classes = {KokoroLSTM: nn.LSTM}


def _patched_class(cls):
    pc = _patched_classes.get(cls)
    if pc is None:
        pc = type(f"Kokoro{cls.__name__}", (KokoroLSTM, cls), {
            "__module__": __name__,
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


# --------------------------------------------------------------------------------------
# Counter-based noise (kokoro_lstm.noise): the engine's Philox draws as ops
# --------------------------------------------------------------------------------------
_RANDOM_OPS = {"random_uniform": 0, "random_normal": 1}  # name -> dist (src/ops/random.h)
_RANDOM_SCHEMA = "(Tensor seed, SymInt[] shape, int stream) -> Tensor"


def _random_check(name, seed, shape, stream, real=True):
    p = f"kokoro::{name}: "
    _check(seed.dtype == torch.int64 and seed.dim() == 1 and seed.shape[0] == 1,
           lambda: p + f"seed must be an int64 tensor of shape [1], got {seed.dtype} "
                       f"{tuple(seed.shape)}")
    _check(seed.device.type == "cpu" or not real,
           lambda: p + f"seed must be on the CPU, got {seed.device}")
    _check(stream >= 0, lambda: p + f"stream must be >= 0, got {stream}")
    for d in shape:
        _check(d >= 0, lambda: p + f"shape must not be negative, got {list(shape)}")


def _make_random(name, dist):
    def cpu(seed, shape, stream):
        _random_check(name, seed, shape, stream)
        out = torch.empty(list(shape), dtype=torch.float32)
        kokoro_lstm._core.random_fill(dist, int(seed[0]), stream, out.numpy())
        return out

    def fake(seed, shape, stream):
        _random_check(name, seed, shape, stream, real=False)
        return seed.new_empty(list(shape), dtype=torch.float32)
    cpu.__name__, fake.__name__ = f"{name}_cpu", f"{name}_fake"
    return cpu, fake


def _register_random():
    for name, dist in _RANDOM_OPS.items():
        _lib.define(name + _RANDOM_SCHEMA)
        cpu, fake = _make_random(name, dist)
        _lib.impl(name, cpu, "CPU")
        torch.library.register_fake(f"kokoro::{name}", fake, lib=_lib)


_register_random()

#: kokoro::random_uniform(seed int64 [1], shape, stream) -> float32 [*shape] in [0, 1) and
#: kokoro::random_normal(...) -> standard normal: element i depends only on (seed, stream, i)
#: (kokoro_lstm.noise; TVM lowers both to the engine's kokoro_lstm.random_v1).
random_uniform = torch.ops.kokoro.random_uniform.default
random_normal = torch.ops.kokoro.random_normal.default
