"""The kokoro:: LSTM ops: one table holding every op's schema, one arrangement of a
call for the engine's one entry (``kokoro_lstm._core.forward`` -> ``kl_lstm_forward``)
and one fake per op.

The C engine is the only validator of a call's tensors: a refusal is raised with its
message and the op's name in front (:class:`OpArgumentError`). Python checks only what
C cannot see: arguments that are None or not tensors, tensors on a device other than
the input's (meta tensors dispatch to the fake), and autograd.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor
from torch.utils.dlpack import to_dlpack as _to_dlpack

import kokoro_lstm

__all__ = ["OpArgumentError", "clear_cache", "set_num_threads", "get_num_threads",
           "lstm_forward", "lstm_forward_bidirectional", "lstm_forward_packed",
           "lstm_forward_packed_bidirectional", "lstm_forward_gated"]

_W = "Tensor weight_ih_l0, Tensor weight_hh_l0, Tensor? bias_ih_l0, Tensor? bias_hh_l0"
_W_REV = ("Tensor weight_ih_l0_reverse, Tensor weight_hh_l0_reverse, "
          "Tensor? bias_ih_l0_reverse, Tensor? bias_hh_l0_reverse")
_W_REV_OPT = ("Tensor? weight_ih_l0_reverse=None, Tensor? weight_hh_l0_reverse=None, "
              "Tensor? bias_ih_l0_reverse=None, Tensor? bias_hh_l0_reverse=None")
_RET = "(Tensor output, Tensor h_n, Tensor c_n)"
_WEIGHT_NAMES = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
_WEIGHT_NAMES_REV = tuple(n + "_reverse" for n in _WEIGHT_NAMES)


class _Op(NamedTuple):
    schema: str
    #: the arguments before the weights, in schema order
    head: tuple
    #: 2: bidirectional; 1: unidirectional; 0: bidirectional when the reverse weights are given
    directions: int
    #: the arguments that must not require grad while grad mode is on (): all)
    no_grad: tuple = ()
    #: whether a batch-major input view is read in place (else copied contiguous)
    batch_major: bool = True


_LSTM_HEAD = ("input", "h0", "c0")
_PACKED_HEAD = ("input", "lengths", "h0", "c0")
_GATED_HEAD = ("input", "lengths", "gate_bias", "x_gates")

#: Every op: kokoro-tvm's four LSTM ops, then kokoro_lstm's own gated op (layer 0's gate
#: input given or augmented by the caller; the exact algebra cuts of
#: ``kokoro-lstm port-encoder`` use it, TVM lowers it with lstm_method='native').
OPS = {
    "lstm_forward": _Op(f"(Tensor input, Tensor h0, Tensor c0, {_W}) -> {_RET}", _LSTM_HEAD, 1),
    "lstm_forward_bidirectional": _Op(
        f"(Tensor input, Tensor h0, Tensor c0, {_W}, {_W_REV}) -> {_RET}", _LSTM_HEAD, 2),
    "lstm_forward_packed": _Op(
        f"(Tensor input, Tensor lengths, Tensor h0, Tensor c0, {_W}) -> {_RET}", _PACKED_HEAD, 1),
    "lstm_forward_packed_bidirectional": _Op(
        f"(Tensor input, Tensor lengths, Tensor h0, Tensor c0, {_W}, {_W_REV}) -> {_RET}",
        _PACKED_HEAD, 2),
    "lstm_forward_gated": _Op(
        "(Tensor input, Tensor? lengths, Tensor? gate_bias, bool x_gates, "
        f"{_W}, {_W_REV_OPT}) -> {_RET}", _GATED_HEAD, 0, ("input", "gate_bias"), False),
}

class OpArgumentError(RuntimeError, ValueError):
    """An op's arguments refused by the engine (its message, the op's name in front):
    a RuntimeError as torch's own argument errors are, and a ValueError as the engine's
    refusals are everywhere else in kokoro_lstm."""


class _Call(NamedTuple):
    x: Tensor
    lengths: object
    h0: object
    c0: object
    gate_bias: object
    x_gates: bool
    w: list  # 4 weights per direction, None for absent biases
    names: tuple  # the op's argument names, in order
    D: int
    batch_major: bool  # x is a batch-major view read in place


def _arranger(op_name, spec):
    """A function of the op's arguments to one call (the weights of the directions it
    runs), its argument positions looked up once."""
    k = len(spec.head)
    at = {name: spec.head.index(name) if name in spec.head else None
          for name in ("lengths", "h0", "c0", "gate_bias", "x_gates")}
    il, ih, ic, ig, ixg = (at[n] for n in ("lengths", "h0", "c0", "gate_bias", "x_gates"))
    names = {D: spec.head + _WEIGHT_NAMES + (_WEIGHT_NAMES_REV if D == 2 else ()) for D in (1, 2)}

    def arrange(args):
        w = args[k:]
        D = spec.directions or (2 if len(w) > 4 and w[4] is not None else 1)
        x = args[0]
        if not isinstance(x, Tensor):
            raise TypeError(f"kokoro::{op_name}: input must be a Tensor, got {type(x).__name__}")
        return _Call(x, None if il is None else args[il], None if ih is None else args[ih],
                     None if ic is None else args[ic], None if ig is None else args[ig],
                     False if ixg is None else bool(args[ixg]), list(w[:4 * D]), names[D], D,
                     spec.batch_major and _batch_major(x))
    return arrange


def _batch_major(x: Tensor) -> bool:
    """True if x [T, B, I] is a transpose(0, 1) view of a contiguous [B, T, I] tensor
    (and not itself contiguous): the engine reads it in place, and the output is laid
    out the same way."""
    return x.dim() == 3 and not x.is_contiguous() and x.transpose(0, 1).is_contiguous()


def _check_devices(op_name, names, args, real=True):
    """Every tensor argument must be on the input's device (lengths may stay on the
    CPU with CUDA data), and (``real``: the implementation that computes) that device
    one the ops run on. RuntimeError naming the argument. Both implementations check:
    a call mixing meta and CPU tensors dispatches to the fake one, whose CPU outputs
    would otherwise be returned as results, uninitialized."""
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


#: Device types the ops' real implementations run on; everything else fails in
#: _check_devices before any memory is read.
_DEVICE_TYPES = ("cpu", "cuda")


def _check_no_grad(op_name, names, tensors):
    if not torch.is_grad_enabled():
        return
    for name, t in zip(names, tensors):
        if isinstance(t, Tensor) and t.requires_grad:
            raise RuntimeError(
                f"kokoro::{op_name} is inference-only (it has no backward), but '{name}' "
                "requires grad while grad mode is on. Run it under torch.inference_mode() "
                "or torch.no_grad(), or call model.requires_grad_(False).")


def _check_python_types(op_name, call):
    """What C cannot see: a required argument that is None or not a tensor, and biases
    given for some weights but not others. Raises; called when the weights do not
    make an engine call (_engine_weights)."""
    p = f"kokoro::{op_name}: "
    names = call.names[len(call.names) - len(call.w):]
    required = [("input", call.x)] + [(n, getattr(call, n)) for n in ("h0", "c0")
                                     if n in call.names]
    for name, t in required + list(zip(names, call.w)):
        if t is None and not name.startswith("bias"):
            raise TypeError(p + f"{name} is required (a Tensor), got None")
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(p + f"{name} must be a Tensor or None, got {type(t).__name__}")
    for k in range(0, len(call.w), 4):
        if (call.w[k + 2] is None) != (call.w[k + 3] is None):
            given, missing = (names[k + 2], names[k + 3]) if call.w[k + 3] is None else \
                (names[k + 3], names[k + 2])
            raise ValueError(p + f"{given} is given but {missing} is None: pass both "
                                 "biases or neither")
    if call.D == 2 and (call.w[2] is None) != (call.w[6] is None):
        raise OpArgumentError(p + "forward and reverse biases must both be given or both None")
    raise AssertionError(f"{p}weights not refused: {[type(t).__name__ for t in call.w]}")


def _engine_weights(op_name, call):
    """The weights' capsules (absent biases left out) and whether the call has biases;
    _check_python_types names what is wrong when they are not all weights of one kind."""
    w, D = call.w, call.D
    try:
        weights = [_engine_arg(t if t.stride(-1) == 1 else t.contiguous()) for t in w if t is not None]
    except (AttributeError, TypeError):
        _check_python_types(op_name, call)
        raise
    has_bias = w[2] is not None
    if (len(weights) != D * (4 if has_bias else 2) or w[0] is None or w[1] is None
            or D == 2 and (w[4] is None or w[5] is None)):
        _check_python_types(op_name, call)
    return weights, has_bias


def _out_shapes(call):
    """(y, h_n) shapes as the call implies them; placeholders where the engine will
    refuse the inputs before it looks at the outputs."""
    x, w_ih = call.x, call.w[0]
    T, B = (x.shape[0], x.shape[1]) if x.dim() == 3 else (0, 0)
    H = w_ih.shape[0] // 4 if w_ih.dim() == 2 else 0
    return (T, B, call.D * H), (call.D, B, H)


def _engine_arg(t: Tensor):
    """What the engine reads in place: the tensor's DLPack capsule (for CUDA, the ops
    run on its current stream, so no stream handshake). The ops record no autograd,
    so a parameter's capsule needs no detached copy."""
    return _to_dlpack(t)


