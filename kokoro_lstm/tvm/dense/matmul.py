"""matmul_v1 for a Relax matmul: B read transposed in place, a constant B packed in panels
(on CUDA: a constant 2-D B as [N, K], the engine's tensor-core kernel)."""
from __future__ import annotations

from .configs import MatmulConfig
from .ir import batch_ok, extern_call, is_constant, static_shape


def matmul_call(rw, call, scope, bias=None, act=0):
    """matmul_v1 for ``call`` (a matmul), else None."""
    a, b = call.args
    sa, sb, out = static_shape(a), static_shape(b), static_shape(call)
    if sa is None or sb is None or out is None or len(sa) < 2 or len(sb) < 2:
        return None
    if str(call.attrs.out_dtype) not in ("", "None", "void", "float32"):
        return None
    trans_b = 0
    bt = scope.call(b, "relax.permute_dims")
    if bt is not None and len(sb) == 2:
        w, axes = bt.args[0], bt.attrs.axes
        if static_shape(w) is not None and (axes is None or [int(x) for x in axes] == [1, 0]):
            b, sb, trans_b = w, static_shape(w), 1
    if not (batch_ok(sa, out[:-2]) and batch_ok(sb, out[:-2])):
        return None
    if rw.cuda:  # a linear's weight: C = A W^T, A's batch folded into its rows
        if len(sb) != 2 or not is_constant(b) or act or tuple(sa[:-1]) != tuple(out[:-1]):
            return None
        cfg = MatmulConfig(trans_b=1, has_bias=int(bias is not None), num_threads=0)
        return extern_call(cfg, [a, rw.rows_nk(b, trans_b)] + ([bias] if bias is not None else []),
                           out)
    panels = len(sb) == 2 and is_constant(b)
    if panels:
        b = rw.panels(b, trans_b)
    cfg = MatmulConfig(trans_b=trans_b, has_bias=int(bias is not None), num_threads=rw.nth,
                       act=act, b_panels=int(panels))
    return extern_call(cfg, [a, b] + ([bias] if bias is not None else []), out)


def matmul_rule(rw, call, m, scope):
    return matmul_call(rw, call, scope)
