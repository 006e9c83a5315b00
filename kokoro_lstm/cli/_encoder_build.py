"""One encoder component with one LSTM method: lower, build, export, run, time and
validate against PyTorch eager, writing ``{component}_ir.py``, ``_compiled.so`` and
``_report.json`` all at once or (failure, Ctrl-C) none.
"""
from __future__ import annotations

import os
import time

from ._artifact import (Staging, _as_list, native_dense, _compare, _nan_both, _rename_main, _sync,
                        _time_ms, _to_tvm, _versions, build_executable, run_device,
                        target_fields, write_report)


def _spec(names, arrays):
    return [{"name": n, "shape": list(a.shape), "dtype": str(a.dtype)}
            for n, a in zip(names, arrays)]


def port_method(comp, method, out_dir, opts, progress):
    """Lower, build, export, validate and time one component with one method. The
    files are written under temporary names and renamed into place at the end, all of
    them or (failure, Ctrl-C) none."""
    with Staging() as staging:
        report = _port_method_staged(comp, method, out_dir, opts, progress, staging)
        staging.commit()
    return report


def _export_for(comp, resolved, opts):
    """(exported program, its LSTM op counts, the cuts' detail, the cuts applied) for
    the resolved LSTM method: the cut export only where the native method lowers it."""
    ep, cuts, lstm_ops = comp.ep, dict(comp.cuts), comp.lstm_ops
    if comp.ep_cut is not None:
        if resolved == "native":
            ep, lstm_ops = comp.ep_cut, comp.lstm_ops_cut
        else:
            cuts = {k: (f"not applied: lstm_method {resolved!r} (cuts need 'native')"
                        if v.startswith("applied") else v) for k, v in cuts.items()}
    if not opts.get("algebra_cuts", True):
        cuts = {"all": "not applied: --no-algebra-cuts"}
    applied = sorted(k for k, v in cuts.items() if v.startswith("applied"))
    return ep, lstm_ops, cuts, applied


def _lower(comp, ep, resolved, applied, opts, progress, tag, times):
    """The Relax module (main renamed to the component's function) and the dense
    rewrites' counts."""
    import kokoro_lstm.tvm as kt

    dense = opts["dense_method"]
    with progress.step(tag, f"lower ({resolved}, dense {dense}"
                       + (f", cuts {'+'.join(applied)}" if applied else "") + ")",
                       times, "lower_s"):
        mod = kt.from_exported_program(ep, lstm_method=resolved, target=opts["target"],
                                       unwrap_unit_return_tuple=False)
        mod = _rename_main(mod, comp.function)
        mod, rewrites = native_dense(mod, opts)
    return mod, rewrites


def _build(mod, tmp, opts, progress, tag, times, staging):
    """The compiled executable, exported to its staged library path."""
    with progress.step(tag, "build", times, "build_s"):
        ex = build_executable(mod, opts)
        staging.export_library(ex, tmp["library"])
    return ex


def _run(comp, ex, dev, opts, progress, tag, times):
    """(the function, its TVM inputs, the outputs of every input set when validating
    else of the full-length one, the first call's seconds) on device ``dev``."""
    from tvm import relax

    fn = relax.VirtualMachine(ex, dev)[comp.function]
    used = comp.inputs if opts["validate"] else comp.inputs[:1]
    tvm_inputs = [_to_tvm([a.numpy() for a in args], dev) for args in used]
    with progress.step(tag, "run", times, "run_s"):
        t0 = time.perf_counter()
        outputs = [_as_list(fn(*tvm_inputs[0]))]
        first_s = time.perf_counter() - t0  # a cold call: the warm-up of the timing below
        outputs += [_as_list(fn(*ti)) for ti in tvm_inputs[1:]]
    return fn, tvm_inputs, outputs, first_s


def _port_method_staged(comp, method, out_dir, opts, progress, staging):
    import kokoro_lstm.tvm as kt

    name = comp.name
    tag = name if not opts.get("multi") else f"{name}/{method}"
    times = {}
    resolved = kt.select_method(opts["target"], method)
    ep, lstm_ops, cuts, applied = _export_for(comp, resolved, opts)
    mod, rewrites = _lower(comp, ep, resolved, applied, opts, progress, tag, times)
    script = mod.script(show_meta=False)
    ir = kt.ir_size(mod)
    os.makedirs(out_dir, exist_ok=True)
    files = {"ir": os.path.join(out_dir, f"{name}_ir.py"),
             "library": os.path.join(out_dir, f"{name}_compiled.so"),
             "report": os.path.join(out_dir, f"{name}_report.json")}
    tmp = {k: staging.path(v) for k, v in files.items()}
    with open(tmp["ir"], "w", encoding="utf-8") as f:
        f.write(script)
    ex = _build(mod, tmp, opts, progress, tag, times, staging)
    dev, why_not = run_device(opts)
    if dev is None:  # a cuda library where no GPU here runs it: written, described, not run
        progress.note(tag, why_not)
        report = _report(comp, method, resolved, opts, [comp.eager(comp.inputs[0])], mod, ex,
                         rewrites, lstm_ops, cuts, applied, ir, times, files)
        report["torch_eager_ms"] = comp.torch_ms()
        if opts["validate"]:
            report["validation"] = {"skipped": why_not, "passed": None}
        report["times_s"] = dict(comp.times, **times)
        write_report(tmp["report"], report)
        return report
    fn, tvm_inputs, outputs, first_s = _run(comp, ex, dev, opts, progress, tag, times)
    report = _report(comp, method, resolved, opts, outputs, mod, ex, rewrites, lstm_ops,
                     cuts, applied, ir, times, files)
    with progress.step(tag, "time", times, "time_s"):
        report["runtime_ms"] = _time_ms(lambda: _sync(fn(*tvm_inputs[0]), dev),
                                        warm_s=first_s)
        report["torch_eager_ms"] = comp.torch_ms()
    if opts["validate"]:
        with progress.step(tag, "validate", times, "validate_s"):
            ref, unpadded = comp.references()
        report["validation"] = _validate(comp, outputs, ref, unpadded, opts["tolerance"],
                                         progress, tag)
    report["times_s"] = dict(comp.times, **times)
    write_report(tmp["report"], report)
    return report


