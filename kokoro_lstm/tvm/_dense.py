"""Dense ops of a Relax module into the kokoro_lstm engine (``--dense-method native``).

TVM's default CPU pipeline legalizes ``R.matmul`` and ``R.nn.conv1d`` into naive
loop nests (no BLAS backend in the PyPI wheel; dlight's CPU rules cover GEMV and
reductions only), which makes Kokoro's encoder 20-90x slower than PyTorch
without hours of MetaSchedule tuning. :func:`rewrite_dense` replaces, where every
shape is static and the dtype float32:

* ``R.matmul(A, B)`` (A, B at least 2-D, numpy batch broadcasting where each
  operand's batch is the result's or all ones) by ``kokoro_lstm.matmul_v1``; a
  ``B = R.permute_dims(W, [.., -1, -2])`` of a 2-D ``W`` is read transposed in
  place (no copy), and ``R.add(matmul, bias[N])`` is fused when the product has no
  other use;
* ``R.nn.conv1d`` (NCW/OIW, groups 1) by ``kokoro_lstm.conv1d_v1`` (im2col + GEMM),
  with the bias of a following ``R.add(conv, bias[1, C, 1])`` fused likewise;
* ``R.nn.conv1d_transpose`` with groups == channels (f0n's depthwise upsampling)
  by ``kokoro_lstm.conv1d_transpose_dw_v1``;
* ``R.nn.softmax`` over the last axis (bert's attention: TVM's scheduled softmax
  took ~16 ms per [12, 512, 512] layer, half of bert's non-GEMM time) by
  ``kokoro_lstm.softmax_v1`` (vectorized exp, rows on the pool).

Each is a C function of the engine registered with tvm-ffi (src/tvm/kl_tvm_dense.c,
src/ops/dense.c): OpenBLAS sgemm on tiles fixed by the shapes, on the engine's
thread pool. :func:`kokoro_lstm.tvm.export_library` links the engine into the
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


class _Rewriter:
    def __init__(self, num_threads):
        self.nth = int(num_threads or 0)
        self.counts = {}

    def _count(self, key):
        self.counts[key] = self.counts.get(key, 0) + 1

    # -- matmul -----------------------------------------------------------------
    def matmul(self, call, bindings, bias=None):
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
        cfg = relax.ShapeExpr([ABI_VERSION, trans_b, int(bias is not None), self.nth])
        self._count("matmul")
        return relax.call_dps_packed(MATMUL_FUNC, [cfg, a, b] + ([bias] if bias is not None else []),
                                     relax.TensorType(out, "float32"))

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
        cfg = relax.ShapeExpr([ABI_VERSION, int(at.strides[0]), pad[0], pad[-1],
                               int(at.dilation[0]), int(bias is not None), self.nth])
        self._count("conv1d")
        return relax.call_dps_packed(CONV1D_FUNC, [cfg, x, w] + ([bias] if bias is not None else []),
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
        changed = False
        blocks = []
        bb = relax.BlockBuilder()
        for block in body.blocks:
            new_bindings = []
            for bd in block.bindings:
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
    calls = count_dense_calls(out)
    counts = {k: calls[f] for k, f in (("matmul", MATMUL_FUNC), ("conv1d", CONV1D_FUNC),
                                        ("conv1d_transpose_dw", CONV1D_TRANSPOSE_DW_FUNC),
                                        ("softmax", SOFTMAX_FUNC))
              if f in calls}
    for k in ("bias_fused", "lstm_threads"):
        if rw.counts.get(k):
            counts[k] = rw.counts[k]
    return out, counts


def count_dense_calls(mod_or_text) -> dict:
    """{extern name: number of calls} in a module (or its printed text)."""
    import re

    text = mod_or_text if isinstance(mod_or_text, str) else mod_or_text.script(show_meta=False)
    counts = {f: len(re.findall(re.escape(f) + r"\b", text)) for f in DENSE_FUNCS}
    return {f: n for f, n in counts.items() if n}
