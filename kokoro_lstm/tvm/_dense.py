"""Dense ops of a Relax module into the kokoro_lstm engine (``--dense-method native``).

TVM's default CPU pipeline legalizes ``R.matmul`` and ``R.nn.conv1d`` into naive
loop nests (no BLAS backend in the PyPI wheel; dlight's CPU rules cover GEMV and
reductions only), which makes Kokoro's encoder 20-90x slower than PyTorch
without hours of MetaSchedule tuning. :func:`rewrite_dense` replaces, where every
shape is static and the dtype float32:

* ``R.matmul(A, B)`` (A, B at least 2-D, numpy batch broadcasting where each
  operand's batch is the result's or all ones) by ``kokoro_lstm.matmul_v1``; a
  ``B = R.permute_dims(W, [.., -1, -2])`` of a 2-D ``W`` is read transposed in
  place (no copy); a constant 2-D B (a linear's weight) is packed in 32-column
  panels at compile time (:func:`pack_panels`, once per constant) and read by the
  engine's f32-pgemm kernels instead of OpenBLAS, which packs B on every call:
  bert at 64 tokens 122 -> 102 ms (1 thread) and 51 -> 37 ms (2 threads), at 512
  tokens 858 -> 836 and 458 -> 449 ms (2-core AVX-512 Xeon, medians of alternated
  calls); and ``R.add(matmul, bias[N])`` is fused when the product has no
  other use, and so is a GELU (tanh form, ALBERT's FFN) that follows (its own
  elementwise pass re-read [512, 2048] per bert layer: ~20 ms of ~800 at 512 tokens);
* ``R.nn.conv1d`` (NCW/OIW, groups 1) by ``kokoro_lstm.conv1d_v1``, with the bias
  of a following ``R.add(conv, bias[1, C, 1])`` fused likewise. A constant weight
  of more than one tap (stride and dilation 1) is packed in panels over (tap,
  channel) at compile time (:func:`pack_conv_panels`) and the conv runs on the
  f32-pgemm kernels without im2col (x transposed once; each output step's window
  is a contiguous run of it); a weight that torch.export computes from constants
  (weight norm: Kokoro's text_encoder and f0n convs) is evaluated at compile time
  for it (:func:`_fold_weights`). Others: im2col + OpenBLAS. 2-core AVX-512 Xeon,
  1 thread, one process alternating the two builds: text_encoder 0.77x the time at
  64 tokens, 0.91x at 512; f0n 0.82x at 64 frames, 0.92x at 512;
* ``R.nn.conv1d_transpose`` with groups == channels (f0n's depthwise upsampling)
  by ``kokoro_lstm.conv1d_transpose_dw_v1``;
* the scaled-dot-product attention that ``torch.export`` decomposes SDPA into
  (``matmul(q*a, permute(k)*a)`` [``+ mask``] → ``softmax`` → fully-masked-row
  fix → ``matmul(·, v)``, see :meth:`_Rewriter.attention`) by
  ``kokoro_lstm.attention_v1``: one call per attention, q/k/v read and the output
  written in the ``[B, L, H, D]`` layout of the linears around it (their head
  transposes folded), no ``[B, H, L, S]`` tensor in memory. Measured on bert at 512
  tokens (2-core AVX-512 Xeon, 1 thread): the decomposed form spent ~90 ms per
  forward in TVM kernels and softmax besides its GEMMs, ~180 ms in all;
* ``R.nn.softmax`` over the last axis (bert's attention: TVM's scheduled softmax
  took ~16 ms per [12, 512, 512] layer, half of bert's non-GEMM time) by
  ``kokoro_lstm.softmax_v1`` (vectorized exp, rows on the pool).

Each is a C function of the engine registered with tvm-ffi (src/tvm/kl_tvm_dense.c,
src/ops/dense.c): OpenBLAS sgemm on tiles fixed by the shapes, or the f32-pgemm
kernels on packed constant weights, on the engine's thread pool. :func:`kokoro_lstm.tvm.export_library` links the engine into the
artifact, so it runs where TVM's runtime runs, without Python.
"""
from __future__ import annotations

__all__ = ["MATMUL_FUNC", "CONV1D_FUNC", "CONV1D_TRANSPOSE_DW_FUNC", "SOFTMAX_FUNC",
           "ATTENTION_FUNC", "ABI_VERSION",
           "DENSE_METHODS", "select_dense_method", "rewrite_dense", "count_dense_calls"]