def _host_lengths(lengths):
    """lengths in host memory, as the engine plans its launches with them (like
    pack_padded_sequence, CUDA lengths are copied, which waits for the GPU)."""
    return None if lengths is None else _engine_arg(lengths.cpu().contiguous())


def _opt(t):
    return None if t is None else _engine_arg(t.contiguous())


def _run(op_name, call):
    """The engine's one entry on the call's tensors; outputs allocated like the input."""
    weights, has_bias = _engine_weights(op_name, call)
    x = call.x
    batch_first = call.batch_major
    if batch_first:
        x = x.transpose(0, 1)
    elif x.dim() == 3:
        x = x.contiguous()
    y_shape, h_shape = _out_shapes(call)
    out = x.new_empty((y_shape[1], y_shape[0], y_shape[2]) if batch_first else y_shape)
    h_n, c_n = x.new_empty(h_shape), x.new_empty(h_shape)
    try:
        kokoro_lstm._core.forward(
            _engine_arg(x), _host_lengths(call.lengths), _opt(call.h0), _opt(call.c0),
            weights, _engine_arg(out), _engine_arg(h_n), _engine_arg(c_n), num_layers=1,
            bidirectional=call.D == 2, has_bias=has_bias, batch_first=batch_first,
            dtype="float64" if x.dtype == torch.float64 else "float32",
            num_threads=get_num_threads(), stream=_stream(x), gate_bias=_opt(call.gate_bias),
            x_gates=call.x_gates)
    except (TypeError, ValueError) as e:
        raise OpArgumentError(f"kokoro::{op_name}: {e}") from None
    return (out.transpose(0, 1) if batch_first else out), h_n, c_n


