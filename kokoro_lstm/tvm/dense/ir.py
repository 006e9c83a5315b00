"""What the rules read of a Relax function (static shapes, operator names, constants,
a function's bindings and uses) and the extern calls they write."""
from __future__ import annotations

from .configs import CONFIGS, FUNC_OF

def static_shape(expr, dtype="float32"):
    """The static shape (tuple of ints) of a float32 tensor expr, else None."""
    from tvm import relax, tirx

    ty = getattr(expr, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.shape is None or ty.dtype != dtype:
        return None
    try:
        vals = ty.shape.values
    except AttributeError:
        return None
    out = []
    for v in vals:
        if not isinstance(v, tirx.IntImm):
            return None
        out.append(int(v.value))
    return tuple(out)


def batch_ok(shape, cbatch):
    """An operand's batch dims are the result's (right-aligned) or all ones."""
    nb = len(shape) - 2
    b = shape[:nb]
    if all(d == 1 for d in b):
        return True
    if nb > len(cbatch):
        return False
    pad = (1,) * (len(cbatch) - nb) + tuple(b)
    return pad == tuple(cbatch)


def op_name(e):
    import tvm
    from tvm import relax

    if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
        return e.op.name
    return None


def const_scalar(e):
    """The float value of a scalar (or one-element) float Constant, else None."""
    import tvm

    if not isinstance(e, tvm.ir.expr.Constant) or not hasattr(e.value, "numpy"):
        return None
    a = e.value.numpy()
    if a.size != 1 or a.dtype.kind != "f":
        return None
    return float(a.reshape(()))


def is_constant(e):
    import tvm

    return isinstance(e, tvm.ir.expr.Constant)


class Scope:
    """One Relax function's bindings (var -> value and back) and the uses of each
    var, as the rules' checks read them."""

    def __init__(self, func):
        from tvm import relax

        self.value, self.var, self.uses = {}, {}, {}
        for block in func.body.blocks:
            for bd in block.bindings:
                if isinstance(bd, relax.VarBinding):
                    self.value[bd.var] = bd.value
                    self.var[bd.value] = bd.var

        def count(e):
            if isinstance(e, relax.Var):
                self.uses[e] = self.uses.get(e, 0) + 1

        relax.analysis.post_order_visit(func.body, count)

    def call(self, x, name=None):
        """The value bound to var x when it is a call (of operator ``name``), else None."""
        v = self.value.get(x)
        return v if op_name(v) is not None and (name is None or op_name(v) == name) else None

    def used_once(self, e):
        """Whether the var bound to (or being) e has exactly one use."""
        return self.uses.get(self.var.get(e, e), 0) == 1

    def peel(self, x):
        """x through reshapes and same-size broadcast_tos (row-major views of it)."""
        import math

        while True:
            v = self.value.get(x)
            if op_name(v) not in ("relax.reshape", "relax.broadcast_to"):
                return x
            a, b = static_shape(v.args[0]), static_shape(x)
            if a is None or b is None or math.prod(a) != math.prod(b):
                return x
            x = v.args[0]


def extern_call(cfg, args, out_shape):
    """``call_dps_packed`` of the extern whose config ``cfg`` is, into float32 ``out_shape``."""
    from tvm import relax

    return relax.call_dps_packed(FUNC_OF[type(cfg)], [relax.ShapeExpr(list(cfg))] + list(args),
                                 relax.TensorType(out_shape, "float32"))


def dense_calls(mod) -> list:
    """``[(extern name, config)]`` of every engine extern call in ``mod``'s Relax
    functions, found by walking the IR; each config parsed by its schema."""
    import tvm
    from tvm import relax

    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"expected a tvm.IRModule, got {type(mod).__name__}")
    found = []

    def visit(e):
        if not (isinstance(e, relax.Call) and op_name(e) == "relax.call_dps_packed"):
            return
        f, args = e.args[0], e.args[1]
        if isinstance(f, relax.ExternFunc) and f.global_symbol in CONFIGS:
            cfg = args.fields[0] if isinstance(args, relax.Tuple) and args.fields else None
            vals = [int(v) for v in cfg.values] if isinstance(cfg, relax.ShapeExpr) else []
            found.append((f.global_symbol, CONFIGS[f.global_symbol](*vals)))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def count_dense_calls(mod) -> dict:
    """{extern name: number of calls} in a module (:func:`dense_calls`)."""
    counts = {}
    for name, _ in dense_calls(mod):
        counts[name] = counts.get(name, 0) + 1
    return counts
