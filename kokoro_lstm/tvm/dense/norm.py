"""instance_norm_v1 for Relax's instance_norm, Kokoro's AdaIN1d and Snake fused into it.

TVM 0.27 legalizes relax.nn.instance_norm as rsqrt(E[x^2] - E[x]^2 + eps), NaN where
rounding makes that negative (a constant row: Kokoro's decoder on silence). The
engine's kernel (src/ops/norm.c) takes the centered variance in double: a constant
row gives 0 (PyTorch's answer), NaN in gives NaN out. Kokoro's AdaIN1d,
``scale * instance_norm(x) + shift`` with per-(batch, channel) scale and shift (its
``1 + gamma`` and ``beta``), is fused into the same call."""
from __future__ import annotations

from .configs import INSTANCE_NORM_FUNC, InstanceNormConfig, f64_bits
from .ir import extern_call, op_name, static_shape


def instance_norm_call(rw, norm, scale=None, shift=None):
    """instance_norm_v1 for the Relax instance_norm ``norm`` (with an AdaIN scale and
    shift), else None: float32 [N, C, ...] normalized per (n, c) over the rest (its
    axes those, or with axis 0 too when N is 1), weight and bias of C values."""
    x, gamma, beta = norm.args
    at = norm.attrs
    sx = static_shape(x)
    if sx is None or len(sx) < 3 or static_shape(norm) != sx:
        return None
    nd = len(sx)
    axes = sorted(int(a) % nd for a in at.axes)
    rest = list(range(2, nd))
    if int(at.channel_axis) % nd != 1 or not (axes == rest or (sx[0] == 1 and axes == [0] + rest)):
        return None
    use_w, use_b = bool(at.scale), bool(at.center)
    if (use_w and static_shape(gamma) != (sx[1],)) or (use_b and static_shape(beta) != (sx[1],)):
        return None
    cfg = InstanceNormConfig(has_weight=int(use_w), has_bias=int(use_b),
                             has_scale=int(scale is not None), has_shift=int(shift is not None),
                             eps_bits=f64_bits(float(at.epsilon)), num_threads=rw.nth)
    args = [x] + [gamma] * use_w + [beta] * use_b + [a for a in (scale, shift) if a is not None]
    return extern_call(cfg, args, sx)


def _per_channel(shape, n, c, nd):
    """Whether a tensor of ``shape`` broadcast against [n, c, ...] (nd dims) is one
    value per (n, c) or per c, laid out [n][c]."""
    if shape is None or len(shape) > nd:
        return False
    full = (1,) * (nd - len(shape)) + tuple(shape)
    return full[0] in (1, n) and full[1] == c and all(d == 1 for d in full[2:])


def adain_rule(rw, call, m, scope):
    """``scale * instance_norm(x) + shift`` (the product used once) as one
    instance_norm_v1; a norm shared by several AdaINs (Kokoro's three resblocks on one
    input) is recomputed by each, its statistics being cheaper than an unfused AdaIN."""
    norm, mul = m["norm"], m["mul"]
    if not scope.used_once(mul):
        return None
    shift = next((a for a in call.args if not scope.value.get(a, a).same_as(mul)), None)
    scale = next((a for a in mul.args if not scope.value.get(a, a).same_as(norm)), None)
    sx = static_shape(norm.args[0])
    if shift is None or scale is None or sx is None or static_shape(call) != sx:
        return None
    if not all(_per_channel(static_shape(t), sx[0], sx[1], len(sx)) for t in (scale, shift)):
        return None
    new = instance_norm_call(rw, norm, scale, shift)
    if new is not None:
        rw.count("adain_fused")
    return new


def instance_norm_rule(rw, call, m, scope):
    return instance_norm_call(rw, call)


def snake_rule(rw, call, m, scope):
    """Snake on an instance_norm_v1's output (used only here; a and c one value per
    channel) as the same call with ``has_snake``."""
    norm = m["x"]
    if (op_name(norm) != "relax.call_dps_packed"
            or norm.args[0].global_symbol != INSTANCE_NORM_FUNC
            or scope.uses.get(scope.var.get(norm), 0) != 2):
        return None
    sq = m["sq"]
    if op_name(sq) == "relax.power":
        p = sq.args[1].value.numpy() if hasattr(sq.args[1].value, "numpy") else None
        if p is None or p.size != 1 or float(p.reshape(())) != 2.0:
            return None
    sin_uses = 1 if op_name(sq) == "relax.power" else 2
    if not all(scope.used_once(m[k]) for k in ("at", "csq", "sq")) or scope.uses.get(
            scope.var.get(m["sin"]), 0) != sin_uses:
        return None
    cfg = InstanceNormConfig(*[int(v) for v in norm.args[1].fields[0].values])
    sx = static_shape(scope.var[norm])
    if cfg.has_snake or sx is None or static_shape(call) != sx:
        return None
    a = next((e for e in m["at"].args if not scope.value.get(e, e).same_as(norm)), None)
    c = next((e for e in m["csq"].args if not scope.value.get(e, e).same_as(m["sq"])), None)
    if a is None or c is None:
        return None
    if not all(_per_channel(static_shape(t), 1, sx[1], len(sx)) for t in (a, c)):
        return None
    rw.count("snake_fused")
    return extern_call(cfg._replace(has_snake=1), list(norm.args[1].fields[1:]) + [a, c], sx)
