"""What a port writes and how it checks the compiled module: output files staged and
renamed into place, strict-JSON reports, the compiled module's inputs, outputs and
timing, its comparison with PyTorch and what the library needs where it runs.
Importing it imports neither torch nor TVM.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import time


class Staging:
    """Output files written under temporary names in their own directory and renamed
    into place by :meth:`commit`; :meth:`discard` (or leaving the ``with`` block by an
    exception, Ctrl-C included) removes whatever was written, so a failed or
    interrupted step never leaves a half-written artifact under a final name."""

    def __init__(self):
        self._pending = []  # (temporary path, final path)
        self._blas = set()  # folders that get the engine's BLAS file on commit

    def path(self, final):
        """A temporary path beside ``final`` with the same extension (TVM's
        export_library picks the format from it)."""
        d, base = os.path.split(os.path.abspath(final))
        stem, ext = os.path.splitext(base)
        tmp = os.path.join(d, f".{stem}.partial-{os.getpid()}-{len(self._pending)}{ext}")
        self._pending.append((tmp, final))
        return tmp

    def export_library(self, ex, final_tmp):
        """``kokoro_lstm.tvm.export_library`` to a :meth:`path`; the BLAS file its folder
        needs is written by :meth:`commit`, with the rest (so Ctrl-C leaves none)."""
        import kokoro_lstm.tvm as kt

        kt.export_library(ex, final_tmp, copy_blas=False)
        if kt.uses_engine(ex):
            self._blas.add(os.path.dirname(os.path.abspath(final_tmp)))

    def commit(self):
        from kokoro_lstm.tvm import copy_blas

        for tmp, final in self._pending:
            os.replace(tmp, final)
        for folder in sorted(self._blas):
            copy_blas(folder)
        self._pending, self._blas = [], set()

    def discard(self):
        for tmp, _ in self._pending:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        self._pending, self._blas = [], set()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.discard()
        return False


def _json_safe(obj):
    """``obj`` with every non-finite float (NaN, +-inf) as None: JSON has no NaN."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def write_report(path, report):
    """The report as strict JSON (``null`` for NaN and infinities)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_json_safe(report), f, indent=2, default=str, allow_nan=False)
        f.write("\n")


def _rename_main(mod, name):
    import tvm

    funcs = {}
    for gv, func in mod.functions.items():
        if gv.name_hint == "main":
            funcs[tvm.ir.GlobalVar(name)] = func.with_attr("global_symbol", name)
        else:
            funcs[gv] = func
    return tvm.IRModule(funcs, attrs=mod.attrs)


def _to_tvm(arrays, dev=None):
    import tvm

    return [tvm.runtime.tensor(a, device=dev) for a in arrays]


NO_GPU = ("no CUDA device here: the library is written but not run, timed or validated "
          "(run it where a GPU is)")


def native_dense(mod, opts):
    """(``mod`` with its dense ops on the engine's externs, the rewrites' counts) when
    ``opts["dense_method"]`` is native, else (mod, {}): on CPUs every rule and TVM's
    fast math after it; on cuda the convolutions only, TVM's exact math kept."""
    import kokoro_lstm.tvm as kt
    from kokoro_lstm.tvm import _cuda

    if opts["dense_method"] != "native":
        return mod, {}
    mod, rewrites = kt.rewrite_dense(mod, num_threads=opts["num_threads"] or 0,
                                     target=opts["target"])
    return (mod if _cuda.is_cuda(opts["target"]) else kt.prepare(mod)), rewrites


def build_executable(mod, opts):
    """``tvm.compile`` of a lowered module for ``opts["target"]``: a cuda target through
    :func:`kokoro_lstm.tvm._cuda.build` (cubin kernels, a Relax CUDA graph); a CPU one
    through :func:`kokoro_lstm.tvm.cpu_pipeline` when the dense ops are native, else
    TVM's default pipeline."""
    import tvm

    import kokoro_lstm.tvm as kt
    from kokoro_lstm.tvm import _cuda

    tgt = tvm.target.Target(opts["target"])
    if _cuda.is_cuda(tgt):
        return _cuda.build(mod, tgt)
    if opts["dense_method"] == "native":
        return tvm.compile(mod, target=tgt, relax_pipeline=kt.cpu_pipeline(
            tgt, parallel=opts["num_threads"] != 1))
    return tvm.compile(mod, target=tgt)


def _sync(result, dev):
    """``result`` once ``dev``'s queued work is done (a GPU call returns before its
    kernels finish)."""
    if dev.dlpack_device_type() != 1:
        dev.sync()
    return result


