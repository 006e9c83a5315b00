"""softmax_v1 for a softmax over the last axis, attention_v1 for torch.export's SDPA
decomposition (q, k, v and its output read and written in the layouts around it)."""
from __future__ import annotations

from .configs import ATTENTION_FUNC, AttentionConfig, SoftmaxConfig, f32_bits
from .ir import const_scalar, extern_call, op_name, static_shape


def softmax_rule(rw, call, m, scope):
    (x,) = call.args
    sx, out = static_shape(x), static_shape(call)
    if sx is None or out is None or not sx or int(call.attrs.axis) not in (-1, len(sx) - 1):
        return None
    return extern_call(SoftmaxConfig(num_threads=rw.nth), [x], out)


def _bhsd(x, scope):
    """(tensor, layout) for a [B, H, rows, D] operand: the [B, rows, H, D]
    tensor it is permute_dims([0, 2, 1, 3]) of (layout 1), else itself (0)."""
    v = scope.call(x, "relax.permute_dims")
    if v is not None and v.attrs.axes is not None:
        if [int(a) for a in v.attrs.axes] == [0, 2, 1, 3] and static_shape(v.args[0]):
            return v.args[0], 1
    return x, 0


def attention_rule(rw, call, m, scope):
    """attention_v1 (output [B, H, L, D]) for the SDPA decomposition ending in
    ``call = matmul(P, v)``, else None."""
    import math

    from tvm import relax

    p3, v3 = call.args
    sp, sv, so = static_shape(p3), static_shape(v3), static_shape(call)
    if sp is None or sv is None or so is None or len(sp) not in (3, 4):
        return None
    v4, pw = scope.peel(v3), scope.peel(p3)
    s_v4, s_pw = static_shape(v4), static_shape(pw)
    if s_v4 is None or s_pw is None or len(s_v4) != 4 or len(s_pw) != 4:
        return None
    B, H, L, S = s_pw
    D = s_v4[3]
    if s_v4 != (B, H, S, D) or math.prod(so) != B * H * L * D or so[-2:] != (L, D):
        return None
    fix = m.get("fix")
    if fix is not None and (
            const_scalar(m["zero"]) != 0.0 or const_scalar(m["ninf"]) != float("-inf")
            or [int(a) for a in (m["max"].attrs.axis or [])] not in ([-1], [3])):
        return None
    if int(m["softmax"].attrs.axis) not in (-1, 3):
        return None
    mask = (m["masked"].args[1] if "masked" in m
            else m["masked_r"].args[0] if "masked_r" in m else None)
    if fix is None and mask is not None:
        return None  # a mask without torch's row fix: rows all -inf would be NaN there
    # (no mask and no row fix: only inf inputs make a row all -inf, NaN there, zeros here)
    mm = m["scores"]
    # the products' own operands: [.., L, D] @ [.., D, S] and [.., L, S] @ [.., S, D], the
    # batch folding into B * H (the peeled reshapes are then row-major views)
    sq3, sk3 = static_shape(mm.args[0]), static_shape(mm.args[1])
    if (sq3 is None or sk3 is None or sq3[-2:] != (L, D) or sk3[-2:] != (D, S)
            or sp[-2:] != (L, S) or sv[-2:] != (S, D)
            or any(math.prod(x[:-2]) != B * H for x in (sq3, sk3, sp, sv))):
        return None
    scale = 1.0

    def strip(x, want_t):
        """x's source through views, constant scales and (want_t) one
        permute_dims([0, 1, 3, 2]), else None."""
        nonlocal scale
        transposed = False
        while True:
            x = scope.peel(x)
            xv = scope.call(x)
            name = op_name(xv)
            if name == "relax.multiply":
                c = const_scalar(xv.args[1])
                if c is None:
                    return None
                scale *= c
                x = xv.args[0]
            elif (name == "relax.permute_dims" and want_t and not transposed
                  and xv.attrs.axes is not None
                  and [int(a) for a in xv.attrs.axes] == [0, 1, 3, 2]):
                transposed = True
                x = xv.args[0]
            else:
                break
        return x if transposed == want_t else None

    q4, k4 = strip(mm.args[0], False), strip(mm.args[1], True)
    if q4 is None or k4 is None:
        return None
    if static_shape(q4) != (B, H, L, D) or static_shape(k4) != (B, H, S, D):
        return None
    if mask is not None:
        sm = static_shape(mask)
        if sm is None or not 2 <= len(sm) <= 4 or sm[-2:] != (L, S):
            return None
        lead = (B, H)[4 - len(sm):] if len(sm) > 2 else ()
        if any(d not in (1, f) for d, f in zip(sm[:-2], lead)):
            return None
    (q, lq), (k, lk), (v, lv) = (_bhsd(x, scope) for x in (q4, k4, v4))
    cfg = AttentionConfig(q_layout=lq, k_layout=lk, v_layout=lv, o_layout=0,
                          has_mask=int(mask is not None), scale_bits=f32_bits(scale),
                          num_threads=rw.nth)
    ext = extern_call(cfg, [q, k, v] + ([mask] if mask is not None else []), (B, H, L, D))
    return ext if (B, H, L, D) == so else relax.op.reshape(ext, so)


def attention_out_rule(rw, call, m, scope):
    """An attention call (output [B, H, L, D]) whose result only feeds reshapes
    to [B, H, L, D] and a chain of permutes composing to [0, 2, 1, 3] (``call``
    its end): the call writing [B, L, H, D] (o_layout 1) in its place."""
    perms, x = [], call
    while op_name(x) == "relax.permute_dims":  # from the end, inwards
        if x.attrs.axes is None or len(static_shape(x) or ()) != 4:
            return None
        perms.append([int(a) for a in x.attrs.axes])
        if x is not call and not scope.used_once(x):
            return None
        x = scope.call(x.args[0])
    if static_shape(scope.var.get(x)) is None:
        return None
    first = static_shape(scope.var[x])  # what the permutes start from
    while op_name(x) == "relax.reshape":
        if not scope.used_once(x):
            return None
        x = scope.call(x.args[0])
    if not (x is not None and op_name(x) == "relax.call_dps_packed"
            and x.args[0].global_symbol == ATTENTION_FUNC and scope.used_once(x)):
        return None
    cfg = AttentionConfig(*[int(v) for v in x.args[1].fields[0].values])
    B, H, L, D = static_shape(scope.var[x])
    if cfg.o_layout != 0 or first != (B, H, L, D):
        return None
    perm = [0, 1, 2, 3]
    for ax in reversed(perms):
        perm = [perm[a] for a in ax]
    if perm != [0, 2, 1, 3]:
        return None
    return extern_call(cfg._replace(o_layout=1), list(x.args[1].fields[1:]), (B, L, H, D))
