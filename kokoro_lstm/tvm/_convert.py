"""Converters (torch.export FX node -> Relax) for the kokoro ops and aten ``lstm.input``.

Every converter parses its node into one normalized :class:`LSTMCall` and lowers it
with one of the methods; all of them return the full ``(output, h_n, c_n)`` tuple,
for any number of layers, both directions, with per-sequence lengths honored
(``pack_padded_sequence -> nn.LSTM -> pad_packed_sequence`` semantics).
"""
from __future__ import annotations

from tvm import relax, te, tirx, topi

from . import _native, _tir
from ._lstm_call import (GATED_OP, KOKORO_OPS, LSTMCall, parse_aten_lstm, parse_gated_op,
                         parse_kokoro_op)

NATIVE_FUNC = _native.FUNC_NAME
ABI_VERSION = _native.ABI_VERSION


# ----------------------------------------------------------------------------------
# Shared helpers
# ----------------------------------------------------------------------------------
def _seq_first(bb, call):
    return bb.emit(relax.op.permute_dims(call.x, (1, 0, 2))) if call.batch_first else call.x


def _out_layout(bb, call, y):
    return bb.emit(relax.op.permute_dims(y, (1, 0, 2))) if call.batch_first else y


def _state_slice(bb, state, index, count):
    """state[index:index+count] along axis 0."""
    return bb.emit(relax.op.strided_slice(state, axes=[0], begin=[index], end=[index + count]))


def _zeros(bb, shape, dtype):
    return bb.emit(relax.op.zeros(relax.ShapeExpr(shape), dtype))


def _static_seq_len(call, method):
    T = call.seq_len
    if not isinstance(T, int):
        raise ValueError(f"kokoro_lstm.tvm: lstm_method={method!r} unrolls over time and needs a "
                         "static sequence length; use 'tir' or 'native' for dynamic shapes")
    return T


# ----------------------------------------------------------------------------------
# Method: relax (per-timestep Relax ops, unrolled)
# ----------------------------------------------------------------------------------
def _lower_unrolled(bb, call, step, method):
    op = relax.op
    T = _static_seq_len(call, method)
    B, H, R, D = call.batch, call.hidden_size, call.R, call.D
    x = _seq_first(bb, call)
    hs, cs = [], []
    for l in range(call.num_layers):
        outs = []
        for d in range(D):
            w = call.weights[l][d]
            k = l * D + d
            h = (bb.emit(op.squeeze(_state_slice(bb, call.h0, k, 1), [0]))
                 if call.h0 is not None else _zeros(bb, (B, R), call.dtype))
            c = (bb.emit(op.squeeze(_state_slice(bb, call.c0, k, 1), [0]))
                 if call.c0 is not None else _zeros(bb, (B, H), call.dtype))
            prep = step.prepare(bb, w, call)
            ys = [None] * T
            for t in (range(T - 1, -1, -1) if d else range(T)):
                x_t = bb.emit(op.take(x, relax.const(t, "int64"), axis=0))
                ys[t], h, c = step.cell(bb, call, prep, x_t, h, c, t)
            outs.append(bb.emit(op.stack(ys, axis=0)) if T > 1
                        else bb.emit(op.expand_dims(ys[0], 0)))
            hs.append(h)
            cs.append(c)
        x = outs[0] if D == 1 else bb.emit(op.concat(outs, axis=2))
    hn = bb.emit(op.stack(hs, axis=0)) if len(hs) > 1 else bb.emit(op.expand_dims(hs[0], 0))
    cn = bb.emit(op.stack(cs, axis=0)) if len(cs) > 1 else bb.emit(op.expand_dims(cs[0], 0))
    return _out_layout(bb, call, x), hn, cn


