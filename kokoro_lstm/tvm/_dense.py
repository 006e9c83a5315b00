"""Dense ops of a Relax module into the kokoro_lstm engine (``--dense-method native``).

TVM's CPU pipeline legalizes ``R.matmul`` and ``R.nn.conv1d`` into naive loop nests
(the PyPI wheel has no BLAS backend). :func:`rewrite_dense` replaces, where every
shape is static and the dtype float32, each of these by a call of one of the
engine's externs (C functions registered with tvm-ffi: src/tvm/kl_tvm_dense.c over
src/ops/dense.c), one ``relax.dpl`` pattern and one check per rule (:data:`_RULES`):

* ``matmul(A, B)`` (numpy batch broadcasting where each operand's batch is the
  result's or all ones) by ``matmul_v1``: ``B = permute_dims(W)`` of a 2-D ``W`` is
  read transposed in place; a constant 2-D B (a linear's weight) is packed in
  32-column panels at compile time (:func:`pack_panels`, once per constant) for the
  engine's f32-pgemm kernels; a following per-column bias add and a GELU (tanh
  form, ALBERT's ``gelu_new``) are fused into the call;
* ``conv1d`` (NCW/OIW, groups 1) by ``conv1d_v1``, a per-channel bias add fused; a
  constant weight of more than one tap (stride or dilation 1) is packed in panels
  over (tap, channel) (:func:`pack_conv_panels`), a weight computed from constants
  (weight norm) evaluated at compile time first (:func:`_fold_weights`);
* a depthwise ``conv1d_transpose`` by ``conv1d_transpose_dw_v1``;
* a ``conv1d_transpose`` with groups 1 by ``conv1d_transpose_v1``, its constant
  weight (weight norm folded) packed by output phase at compile time
  (:func:`pack_conv_transpose_panels`), a per-channel bias add fused;
* the scaled-dot-product attention that ``torch.export`` decomposes SDPA into
  (``matmul(q*a, permute(k)*a)`` [``+ mask``] -> ``softmax`` -> fully-masked-row fix
  -> ``matmul(., v)``) by ``attention_v1``, reading q/k/v and writing its output in
  the ``[B, L, H, D]`` layout of the linears around it (their head transposes
  folded);
* ``softmax`` over the last axis by ``softmax_v1``.

Every extern's config (its first argument, a shape) is one NamedTuple here
(:data:`CONFIGS`), whose fields are the C side's ``KL_*_CFG_*`` indices in
src/tvm/kl_tvm_dense.h in the same order. :func:`kokoro_lstm.tvm.export_library`
links the engine into the artifact, so it runs where TVM's runtime runs.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["MATMUL_FUNC", "CONV1D_FUNC", "CONV1D_TRANSPOSE_DW_FUNC", "CONV1D_TRANSPOSE_FUNC",
           "SOFTMAX_FUNC", "Conv1dTransposeConfig",
           "ATTENTION_FUNC", "ABI_VERSION", "CONFIGS", "MatmulConfig", "Conv1dConfig",
           "Conv1dTransposeDwConfig", "SoftmaxConfig", "AttentionConfig",
           "DENSE_METHODS", "select_dense_method", "rewrite_dense", "dense_calls",
           "count_dense_calls"]

ABI_VERSION = 1
MATMUL_FUNC = "kokoro_lstm.matmul_v1"
CONV1D_FUNC = "kokoro_lstm.conv1d_v1"
CONV1D_TRANSPOSE_DW_FUNC = "kokoro_lstm.conv1d_transpose_dw_v1"
CONV1D_TRANSPOSE_FUNC = "kokoro_lstm.conv1d_transpose_v1"
SOFTMAX_FUNC = "kokoro_lstm.softmax_v1"
ATTENTION_FUNC = "kokoro_lstm.attention_v1"
#: Width of the panels of a packed B (KL_DENSE_PANEL in src/ops/dense.h).
PANEL = 32
#: ``--dense-method`` values: native (the engine's externs) or tvm (TVM's own lowering).
DENSE_METHODS = ("native", "tvm")
#: matmul_v1's ``act``: GELU, tanh form, on the result (KL_ACT_GELU_TANH).
ACT_GELU_TANH = 1


# -- the externs' configs: one schema each, the C side's KL_*_CFG_* order -----------------
class MatmulConfig(NamedTuple):
    """``matmul_v1(cfg, A, B, [bias], C)``; ``act`` and ``b_panels`` may be absent (0)."""
    abi: int = ABI_VERSION
    trans_b: int = 0      # B is [.., N, K]
    has_bias: int = 0
    num_threads: int = 0  # 0: the process default at run time
    act: int = 0          # 0, or ACT_GELU_TANH
    b_panels: int = 0     # 1: B is op(B) packed by pack_panels, shared by the batch


class Conv1dConfig(NamedTuple):
    """``conv1d_v1(cfg, x, w, [bias], y)``; ``w_panels`` may be absent (0)."""
    abi: int = ABI_VERSION
    stride: int = 1
    pad_l: int = 0
    pad_r: int = 0
    dilation: int = 1
    has_bias: int = 0
    num_threads: int = 0
    w_panels: int = 0     # 1: w packed by pack_conv_panels (stride or dilation 1)


class Conv1dTransposeDwConfig(NamedTuple):
    """``conv1d_transpose_dw_v1(cfg, x, w, [bias], y)``."""
    abi: int = ABI_VERSION
    stride: int = 1
    pad_l: int = 0
    dilation: int = 1
    has_bias: int = 0
    num_threads: int = 0


class Conv1dTransposeConfig(NamedTuple):
    """``conv1d_transpose_v1(cfg, x, w, [bias], y)``, groups 1."""
    abi: int = ABI_VERSION
    stride: int = 1
    pad_l: int = 0
    dilation: int = 1     # a divisor of stride
    ksize: int = 1
    has_bias: int = 0
    num_threads: int = 0
    w_panels: int = 0     # 1: w packed by pack_conv_transpose_panels


class SoftmaxConfig(NamedTuple):
    """``softmax_v1(cfg, x, y)``, over the last axis."""
    abi: int = ABI_VERSION
    num_threads: int = 0


class AttentionConfig(NamedTuple):
    """``attention_v1(cfg, q, k, v, [mask], o)``; layouts 0 [B, H, rows, D], 1 [B, rows, H, D]."""
    abi: int = ABI_VERSION
    q_layout: int = 0
    k_layout: int = 0
    v_layout: int = 0
    o_layout: int = 0
    has_mask: int = 0
    scale_bits: int = 0   # the float32 scale's bits (f32_bits)
    num_threads: int = 0


# -- instance norm: instance_norm_v1 -----------------------------------------------------
# TVM 0.27 legalizes relax.nn.instance_norm as rsqrt(E[x^2] - E[x]^2 + eps), NaN where
# rounding makes that negative (a constant row: Kokoro's decoder on silence). The
# engine's kernel (src/ops/norm.c) takes the centered variance in double: a constant
# row gives 0 (PyTorch's answer), NaN in gives NaN out. Kokoro's AdaIN1d,
# ``scale * instance_norm(x) + shift`` with per-(batch, channel) scale and shift (its
# ``1 + gamma`` and ``beta``), is fused into the same call.
INSTANCE_NORM_FUNC = "kokoro_lstm.instance_norm_v1"


class InstanceNormConfig(NamedTuple):
    """``instance_norm_v1(cfg, x, [weight], [bias], [scale], [shift], [snake_a, snake_c], y)``."""
    abi: int = ABI_VERSION
    has_weight: int = 0
    has_bias: int = 0
    has_scale: int = 0    # AdaIN: y = scale * norm + shift, C or N * C values each
    has_shift: int = 0
    has_snake: int = 0    # then y + c * sin(a * y)^2, a and c C values each (Kokoro's Snake)
    eps_bits: int = 0     # the float64 epsilon's bits (f64_bits)
    num_threads: int = 0


def f64_bits(x) -> int:
    """The bits of float64 ``x`` as a signed int (InstanceNormConfig.eps_bits)."""
    import struct

    return struct.unpack("<q", struct.pack("<d", x))[0]


def _instance_norm_pattern():
    """A Relax instance_norm."""
    from tvm.relax.dpl import wildcard

    return _op("relax.nn.instance_norm", wildcard(), wildcard(), wildcard()), {}


def _adain_pattern():
    """``scale * instance_norm(x) + shift``, each product and sum in either order."""
    from tvm.relax.dpl import wildcard

    ann = {"norm": _op("relax.nn.instance_norm", wildcard(), wildcard(), wildcard())}
    ann["mul"] = _either("relax.multiply", ann["norm"], wildcard())
    return _either("relax.add", ann["mul"], wildcard()), ann


def _instance_norm_call(rw, norm, scale=None, shift=None):
    """instance_norm_v1 for the Relax instance_norm ``norm`` (with an AdaIN scale and
    shift), else None: float32 [N, C, ...] normalized per (n, c) over the rest (its
    axes those, or with axis 0 too when N is 1), weight and bias of C values."""
    x, gamma, beta = norm.args
    at = norm.attrs
    sx = _static_shape(x)
    if sx is None or len(sx) < 3 or _static_shape(norm) != sx:
        return None
    nd = len(sx)
    axes = sorted(int(a) % nd for a in at.axes)
    rest = list(range(2, nd))
    if int(at.channel_axis) % nd != 1 or not (axes == rest or (sx[0] == 1 and axes == [0] + rest)):
        return None
    use_w, use_b = bool(at.scale), bool(at.center)
    if (use_w and _static_shape(gamma) != (sx[1],)) or (use_b and _static_shape(beta) != (sx[1],)):
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


def _adain_rule(rw, call, m, scope):
    """``scale * instance_norm(x) + shift`` (the product used once) as one
    instance_norm_v1; a norm shared by several AdaINs (Kokoro's three resblocks on one
    input) is recomputed by each, its statistics being cheaper than an unfused AdaIN."""
    norm, mul = m["norm"], m["mul"]
    if not scope.used_once(mul):
        return None
    shift = next((a for a in call.args if not scope.value.get(a, a).same_as(mul)), None)
    scale = next((a for a in mul.args if not scope.value.get(a, a).same_as(norm)), None)
    sx = _static_shape(norm.args[0])
    if shift is None or scale is None or sx is None or _static_shape(call) != sx:
        return None
    if not all(_per_channel(_static_shape(t), sx[0], sx[1], len(sx)) for t in (scale, shift)):
        return None
    new = _instance_norm_call(rw, norm, scale, shift)
    if new is not None:
        rw._count("adain_fused")
    return new


def _instance_norm_rule(rw, call, m, scope):
    return _instance_norm_call(rw, call)


def _snake_pattern():
    """Kokoro's Snake, ``x + c * sin(a * x) ** 2`` (the square as a power or a product),
    each product and the sum in either order (``c`` is ``1 / a`` as exported; the check
    needs only one value of each per channel)."""
    from tvm.relax.dpl import is_const, wildcard

    x = wildcard()
    ann = {"x": x, "at": _either("relax.multiply", wildcard(), x)}
    ann["sin"] = _op("relax.sin", ann["at"])
    ann["sq"] = _op("relax.multiply", ann["sin"], ann["sin"]) | _op("relax.power", ann["sin"],
                                                                    is_const())
    ann["csq"] = _either("relax.multiply", wildcard(), ann["sq"])
    return _either("relax.add", x, ann["csq"]), ann


def _snake_rule(rw, call, m, scope):
    """Snake on an instance_norm_v1's output (used only here; a and c one value per
    channel) as the same call with ``has_snake``."""
    norm = m["x"]
    if (_op_name(norm) != "relax.call_dps_packed"
            or norm.args[0].global_symbol != INSTANCE_NORM_FUNC
            or scope.uses.get(scope.var.get(norm), 0) != 2):
        return None
    sq = m["sq"]
    if _op_name(sq) == "relax.power":
        p = sq.args[1].value.numpy() if hasattr(sq.args[1].value, "numpy") else None
        if p is None or p.size != 1 or float(p.reshape(())) != 2.0:
            return None
    sin_uses = 1 if _op_name(sq) == "relax.power" else 2
    if not all(scope.used_once(m[k]) for k in ("at", "csq", "sq")) or scope.uses.get(
            scope.var.get(m["sin"]), 0) != sin_uses:
        return None
    cfg = InstanceNormConfig(*[int(v) for v in norm.args[1].fields[0].values])
    sx = _static_shape(scope.var[norm])
    if cfg.has_snake or sx is None or _static_shape(call) != sx:
        return None
    a = next((e for e in m["at"].args if not scope.value.get(e, e).same_as(norm)), None)
    c = next((e for e in m["csq"].args if not scope.value.get(e, e).same_as(m["sq"])), None)
    if a is None or c is None:
        return None
    if not all(_per_channel(_static_shape(t), 1, sx[1], len(sx)) for t in (a, c)):
        return None
    rw._count("snake_fused")
    return extern_call(cfg._replace(has_snake=1), list(norm.args[1].fields[1:]) + [a, c], sx)


#: extern name -> its config's schema
CONFIGS = {MATMUL_FUNC: MatmulConfig, CONV1D_FUNC: Conv1dConfig,
           CONV1D_TRANSPOSE_DW_FUNC: Conv1dTransposeDwConfig,
           CONV1D_TRANSPOSE_FUNC: Conv1dTransposeConfig, SOFTMAX_FUNC: SoftmaxConfig,
           ATTENTION_FUNC: AttentionConfig, INSTANCE_NORM_FUNC: InstanceNormConfig}
_FUNC_OF = {cls: name for name, cls in CONFIGS.items()}


def f32_bits(x) -> int:
    """The bits of float32 ``x`` as a signed int (AttentionConfig.scale_bits)."""
    import struct

    return struct.unpack("<i", struct.pack("<f", x))[0]


def extern_call(cfg, args, out_shape):
    """``call_dps_packed`` of the extern whose config ``cfg`` is, into float32 ``out_shape``."""
    from tvm import relax

    return relax.call_dps_packed(_FUNC_OF[type(cfg)], [relax.ShapeExpr(list(cfg))] + list(args),
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
        if not (isinstance(e, relax.Call) and _op_name(e) == "relax.call_dps_packed"):
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


def select_dense_method(target="llvm", method="native") -> str:
    """Validates ``method`` for ``target``: ``native`` needs a CPU target and the
    kokoro_lstm extension; ``tvm`` always works."""
    from . import _native, _target_info

    if method not in DENSE_METHODS:
        raise ValueError(f"unknown dense method {method!r}; expected one of {DENSE_METHODS}")
    if method == "native":
        kind, is_cpu = _target_info(target)
        if not is_cpu:
            raise ValueError(f"dense method 'native' runs the kokoro_lstm engine on the CPU; "
                             f"target {kind!r} is not a CPU target (use 'tvm')")
        if not _native.available():
            raise RuntimeError("dense method 'native' needs the kokoro_lstm C extension, which "
                               "failed to load (use 'tvm')")
    return method


# -- helpers ----------------------------------------------------------------------------------
def _static_shape(expr, dtype="float32"):
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


def _batch_ok(shape, cbatch):
    """An operand's batch dims are the result's (right-aligned) or all ones."""
    nb = len(shape) - 2
    b = shape[:nb]
    if all(d == 1 for d in b):
        return True
    if nb > len(cbatch):
        return False
    pad = (1,) * (len(cbatch) - nb) + tuple(b)
    return pad == tuple(cbatch)


def _op_name(e):
    import tvm
    from tvm import relax

    if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
        return e.op.name
    return None


def _const_scalar(e):
    """The float value of a scalar (or one-element) float Constant, else None."""
    import tvm

    if not isinstance(e, tvm.ir.expr.Constant) or not hasattr(e.value, "numpy"):
        return None
    a = e.value.numpy()
    if a.size != 1 or a.dtype.kind != "f":
        return None
    return float(a.reshape(()))


def _is_const(e):
    import tvm

    return isinstance(e, tvm.ir.expr.Constant)


def pack_panels(w, trans):
    """op(w) packed for ``matmul_v1``'s ``b_panels``: w is [N, K] (``trans``, a
    linear's weight) or [K, N]; the result [ceil(N / 32), K, 32] float32 holds
    columns 32p.. of op(w) = [K, N] in panel p, zeros past N (the engine's
    panel layout, src/core/internal.h at KL_PGEMM_NR)."""
    import numpy as np

    b = np.asarray(w, dtype=np.float32)
    b = b.T if trans else b                       # [K, N]
    K, N = b.shape
    npan = -(-N // PANEL)
    out = np.zeros((K, npan * PANEL), np.float32)
    out[:, :N] = b
    return np.ascontiguousarray(out.reshape(K, npan, PANEL).transpose(1, 0, 2))


def pack_conv_panels(w):
    """A conv1d weight [Cout, Cin, K] packed for ``conv1d_v1``'s ``w_panels``: the
    kernel axis ordered (tap, channel), i.e. :func:`pack_panels` of the [K * Cin,
    Cout] matrix whose row ``j * Cin + c`` holds ``w[:, c, j]``."""
    import numpy as np

    w = np.asarray(w, dtype=np.float32)
    cout, cin, k = w.shape
    return pack_panels(w.transpose(2, 1, 0).reshape(k * cin, cout), False)


def pack_conv_transpose_panels(w, stride, dilation=1):
    """A conv1d_transpose weight [Cin, Cout, K] (IOW; dilation a divisor of stride)
    packed for ``conv1d_transpose_v1``'s ``w_panels``: :func:`pack_panels` of the
    [K * Cin, Cout] matrix whose rows are, for each output phase r < stride in
    turn, its taps k = r // dilation + m * (stride // dilation), m < n_r, as rows
    ``j * Cin + c`` (m = n_r - 1 - j) holding ``w[c, :, k]``
    (kl_f32_conv1d_transpose_pack in src/ops/dense.c)."""
    import numpy as np

    w = np.asarray(w, dtype=np.float32)
    cin, cout, k = w.shape
    if stride % dilation:
        raise ValueError(f"dilation {dilation} does not divide stride {stride}")
    s1, rows = stride // dilation, []
    for r in range(0, min(stride, k * dilation), dilation):
        taps = list(range(r // dilation, k, s1))
        rows += [w[:, :, t] for t in reversed(taps)]
    return pack_panels(np.concatenate(rows), False)


def _is_plain_op(value):
    """A call of a Relax operator that computes a value from its arguments alone
    (not a call into another function, a packed function or a TIR function)."""
    import tvm
    from tvm import relax

    if isinstance(value, (relax.Tuple, relax.TupleGetItem, tvm.ir.expr.Constant)):
        return True
    return (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
            and not value.op.name.startswith("relax.call_"))


def _fold_weights(func, targets):
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


def _transpose_weights(scope):
    """The computed weights (vars) of the groups-1 conv1d_transposes in ``scope``
    that conv1d_transpose_v1 takes (dilation dividing stride): those
    :func:`_fold_weights` evaluates for packing."""
    from tvm import relax

    return [v.args[1] for v in scope.value.values()
            if _op_name(v) == "relax.nn.conv1d_transpose" and int(v.attrs.groups) == 1
            and int(v.attrs.strides[0]) % int(v.attrs.dilation[0]) == 0
            and isinstance(v.args[1], relax.Var)]


def _conv_on_panels(w_shape, stride, dilation):
    """Whether a conv1d with a constant weight runs on panels (``w_panels``):
    stride or dilation 1 (each output's window is then one run of the time-major
    input, of every d-th step for dilation d) and a kernel of more than one tap (a
    1-tap conv needs no im2col on the BLAS path, which is as fast)."""
    return (stride == 1 or dilation == 1) and w_shape is not None and w_shape[2] > 1


# -- patterns -----------------------------------------------------------------------------
def _op(name, *args):
    """A call of Relax operator ``name`` on ``args``; further arguments (a reshape's
    shape, ...) match anything."""
    from tvm.relax.dpl import is_op

    return is_op(name)(*args, varg_default_wildcard=True)


def _either(name, a, b):
    """``name(a, b)`` or ``name(b, a)``."""
    return _op(name, a, b) | _op(name, b, a)


def _views(p):
    """``p`` through up to two reshapes / broadcast_tos (the longest chain first); the
    checks see whether they are row-major views of it (:meth:`_Scope.peel`)."""
    one = _op("relax.reshape", p) | _op("relax.broadcast_to", p)
    two = (_op("relax.reshape", _op("relax.broadcast_to", p))
           | _op("relax.reshape", _op("relax.reshape", p)))
    return two | one | p


def _scaled(p):
    """``p``, or ``p`` times a constant."""
    from tvm.relax.dpl import is_const

    return _op("relax.multiply", p, is_const()) | p


def _sdpa_pattern():
    """torch.export's SDPA decomposition, rooted at ``matmul(P, v)``: scores
    ``q @ k^T`` (each scaled, k transposed, through views) [``+ mask``], softmax,
    [the fully-masked-row fix ``where(no score > -inf, 0, P)``]."""
    from tvm.relax.dpl import is_const, wildcard

    q = _views(_scaled(_views(wildcard())))
    k = (_views(_scaled(_views(_op("relax.permute_dims", _views(wildcard())))))
         | _views(_op("relax.permute_dims", _views(_scaled(_views(wildcard()))))))
    ann = {"scores": _op("relax.matmul", q, k), "mask": wildcard(),
           "ninf": is_const(), "zero": is_const()}
    s4 = _views(ann["scores"])
    ann["masked"] = _op("relax.add", s4, ann["mask"])
    ann["masked_r"] = _op("relax.add", ann["mask"], s4)
    s2 = ann["masked"] | ann["masked_r"] | s4
    ann["softmax"] = p = _op("relax.nn.softmax", s2)
    ann["max"] = _op("relax.max", _op("relax.astype", _op("relax.logical_not", _op(
        "relax.equal", s2, ann["ninf"]))))
    empty = _op("relax.logical_not", _op("relax.astype", ann["max"]))
    ann["fix"] = _op("relax.where", empty, _op("relax.full_like", wildcard(), ann["zero"]), p)
    return _op("relax.matmul", _views(ann["fix"] | p), _views(wildcard())), ann


def _sdpa_out_pattern():
    """Up to three permute_dims over views of an attention call."""
    from tvm.relax.dpl import ExternFuncPattern, wildcard

    att = _views(_op("relax.call_dps_packed", ExternFuncPattern(ATTENTION_FUNC), wildcard()))
    chain = _op("relax.permute_dims", att)
    for _ in range(2):
        chain = _op("relax.permute_dims", chain | att)
    return chain, {}


def _gelu_pattern():
    """ALBERT's gelu_new as exported: ``(x * 0.5) * (tanh((x + x**3 * 0.044715) *
    0.7978846) + 1)``, the operands of each multiply and add in either order."""
    from tvm.relax.dpl import is_const, wildcard

    x = wildcard()
    ann = {c: is_const() for c in ("c_half", "c_one", "c_sqrt", "c_cubic", "c_three")}
    ann["pow"] = _op("relax.power", x, ann["c_three"])
    ann["cube"] = _either("relax.multiply", ann["pow"], ann["c_cubic"])
    ann["inner"] = _either("relax.add", x, ann["cube"])
    ann["arg"] = _either("relax.multiply", ann["inner"], ann["c_sqrt"])
    ann["tanh"] = _op("relax.tanh", ann["arg"])
    ann["plus1"] = _either("relax.add", ann["tanh"], ann["c_one"])
    ann["half"] = _either("relax.multiply", x, ann["c_half"])
    return _either("relax.multiply", ann["half"], ann["plus1"]), ann


def _bias_pattern():
    """A matmul, conv1d or conv1d_transpose with an add after it."""
    from tvm.relax.dpl import wildcard

    prod = (_op("relax.matmul", wildcard(), wildcard())
            | _op("relax.nn.conv1d", wildcard(), wildcard())
            | _op("relax.nn.conv1d_transpose", wildcard(), wildcard()))
    return _either("relax.add", prod, wildcard()), {}


def _lstm_pattern():
    from tvm.relax.dpl import ExternFuncPattern, wildcard

    from . import _native

    return _op("relax.call_dps_packed", ExternFuncPattern(_native.FUNC_NAME), wildcard()), {}


def _single(name, nargs=2):
    """A call of operator ``name`` on anything."""
    def make():
        from tvm.relax.dpl import wildcard

        return _op(name, *[wildcard() for _ in range(nargs)]), {}
    return make


# -- the rewrite ----------------------------------------------------------------------------
class _Scope:
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
        return v if _op_name(v) is not None and (name is None or _op_name(v) == name) else None

    def used_once(self, e):
        """Whether the var bound to (or being) e has exactly one use."""
        return self.uses.get(self.var.get(e, e), 0) == 1

    def peel(self, x):
        """x through reshapes and same-size broadcast_tos (row-major views of it)."""
        import math

        while True:
            v = self.value.get(x)
            if _op_name(v) not in ("relax.reshape", "relax.broadcast_to"):
                return x
            a, b = _static_shape(v.args[0]), _static_shape(x)
            if a is None or b is None or math.prod(a) != math.prod(b):
                return x
            x = v.args[0]


class _Rewriter:
    """The rules, one pattern and one check each (:data:`_RULES`), applied in turn to
    every Relax function of a module; counts what it fused and packed."""

    def __init__(self, num_threads):
        self.nth = int(num_threads or 0)
        self.counts = {}
        self.packed = {}  # (Constant, layout) -> its panels
        self.folded = {}  # var -> Constant (_fold_weights)

    def _count(self, key):
        self.counts[key] = self.counts.get(key, 0) + 1

    def rewrite_function(self, func):
        from tvm import relax
        from tvm.relax.dpl import rewrite_call

        if not isinstance(func.body, relax.SeqExpr):
            return func
        scope = _Scope(func)
        # weights computed from constants (weight norm) in front of a conv on panels
        self.folded.update(_fold_weights(func, [
            v.args[1] for v in scope.value.values()
            if _op_name(v) == "relax.nn.conv1d" and isinstance(v.args[1], relax.Var)
            and _conv_on_panels(_static_shape(v.args[1]), int(v.attrs.strides[0]),
                                int(v.attrs.dilation[0]))] + _transpose_weights(scope)))
        for make_pattern, rule in _RULES:
            if rule == "lstm_threads" and not self.nth:
                continue
            pattern, ann = make_pattern()

            def rewrite(call, matches, check=getattr(self, rule), scope=_Scope(func), ann=ann):
                """The check's replacement for the matched ``call``, or ``call`` itself;
                the check reads the annotated sub-matches by name."""
                new = check(call, {k: matches[p] for k, p in ann.items() if p in matches}, scope)
                return call if new is None else new

            func = rewrite_call(pattern, rewrite, func)
        return func

    # -- matmul ---------------------------------------------------------------------------
    def _matmul(self, call, scope, bias=None, act=0):
        """matmul_v1 for ``call`` (a matmul), else None."""
        a, b = call.args
        sa, sb, out = _static_shape(a), _static_shape(b), _static_shape(call)
        if sa is None or sb is None or out is None or len(sa) < 2 or len(sb) < 2:
            return None
        if str(call.attrs.out_dtype) not in ("", "None", "void", "float32"):
            return None
        trans_b = 0
        bt = scope.call(b, "relax.permute_dims")
        if bt is not None and len(sb) == 2:
            w, axes = bt.args[0], bt.attrs.axes
            if _static_shape(w) is not None and (axes is None or [int(x) for x in axes] == [1, 0]):
                b, sb, trans_b = w, _static_shape(w), 1
        if not (_batch_ok(sa, out[:-2]) and _batch_ok(sb, out[:-2])):
            return None
        panels = len(sb) == 2 and _is_const(b)
        if panels:
            b = self._panels(b, trans_b)
        cfg = MatmulConfig(trans_b=trans_b, has_bias=int(bias is not None), num_threads=self.nth,
                           act=act, b_panels=int(panels))
        return extern_call(cfg, [a, b] + ([bias] if bias is not None else []), out)

    def _panels(self, w, layout):
        """The Constant w packed in panels, once per constant (ALBERT's 12 layers
        share one set of weights): layout 0 / 1 is a matmul's op(w)
        (:func:`pack_panels` with ``trans``), "conv" a conv1d weight
        (:func:`pack_conv_panels`)."""
        from tvm import relax

        key = (w, layout)
        if key not in self.packed:
            v = w.value.numpy()
            self.packed[key] = relax.const(
                pack_conv_panels(v) if layout == "conv"
                else pack_conv_transpose_panels(v, *layout[1:]) if isinstance(layout, tuple)
                else pack_panels(v, layout))
            self._count("panels_packed")
        return self.packed[key]

    def matmul(self, call, m, scope):
        return self._matmul(call, scope)

    # -- conv1d ---------------------------------------------------------------------------
    def _conv1d(self, call, scope, bias=None):
        x, w = call.args
        at = call.attrs
        sx, sw, out = _static_shape(x), _static_shape(w), _static_shape(call)
        if (sx is None or sw is None or out is None or len(sx) != 3 or int(at.groups) != 1
                or at.data_layout != "NCW" or at.kernel_layout != "OIW"
                or at.out_layout != "NCW" or str(at.out_dtype) not in ("", "None", "void", "float32")):
            return None
        pad = [int(p) for p in at.padding] or [0]
        stride, dil = int(at.strides[0]), int(at.dilation[0])
        w = self.folded.get(w, w)
        panels = _conv_on_panels(sw, stride, dil) and _is_const(w)
        if panels:
            w = self._panels(w, "conv")
        cfg = Conv1dConfig(stride=stride, pad_l=pad[0], pad_r=pad[-1], dilation=dil,
                           has_bias=int(bias is not None), num_threads=self.nth,
                           w_panels=int(panels))
        return extern_call(cfg, [x, w] + ([bias] if bias is not None else []), out)

    def conv1d(self, call, m, scope):
        return self._conv1d(call, scope)

    def conv1d_transpose(self, call, m, scope):
        """A depthwise conv1d_transpose (groups == channels, NCW/IOW), or one of
        groups 1 (:meth:`_conv1d_transpose`)."""
        x, w = call.args
        at = call.attrs
        sx, sw, out = _static_shape(x), _static_shape(w), _static_shape(call)
        if (sx is None or sw is None or out is None or len(sx) != 3
                or at.data_layout != "NCW" or at.kernel_layout != "IOW"
                or at.out_layout != "NCW" or str(at.out_dtype) not in ("", "None", "void", "float32")):
            return None
        C = sx[1]
        if int(at.groups) == 1 and not (C == 1 and sw[1] == 1):
            return self._conv1d_transpose(call, scope)
        if int(at.groups) != C or sw[0] != C or sw[1] != 1 or out[1] != C:
            return None
        pad = [int(p) for p in at.padding] or [0]
        cfg = Conv1dTransposeDwConfig(stride=int(at.strides[0]), pad_l=pad[0],
                                      dilation=int(at.dilation[0]), num_threads=self.nth)
        return extern_call(cfg, [x, w], out)

    def _conv1d_transpose(self, call, scope, bias=None):
        """conv1d_transpose_v1 for a conv1d_transpose of groups 1 (NCW/IOW), its
        constant weight packed by phase, else None."""
        x, w = call.args
        at = call.attrs
        sx, sw, out = _static_shape(x), _static_shape(w), _static_shape(call)
        if (sx is None or sw is None or out is None or len(sx) != 3 or int(at.groups) != 1
                or at.data_layout != "NCW" or at.kernel_layout != "IOW"
                or at.out_layout != "NCW" or str(at.out_dtype) not in ("", "None", "void", "float32")):
            return None
        pad = [int(p) for p in at.padding] or [0]
        stride, dil = int(at.strides[0]), int(at.dilation[0])
        if stride % dil:
            return None  # phases would not be plain correlations: TVM's own lowering
        w = self.folded.get(w, w)
        panels = _is_const(w)
        if panels:
            w = self._panels(w, ("transpose", stride, dil))
        cfg = Conv1dTransposeConfig(stride=stride, pad_l=pad[0], dilation=dil, ksize=sw[2],
                                    has_bias=int(bias is not None), num_threads=self.nth,
                                    w_panels=int(panels))
        return extern_call(cfg, [x, w] + ([bias] if bias is not None else []), out)

    # -- a bias add after a product ---------------------------------------------------------
    def _bias_of(self, add, scope):
        """(product call, bias) when ``add`` adds a per-channel bias to a matmul or
        conv1d used nowhere else, else None."""
        out = _static_shape(add)
        for prod, other in ((add.args[0], add.args[1]), (add.args[1], add.args[0])):
            value = scope.call(prod)
            name = _op_name(value)
            if (name not in ("relax.matmul", "relax.nn.conv1d", "relax.nn.conv1d_transpose")
                    or scope.uses.get(prod, 0) != 1):
                continue
            sp, so = _static_shape(prod), _static_shape(other)
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

    def bias(self, call, m, scope):
        found = self._bias_of(call, scope)
        if found is None:
            return None
        prod, bias = found
        name = _op_name(prod)
        new = (self._matmul(prod, scope, bias) if name == "relax.matmul"
               else self._conv1d(prod, scope, bias) if name == "relax.nn.conv1d"
               else self._conv1d_transpose(prod, scope, bias))
        if new is not None:
            self._count("bias_fused")
        return new

    # -- GELU (tanh form) after a matmul ----------------------------------------------------
    _GELU_CONSTS = {"c_half": 0.5, "c_one": 1.0, "c_sqrt": 0.7978845608, "c_cubic": 0.044715}

    def gelu(self, call, m, scope):
        """The matmul (+ bias) that x is, or a reshape of, with its GELU epilogue
        (ACT_GELU_TANH), when x and every step of the GELU have no other use."""
        from tvm import relax

        for k, c in self._GELU_CONSTS.items():
            v = _const_scalar(m[k])
            if v is None or abs(v - c) > 1e-6 * c:
                return None
        if _const_scalar(m["c_three"]) != 3.0:
            return None
        if not all(scope.used_once(m[k]) for k in ("half", "plus1", "tanh", "arg", "inner",
                                                    "cube", "pow")):
            return None
        x = m["pow"].args[0]
        if scope.uses.get(x, 0) != 3 or _static_shape(x) is None:
            return None
        if _static_shape(call) != _static_shape(x):
            return None
        y = x  # the product, or what x is a reshape of (a linear's [L, N] as [1, L, N])
        xv = scope.call(x, "relax.reshape")
        if xv is not None and isinstance(xv.args[0], relax.Var) and scope.uses.get(xv.args[0], 0) == 1:
            y = xv.args[0]
        yv = scope.call(y)
        bias = None
        if _op_name(yv) == "relax.add":
            found = self._bias_of(yv, scope)
            if found is None or _op_name(found[0]) != "relax.matmul":
                return None
            mm, bias = found
        elif _op_name(yv) == "relax.matmul":
            mm = yv
        else:
            return None
        new = self._matmul(mm, scope, bias, act=ACT_GELU_TANH)
        if new is None:
            return None
        self._count("gelu_fused")
        if bias is not None:
            self._count("bias_fused")
        return new if y is x else relax.op.reshape(new, _static_shape(x))

    # -- softmax ----------------------------------------------------------------------------
    def softmax(self, call, m, scope):
        (x,) = call.args
        sx, out = _static_shape(x), _static_shape(call)
        if sx is None or out is None or not sx or int(call.attrs.axis) not in (-1, len(sx) - 1):
            return None
        return extern_call(SoftmaxConfig(num_threads=self.nth), [x], out)

    # -- attention --------------------------------------------------------------------------
    def _bhsd(self, x, scope):
        """(tensor, layout) for a [B, H, rows, D] operand: the [B, rows, H, D]
        tensor it is permute_dims([0, 2, 1, 3]) of (layout 1), else itself (0)."""
        v = scope.call(x, "relax.permute_dims")
        if v is not None and v.attrs.axes is not None:
            if [int(a) for a in v.attrs.axes] == [0, 2, 1, 3] and _static_shape(v.args[0]):
                return v.args[0], 1
        return x, 0

    def attention(self, call, m, scope):
        """attention_v1 (output [B, H, L, D]) for the SDPA decomposition ending in
        ``call = matmul(P, v)``, else None."""
        import math

        from tvm import relax

        p3, v3 = call.args
        sp, sv, so = _static_shape(p3), _static_shape(v3), _static_shape(call)
        if sp is None or sv is None or so is None or len(sp) not in (3, 4):
            return None
        v4, pw = scope.peel(v3), scope.peel(p3)
        s_v4, s_pw = _static_shape(v4), _static_shape(pw)
        if s_v4 is None or s_pw is None or len(s_v4) != 4 or len(s_pw) != 4:
            return None
        B, H, L, S = s_pw
        D = s_v4[3]
        if s_v4 != (B, H, S, D) or math.prod(so) != B * H * L * D or so[-2:] != (L, D):
            return None
        fix = m.get("fix")
        if fix is not None and (
                _const_scalar(m["zero"]) != 0.0 or _const_scalar(m["ninf"]) != float("-inf")
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
        sq3, sk3 = _static_shape(mm.args[0]), _static_shape(mm.args[1])
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
                name = _op_name(xv)
                if name == "relax.multiply":
                    c = _const_scalar(xv.args[1])
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
        if _static_shape(q4) != (B, H, L, D) or _static_shape(k4) != (B, H, S, D):
            return None
        if mask is not None:
            sm = _static_shape(mask)
            if sm is None or not 2 <= len(sm) <= 4 or sm[-2:] != (L, S):
                return None
            lead = (B, H)[4 - len(sm):] if len(sm) > 2 else ()
            if any(d not in (1, f) for d, f in zip(sm[:-2], lead)):
                return None
        (q, lq), (k, lk), (v, lv) = (self._bhsd(x, scope) for x in (q4, k4, v4))
        cfg = AttentionConfig(q_layout=lq, k_layout=lk, v_layout=lv, o_layout=0,
                              has_mask=int(mask is not None), scale_bits=f32_bits(scale),
                              num_threads=self.nth)
        ext = extern_call(cfg, [q, k, v] + ([mask] if mask is not None else []), (B, H, L, D))
        return ext if (B, H, L, D) == so else relax.op.reshape(ext, so)

    def attention_out(self, call, m, scope):
        """An attention call (output [B, H, L, D]) whose result only feeds reshapes
        to [B, H, L, D] and a chain of permutes composing to [0, 2, 1, 3] (``call``
        its end): the call writing [B, L, H, D] (o_layout 1) in its place."""
        perms, x = [], call
        while _op_name(x) == "relax.permute_dims":  # from the end, inwards
            if x.attrs.axes is None or len(_static_shape(x) or ()) != 4:
                return None
            perms.append([int(a) for a in x.attrs.axes])
            if x is not call and not scope.used_once(x):
                return None
            x = scope.call(x.args[0])
        if _static_shape(scope.var.get(x)) is None:
            return None
        first = _static_shape(scope.var[x])  # what the permutes start from
        while _op_name(x) == "relax.reshape":
            if not scope.used_once(x):
                return None
            x = scope.call(x.args[0])
        if not (x is not None and _op_name(x) == "relax.call_dps_packed"
                and x.args[0].global_symbol == ATTENTION_FUNC and scope.used_once(x)):
            return None
        cfg = AttentionConfig(*[int(v) for v in x.args[1].fields[0].values])
        B, H, L, D = _static_shape(scope.var[x])
        if cfg.o_layout != 0 or first != (B, H, L, D):
            return None
        perm = [0, 1, 2, 3]
        for ax in reversed(perms):
            perm = [perm[a] for a in ax]
        if perm != [0, 2, 1, 3]:
            return None
        return extern_call(cfg._replace(o_layout=1), list(x.args[1].fields[1:]), (B, L, H, D))

    adain, instance_norm, snake = _adain_rule, _instance_norm_rule, _snake_rule

    def lstm_threads(self, call, m, scope):
        """The LSTM's engine call with ``num_threads`` compiled into its config."""
        from tvm import relax

        from . import _native

        f, tup = call.args[0], call.args[1]
        if (not isinstance(tup, relax.Tuple) or not tup.fields
                or not isinstance(tup.fields[0], relax.ShapeExpr)):
            return None
        vals = [int(x) for x in tup.fields[0].values]
        k = _native.Config._fields.index("num_threads")
        if len(vals) != len(_native.Config._fields) or vals[k] == self.nth:
            return None
        vals[k] = self.nth
        self._count("lstm_threads")
        return relax.Call(call.op, [f, relax.Tuple([relax.ShapeExpr(vals)] + list(tup.fields[1:]))],
                          call.attrs, call.ty_args)


