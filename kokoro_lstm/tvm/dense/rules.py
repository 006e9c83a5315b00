"""The rules table and the rewrite that applies it to every Relax function of a module."""
from __future__ import annotations

import numpy as np

from . import attention, conv, epilogue, matmul, norm, patterns
from .configs import DENSE_METHODS
from .conv import fold_weights, weights_to_fold
from .ir import Scope, dense_calls
from .panels import pack_conv_panels, pack_conv_transpose_panels, pack_panels


def select_dense_method(target="llvm", method="native") -> str:
    """Validates ``method`` for ``target``: ``native`` needs a CPU or cuda target and
    the kokoro_lstm extension; ``tvm`` always works."""
    from .. import _require_native, _target_info

    if method not in DENSE_METHODS:
        raise ValueError(f"unknown dense method {method!r}; expected one of {DENSE_METHODS}")
    if method == "native":
        kind, is_cpu = _target_info(target)
        _require_native("dense method 'native'", kind, "a CPU or cuda target",
                        is_cpu or kind == "cuda", "'tvm'", "'tvm'")
    return method


def lstm_threads_rule(rw, call, m, scope):
    """The LSTM's engine call with ``num_threads`` compiled into its config."""
    from tvm import relax

    from .. import _native

    f, tup = call.args[0], call.args[1]
    if (not isinstance(tup, relax.Tuple) or not tup.fields
            or not isinstance(tup.fields[0], relax.ShapeExpr)):
        return None
    vals = [int(x) for x in tup.fields[0].values]
    k = _native.Config._fields.index("num_threads")
    if len(vals) != len(_native.Config._fields) or vals[k] == rw.nth:
        return None
    vals[k] = rw.nth
    rw.count("lstm_threads")
    return relax.Call(call.op, [f, relax.Tuple([relax.ShapeExpr(vals)] + list(tup.fields[1:]))],
                      call.attrs, call.ty_args)


#: (pattern, check) in the order applied: the fusions before the plain products they
#: take in. A check ``rule(rw, call, matches, scope)`` returns the call's replacement
#: or None. A new op: its config in .configs, its pattern in .patterns, its rule in its
#: family's module, and a row here (src/ops/README.md says the C side).
RULES = ((patterns.sdpa_pattern, attention.attention_rule),
         (patterns.sdpa_out_pattern, attention.attention_out_rule),
         (patterns.gelu_pattern, epilogue.gelu_rule), (patterns.bias_pattern, epilogue.bias_rule),
         (patterns.single("relax.matmul"), matmul.matmul_rule),
         (patterns.single("relax.nn.conv1d"), conv.conv1d_rule),
         (patterns.single("relax.nn.conv1d_transpose"), conv.conv1d_transpose_rule),
         (patterns.single("relax.nn.softmax", 1), attention.softmax_rule),
         (patterns.lstm_pattern, lstm_threads_rule),
         (patterns.adain_pattern, norm.adain_rule),
         (patterns.instance_norm_pattern, norm.instance_norm_rule),
         (patterns.snake_pattern, norm.snake_rule))
#: The rules of a cuda target: the convolutions and the products by a constant weight
#: (a bias fused), on the engine's CUDA kernels; every other op is TVM's own there.
CUDA_RULES = (epilogue.bias_rule, matmul.matmul_rule, conv.conv1d_rule, conv.conv1d_transpose_rule)


class Rewriter:
    """The rules, one pattern and one check each (:data:`RULES`), applied in turn to
    every Relax function of a module; counts what it fused and packed."""

    def __init__(self, num_threads, cuda=False):
        self.nth = int(num_threads or 0)
        self.cuda = bool(cuda)
        self.counts = {}
        self.packed = {}  # (Constant, layout) -> its panels
        self.folded = {}  # var -> Constant (fold_weights)
        self.nk = {}  # (Constant, trans_b) -> the weight as [N, K] (rows_nk)

    def count(self, key):
        self.counts[key] = self.counts.get(key, 0) + 1

    def rewrite_function(self, func):
        from tvm import relax
        from tvm.relax.dpl import rewrite_call

        if not isinstance(func.body, relax.SeqExpr):
            return func
        scope = Scope(func)
        # weights computed from constants (weight norm) in front of a conv on panels
        self.folded.update(fold_weights(func, weights_to_fold(scope, self.cuda)))
        for make_pattern, rule in RULES:
            if ((rule is lstm_threads_rule and not self.nth)
                    or (self.cuda and rule not in CUDA_RULES)):
                continue
            pattern, ann = make_pattern()

            def rewrite(call, matches, check=rule, scope=Scope(func), ann=ann):
                """The check's replacement for the matched ``call``, or ``call`` itself;
                the check reads the annotated sub-matches by name."""
                new = check(self, call, {k: matches[p] for k, p in ann.items() if p in matches},
                            scope)
                return call if new is None else new

            func = rewrite_call(pattern, rewrite, func)
        return func

    def rows_nk(self, w, trans_b):
        """The constant 2-D weight of a product as [N, K] rows (``w`` itself when it is
        read transposed, else w^T), once per constant."""
        from tvm import relax

        if trans_b:
            return w
        if w not in self.nk:
            self.nk[w] = relax.const(np.ascontiguousarray(w.value.numpy().T))
        return self.nk[w]

    def panels(self, w, layout):
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
            self.count("panels_packed")
        return self.packed[key]


def rewrite_dense(mod, num_threads=0, target=None):
    """``mod`` with its static float32 dense ops replaced by the engine's externs (see
    the package docstring), followed by dead-code elimination; returns (new module,
    {kind: count}). ``num_threads`` (0: the process default at run time,
    KOKORO_LSTM_NUM_THREADS or the usable cores) is compiled into every extern call
    and into the engine's LSTM calls. For a cuda ``target`` (sm_80 on) only the
    convolutions and the products by constant weights (:data:`CUDA_RULES`), their
    weights unpacked."""
    import tvm
    from tvm import relax

    from .. import _cuda, _target_info

    cuda = target is not None and _target_info(target)[0] == "cuda"
    if cuda and not _cuda.convs_run(target):
        return mod, {}
    rw = Rewriter(num_threads, cuda=cuda)
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
        from .. import _maybe_attach

        out = _maybe_attach(out)
    return out, counts
