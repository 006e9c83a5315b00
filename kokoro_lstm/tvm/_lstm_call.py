"""The normalized LSTM call (:class:`LSTMCall`) and the parsers that make one from a
torch.export FX node: aten ``lstm.input``, the kokoro ops and the gated op.

Parsing checks what Relax can lower (static dims, constant or bound weights); the
lowerings in :mod:`._convert` read only the :class:`LSTMCall`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import relax, tirx

# kokoro op name -> (bidirectional, packed)
KOKORO_OPS = {
    "lstm_forward": (False, False),
    "lstm_forward_bidirectional": (True, False),
    "lstm_forward_packed": (False, True),
    "lstm_forward_packed_bidirectional": (True, True),
}
#: kokoro_lstm's own op with layer 0's gate input given or augmented by the caller
#: (kokoro_lstm.torch_ops.lstm_forward_gated); lowered by the native method only.
GATED_OP = "lstm_forward_gated"


@dataclass
class LSTMCall:
    """One LSTM call, normalized. Exprs are Relax; dims are ints (or PrimExprs for S/B)."""

    x: Any
    batch_first: bool
    num_layers: int
    bidirectional: bool
    hidden_size: int
    proj_size: int
    input_size: int
    seq_len: Any
    batch: Any
    dtype: str
    lengths: Any = None        # int64 [B] or None
    h0: Any = None             # [L*D, B, R] or None (zeros)
    c0: Any = None             # [L*D, B, H] or None (zeros)
    # weights[layer][direction] = {"w_ih", "w_hh", "b_ih", "b_hh", "w_hr"} (None if absent)
    weights: list = field(default_factory=list)
    constant_weights: bool = False  # every weight is a compile-time constant
    gate_bias: Any = None      # [D, B, 4H] added to layer 0's input gates, or None
    x_gates: bool = False      # x is layer 0's input projection W_ih x_t, [.., D*4H]

    @property
    def D(self):
        return 2 if self.bidirectional else 1

    @property
    def R(self):
        return self.proj_size or self.hidden_size


# ----------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------
def _named_args(node):
    """{schema argument name: raw FX value} for an OpOverload node."""
    schema = node.target._schema
    out = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args):
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def _static(v):
    if isinstance(v, int):
        return v
    if isinstance(v, tirx.IntImm):
        return int(v.value)
    return v


def _shape(expr):
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise TypeError(f"kokoro_lstm.tvm: expected a tensor with a known shape, got {ty}")
    return [_static(s) for s in ty.shape.values]


def _is_constant(fx_value, expr, bound_names):
    if isinstance(expr, tvm.ir.expr.Constant):
        return True
    if bound_names is None:
        return False
    from torch import fx

    return (isinstance(fx_value, fx.Node) and fx_value.op == "placeholder"
            and fx_value.name in bound_names)


def _finish(call: LSTMCall, fx_weights, importer, bound_names) -> LSTMCall:
    x_shape = _shape(call.x)
    if len(x_shape) != 3:
        raise ValueError(f"kokoro_lstm.tvm: LSTM input must be 3-D, got shape {x_shape}")
    if call.batch_first:
        call.batch, call.seq_len, call.input_size = x_shape
    else:
        call.seq_len, call.batch, call.input_size = x_shape
    w0 = call.weights[0][0]
    four_h = _shape(w0["w_ih"])[0]
    if not isinstance(four_h, int) or four_h % 4:
        raise ValueError(f"kokoro_lstm.tvm: weight_ih has {four_h} rows, not 4*H")
    call.hidden_size = four_h // 4
    if call.x_gates:  # x holds the gates; input_size is W_ih's
        call.input_size = _shape(w0["w_ih"])[1]
    call.proj_size = _shape(w0["w_hr"])[0] if w0.get("w_hr") is not None else 0
    call.dtype = call.x.ty.dtype
    if call.dtype not in ("float32", "float64"):
        raise TypeError(f"kokoro_lstm.tvm: LSTM input dtype {call.dtype} is not supported "
                        "(float32 or float64)")
    call.constant_weights = all(
        _is_constant(fv, e, bound_names) for fv, e in fx_weights if e is not None)
    return call


def parse_aten_lstm(node, importer, bound_names=None) -> LSTMCall:
    """aten::lstm.input(input, hx[], params[], has_biases, num_layers, dropout, train,
    bidirectional, batch_first)."""
    a = _named_args(node)
    get = importer._retrieve_args
    if a.get("train") and a.get("dropout"):
        raise NotImplementedError("kokoro_lstm.tvm: LSTM dropout in training mode is not "
                                  "supported (export the model in eval mode)")
    L = int(a["num_layers"])
    D = 2 if a["bidirectional"] else 1
    has_b = bool(a["has_biases"])
    fx_params = list(a["params"])
    per = 4 if has_b else 2
    if len(fx_params) == L * D * (per + 1):
        per += 1  # weight_hr_l* (proj_size > 0)
    elif len(fx_params) != L * D * per:
        raise ValueError(f"kokoro_lstm.tvm: aten.lstm got {len(fx_params)} parameters for "
                         f"num_layers={L}, bidirectional={D == 2}, has_biases={has_b}")
    names = ["w_ih", "w_hh"] + (["b_ih", "b_hh"] if has_b else []) + (
        ["w_hr"] if per in (3, 5) else [])
    weights, fx_weights = [], []
    for l in range(L):
        layer = []
        for d in range(D):
            chunk = fx_params[(l * D + d) * per:(l * D + d + 1) * per]
            w = {"w_ih": None, "w_hh": None, "b_ih": None, "b_hh": None, "w_hr": None}
            for n, fv in zip(names, chunk):
                w[n] = get(fv)
                fx_weights.append((fv, w[n]))
            layer.append(w)
        weights.append(layer)
    hx = a.get("hx") or []
    h0 = get(hx[0]) if len(hx) > 0 else None
    c0 = get(hx[1]) if len(hx) > 1 else None
    call = LSTMCall(x=get(a["input"]), batch_first=bool(a["batch_first"]), num_layers=L,
                    bidirectional=D == 2, hidden_size=0, proj_size=0, input_size=0,
                    seq_len=0, batch=0, dtype="", h0=h0, c0=c0, weights=weights)
    return _finish(call, fx_weights, importer, bound_names)


def _op_weights(a, get, bidirectional):
    """A one-layer kokoro op's weights (args a by name, relax values through get): the
    layer's [forward, reverse] weight dicts, and (fx arg, value) pairs for _finish."""
    layer, fx_weights = [], []
    for sfx in ([""] + (["_reverse"] if bidirectional else [])):
        w = {"w_hr": None}
        for key, arg in (("w_ih", "weight_ih_l0"), ("w_hh", "weight_hh_l0"),
                         ("b_ih", "bias_ih_l0"), ("b_hh", "bias_hh_l0")):
            fv = a.get(arg + sfx)
            w[key] = get(fv) if fv is not None else None
            fx_weights.append((fv, w[key]))
        layer.append(w)
    return [layer], fx_weights