class _RelaxStep:
    @staticmethod
    def prepare(bb, w, call):
        op = relax.op
        p = {"w_ih_t": bb.emit(op.permute_dims(w["w_ih"], (1, 0))),
             "w_hh_t": bb.emit(op.permute_dims(w["w_hh"], (1, 0))),
             "w_hr_t": (bb.emit(op.permute_dims(w["w_hr"], (1, 0)))
                        if w.get("w_hr") is not None else None),
             "bias": None}
        for n in ("b_ih", "b_hh"):
            if w.get(n) is not None:
                p["bias"] = w[n] if p["bias"] is None else bb.emit(op.add(p["bias"], w[n]))
        return p

    @staticmethod
    def cell(bb, call, p, x_t, h, c, t):
        op = relax.op
        g = bb.emit(op.add(op.matmul(x_t, p["w_ih_t"]), op.matmul(h, p["w_hh_t"])))
        if p["bias"] is not None:
            g = bb.emit(op.add(g, p["bias"]))
        parts = bb.emit(op.split(g, 4, axis=1))
        i = bb.emit(op.sigmoid(relax.TupleGetItem(parts, 0)))
        f = bb.emit(op.sigmoid(relax.TupleGetItem(parts, 1)))
        gg = bb.emit(op.tanh(relax.TupleGetItem(parts, 2)))
        o = bb.emit(op.sigmoid(relax.TupleGetItem(parts, 3)))
        c_new = bb.emit(op.add(op.multiply(f, c), op.multiply(i, gg)))
        h_new = bb.emit(op.multiply(o, op.tanh(c_new)))
        if p["w_hr_t"] is not None:
            h_new = bb.emit(op.matmul(h_new, p["w_hr_t"]))
        if call.lengths is None:
            return h_new, h_new, c_new
        m = bb.emit(op.expand_dims(op.less(relax.const(t, "int64"), call.lengths), 1))
        y = bb.emit(op.where(m, h_new, relax.const(0, call.dtype)))
        return y, bb.emit(op.where(m, h_new, h)), bb.emit(op.where(m, c_new, c))


# ----------------------------------------------------------------------------------
# Method: topi (per-timestep TOPI computes through emit_te, unrolled)
# ----------------------------------------------------------------------------------
def _te_cell(x_t, h, c, w_ih, w_hh, *rest, H, has_bias, has_proj, has_len):
    """One LSTM step in TE. rest: [b_ih, b_hh], [w_hr], [valid (bool [B]: t < length)].
    The step index is not baked in, so every step shares one PrimFunc."""
    rest = list(rest)
    gates = topi.add(topi.nn.dense(x_t, w_ih), topi.nn.dense(h, w_hh))
    if has_bias:
        b_ih, b_hh = rest.pop(0), rest.pop(0)
        gates = topi.add(gates, topi.add(b_ih, b_hh))
    w_hr = rest.pop(0) if has_proj else None
    valid = rest.pop(0) if has_len else None
    B = gates.shape[0]

    def gate(q, act):
        return te.compute((B, H), lambda b, j: act(gates[b, q * H + j]), name=f"gate{q}")

    i, f = gate(0, tirx.sigmoid), gate(1, tirx.sigmoid)
    g, o = gate(2, tirx.tanh), gate(3, tirx.sigmoid)
    c_new = te.compute((B, H), lambda b, j: f[b, j] * c[b, j] + i[b, j] * g[b, j], name="c_new")
    h_new = te.compute((B, H), lambda b, j: o[b, j] * tirx.tanh(c_new[b, j]), name="h_new")
    if has_proj:
        h_new = topi.nn.dense(h_new, w_hr)
    if not has_len:
        return [h_new, c_new]
    R = h_new.shape[1]
    zero = tirx.const(0, h_new.dtype)
    y = te.compute((B, R), lambda b, j: tirx.Select(valid[b], h_new[b, j], zero), name="y_t")
    h_o = te.compute((B, R), lambda b, j: tirx.Select(valid[b], h_new[b, j], h[b, j]),
                     name="h_t")
    c_o = te.compute((B, H), lambda b, j: tirx.Select(valid[b], c_new[b, j], c[b, j]),
                     name="c_t")
    return [y, h_o, c_o]


