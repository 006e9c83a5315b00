"""conv1d_v1, conv1d_transpose_v1 and conv1d_transpose_dw_v1 for Relax's 1-D
convolutions, their constant weights (weight norm folded first) packed in panels."""
from __future__ import annotations

from .configs import Conv1dConfig, Conv1dTransposeConfig, Conv1dTransposeDwConfig
from .ir import extern_call, is_constant, op_name, static_shape
from .panels import conv_on_panels


def _is_plain_op(value):
    """A call of a Relax operator that computes a value from its arguments alone
    (not a call into another function, a packed function or a TIR function)."""
    import tvm
    from tvm import relax

    if isinstance(value, (relax.Tuple, relax.TupleGetItem, tvm.ir.expr.Constant)):
        return True
    return (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
            and not value.op.name.startswith("relax.call_"))


def fold_weights(func, targets):
    """{var: Constant} for those of ``targets`` (vars of ``func``) computed from
    constants alone by plain operators — a weight-normed conv's ``g * v / ||v||``,
    which torch.export keeps in the graph — evaluated once at compile time by TVM
    itself (the same kernels the module would run, one build for all of them)."""
    import tvm
    from tvm import relax

    if not targets:
        return {}
    bind, order = {}, []
    for block in func.body.blocks:
        for bd in block.bindings:
            if isinstance(bd, relax.VarBinding):
                bind[bd.var] = bd.value
                order.append(bd.var)
    need, ok = set(), []
    for t in dict.fromkeys(targets):
        closure, stack, good = set(), [t], True
        while stack and good:
            v = stack.pop()
            if v in closure or v in need:
                continue
            good = v in bind and _is_plain_op(bind[v])
            closure.add(v)
            stack.extend(relax.analysis.free_vars(bind[v]) if good else ())
        if good:
            need |= closure
            ok.append(t)
    if not ok:
        return {}
    out = relax.Var("folded", relax.TupleType([t.ty for t in ok]))
    binds = [relax.VarBinding(v, bind[v]) for v in order if v in need]
    binds.append(relax.VarBinding(out, relax.Tuple(ok)))
    f = relax.Function([], relax.SeqExpr([relax.DataflowBlock(binds)], out), out.ty,
                       True).with_attr("global_symbol", "main")
    ex = tvm.compile(tvm.IRModule({"main": f}), target="llvm")
    vals = relax.VirtualMachine(ex, tvm.cpu())["main"]()
    return {t: relax.const(v.numpy()) for t, v in zip(ok, vals)}


def _transpose_taken(at, cuda):
    """Whether conv1d_transpose_v1 takes a groups-1 conv1d_transpose of attrs ``at``:
    dilation dividing stride on CPUs, dilation 1 on CUDA."""
    dil = int(at.dilation[0])
    return dil == 1 if cuda else int(at.strides[0]) % dil == 0


def transpose_weights(scope, cuda=False):
    """The computed weights (vars) of the groups-1 conv1d_transposes in ``scope``
    that conv1d_transpose_v1 takes: those :func:`fold_weights` evaluates for packing."""
    from tvm import relax

    return [v.args[1] for v in scope.value.values()
            if op_name(v) == "relax.nn.conv1d_transpose" and int(v.attrs.groups) == 1
            and _transpose_taken(v.attrs, cuda) and isinstance(v.args[1], relax.Var)]


def weights_to_fold(scope, cuda=False):
    """The computed weights (vars) in ``scope`` that :func:`fold_weights` makes constant:
    on CPUs those that go in panels (the conv1ds on panels, :func:`conv_on_panels`, and
    the groups-1 conv1d_transposes, :func:`transpose_weights`); on CUDA every conv's
    (weight norm computed once, not per call)."""
    from tvm import relax

    return [v.args[1] for v in scope.value.values()
            if op_name(v) == "relax.nn.conv1d" and isinstance(v.args[1], relax.Var)
            and (cuda or conv_on_panels(static_shape(v.args[1]), int(v.attrs.strides[0]),
                                        int(v.attrs.dilation[0])))] + transpose_weights(scope, cuda)


def _conv_args(call, kernel_layout):
    """(x, w, attrs, the shapes of x, w and the result) of a 1-D convolution ``call``,
    NCW with ``kernel_layout`` and a float32 result, every shape static; else None."""
    x, w = call.args
    at = call.attrs
    sx, sw, out = static_shape(x), static_shape(w), static_shape(call)
    if (sx is None or sw is None or out is None or len(sx) != 3
            or at.data_layout != "NCW" or at.kernel_layout != kernel_layout
            or at.out_layout != "NCW" or str(at.out_dtype) not in ("", "None", "void", "float32")):
        return None
    return x, w, at, sx, sw, out


def conv1d_call(rw, call, scope, bias=None):
    got = _conv_args(call, "OIW")
    if got is None or int(got[2].groups) != 1:
        return None
    x, w, at, sx, sw, out = got
    pad = [int(p) for p in at.padding] or [0]
    stride, dil = int(at.strides[0]), int(at.dilation[0])
    w = rw.folded.get(w, w)
    panels = not rw.cuda and conv_on_panels(sw, stride, dil) and is_constant(w)
    if panels:
        w = rw.panels(w, "conv")
    cfg = Conv1dConfig(stride=stride, pad_l=pad[0], pad_r=pad[-1], dilation=dil,
                       has_bias=int(bias is not None), num_threads=rw.nth,
                       w_panels=int(panels))
    return extern_call(cfg, [x, w] + ([bias] if bias is not None else []), out)


def conv1d_rule(rw, call, m, scope):
    return conv1d_call(rw, call, scope)


def conv1d_transpose_rule(rw, call, m, scope):
    """A depthwise conv1d_transpose (groups == channels, NCW/IOW), or one of
    groups 1 (:func:`conv1d_transpose_call`)."""
    got = _conv_args(call, "IOW")
    if got is None:
        return None
    x, w, at, sx, sw, out = got
    C = sx[1]
    if int(at.groups) == 1 and not (C == 1 and sw[1] == 1):
        return conv1d_transpose_call(rw, call, scope)
    if rw.cuda or int(at.groups) != C or sw[0] != C or sw[1] != 1 or out[1] != C:
        return None
    pad = [int(p) for p in at.padding] or [0]
    cfg = Conv1dTransposeDwConfig(stride=int(at.strides[0]), pad_l=pad[0],
                                  dilation=int(at.dilation[0]), num_threads=rw.nth)
    return extern_call(cfg, [x, w], out)


def conv1d_transpose_call(rw, call, scope, bias=None):
    """conv1d_transpose_v1 for a conv1d_transpose of groups 1 (NCW/IOW), its
    constant weight packed by phase on CPUs, else None."""
    got = _conv_args(call, "IOW")
    if got is None or int(got[2].groups) != 1:
        return None
    x, w, at, sx, sw, out = got
    pad = [int(p) for p in at.padding] or [0]
    stride, dil = int(at.strides[0]), int(at.dilation[0])
    if not _transpose_taken(at, rw.cuda):
        return None  # phases would not be plain correlations: TVM's own lowering
    w = rw.folded.get(w, w)
    panels = not rw.cuda and is_constant(w)
    if panels:
        w = rw.panels(w, ("transpose", stride, dil))
    cfg = Conv1dTransposeConfig(stride=stride, pad_l=pad[0], dilation=dil, ksize=sw[2],
                                has_bias=int(bias is not None), num_threads=rw.nth,
                                w_panels=int(panels))
    return extern_call(cfg, [x, w] + ([bias] if bias is not None else []), out)