def _report(comp, method, resolved, opts, outputs, mod, ex, rewrites, lstm_ops, cuts,
            applied, ir, times, files):
    """The report before timing and validation fill their fields."""
    import kokoro_lstm.tvm as kt

    return {
        "component": comp.name,
        "function": comp.function,
        "inputs": _spec(comp.input_names, [a.numpy() for a in comp.inputs[0]]),
        "outputs": _spec(comp.output_names, outputs[0]),
        "lstm_method_requested": method,
        "lstm_method": resolved,
        "lstm_semantics": opts["semantics"],
        "dense_method": opts["dense_method"],
        "dense_calls": kt.count_dense_calls(mod),
        # products whose constant weight the lowering packed in panels at compile time
        "dense_packed_weights": {"matmuls": rewrites.get("matmul_panels", 0),
                                 "convs": rewrites.get("conv1d_panels", 0),
                                 "constants": rewrites.get("panels_packed", 0)},
        "algebra_cuts": {"applied": applied, "detail": cuts},
        "f0n_input": opts.get("f0n_input", "en") if comp.name == "f0n" else None,
        **target_fields(opts, ex),
        "seq_len": opts["seq_len"], "aligned_len": opts["aligned_len"],
        "bert_seq_len": opts["bert_seq_len"],
        "static_length": comp.T,
        "weights": opts["weights"],
        "modules": opts["modules"],
        "lstm_ops_in_export": lstm_ops,
        "ir_lines": ir["lines"], "ir_chars": ir["chars"],
        "compile_s": round(times["lower_s"] + times["build_s"], 3),
        "times_s": dict(comp.times, **times),
        "runtime_ms": None,
        "torch_eager_ms": None,
        "num_threads": opts["num_threads"],
        "validation": None,
        "files": {k: os.path.abspath(v) for k, v in files.items()},
        "versions": _versions(),
    }


def _compare_outputs(comp, outputs, ref, progress, tag):
    """Per output: errors and NaN counts over every input set, one note each."""
    per_output = {}
    for k, oname in enumerate(comp.output_names):
        abs_e = rel_e = 0.0
        nans = both = 0
        for got, want in zip(outputs, ref):
            a, r, n = _compare(got[k], want[k])
            abs_e, rel_e, nans = max(abs_e, a), max(rel_e, r), nans + n
            both += _nan_both(got[k], want[k])
        per_output[oname] = {"max_abs_err": abs_e, "scaled_err": rel_e, "nan_mismatch": nans,
                             "nan_both": both}
        progress.note(tag, f"validate {oname} {list(outputs[0][k].shape)}: max abs err "
                           f"{abs_e:.3g}" + ("" if rel_e == abs_e else f" (scaled {rel_e:.3g})")
                           + (f", NaN on one side only at {nans} positions" if nans else "")
                           + (f", NaN on both sides at {both} positions" if both else ""))
    return per_output


def _padding_error(comp, outputs, unpadded):
    """max|compiled(short input, padded) - eager(unpadded)| over the valid steps, or None."""
    if unpadded is None:
        return None
    L = comp.lengths[1]
    errs = []
    for k in range(len(comp.output_names)):
        g = comp.C.valid_region(comp.name, k, outputs[1][k], L)
        w = comp.C.valid_region(comp.name, k, unpadded[k], L)
        if g is not None:
            a, _, n = _compare(g, w)
            errs.append(float("inf") if n else a)
    return max(errs) if errs else None


def _validate(comp, outputs, ref, unpadded, tol, progress, tag):
    """The report's validation: passed only within ``tol`` and with no NaN on either side."""
    import numpy as np

    per_output = _compare_outputs(comp, outputs, ref, progress, tag)
    worst = max((v["scaled_err"] for v in per_output.values()), default=0.0)
    nan_total = sum(v["nan_mismatch"] for v in per_output.values())
    both_total = sum(v["nan_both"] for v in per_output.values())
    pad_err = _padding_error(comp, outputs, unpadded)
    passed = bool(worst <= tol and np.isfinite(worst) and nan_total == 0
                  and both_total == 0)
    if nan_total:
        progress.note(tag, f"validation FAILED: NaN on one side only at {nan_total} "
                           "positions")
    elif both_total:
        progress.note(tag, f"validation FAILED: NaN on both sides at {both_total} "
                           "positions (nothing to compare there)")
    elif not passed:
        progress.note(tag, f"validation FAILED: max err {worst:.3g} > tolerance {tol:g}")
    return {
        "reference": "PyTorch eager, unpatched nn.LSTM, same semantics",
        "lengths": comp.lengths, "tolerance": tol, "outputs": per_output,
        "max_err": worst, "nan_mismatch": nan_total, "nan_both": both_total,
        "passed": passed,
        "padding_error": pad_err,
        "padding_error_note": (
            f"max|compiled(T={comp.T}, length={comp.lengths[1]}) - eager(unpadded, "
            f"T={comp.lengths[1]})| over the valid steps" if pad_err is not None else
            "not applicable (f0n's AdaIN norms see every frame; bert/text/duration only)"
            if len(comp.lengths) > 1 else "T == 1"),
    }