def run_device(opts):
    """(the TVM device a library built for ``opts["target"]`` runs on here, None) -- the
    CPU or the first GPU -- or (None, why) for a cuda target where no GPU here runs it."""
    import tvm

    from kokoro_lstm.tvm import _cuda

    if not _cuda.is_cuda(opts["target"]):
        return tvm.cpu(), None
    dev, arch, gpu = _cuda.device(), _cuda.target_arch(opts["target"]), _cuda.local_arch()
    if dev is None:
        return None, NO_GPU
    if arch and gpu and not _cuda.arch_runs(arch, gpu):
        return None, (f"the GPU here is {gpu}, which cannot run {arch} kernels: the library is "
                      f"written but not run, timed or validated (run it on an {arch} GPU, or "
                      f"port with --target \"cuda -arch={gpu}\")")
    return dev, None


def target_fields(opts, ex):
    """The report's target fields: what was asked, TVM's canonical form, its kind and
    (cuda) architecture, and what the library needs where it runs."""
    from kokoro_lstm.tvm import _cuda

    cuda = _cuda.is_cuda(opts["target"])
    return {"target": opts["target_arg"], "target_tvm": opts["target_json"],
            "target_kind": "cuda" if cuda else "llvm",
            "target_arch": _cuda.target_arch(opts["target"]) if cuda else None,
            "runtime_needs": _runtime_needs(ex, cuda)}


def _as_list(res):
    try:
        return [r.numpy() for r in res]
    except TypeError:
        return [res.numpy()]


def _time_ms(fn, min_runs=3, max_runs=30, budget_s=0.5, warm_s=None):
    """Median wall time of fn() in ms, after one warm-up call (``warm_s``: fn was just
    called, taking that long; no warm-up then). A single timed call when one call
    exceeds the budget."""
    if warm_s is None:
        t0 = time.perf_counter()
        fn()
        warm_s = time.perf_counter() - t0
    if warm_s > budget_s:
        t0 = time.perf_counter()
        fn()
        return round((time.perf_counter() - t0) * 1e3, 4)
    times = []
    t_end = time.perf_counter() + budget_s
    while len(times) < min_runs or (len(times) < max_runs and time.perf_counter() < t_end):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return round(times[len(times) // 2], 4)


def _compare(got, want):
    """(max abs error, scaled error, NaN mismatches) of an output against PyTorch's.

    NaN-aware: a position where one side is NaN and the other is not is a mismatch,
    counted (and failing validation) rather than dropped by max(); NaN on both sides,
    and equal infinities, agree here (validation still fails on them:
    :func:`_nan_both`). The errors are over the other positions, scaled by
    max(1, max|want|) over want's finite values. Different shapes: (inf, inf, 0)."""
    import numpy as np

    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return float("inf"), float("inf"), 0
    g_nan, w_nan = np.isnan(got), np.isnan(want)
    nan_mismatch = int(np.count_nonzero(g_nan != w_nan))
    with np.errstate(invalid="ignore"):
        diff = np.where((got == want) | g_nan | w_nan, 0.0, np.abs(got - want))
    if not diff.size:
        return 0.0, 0.0, nan_mismatch
    e = float(diff.max())
    finite = np.abs(want[np.isfinite(want)])
    return e, e / max(1.0, float(finite.max()) if finite.size else 1.0), nan_mismatch


def _nan_both(got, want):
    """Positions where both sides are NaN: nothing was compared there, so validation
    fails on any (an all-NaN PyTorch output and library output agree everywhere and
    would otherwise pass with error 0)."""
    import numpy as np

    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return 0
    return int(np.count_nonzero(np.isnan(got) & np.isnan(want)))


def _runtime_needs(ex, cuda=False):
    """What the exported library needs where it runs."""
    import kokoro_lstm.tvm as kt

    rt = "TVM runtime (libtvm_runtime + libtvm_ffi" + (" + libtvm_runtime_cuda, the NVIDIA "
                                                       "driver)" if cuda else ")")
    if not kt.uses_engine(ex):
        return {"summary": f"{rt} only", "engine_linked": False, "blas": None}
    from kokoro_lstm import _build_config

    nvrtc = (" and NVRTC (libnvrtc.so.13: the engine compiles its CUDA kernels where it "
             "runs; pip install nvidia-cuda-nvrtc or a CUDA toolkit)" if cuda else "")
    return {"summary": f"{rt}, OpenBLAS{nvrtc}; the kokoro_lstm "
                       "engine is linked into the library (no Python, no kokoro_lstm install)",
            "engine_linked": True, "blas": _build_config.BLAS,
            "nvrtc": "libnvrtc.so.13" if cuda else None,
            "threads": "engine calls: the count compiled in (--num-threads), else "
                       "KOKORO_LSTM_NUM_THREADS or the usable cores; TVM's own loops: "
                       "TVM_NUM_THREADS"}


def _versions():
    import torch
    import tvm

    import kokoro_lstm

    return {"kokoro_lstm": kokoro_lstm.__version__, "torch": torch.__version__,
            "tvm": getattr(tvm, "__version__", "?")}