ABI_VERSION = 1
MATMUL_FUNC = "kokoro_lstm.matmul_v1"
CONV1D_FUNC = "kokoro_lstm.conv1d_v1"
CONV1D_TRANSPOSE_DW_FUNC = "kokoro_lstm.conv1d_transpose_dw_v1"
SOFTMAX_FUNC = "kokoro_lstm.softmax_v1"
ATTENTION_FUNC = "kokoro_lstm.attention_v1"
#: Width of the panels of a packed B (KL_DENSE_PANEL in src/ops/dense.h).
PANEL = 32
DENSE_FUNCS = (MATMUL_FUNC, CONV1D_FUNC, CONV1D_TRANSPOSE_DW_FUNC, SOFTMAX_FUNC, ATTENTION_FUNC)
#: ``--dense-method`` values: native (the engine's externs) or tvm (TVM's own lowering).
DENSE_METHODS = ("native", "tvm")


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


def _count_uses(expr, uses):
    """Adds the Var references of ``expr`` into ``uses``; False for an expr kind
    it does not know (then nothing in its function is fused)."""
    from tvm import relax

    if isinstance(expr, relax.Var):
        uses[expr] = uses.get(expr, 0) + 1
        return True
    if isinstance(expr, relax.Call):
        return all(_count_uses(a, uses) for a in expr.args)
    if isinstance(expr, relax.Tuple):
        return all(_count_uses(f, uses) for f in expr.fields)
    if isinstance(expr, relax.TupleGetItem):
        return _count_uses(expr.tuple_value, uses)
    import tvm

    leaf = tuple(getattr(mod, n) for mod, n in (
        (tvm.ir.expr, "Constant"), (tvm.ir.expr, "StringImm"), (relax, "ShapeExpr"),
        (relax, "PrimValue"), (relax, "DataTypeImm"), (tvm.ir, "GlobalVar"),
        (relax, "ExternFunc")) if hasattr(mod, n))
    return isinstance(expr, leaf)


def _const_scalar(e):
    """The float value of a scalar (or one-element) float Constant, else None."""
    import tvm

    if not isinstance(e, tvm.ir.expr.Constant) or not hasattr(e.value, "numpy"):
        return None
    a = e.value.numpy()
    if a.size != 1 or a.dtype.kind != "f":
        return None
    return float(a.reshape(()))


def _call_vars(e):
    """The Vars a binding value reads directly (call arguments, tuple fields)."""
    from tvm import relax

    if isinstance(e, relax.Var):
        return [e]
    if isinstance(e, relax.Call):
        return [v for a in e.args for v in _call_vars(a)]
    if isinstance(e, relax.Tuple):
        return [v for f in e.fields for v in _call_vars(f)]
    if isinstance(e, relax.TupleGetItem):
        return _call_vars(e.tuple_value)
    return []


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


def _conv_on_panels(w_shape, stride, dilation):
    """Whether a conv1d with a constant weight runs on panels (``w_panels``):
    stride and dilation 1 (its shifted rows are then contiguous) and a kernel of
    more than one tap. A 1-tap conv needs no im2col on the BLAS path either and
    measured level or slower on panels (512 -> 256 channels, 256 steps, 2-core
    AVX-512 Xeon: 0.99x at 1 thread, 1.17x at 2)."""
    return stride == 1 and dilation == 1 and w_shape is not None and w_shape[2] > 1


def _f32_bits(x):
    import struct

    return struct.unpack("<i", struct.pack("<f", x))[0]


