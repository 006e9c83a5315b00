"""The ``tir`` lowering: one LSTM layer (all directions) as ONE TIR PrimFunc.

The PrimFunc is generic in the sequence length ``S`` and batch ``B`` (symbolic), so
the IR does not grow with T. It runs two loop nests:

1. the input projection of every time step and direction, hoisted out of the time
   loop as one matrix multiply ``xw = x @ W_ih^T + (b_ih + b_hh)`` (register-blocked:
   ``RB`` rows x ``V`` columns per accumulator tile, parallel over tiles,
   vectorized over ``V``);
2. the recurrence: parallel over (direction, batch); for each, a serial loop over
   time with the recurrent mat-vec ``W_hh h`` (4 gates x ``V`` units accumulated in
   registers), the cell update, the output and the state; steps at or past a
   sequence's length are skipped (output 0, state kept), and the reverse direction
   starts at each sequence's own last valid step, which is exactly
   ``pack_padded_sequence -> nn.LSTM -> pad_packed_sequence``.

The weights are passed in kernel layouts that :func:`pack_weights_relax` builds with
Relax ops (folded at compile time when the weights are constants):

* ``wp``  [D*U*4, I, V]:  ``wp[(d*U + u)*4 + q, k, v] = W_ih_d[q*H + u*V + v, k]``
* ``bias`` [D*U*4*V]:     same row order, ``b_ih + b_hh``
* ``wh``  [D, U, R, 4, V]: ``wh[d, u, k, q, v] = W_hh_d[q*H + u*V + v, k]``
* ``whr`` [D, R, H] (projection only): ``whr[d, p, j] = W_hr_d[p, j]``

with U = H / V and q the gate (i, f, g, o). ``xw`` is a scratch output of the
PrimFunc, [S*B, D*4H] in the same gate-interleaved column order.

Notes: a ``Let`` (``c = ...``) inside a ``T.vectorized`` loop miscompiles with this
TVM (wrong values), so the vectorized bodies below only use buffer loads/stores
(staged through small local buffers). float32 activations use a vectorized exp.
"""
from __future__ import annotations

import functools

__all__ = ["vector_width", "lstm_layer_kernel", "pack_weights_relax"]

_RB = 4  # rows per projection tile


def vector_width(hidden_size: int) -> int:
    """Units per accumulator tile: the largest of 16, 8, 4, 2, 1 that divides H."""
    for v in (16, 8, 4, 2, 1):
        if hidden_size % v == 0:
            return v
    return 1  # pragma: no cover


# Cephes' expf: exp(x) = 2^n * p(r), x = n ln2 + r, |r| <= ln2/2 (about 1 ulp).
_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)