def parse_kokoro_op(node, importer, bound_names=None) -> LSTMCall:
    """kokoro::lstm_forward[_packed][_bidirectional] (one layer, seq-first)."""
    name = node.target._schema.name.split("::")[-1]
    bidirectional, packed = KOKORO_OPS[name]
    a = _named_args(node)
    get = importer._retrieve_args
    weights, fx_weights = _op_weights(a, get, bidirectional)
    call = LSTMCall(x=get(a["input"]), batch_first=False, num_layers=1,
                    bidirectional=bidirectional, hidden_size=0, proj_size=0, input_size=0,
                    seq_len=0, batch=0, dtype="",
                    lengths=get(a["lengths"]) if packed and a.get("lengths") is not None else None,
                    h0=get(a["h0"]) if a.get("h0") is not None else None,
                    c0=get(a["c0"]) if a.get("c0") is not None else None, weights=weights)
    call = _finish(call, fx_weights, importer, bound_names)
    if call.lengths is not None and call.lengths.ty.dtype != "int64":
        call.lengths = importer.block_builder.emit(relax.op.astype(call.lengths, "int64"))
    return call


def parse_gated_op(node, importer, bound_names=None) -> LSTMCall:
    """kokoro::lstm_forward_gated (one layer, seq-first, zero initial states): layer 0's
    gates are W_ih x_t + gate_bias (or x + gate_bias with x_gates)."""
    a = _named_args(node)
    get = importer._retrieve_args
    bidirectional = a.get("weight_ih_l0_reverse") is not None
    weights, fx_weights = _op_weights(a, get, bidirectional)
    call = LSTMCall(x=get(a["input"]), batch_first=False, num_layers=1,
                    bidirectional=bidirectional, hidden_size=0, proj_size=0, input_size=0,
                    seq_len=0, batch=0, dtype="",
                    lengths=get(a["lengths"]) if a.get("lengths") is not None else None,
                    weights=weights,
                    gate_bias=get(a["gate_bias"]) if a.get("gate_bias") is not None else None,
                    x_gates=bool(a.get("x_gates")))
    call = _finish(call, fx_weights, importer, bound_names)
    if call.lengths is not None and call.lengths.ty.dtype != "int64":
        call.lengths = importer.block_builder.emit(relax.op.astype(call.lengths, "int64"))
    return call