class _Rewriter:
    def __init__(self, num_threads):
        self.nth = int(num_threads or 0)
        self.counts = {}
        self.packed = {}
        self.folded = {}  # var -> Constant (_fold_weights)

    def _count(self, key):
        self.counts[key] = self.counts.get(key, 0) + 1

    # -- matmul -----------------------------------------------------------------
    def matmul(self, call, bindings, bias=None, act=0):
        from tvm import relax

        a, b = call.args
        sa, sb, out = _static_shape(a), _static_shape(b), _static_shape(call)
        if sa is None or sb is None or out is None or len(sa) < 2 or len(sb) < 2:
            return None
        if str(call.attrs.out_dtype) not in ("", "None", "void", "float32"):
            return None
        cb = out[:-2]
        trans_b = 0
        bb = bindings.get(b) if isinstance(b, relax.Var) else None
        if _op_name(bb) == "relax.permute_dims" and len(sb) == 2:
            w = bb.args[0]
            axes = bb.attrs.axes
            if (_static_shape(w) is not None
                    and (axes is None or [int(x) for x in axes] == [1, 0])):
                b, sb, trans_b = w, _static_shape(w), 1
        if not (_batch_ok(sa, cb) and _batch_ok(sb, cb)):
            return None
        vals = [ABI_VERSION, trans_b, int(bias is not None), self.nth]
        if len(sb) == 2 and _is_const(b):
            b = self._panels(b, trans_b)
            vals += [act, 1]
        elif act:
            vals.append(act)
        self._count("matmul")
        return relax.call_dps_packed(MATMUL_FUNC,
                                     [relax.ShapeExpr(vals), a, b] + ([bias] if bias is not None else []),
                                     relax.TensorType(out, "float32"))

    def _panels(self, w, layout):
        """The Constant w packed in panels, once per constant (ALBERT's 12 layers
        share one set of weights): layout 0 / 1 is a matmul's op(w)
        (:func:`pack_panels` with ``trans``), "conv" a conv1d weight
        (:func:`pack_conv_panels`)."""
        from tvm import relax

        key = (w, layout)
        if key not in self.packed:
            v = w.value.numpy()
            self.packed[key] = relax.const(pack_conv_panels(v) if layout == "conv"
                                           else pack_panels(v, layout))
            self._count("panels_packed")
        return self.packed[key]

    # -- conv1d -----------------------------------------------------------------
    def conv1d(self, call, bindings, bias=None):
        from tvm import relax

        x, w = call.args
        at = call.attrs
        sx, sw, out = _static_shape(x), _static_shape(w), _static_shape(call)
        if (sx is None or sw is None or out is None or len(sx) != 3 or int(at.groups) != 1
                or at.data_layout != "NCW" or at.kernel_layout != "OIW"
                or at.out_layout != "NCW" or str(at.out_dtype) not in ("", "None", "void", "float32")):
            return None
        pad = [int(p) for p in at.padding] or [0]
        stride, dil = int(at.strides[0]), int(at.dilation[0])
        vals = [ABI_VERSION, stride, pad[0], pad[-1], dil, int(bias is not None), self.nth]
        w = self.folded.get(w, w)
        if _conv_on_panels(sw, stride, dil) and _is_const(w):
            w = self._panels(w, "conv")
            vals.append(1)
        self._count("conv1d")
        return relax.call_dps_packed(CONV1D_FUNC, [relax.ShapeExpr(vals), x, w]
                                     + ([bias] if bias is not None else []),
                                     relax.TensorType(out, "float32"))

    def conv1d_transpose(self, call, bindings, bias=None):
        from tvm import relax

        x, w = call.args
        at = call.attrs
        sx, sw, out = _static_shape(x), _static_shape(w), _static_shape(call)
        if (sx is None or sw is None or out is None or len(sx) != 3 or bias is not None
                or at.data_layout != "NCW" or at.kernel_layout != "IOW"
                or at.out_layout != "NCW" or str(at.out_dtype) not in ("", "None", "void", "float32")):
            return None
        C = sx[1]
        if int(at.groups) != C or sw[0] != C or sw[1] != 1 or out[1] != C:
            return None
        pad = [int(p) for p in at.padding] or [0]
        cfg = relax.ShapeExpr([ABI_VERSION, int(at.strides[0]), pad[0], int(at.dilation[0]), 0,
                               self.nth])
        self._count("conv1d_transpose_dw")
        return relax.call_dps_packed(CONV1D_TRANSPOSE_DW_FUNC, [cfg, x, w],
                                     relax.TensorType(out, "float32"))

    def lstm_threads(self, call):
        """The LSTM's engine call with ``num_threads`` compiled into its config."""
        from tvm import relax

        from . import _native

        f, tup = call.args[0], call.args[1]
        if (not isinstance(f, relax.ExternFunc) or f.global_symbol != _native.FUNC_NAME
                or not isinstance(tup, relax.Tuple) or not tup.fields
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

    def softmax(self, call, bindings, bias=None):
        from tvm import relax

        (x,) = call.args
        sx, out = _static_shape(x), _static_shape(call)
        if sx is None or out is None or not sx or bias is not None:
            return None
        if int(call.attrs.axis) not in (-1, len(sx) - 1):
            return None
        cfg = relax.ShapeExpr([ABI_VERSION, self.nth])
        self._count("softmax")
        return relax.call_dps_packed(SOFTMAX_FUNC, [cfg, x], relax.TensorType(out, "float32"))


    # -- GELU (tanh form) after a matmul -------------------------------------------
    def gelu(self, var, call, bindings, uses):
        """A plan for ``var = (x * 0.5) * (tanh((x + x**3 * 0.044715) * 0.7978846) + 1)``
        (ALBERT's gelu_new as exported) where x is a rewritable matmul (+ bias) used
        only there: the matmul extern with its GELU epilogue (act 1), bound to var at
        x's place. Returns ([(var, call)], x's var, the chain's vars), else None."""
        from tvm import relax

        def op(x, name):
            v = bindings.get(x) if isinstance(x, relax.Var) else None
            return v if _op_name(v) == name and uses.get(x, 0) == 1 else None

        def by_const(v, c):
            """The non-constant operand of multiply/add v whose other one is ~c."""
            for a, b in ((v.args[0], v.args[1]), (v.args[1], v.args[0])):
                k = _const_scalar(b)
                if k is not None and abs(k - c) <= 1e-6 * abs(c):
                    return a
            return None

        if _op_name(call) != "relax.multiply":
            return None
        chain = []  # the GELU's intermediate vars (dropped)
        half = e = None
        for a, b in ((call.args[0], call.args[1]), (call.args[1], call.args[0])):
            av, ev = op(a, "relax.multiply"), op(b, "relax.add")
            if av is not None and ev is not None:
                half, e = av, ev
                chain += [a, b]
                break
        if half is None:
            return None
        x = by_const(half, 0.5)
        t = by_const(e, 1.0)
        tv = op(t, "relax.tanh") if t is not None else None
        if x is None or tv is None:
            return None
        dv = op(tv.args[0], "relax.multiply")
        c = by_const(dv, 0.7978845608) if dv is not None else None
        cv = op(c, "relax.add") if c is not None else None
        if cv is None:
            return None
        chain += [t, tv.args[0], c]
        for a, b in ((cv.args[0], cv.args[1]), (cv.args[1], cv.args[0])):
            if a.same_as(x):
                bv = op(b, "relax.multiply")
                chain.append(b)
                break
        else:
            return None
        p = by_const(bv, 0.044715) if bv is not None else None
        pv = op(p, "relax.power") if p is not None else None
        if pv is None or not pv.args[0].same_as(x) or _const_scalar(pv.args[1]) != 3.0:
            return None
        chain.append(p)
        if uses.get(x, 0) != 3 or _static_shape(x) is None:
            return None
        if _static_shape(var) != _static_shape(x):
            return None
        y = x  # the product, or what x is a reshape of (a linear's [L, N] as [1, L, N])
        xv = bindings.get(x)
        if (_op_name(xv) == "relax.reshape" and isinstance(xv.args[0], relax.Var)
                and uses.get(xv.args[0], 0) == 1):
            y = xv.args[0]
        yv = bindings.get(y)
        bias = None
        if _op_name(yv) == "relax.add":
            found = self._bias_for(yv, bindings, uses)
            if found is None or _op_name(found[0]) != "relax.matmul":
                return None
            mm, bias = found
        elif _op_name(yv) == "relax.matmul":
            mm = yv
        else:
            return None
        new = self.matmul(mm, bindings, bias, act=1)
        if new is None:
            return None
        self._count("gelu_fused")  # (its bias add is counted when the loop meets it)
        if y is not x:
            tmp = relax.Var("gelu", relax.TensorType(_static_shape(y), "float32"))
            return [(tmp, new), (var, relax.op.reshape(tmp, _static_shape(x)))], x, set(chain)
        return [(var, new)], x, set(chain)

    # -- attention ----------------------------------------------------------------
    def _peel(self, x, bindings):
        """x through reshapes and same-size broadcast_to (row-major views of it)."""
        import math

        while True:
            v = bindings.get(x)
            name = _op_name(v)
            if name not in ("relax.reshape", "relax.broadcast_to"):
                return x
            src = v.args[0]
            a, b = _static_shape(src), _static_shape(x)
            if a is None or b is None or math.prod(a) != math.prod(b):
                return x
            x = src

    def _bhsd(self, x, bindings):
        """(tensor, layout) for a [B, H, rows, D] operand: the [B, rows, H, D]
        tensor it is permute_dims([0, 2, 1, 3]) of (layout 1), else itself (0)."""
        v = bindings.get(x)
        if _op_name(v) == "relax.permute_dims" and v.attrs.axes is not None:
            if [int(a) for a in v.attrs.axes] == [0, 2, 1, 3] and _static_shape(v.args[0]):
                return v.args[0], 1
        return x, 0

    def _masked_row_fix(self, pw, bindings):
        """softmax input S2 and softmax var P of ``where(no score > -inf in the row,
        0, P)`` (torch's SDPA decomposition), else None."""
        from tvm import relax

        v = bindings.get(pw)
        if _op_name(v) != "relax.where":
            return None
        c, z, p = v.args
        zv = bindings.get(z)
        if _op_name(zv) != "relax.full_like" or _const_scalar(zv.args[1]) != 0.0:
            return None
        chain = ["relax.logical_not", "relax.astype", "relax.max", "relax.astype",
                 "relax.logical_not", "relax.equal"]
        x = c
        for want in chain:
            xv = bindings.get(x) if isinstance(x, relax.Var) else None
            if _op_name(xv) != want:
                return None
            if want == "relax.max" and [int(a) for a in (xv.attrs.axis or [])] not in ([-1], [3]):
                return None
            if want == "relax.equal":
                if _const_scalar(xv.args[1]) != float("-inf"):
                    return None
                return xv.args[0], p
            x = xv.args[0]
        return None

    def attention(self, var, call, bindings, users):
        """A plan for the SDPA decomposition ending in ``var = matmul(P, v)``:
        (new bindings, vars to drop), else None. See the module docstring."""
        import math

        from tvm import relax

        p3, v3 = call.args
        sp, sv, so = _static_shape(p3), _static_shape(v3), _static_shape(call)
        if sp is None or sv is None or so is None or len(sp) not in (3, 4):
            return None
        v4 = self._peel(v3, bindings)
        pw = self._peel(p3, bindings)
        s_v4, s_pw = _static_shape(v4), _static_shape(pw)
        if s_v4 is None or s_pw is None or len(s_v4) != 4 or len(s_pw) != 4:
            return None
        B, H, L, S = s_pw
        D = s_v4[3]
        if s_v4 != (B, H, S, D) or math.prod(so) != B * H * L * D or so[-2:] != (L, D):
            return None
        fix = self._masked_row_fix(pw, bindings)
        if fix is not None:
            s2, p = fix
        else:
            s2, p = None, pw
        pv = bindings.get(p)
        if _op_name(pv) != "relax.nn.softmax" or int(pv.attrs.axis) not in (-1, 3):
            return None
        if s2 is not None and not pv.args[0].same_as(s2):
            return None
        s2 = pv.args[0]
        mask = None
        s4 = s2
        av = bindings.get(s2)
        if _op_name(av) == "relax.add":
            for a, b in ((av.args[0], av.args[1]), (av.args[1], av.args[0])):
                mm = bindings.get(self._peel(a, bindings))
                if _op_name(mm) == "relax.matmul":
                    s4, mask = a, b
                    break
            else:
                return None
        # (no mask and no row fix: only inf inputs make a row all -inf, NaN there, zeros here)
        mm = bindings.get(self._peel(s4, bindings))
        if _op_name(mm) != "relax.matmul":
            return None
        # the products' own operands: [.., L, D] @ [.., D, S] and [.., L, S] @ [.., S, D], the
        # batch folding into B * H (the peeled reshapes are then row-major views)
        sq3, sk3 = _static_shape(mm.args[0]), _static_shape(mm.args[1])
        if (sq3 is None or sk3 is None or sq3[-2:] != (L, D) or sk3[-2:] != (D, S)
                or sp[-2:] != (L, S) or sv[-2:] != (S, D)
                or any(math.prod(x[:-2]) != B * H for x in (sq3, sk3, sp, sv))):
            return None
        if fix is None and mask is not None:
            return None  # a mask without torch's row fix: rows all -inf would be NaN there
        scale = 1.0

        def strip(x, want_t):
            nonlocal scale
            transposed = False
            while True:
                x = self._peel(x, bindings)
                xv = bindings.get(x)
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

        q4 = strip(mm.args[0], False)
        k4 = strip(mm.args[1], True)
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
        (q, lq), (k, lk), (v, lv) = (self._bhsd(x, bindings) for x in (q4, k4, v4))
        # the output: [B, H, L, D] through reshapes, or [B, L, H, D] when the result only
        # feeds a chain of permutes that composes to [0, 2, 1, 3] (then bound to its end)
        drop, out_var, lo = set(), None, 0
        x, perm = var, None
        while len(users.get(x, ())) == 1:
            u = users[x][0]
            uv = bindings.get(u)
            name = _op_name(uv)
            su = _static_shape(u)
            if name == "relax.reshape" and perm is None and su == (B, H, L, D):
                pass
            elif name == "relax.permute_dims" and len(su or ()) == 4 and uv.attrs.axes is not None:
                ax = [int(a) for a in uv.attrs.axes]
                perm = [(perm or [0, 1, 2, 3])[a] for a in ax]
            else:
                break
            drop.add(x)
            x = u
            if perm == [0, 2, 1, 3]:
                out_var, lo = x, 1
                break
        if out_var is None:
            drop = set()
        else:
            drop.add(out_var)  # its binding moves up to var's place
        cfg = relax.ShapeExpr([ABI_VERSION, lq, lk, lv, lo, int(mask is not None),
                               _f32_bits(scale), self.nth])
        oshape = (B, L, H, D) if lo else (B, H, L, D)
        ext = relax.call_dps_packed(ATTENTION_FUNC, [cfg, q, k, v] + ([mask] if mask is not None else []),
                                    relax.TensorType(oshape, "float32"))
        self._count("attention")
        if out_var is not None:
            return [(out_var, ext)], drop
        if oshape == so:
            return [(var, ext)], drop
        tmp = relax.Var("attn", relax.TensorType(oshape, "float32"))
        return [(tmp, ext), (var, relax.op.reshape(tmp, so))], drop

    RULES = {"relax.matmul": "matmul", "relax.nn.conv1d": "conv1d",
             "relax.nn.conv1d_transpose": "conv1d_transpose", "relax.nn.softmax": "softmax"}

    def _bias_for(self, add, bindings, uses):
        """(product binding value, bias) when ``add`` adds a per-channel bias to a
        rewritable product used nowhere else."""
        from tvm import relax

        out = _static_shape(add)
        for prod, other in ((add.args[0], add.args[1]), (add.args[1], add.args[0])):
            if not isinstance(prod, relax.Var) or uses.get(prod, 0) != 1:
                continue
            value = bindings.get(prod)
            name = _op_name(value)
            if name not in ("relax.matmul", "relax.nn.conv1d"):
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

    def rewrite_function(self, func):
        from tvm import relax

        body = func.body
        if not isinstance(body, relax.SeqExpr):
            return func
        bindings, uses = {}, {}
        fusable = True
        for block in body.blocks:
            for bd in block.bindings:
                if isinstance(bd, relax.VarBinding):
                    bindings[bd.var] = bd.value
                    fusable &= _count_uses(bd.value, uses)
                else:
                    fusable = False
        fusable &= _count_uses(body.body, uses)
        # weights computed from constants (weight norm) in front of a conv on panels
        self.folded.update(_fold_weights(func, [
            v.args[1] for v in bindings.values()
            if _op_name(v) == "relax.nn.conv1d" and isinstance(v.args[1], relax.Var)
            and _conv_on_panels(_static_shape(v.args[1]), int(v.attrs.strides[0]),
                                int(v.attrs.dilation[0]))]))
        # attention plans (a pre-pass: each replaces bindings further down its block)
        plans, drop = {}, set()
        for block in body.blocks:
            users = {}
            for bd in block.bindings:
                if isinstance(bd, relax.VarBinding):
                    for v in _call_vars(bd.value):
                        users.setdefault(v, []).append(bd.var)
            for v in _call_vars(body.body):
                users.setdefault(v, []).append(None)
            for bd in block.bindings:
                if isinstance(bd, relax.VarBinding) and _op_name(bd.value) == "relax.matmul":
                    plan = self.attention(bd.var, bd.value, bindings, users)
                    if plan is not None:
                        plans[bd.var] = plan[0]
                        drop |= plan[1]
                elif (isinstance(bd, relax.VarBinding) and fusable
                      and _op_name(bd.value) == "relax.multiply"):
                    plan = self.gelu(bd.var, bd.value, bindings, uses)
                    if plan is not None:  # emitted at x's place; var's own binding goes
                        plans[plan[1]] = plan[0]
                        drop |= plan[2] | {bd.var}
        changed = bool(plans)
        blocks = []
        bb = relax.BlockBuilder()
        for block in body.blocks:
            new_bindings = []
            for bd in block.bindings:
                if bd.var in plans:
                    for pv, val in plans[bd.var]:
                        new_bindings.append(relax.VarBinding(pv, bb.normalize(val)))
                    continue
                if bd.var in drop:
                    continue
                new = None
                if isinstance(bd, relax.VarBinding):
                    v = bd.value
                    name = _op_name(v)
                    if name == "relax.add" and fusable:
                        found = self._bias_for(v, bindings, uses)
                        if found is not None:
                            prod, bias = found
                            new = getattr(self, self.RULES[_op_name(prod)])(prod, bindings, bias)
                            if new is not None:
                                self._count("bias_fused")
                    elif name in self.RULES:
                        new = getattr(self, self.RULES[name])(v, bindings)
                    elif name == "relax.call_dps_packed" and self.nth:
                        new = self.lstm_threads(v)
                if new is not None:
                    new = bb.normalize(new)
                    new_bindings.append(relax.VarBinding(bd.var, new))
                    changed = True
                else:
                    new_bindings.append(bd)
            blocks.append(relax.DataflowBlock(new_bindings) if isinstance(block, relax.DataflowBlock)
                          else relax.BindingBlock(new_bindings))
        if not changed:
            return func
        new_body = relax.SeqExpr(blocks, body.body)
        return relax.Function(func.params, new_body, func.ret_ty, func.is_pure,
                              func.attrs, func.span)


def rewrite_dense(mod, num_threads=0):
    """``mod`` with its static float32 matmul / conv1d / depthwise conv1d_transpose
    calls replaced by the engine's externs (see the module docstring), followed by
    dead-code elimination; returns (new module, {kind: count}). ``num_threads``
    (0: the process default at run time, KOKORO_LSTM_NUM_THREADS or the usable
    cores) is compiled into every extern call and into the engine's LSTM calls."""
    import tvm
    from tvm import relax

    rw = _Rewriter(num_threads)
    funcs = {}
    for gv, func in mod.functions.items():
        funcs[gv] = rw.rewrite_function(func) if isinstance(func, relax.Function) else func
    out = tvm.IRModule(funcs, attrs=mod.attrs)
    if not rw.counts:
        return out, {}
    out = relax.transform.DeadCodeElimination()(out)
    # what is left after dead-code elimination (a product whose bias add took it
    # over was rewritten too, then dropped)
    text = out.script(show_meta=False)
    calls = count_dense_calls(text)
    counts = {k: calls[f] for k, f in (("matmul", MATMUL_FUNC), ("conv1d", CONV1D_FUNC),
                                        ("conv1d_transpose_dw", CONV1D_TRANSPOSE_DW_FUNC),
                                        ("softmax", SOFTMAX_FUNC), ("attention", ATTENTION_FUNC))
              if f in calls}
    for key, func, ncfg in (("matmul_panels", MATMUL_FUNC, 6), ("conv1d_panels", CONV1D_FUNC, 8)):
        panels = _count_panel_calls(text, func, ncfg)
        if panels:
            counts[key] = panels
    for k in ("bias_fused", "gelu_fused", "panels_packed", "lstm_threads"):
        if rw.counts.get(k):
            counts[k] = rw.counts[k]
    if counts:  # the externs are the engine's: carry it (plain export_library links it)
        from . import _maybe_attach

        out = _maybe_attach(out)
    return out, counts


def _count_panel_calls(text, func, ncfg):
    """The calls of extern ``func`` in a module's text that read their weight
    packed in panels (a config of ``ncfg`` values, the last one 1)."""
    import re

    return len(re.findall(re.escape(func) + r'", \(R\.shape\(\[(?:-?\d+, ){%d}1\]\)' % (ncfg - 1),
                          text))


def count_dense_calls(mod_or_text) -> dict:
    """{extern name: number of calls} in a module (or its printed text)."""
    import re

    text = mod_or_text if isinstance(mod_or_text, str) else mod_or_text.script(show_meta=False)
    counts = {f: len(re.findall(re.escape(f) + r"\b", text)) for f in DENSE_FUNCS}
    return {f: n for f, n in counts.items() if n}
