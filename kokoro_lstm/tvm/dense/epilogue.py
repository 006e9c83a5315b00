"""What is fused after a product: a per-channel bias add (matmul, conv1d,
conv1d_transpose) and ALBERT's GELU (tanh form) after a matmul."""
from __future__ import annotations

from .configs import ACT_GELU_TANH
from .conv import conv1d_call, conv1d_transpose_call
from .ir import const_scalar, op_name, static_shape
from .matmul import matmul_call


def bias_of(add, scope):
    """(product call, bias) when ``add`` adds a per-channel bias to a matmul or
    conv1d used nowhere else, else None."""
    out = static_shape(add)
    for prod, other in ((add.args[0], add.args[1]), (add.args[1], add.args[0])):
        value = scope.call(prod)
        name = op_name(value)
        if (name not in ("relax.matmul", "relax.nn.conv1d", "relax.nn.conv1d_transpose")
                or scope.uses.get(prod, 0) != 1):
            continue
        sp, so = static_shape(prod), static_shape(other)
        if sp is None or so is None or out != sp:
            continue
        if name == "relax.matmul":
            n = sp[-1]
            ok = len(so) >= 1 and so[-1] == n and all(d == 1 for d in so[:-1])
        else:
            n = sp[1]
            ok = so in ((1, n, 1), (n, 1))
        if ok:
            return value, other
    return None


def bias_rule(rw, call, m, scope):
    found = bias_of(call, scope)
    if found is None:
        return None
    prod, bias = found
    name = op_name(prod)
    new = (matmul_call(rw, prod, scope, bias) if name == "relax.matmul"
           else conv1d_call(rw, prod, scope, bias) if name == "relax.nn.conv1d"
           else conv1d_transpose_call(rw, prod, scope, bias))
    if new is not None:
        rw.count("bias_fused")
    return new


_GELU_CONSTS = {"c_half": 0.5, "c_one": 1.0, "c_sqrt": 0.7978845608, "c_cubic": 0.044715}


def gelu_rule(rw, call, m, scope):
    """The matmul (+ bias) that x is, or a reshape of, with its GELU epilogue
    (ACT_GELU_TANH), when x and every step of the GELU have no other use."""
    from tvm import relax

    for k, c in _GELU_CONSTS.items():
        v = const_scalar(m[k])
        if v is None or abs(v - c) > 1e-6 * c:
            return None
    if const_scalar(m["c_three"]) != 3.0:
        return None
    if not all(scope.used_once(m[k]) for k in ("half", "plus1", "tanh", "arg", "inner",
                                                "cube", "pow")):
        return None
    x = m["pow"].args[0]
    if scope.uses.get(x, 0) != 3 or static_shape(x) is None:
        return None
    if static_shape(call) != static_shape(x):
        return None
    y = x  # the product, or what x is a reshape of (a linear's [L, N] as [1, L, N])
    xv = scope.call(x, "relax.reshape")
    if xv is not None and isinstance(xv.args[0], relax.Var) and scope.uses.get(xv.args[0], 0) == 1:
        y = xv.args[0]
    yv = scope.call(y)
    bias = None
    if op_name(yv) == "relax.add":
        found = bias_of(yv, scope)
        if found is None or op_name(found[0]) != "relax.matmul":
            return None
        mm, bias = found
    elif op_name(yv) == "relax.matmul":
        mm = yv
    else:
        return None
    new = matmul_call(rw, mm, scope, bias, act=ACT_GELU_TANH)
    if new is None:
        return None
    rw.count("gelu_fused")
    if bias is not None:
        rw.count("bias_fused")
    return new if y is x else relax.op.reshape(new, static_shape(x))