class _TopiStep:
    @staticmethod
    def prepare(bb, w, call):
        return w

    @staticmethod
    def cell(bb, call, w, x_t, h, c, t):
        has_bias = w.get("b_ih") is not None or w.get("b_hh") is not None
        args = [x_t, h, c, w["w_ih"], w["w_hh"]]
        if has_bias:
            for n in ("b_ih", "b_hh"):
                args.append(w[n] if w.get(n) is not None
                            else _zeros(bb, (4 * call.hidden_size,), call.dtype))
        if w.get("w_hr") is not None:
            args.append(w["w_hr"])
        if call.lengths is not None:
            args.append(bb.emit(relax.op.less(relax.const(t, "int64"), call.lengths)))
        out = bb.emit_te(_te_cell, *args, H=call.hidden_size, has_bias=has_bias,
                         has_proj=w.get("w_hr") is not None,
                         has_len=call.lengths is not None,
                         primfunc_name_hint="kokoro_lstm_topi_cell")
        if call.lengths is None:
            h_new, c_new = (bb.emit(relax.TupleGetItem(out, k)) for k in range(2))
            return h_new, h_new, c_new
        return tuple(bb.emit(relax.TupleGetItem(out, k)) for k in range(3))


# ----------------------------------------------------------------------------------
# Method: tir (one PrimFunc per layer with a loop over time)
# ----------------------------------------------------------------------------------
_NO_LENGTH = 1 << 62

def _lower_tir(bb, call):
    op = relax.op
    S, B, H, R, D, P = call.seq_len, call.batch, call.hidden_size, call.R, call.D, call.proj_size
    dt = call.dtype
    x = _seq_first(bb, call)
    lengths = call.lengths
    if lengths is None:  # no lengths: every step is valid (a bound no step reaches)
        lengths = bb.emit(op.full(relax.ShapeExpr((B,)), relax.const(_NO_LENGTH, "int64"),
                                  "int64"))
    hns, cns = [], []
    I = call.input_size  # noqa: E741
    for l in range(call.num_layers):
        wp, bias, wh, whr = _tir.pack_weights_relax(bb, call.weights[l], H, dt)
        h0 = (_state_slice(bb, call.h0, l * D, D) if call.h0 is not None
              else _zeros(bb, (D, B, R), dt))
        c0 = (_state_slice(bb, call.c0, l * D, D) if call.c0 is not None
              else _zeros(bb, (D, B, H), dt))
        prim = _tir.lstm_layer_kernel(I, H, D, P, dt)
        gv = bb.add_func(prim, "kokoro_lstm_layer" + (f"_I{I}_H{H}_D{D}" + (f"_P{P}" if P else "")))
        out_ty = [relax.TensorType((S, B, D * R), dt), relax.TensorType((D, B, R), dt),
                  relax.TensorType((D, B, H), dt), relax.TensorType((S * B, D * 4 * H), dt)]
        args = [x, wp, bias, wh] + ([whr] if P else []) + [h0, c0, lengths]
        if P:
            out_ty.append(relax.TensorType((D * B, H), dt))
        out = bb.emit(relax.call_tir(gv, args, out_ty=out_ty))
        x = bb.emit(relax.TupleGetItem(out, 0))
        hns.append(bb.emit(relax.TupleGetItem(out, 1)))
        cns.append(bb.emit(relax.TupleGetItem(out, 2)))
        I = D * R  # noqa: E741
    hn = hns[0] if len(hns) == 1 else bb.emit(op.concat(hns, axis=0))
    cn = cns[0] if len(cns) == 1 else bb.emit(op.concat(cns, axis=0))
    return _out_layout(bb, call, x), hn, cn