#: (pattern, check) in the order applied: the fusions before the plain products they
#: take in.
_RULES = ((_sdpa_pattern, "attention"), (_sdpa_out_pattern, "attention_out"),
          (_gelu_pattern, "gelu"), (_bias_pattern, "bias"),
          (_single("relax.matmul"), "matmul"), (_single("relax.nn.conv1d"), "conv1d"),
          (_single("relax.nn.conv1d_transpose"), "conv1d_transpose"),
          (_single("relax.nn.softmax", 1), "softmax"), (_lstm_pattern, "lstm_threads"),
          (_adain_pattern, "adain"), (_instance_norm_pattern, "instance_norm"),
          (_snake_pattern, "snake"))


def rewrite_dense(mod, num_threads=0):
    """``mod`` with its static float32 dense ops replaced by the engine's externs (see
    the module docstring), followed by dead-code elimination; returns (new module,
    {kind: count}). ``num_threads`` (0: the process default at run time,
    KOKORO_LSTM_NUM_THREADS or the usable cores) is compiled into every extern call
    and into the engine's LSTM calls."""
    import tvm
    from tvm import relax

    rw = _Rewriter(num_threads)
    funcs = {gv: rw.rewrite_function(f) if isinstance(f, relax.Function) else f
             for gv, f in mod.functions.items()}
    out = tvm.IRModule(funcs, attrs=mod.attrs)
    if not rw.counts and not dense_calls(out):
        return out, {}
    out = relax.transform.DeadCodeElimination()(out)
    counts = {}
    for name, cfg in dense_calls(out):
        key = name[len("kokoro_lstm."):-len("_v1")]
        counts[key] = counts.get(key, 0) + 1
        if getattr(cfg, "b_panels", 0) or getattr(cfg, "w_panels", 0):
            counts[key + "_panels"] = counts.get(key + "_panels", 0) + 1
    counts.update((k, n) for k, n in rw.counts.items() if n)
    if counts:  # the externs are the engine's: carry it (plain export_library links it)
        from . import _maybe_attach

        out = _maybe_attach(out)
    return out, counts
