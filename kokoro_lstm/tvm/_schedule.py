"""A CPU pipeline for the ported encoder: TVM's default one plus a schedule for
the fused elementwise / reduction kernels that the default leaves serial and
scalar.

TVM's default CPU pipeline (``relax.backend.cpu_generic``) legalizes every op into
plain loop nests and schedules none of them: with the dense ops on the engine's
externs (:mod:`.dense`), those loops (layer / instance norm, AdaIN, softmax,
GELU, masking, transposes) are most of what is left of a call.
:func:`cpu_pipeline` applies, between FuseTIR and the lowering,

* dlight's CPU ``Reduction`` rule (softmax, layer norm: parallel rows, vectorized
  elementwise stages), and
* :class:`Injective`: inline the producers of an all-elementwise kernel, then run
  its output loop nest parallel over the outer iterations and vectorized over the
  innermost when it divides into vector lanes.

Before that, :func:`prepare` rewrites ``power(x, 2 | 3 | 0.5)`` into multiplies /
sqrt (TVM lowers power to one scalar libm ``powf`` per element: bert's GELU) and
applies TVM's ``FastMathTransform`` (softmax, exp, tanh, erf as vectorizable
polynomials; max error against PyTorch stays ~2e-6 on bert at 512 tokens).

Anything a rule cannot schedule (declines, or fails on with ``ScheduleError``:
:class:`Guarded`) is left as TVM's default made it. ``parallel=False``
(``--num-threads 1``) keeps every loop on the calling thread, so TVM's thread pool
is never started.
"""
from __future__ import annotations

__all__ = ["cpu_pipeline", "Injective", "Guarded", "simplify_power", "prepare"]

#: fewer output elements than this: no parallel loop (a pool wake-up costs more)
PARALLEL_MIN = 16384


def _injective_rule():
    from tvm import s_tir, tirx
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base import get_extent
    from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
    from tvm.target.codegen import llvm_get_vector_width

    class Injective(CPUScheduleRule):
        """All-spatial kernels: producers inlined; the output nest parallel outside,
        vectorized inside."""

        def __init__(self, parallel=True):
            self.parallel = parallel

        def apply(self, func, target, _tunable):
            if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
                return None
            sch = s_tir.Schedule(func)
            infos = normalize_prim_func(sch)
            if not infos or not all(bi.is_injective() for bi in infos):
                return None
            for bi in reversed(infos[:-1]):
                try:
                    sch.compute_inline(bi.block_rv)
                except Exception:  # noqa: BLE001 - stays a separate (serial) nest
                    pass
            block = infos[-1].block_rv
            loops = sch.get_loops(block)
            if not loops:
                return None
            extents = [get_extent(sch, lp) for lp in loops]
            if not all(isinstance(e, int) for e in extents):
                return None
            total = 1
            for e in extents:
                total *= e
            st = sch.get(block)
            bits = st.writes[0].source.dtype.bits if st.writes else 32
            vbits = llvm_get_vector_width(target)
            lanes = max((vbits if vbits > 0 else 128) // max(bits, 8), 1)
            inner = loops[-1]
            outer_loops = list(loops[:-1])
            if lanes > 1 and extents[-1] % lanes == 0 and extents[-1] >= lanes:
                io, ii = sch.split(inner, factors=[None, lanes])
                sch.vectorize(ii)
                outer_loops.append(io)
            elif len(loops) == 1:
                return sch if not self.parallel else self._par(sch, [inner], total)
            if outer_loops and self.parallel and total >= PARALLEL_MIN:
                self._par(sch, outer_loops, total)
            return sch

        @staticmethod
        def _par(sch, loops, total):
            if total >= PARALLEL_MIN:
                fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
                sch.parallel(fused)
            return sch

    return Injective


def _guarded_rule():
    from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
    from tvm.s_tir.schedule import ScheduleError

    class Guarded(CPUScheduleRule):
        """``rule``, except that a function it cannot schedule (it raises
        ``ScheduleError``) is left to the next rule, else as TVM's default made it.
        dlight's rules schedule a copy of the function, so a failed attempt changes
        nothing. dlight's CPU ``Reduction`` fails so on an unrolled TOPI LSTM step: a
        reduction fused with elementwise blocks that are all outputs (c_t and h_t)."""

        def __init__(self, rule):
            self.rule = rule

        def apply(self, func, target, tunable):
            try:
                return self.rule.apply(func, target, tunable)
            except ScheduleError:
                return None

    return Guarded


def __getattr__(name):
    if name == "Injective":
        return _injective_rule()
    if name == "Guarded":
        return _guarded_rule()
    raise AttributeError(name)


def cpu_pipeline(target, parallel=True):
    """TVM's default CPU pipeline with the schedules above (see the module
    docstring); pass as ``tvm.compile(mod, target, relax_pipeline=...)``."""
    import tvm
    from tvm.relax.backend.cpu_generic import pipeline as cpu
    from tvm.s_tir import dlight as dl

    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    Injective, Guarded = _injective_rule(), _guarded_rule()
    rules = [Guarded(Injective(parallel))] + ([Guarded(dl.cpu.Reduction())] if parallel else [])

    @tvm.transform.module_pass(opt_level=0, name="KokoroLstmCPUPipeline")
    def _pipeline(mod, _ctx):
        with target:
            seq = tvm.transform.Sequential(
                cpu.library_dispatch_passes(target)
                + cpu.legalize_passes(target)
                + [dl.ApplyDefaultSchedule(*rules)]
                + cpu.dataflow_lower_passes(target)
                + cpu.finalize_passes(target))
            return seq(mod)

    return _pipeline


def _power_rewriter():
    from tvm import relax
    from tvm.relax import expr_functor

    @expr_functor.mutator
    class PowerToMultiply(relax.PyExprMutator):
        """power(x, 2 | 3) -> multiplies; power(x, 0.5) -> sqrt (TVM lowers power to
        a scalar libm powf call per element)."""

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            import tvm

            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.power"):
                return call
            x, e = call.args
            if not isinstance(e, tvm.ir.expr.Constant) or not hasattr(e.value, "numpy") or e.value.numpy().size != 1:
                return call
            v = float(e.value.numpy().reshape(()))
            if x.ty.dtype not in ("float32", "float64") or tuple(call.ty.shape) != tuple(x.ty.shape):
                return call
            if v == 2.0:
                return relax.op.multiply(x, x)
            if v == 3.0:
                return relax.op.multiply(relax.op.multiply(x, x), x)
            if v == 0.5:
                return relax.op.sqrt(x)
            if v == 1.0:
                return x
            return call

    return PowerToMultiply


def simplify_power(mod):
    """``mod`` with power by 2, 3 or 0.5 rewritten as multiplies / sqrt."""
    import tvm
    from tvm import relax

    rw = _power_rewriter()(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rw.builder_.update_func(gv, rw.visit_expr(func))
    return rw.builder_.get()


def prepare(mod):
    """The Relax-level part: :func:`simplify_power`, then TVM's FastMathTransform."""
    from tvm import relax

    return relax.transform.FastMathTransform()(simplify_power(mod))