# ----------------------------------------------------------------------------------
# Method: native (call_dps_packed into the kokoro_lstm C engine)
# ----------------------------------------------------------------------------------
def _lower_native(bb, call):
    S, B, H, R, D, L = call.seq_len, call.batch, call.hidden_size, call.R, call.D, call.num_layers
    dt = call.dtype
    has_bias = any(w.get(n) is not None for layer in call.weights for w in layer
                   for n in ("b_ih", "b_hh"))
    has_hx = call.h0 is not None or call.c0 is not None
    args = [call.x]
    if call.lengths is not None:
        args.append(call.lengths)
    if has_hx:
        args.append(call.h0 if call.h0 is not None else _zeros(bb, (L * D, B, R), dt))
        args.append(call.c0 if call.c0 is not None else _zeros(bb, (L * D, B, H), dt))
    if call.gate_bias is not None:
        args.append(call.gate_bias)
    for layer in call.weights:
        for w in layer:
            args += [w["w_ih"], w["w_hh"]]
            if has_bias:
                args += [w[n] if w.get(n) is not None else _zeros(bb, (4 * H,), dt)
                         for n in ("b_ih", "b_hh")]
            if call.proj_size:
                args.append(w["w_hr"])
    cfg = _native.Config(abi=ABI_VERSION, num_layers=L, num_directions=D,
                         has_lengths=int(call.lengths is not None), has_hx=int(has_hx),
                         batch_first=int(call.batch_first), proj_size=call.proj_size,
                         has_bias=int(has_bias), constant_weights=int(call.constant_weights),
                         dtype=_native.DTYPE_CODES[str(dt)], num_threads=0, reverse=0,
                         has_gate_bias=int(call.gate_bias is not None),
                         x_gates=int(call.x_gates))
    y_shape = (B, S, D * R) if call.batch_first else (S, B, D * R)
    out_ty = [relax.TensorType(y_shape, dt), relax.TensorType((L * D, B, R), dt),
              relax.TensorType((L * D, B, H), dt)]
    out = bb.emit(relax.call_dps_packed(NATIVE_FUNC, [relax.ShapeExpr(list(cfg))] + args,
                                        out_ty=out_ty))
    return tuple(bb.emit(relax.TupleGetItem(out, k)) for k in range(3))


# ----------------------------------------------------------------------------------
# Converter factory
# ----------------------------------------------------------------------------------
def lower(bb, call: LSTMCall, method: str):
    if (call.gate_bias is not None or call.x_gates) and method != "native":
        raise NotImplementedError(
            "kokoro_lstm.tvm: kokoro::lstm_forward_gated (layer 0's gate input given or "
            f"augmented by the caller) is lowered by lstm_method='native' only, not {method!r}")
    if method == "relax":
        return _lower_unrolled(bb, call, _RelaxStep, method)
    if method == "topi":
        return _lower_unrolled(bb, call, _TopiStep, method)
    if method == "tir":
        return _lower_tir(bb, call)
    if method == "native":
        return _lower_native(bb, call)
    raise ValueError(f"kokoro_lstm.tvm: unknown lowering method {method!r}")


def make_converter(parse, method: str, bound_names=None):
    def convert(node, importer):
        call = parse(node, importer, bound_names)
        bb = importer.block_builder
        y, hn, cn = lower(bb, call, method)
        return bb.emit(relax.Tuple([y, hn, cn]))

    convert.__name__ = f"convert_{parse.__name__}_{method}"
    return convert


def build_convert_map(method: str, bound_names=None) -> dict:
    m = {"lstm.input": make_converter(parse_aten_lstm, method, bound_names)}
    for name in KOKORO_OPS:
        m[f"{name}.default"] = make_converter(parse_kokoro_op, method, bound_names)
    m[f"{GATED_OP}.default"] = make_converter(parse_gated_op, method, bound_names)
    from ._noise import convert_map as noise_convert_map

    m.update(noise_convert_map())  # kokoro::random_uniform / random_normal
    return m