def _stream(x: Tensor) -> int:
    """The CUstream the engine runs on: PyTorch's current stream for x's device."""
    return torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else 0


def _make_impl(op_name, spec):
    names = spec.head + _WEIGHT_NAMES + _WEIGHT_NAMES_REV
    arrange = _arranger(op_name, spec)
    grad_at = [names.index(n) for n in spec.no_grad or names]

    def impl(*args):
        call = arrange(args)
        _check_devices(op_name, names, args)
        if torch.is_grad_enabled():
            _check_no_grad(op_name, [names[i] for i in grad_at],
                           [args[i] if i < len(args) else None for i in grad_at])
        return _run(op_name, call)
    impl.__name__ = f"{op_name}_impl"
    return impl


def _make_fake(op_name, spec):
    names = spec.head + _WEIGHT_NAMES + _WEIGHT_NAMES_REV
    arrange = _arranger(op_name, spec)

    def fake(*args):
        """The outputs' shapes and strides (the real op validates, in C)."""
        call = arrange(args)
        _check_devices(op_name, names, args, real=False)
        x = call.x
        T, B = x.shape[0], x.shape[1]
        H, D = call.w[0].shape[0] // 4, call.D
        if call.batch_major:
            out = x.new_empty((B, T, D * H)).transpose(0, 1)
        else:
            out = x.new_empty((T, B, D * H))
        return out, x.new_empty((D, B, H)), x.new_empty((D, B, H))
    fake.__name__ = f"{op_name}_fake"
    return fake


def clear_cache():
    """Drop every packed LSTM from the engine's weight cache (shared with the NumPy API
    and TVM's native method)."""
    kokoro_lstm.clear_cache()


def set_num_threads(n):
    """Same as :func:`kokoro_lstm.set_num_threads` (one count for every front): a
    positive int, or None for the default (``KOKORO_LSTM_NUM_THREADS`` if set, else the
    usable cores, at most ``torch.get_num_threads()``); capped at the usable cores."""
    kokoro_lstm.set_num_threads(n)


def get_num_threads() -> int:
    """The thread count the next op call will use (:func:`kokoro_lstm.get_num_threads`)."""
    return kokoro_lstm.get_num_threads()


def _register():
    lib = torch.library.Library("kokoro", "FRAGMENT")
    for name, spec in OPS.items():
        try:
            lib.define(name + spec.schema)
        except RuntimeError as e:
            raise RuntimeError(
                f"kokoro_lstm.torch_ops: could not define kokoro::{name}; another library "
                f"(kokoro-tvm?) already registered it: {e}") from e
        impl = _make_impl(name, spec)
        lib.impl(name, impl, "CPU")
        lib.impl(name, impl, "CUDA")  # the same road: the engine takes CUDA tensors
        torch.library.register_fake(f"kokoro::{name}", _make_fake(name, spec), lib=lib)
    return lib


_lib = _register()

lstm_forward = torch.ops.kokoro.lstm_forward.default
lstm_forward_bidirectional = torch.ops.kokoro.lstm_forward_bidirectional.default
lstm_forward_packed = torch.ops.kokoro.lstm_forward_packed.default
lstm_forward_packed_bidirectional = torch.ops.kokoro.lstm_forward_packed_bidirectional.default
#: kokoro::lstm_forward_gated(input [T, B, F], lengths?, gate_bias? [D, B, 4H], x_gates,
#: weights (forward, then optional reverse)) -> (output, h_n, c_n): one layer, seq-first,
#: zero initial states, layer 0's gates = W_ih x_t + gate_bias (x_gates: x + gate_bias,
#: x being the caller's W_ih x_t, [T, B, D*4H]); packed semantics when lengths is given.
lstm_forward_gated = torch.ops.kokoro.lstm_forward_gated.default