@functools.lru_cache(maxsize=64)
def lstm_layer_kernel(input_size: int, hidden_size: int, num_directions: int,
                      proj_size: int = 0, dtype: str = "float32"):
    """The PrimFunc for one layer. Arguments (in order)::

        x [S, B, I], wp, bias, wh, [whr,] h0 [D, B, R], c0 [D, B, H], lengths [B] int64,
        y [S, B, D*R], h_n [D, B, R], c_n [D, B, H], xw [S*B, D*4H] (scratch)
        [, hfull [D*B, H] (scratch, projection only)]

    float32 evaluates sigmoid/tanh with a vectorized exp (Cephes' polynomial with
    exponent-bit scaling: LLVM would otherwise scalarize ``llvm.exp`` into one
    ``expf`` call per lane); float64 uses TIR's sigmoid/tanh.
    """
    from tvm.script import tirx as T

    I = int(input_size)  # noqa: E741
    H = int(hidden_size)
    D = int(num_directions)
    P = int(proj_size)
    R = P if P else H
    V = vector_width(H)
    U = H // V
    N = D * 4 * H
    NB = N // V
    RB = _RB
    fast = dtype == "float32"
    p0, p1, p2, p3, p4, p5 = _EXP_P

    @T.macro
    def vexp(z, n, q0, q1):
        # z[q, :] = exp(z[q, :]) for q0 <= q < q1, vectorized (no Let in vector loops)
        for q in T.unroll(q0, q1):
            for v in T.vectorized(V):
                z[q, v] = T.max(T.min(z[q, v], T.float32(88.0)), T.float32(-88.0))
            for v in T.vectorized(V):
                n[q, v] = T.floor(z[q, v] * T.float32(_LOG2E) + T.float32(0.5))
            for v in T.vectorized(V):
                z[q, v] = z[q, v] - n[q, v] * T.float32(_LN2_HI) - n[q, v] * T.float32(_LN2_LO)
            for v in T.vectorized(V):
                z[q, v] = ((((((T.float32(p0) * z[q, v] + T.float32(p1)) * z[q, v]
                               + T.float32(p2)) * z[q, v] + T.float32(p3)) * z[q, v]
                             + T.float32(p4)) * z[q, v] + T.float32(p5)) * z[q, v] * z[q, v]
                           + z[q, v] + T.float32(1.0)) * T.reinterpret(
                               "float32", T.shift_left(T.Cast("int32", n[q, v]) + 127, 23))

    @T.macro
    def cell(gates, z, n, cn, d, b, u):
        # gates[q, :] (i, f, g, o pre-activations of units u*V..u*V+V) -> c_n updated in
        # place, the new h of those units in z[4, :]
        if fast:
            for q in T.unroll(4):
                for v in T.vectorized(V):
                    z[q, v] = gates[q, v] * T.Select(q == 2, T.float32(-2.0), T.float32(-1.0))
            vexp(z, n, 0, 4)
            for q in T.unroll(4):
                for v in T.vectorized(V):
                    z[q, v] = T.float32(1.0) / (T.float32(1.0) + z[q, v])
            for v in T.vectorized(V):
                cn[d, b, u * V + v] = z[1, v] * cn[d, b, u * V + v] + z[0, v] * (
                    T.float32(2.0) * z[2, v] - T.float32(1.0))
            for v in T.vectorized(V):
                z[4, v] = cn[d, b, u * V + v] * T.float32(-2.0)
            vexp(z, n, 4, 5)
            for v in T.vectorized(V):
                z[4, v] = z[3, v] * (T.float32(2.0) / (T.float32(1.0) + z[4, v]) - T.float32(1.0))
        else:
            for v in T.vectorized(V):
                cn[d, b, u * V + v] = T.sigmoid(gates[1, v]) * cn[d, b, u * V + v] + T.sigmoid(
                    gates[0, v]) * T.tanh(gates[2, v])
            for v in T.vectorized(V):
                z[4, v] = T.sigmoid(gates[3, v]) * T.tanh(cn[d, b, u * V + v])

    @T.macro
    def input_projection(xf, wp, bias, xw, S, B):
        # xw = x @ W_ih^T + bias for all S*B rows and all directions (hoisted GEMM):
        # tiles of RB rows x V columns, accumulated in registers, parallel over tiles
        for task in T.parallel((S * B + (RB - 1)) // RB * NB):
            acc = T.alloc_buffer((RB, V), dtype, scope="local")
            for ri in T.unroll(RB):
                for v in T.vectorized(V):
                    acc[ri, v] = bias[task % NB * V + v]
            for k in range(I):
                for ri in T.unroll(RB):
                    for v in T.vectorized(V):
                        acc[ri, v] = acc[ri, v] + xf[
                            T.min(task // NB * RB + ri, S * B - 1) * I + k] * wp[task % NB, k, v]
            for ri in T.unroll(RB):
                if task // NB * RB + ri < S * B:
                    for v in T.vectorized(V):
                        xw[task // NB * RB + ri, task % NB * V + v] = acc[ri, v]

    @T.macro
    def recurrent_gates(xw, wh, hn, gates, s, db, u, S, B):
        # gates = xw[t] + W_hh h_prev for units u*V..u*V+V of direction d = db // B
        for q in T.unroll(4):
            for v in T.vectorized(V):
                gates[q, v] = xw[(s + db // B * (S - 1 - 2 * s)) * B + db % B,
                                 ((db // B * U + u) * 4 + q) * V + v]
        for k in range(R):
            for q in T.unroll(4):
                for v in T.vectorized(V):
                    gates[q, v] = gates[q, v] + hn[db // B, db % B, k] * wh[db // B, u, k, q, v]

    if P == 0:
        @T.prim_func(private=True)
        def kokoro_lstm_layer(x_h: T.handle, wp_h: T.handle, bias_h: T.handle, wh_h: T.handle,
                              h0_h: T.handle, c0_h: T.handle, len_h: T.handle,
                              y_h: T.handle, hn_h: T.handle, cn_h: T.handle, xw_h: T.handle):
            T.func_attr({"tir.noalias": True})
            S = T.int64()
            B = T.int64()
            x = T.match_buffer(x_h, (S, B, I), dtype)
            wp = T.match_buffer(wp_h, (NB, I, V), dtype)
            bias = T.match_buffer(bias_h, (N,), dtype)
            wh = T.match_buffer(wh_h, (D, U, H, 4, V), dtype)
            h0 = T.match_buffer(h0_h, (D, B, H), dtype)
            c0 = T.match_buffer(c0_h, (D, B, H), dtype)
            lens = T.match_buffer(len_h, (B,), "int64")
            y = T.match_buffer(y_h, (S, B, D * H), dtype)
            hn = T.match_buffer(hn_h, (D, B, H), dtype)
            cn = T.match_buffer(cn_h, (D, B, H), dtype)
            xw = T.match_buffer(xw_h, (S * B, N), dtype)
            xf = T.decl_buffer((S * B * I,), dtype, data=x.data)
            # 1) the input projection of every step and direction, out of the time loop
            input_projection(xf, wp, bias, xw, S, B)
            # 2) the recurrence: one task per (direction, sequence), a loop over time
            for db in T.parallel(D * B):
                gates = T.alloc_buffer((4, V), dtype, scope="local")
                z = T.alloc_buffer((5, V), dtype, scope="local")
                n = T.alloc_buffer((5, V), dtype, scope="local")
                for j in range(H):
                    hn[db // B, db % B, j] = h0[db // B, db % B, j]
                    cn[db // B, db % B, j] = c0[db // B, db % B, j]
                for s in range(S):
                    # step t = s (forward) or S - 1 - s (reverse); t >= length: skipped
                    if s + db // B * (S - 1 - 2 * s) < lens[db % B]:
                        for u in range(U):
                            recurrent_gates(xw, wh, hn, gates, s, db, u, S, B)
                            cell(gates, z, n, cn, db // B, db % B, u)
                            for v in T.vectorized(V):
                                y[s + db // B * (S - 1 - 2 * s), db % B,
                                  db // B * H + u * V + v] = z[4, v]
                        for j in range(H):
                            hn[db // B, db % B, j] = y[s + db // B * (S - 1 - 2 * s), db % B,
                                                       db // B * H + j]
                    else:
                        for j in range(H):
                            y[s + db // B * (S - 1 - 2 * s), db % B, db // B * H + j] = T.cast(
                                0, dtype)
        return kokoro_lstm_layer

    @T.prim_func(private=True)
    def kokoro_lstm_layer_proj(x_h: T.handle, wp_h: T.handle, bias_h: T.handle, wh_h: T.handle,
                               whr_h: T.handle, h0_h: T.handle, c0_h: T.handle, len_h: T.handle,
                               y_h: T.handle, hn_h: T.handle, cn_h: T.handle, xw_h: T.handle,
                               hf_h: T.handle):
        T.func_attr({"tir.noalias": True})
        S = T.int64()
        B = T.int64()
        x = T.match_buffer(x_h, (S, B, I), dtype)
        wp = T.match_buffer(wp_h, (NB, I, V), dtype)
        bias = T.match_buffer(bias_h, (N,), dtype)
        wh = T.match_buffer(wh_h, (D, U, R, 4, V), dtype)
        whr = T.match_buffer(whr_h, (D, R, H), dtype)
        h0 = T.match_buffer(h0_h, (D, B, R), dtype)
        c0 = T.match_buffer(c0_h, (D, B, H), dtype)
        lens = T.match_buffer(len_h, (B,), "int64")
        y = T.match_buffer(y_h, (S, B, D * R), dtype)
        hn = T.match_buffer(hn_h, (D, B, R), dtype)
        cn = T.match_buffer(cn_h, (D, B, H), dtype)
        xw = T.match_buffer(xw_h, (S * B, N), dtype)
        hf = T.match_buffer(hf_h, (D * B, H), dtype)
        xf = T.decl_buffer((S * B * I,), dtype, data=x.data)
        input_projection(xf, wp, bias, xw, S, B)
        for db in T.parallel(D * B):
            gates = T.alloc_buffer((4, V), dtype, scope="local")
            z = T.alloc_buffer((5, V), dtype, scope="local")
            n = T.alloc_buffer((5, V), dtype, scope="local")
            for j in range(R):
                hn[db // B, db % B, j] = h0[db // B, db % B, j]
            for j in range(H):
                cn[db // B, db % B, j] = c0[db // B, db % B, j]
            for s in range(S):
                if s + db // B * (S - 1 - 2 * s) < lens[db % B]:
                    for u in range(U):
                        recurrent_gates(xw, wh, hn, gates, s, db, u, S, B)
                        cell(gates, z, n, cn, db // B, db % B, u)
                        for v in T.vectorized(V):
                            hf[db, u * V + v] = z[4, v]
                    # h = W_hr h_full
                    for p in range(R):
                        hn[db // B, db % B, p] = T.cast(0, dtype)
                        for j in range(H):
                            hn[db // B, db % B, p] = hn[db // B, db % B, p] + whr[
                                db // B, p, j] * hf[db, j]
                        y[s + db // B * (S - 1 - 2 * s), db % B, db // B * R + p] = hn[
                            db // B, db % B, p]
                else:
                    for p in range(R):
                        y[s + db // B * (S - 1 - 2 * s), db % B, db // B * R + p] = T.cast(
                            0, dtype)
    return kokoro_lstm_layer_proj


def pack_weights_relax(bb, dirs, hidden_size, dtype):
    """Emit the Relax ops that lay one layer's weights out for the kernel.

    ``dirs``: per direction a dict with relax exprs ``w_ih`` [4H, I], ``w_hh`` [4H, R],
    ``b_ih``/``b_hh`` [4H] or None, ``w_hr`` [P, H] or None.
    Returns (wp, bias, wh, whr-or-None).
    """
    from tvm import relax

    H = int(hidden_size)
    V = vector_width(H)
    U = H // V
    op = relax.op
    wps, biases, whs, whrs = [], [], [], []
    for w in dirs:
        # [4H, I] -> [4, U, V, I] -> [U, 4, I, V] -> [U*4, I, V]
        wi = bb.emit(op.reshape(w["w_ih"], (4, U, V, -1)))
        wi = bb.emit(op.permute_dims(wi, (1, 0, 3, 2)))
        wps.append(bb.emit(op.reshape(wi, (U * 4, -1, V))))
        b = None
        for name in ("b_ih", "b_hh"):
            if w.get(name) is not None:
                b = w[name] if b is None else bb.emit(op.add(b, w[name]))
        if b is None:
            b = bb.emit(op.zeros(relax.ShapeExpr((4 * H,)), dtype))
        b = bb.emit(op.reshape(b, (4, U, V)))
        b = bb.emit(op.permute_dims(b, (1, 0, 2)))
        biases.append(bb.emit(op.reshape(b, (4 * H,))))
        # [4H, R] -> [4, U, V, R] -> [U, R, 4, V]
        wh = bb.emit(op.reshape(w["w_hh"], (4, U, V, -1)))
        whs.append(bb.emit(op.expand_dims(op.permute_dims(wh, (1, 3, 0, 2)), 0)))
        if w.get("w_hr") is not None:
            whrs.append(bb.emit(op.expand_dims(w["w_hr"], 0)))
    cat = (lambda xs, axis: xs[0] if len(xs) == 1 else bb.emit(op.concat(xs, axis=axis)))
    wp = cat(wps, 0)
    bias = cat(biases, 0)
    wh = cat(whs, 0)
    whr = cat(whrs, 0) if whrs else None
    return wp, bias, wh, whr
