"""``kokoro-lstm port-encoder``: compile Kokoro's encoder components with Apache TVM.

A drop-in for kokoro-tvm's ``port_encoder.py`` (same flags, same output files and
function names), with ``--lstm-method native`` (the kokoro_lstm C engine) and packed
LSTM semantics by default::

    kokoro-lstm port-encoder --component text_encoder --seq-len 64 --no-weights --validate
    python -m kokoro_lstm.cli.port_encoder --component all --checkpoint kokoro-v1_0.pth

Per component, in ``--output-dir``: ``{component}_compiled.so`` (``kokoro_lstm.tvm.export_library``:
the engine is linked in, so it loads with ``tvm.runtime.load_module`` in any process
— no ``import kokoro_lstm`` — and from TVM's C++/Rust runtimes; run
``relax.VirtualMachine(lib, tvm.cpu())["{component}_forward"]``), ``{component}_ir.py`` (the Relax module's TVMScript) and
``{component}_report.json``. Components, signatures and semantics: see
:mod:`kokoro_lstm.cli._components`.

Dense ops (``--dense-method``): ``native`` (default) rewrites matmul / linear / conv1d /
depthwise conv1d_transpose / softmax into the kokoro_lstm engine's OpenBLAS-backed C
functions and compiles the rest with :func:`kokoro_lstm.tvm.cpu_pipeline` (scheduled,
no tuning); ``tvm`` leaves everything to TVM's default (untuned) lowering. bert's static
length is 512 (kokoro-tvm's) unless ``--bert-seq-len``.

Algebra cuts (:mod:`kokoro_lstm.cli._cuts`): with the native LSTM method and packed
semantics, ``duration``'s four style-reading LSTMs run with W_ih's style columns folded
into a per-call gate bias, and f0n with ``--f0n-input d`` runs shared's input projection
at token rate (both exact algebra); ``--no-algebra-cuts`` exports Kokoro's graph as it
is. The report's ``algebra_cuts`` (and the table's ``cuts`` column) say which
cuts were applied, and why the others were not.

Exit status: 0 success, 1 validation above tolerance or with NaN on either side (or
a failed step), 2 bad flags, paths or files (one line on stderr), 130 Ctrl-C (one
line; no half-written file left behind).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from ._common import (DEFAULT_TOL, Staging, _as_list, _check_target, _compare, _nan_both,
                      _Parser, _Progress, _rename_main, _require_deps, _runtime_needs,
                      _threads, _time_ms, _to_tvm, _versions, add_common_arguments,
                      check_num_threads, check_seed, check_thread_env, check_writable_dir,
                      parse_target, port_main, run_reports, write_report)
from ._components import COMPONENTS, CHECKPOINT_KEYS, UsageError
from ..tvm.dense.configs import DENSE_METHODS

__all__ = ["build_parser", "main", "run", "port", "format_table", "parse_target"]

PROG = "kokoro-lstm port-encoder"
LSTM_METHODS = ("auto", "native", "tir", "relax", "topi", "mps")

# ----------------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--component", required=True, choices=COMPONENTS + ("all",),
                   help="component to compile (all: bert, duration, f0n, text_encoder)")
    p.add_argument("--seq-len", type=int, default=512,
                   help="static text length T (tokens) of duration and text_encoder (and of "
                        "f0n's d with --f0n-input d); at most plbert.max_position_embeddings "
                        "(512)")
    p.add_argument("--bert-seq-len", type=int, default=None, metavar="N",
                   help="static length of bert (default: 512, bert's max_position_embeddings, "
                        "whatever --seq-len says -- kokoro-tvm's behaviour, whose validation "
                        "feeds (1, 512))")
    p.add_argument("--aligned-len", type=int, default=512,
                   help="static aligned (frame) length F of f0n; at most "
                        "max_position_embeddings x max_dur (25600)")
    p.add_argument("--target", default="llvm",
                   help='TVM target: llvm or an llvm variant such as "llvm -mcpu=znver4" '
                        "(metal-macos / metal-ios need macOS with Metal)")
    p.add_argument("--lstm-method", default="auto", choices=LSTM_METHODS,
                   help="LSTM lowering (kokoro_lstm.tvm): auto (native on CPU), native (the "
                        "kokoro_lstm C engine), tir (while-loop TIR), relax / topi (unrolled), "
                        "mps (macOS only)")
    p.add_argument("--dense-method", default="native", choices=DENSE_METHODS,
                   help="matmul / linear / conv1d lowering: native (default; the kokoro_lstm "
                        "engine's OpenBLAS externs, linked into the library) or tvm (TVM's own "
                        "legalization: self-contained, untuned loops, 20-90x slower)")
    p.add_argument("--lstm-semantics", default="packed", choices=("packed", "padded"),
                   help="packed (default): LSTMs honour the runtime lengths, so padding to "
                        "--seq-len never changes the numbers; padded: pack/pad replaced by "
                        "identity (kokoro-tvm's old behaviour; wrong for the reverse direction "
                        "whenever length < T)")
    p.add_argument("--f0n-input", default="en", choices=("en", "d"),
                   help="f0n's inputs: en (default, kokoro-tvm's f0n_forward(en [1,640,F], "
                        "style, frame_lengths)) or d (f0n_forward(d [1,T,640], frame_token "
                        "int64 [1,F], style, frame_lengths): en = d^T @ alignment is built "
                        "inside, so shared's input projection runs at token rate; T = "
                        "--seq-len, F = --aligned-len)")
    p.add_argument("--no-algebra-cuts", dest="algebra_cuts", action="store_false",
                   help="export Kokoro's graph as it is (default: exact algebra cuts where "
                        "they apply: duration's LSTMs fold the constant style into a gate "
                        "bias; f0n with --f0n-input d projects shared's input at token rate; "
                        "native LSTM method and packed semantics only)")
    p.add_argument("--validate", action="store_true",
                   help="run the compiled module against PyTorch eager on random inputs; "
                        "exit 1 above --tolerance or where either side is NaN")
    p.add_argument("--output-dir", default="tvm_output", help="output directory")
    add_common_arguments(p, checkpoint="dict of per-component state dicts",
                         tolerance="max|tvm - torch| / max(1, max|torch|)",
                         seed="the random weights and inputs")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show TVM's and PyTorch's warnings")
    return p


def build_parser(prog=PROG) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description=__doc__.split("\n\n")[0].replace("``", ""))
    return add_arguments(p)


def _check_args(args):
    if args.seq_len < 1:
        raise UsageError(f"--seq-len must be positive, got {args.seq_len}")
    if args.bert_seq_len is not None and args.bert_seq_len < 1:
        raise UsageError(f"--bert-seq-len must be positive, got {args.bert_seq_len}")
    if args.aligned_len < 1:
        raise UsageError(f"--aligned-len must be positive, got {args.aligned_len}")
    if args.aligned_len < 2 and args.component in ("f0n", "all"):
        raise UsageError("--aligned-len must be at least 2 for f0n (its instance norms need "
                         f"2 frames, in PyTorch too), got {args.aligned_len}")
    check_num_threads(args.num_threads)
    check_thread_env()
    if not args.tolerance > 0:
        raise UsageError(f"--tolerance must be positive, got {args.tolerance}")
    if args.checkpoint and args.no_weights:
        raise UsageError("--checkpoint and --no-weights exclude each other")
    if args.checkpoint and not os.path.isfile(args.checkpoint):
        raise UsageError(f"checkpoint file not found: {args.checkpoint}")
    if args.config and not os.path.isfile(args.config):
        raise UsageError(f"config file not found: {args.config}")
    if os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        raise UsageError(f"--output-dir {args.output_dir} exists and is not a directory")
    check_seed(args.seed)


# ----------------------------------------------------------------------------------
# Pieces
# ----------------------------------------------------------------------------------
def _lstm_op_counts(ep):
    counts = {}
    for n in ep.graph.nodes:
        t = str(n.target)
        if n.op == "call_function" and "lstm" in t:
            counts[t] = counts.get(t, 0) + 1
    return counts


def _spec(names, arrays):
    return [{"name": n, "shape": list(a.shape), "dtype": str(a.dtype)}
            for n, a in zip(names, arrays)]


# ----------------------------------------------------------------------------------
# The pipeline
# ----------------------------------------------------------------------------------
class _Component:
    """One component's model, exported program and PyTorch references (shared by every
    method it is lowered with)."""

    def __init__(self, name, opts, km, ckpt, progress):
        import torch

        import kokoro_lstm.torch_ops as ko

        from . import _components as C

        self.name, self.opts, self.progress = name, opts, progress
        self.cfg = opts["cfg"]
        self.T = {"f0n": opts["aligned_len"], "bert": opts["bert_seq_len"]}.get(name, opts["seq_len"])
        self.times = {}
        packed = opts["semantics"] == "packed"
        self._ctx = (contextlib.nullcontext if packed else C.padded_packing)
        with progress.step(name, "build model", self.times, "build_model_s"):
            self.model = C.build_component(name, self.cfg, km, ckpt, seed=opts["seed"],
                                           f0n_input=opts.get("f0n_input", "en"))
        # f0n from d: d has --seq-len tokens
        n_tok = opts["seq_len"] if name == "f0n" and opts.get("f0n_input") == "d" else None
        m = self.model
        gen = torch.Generator().manual_seed(opts["seed"] + 1)
        T = self.T
        example = C.example_inputs(name, self.cfg, T, T, gen, n_tokens=n_tok)
        with progress.step(name, "export", self.times, "export_s"):
            ko.patch_lstm_modules(m)
            try:
                with (ko.exportable_packing() if packed else C.padded_packing()):
                    self.ep = torch.export.export(m, example)
            finally:
                ko.unpatch_lstm_modules(m)
            self.lstm_ops = _lstm_op_counts(self.ep.run_decompositions())
        # the same component with Kokoro's exact algebra cuts, exported for the native
        # LSTM method (the only one that lowers kokoro::lstm_forward_gated)
        self.ep_cut, self.cuts = None, {}
        if opts.get("algebra_cuts", True):
            from . import _cuts

            cut, self.cuts = _cuts.apply_cuts(name, m, opts["semantics"])
            if cut is not m:
                with progress.step(name, "export (algebra cuts)", self.times, "export_cut_s"):
                    ko.patch_lstm_modules(cut)
                    try:
                        self.ep_cut = torch.export.export(cut, example)
                    finally:
                        ko.unpatch_lstm_modules(cut)
                    self.lstm_ops_cut = _lstm_op_counts(self.ep_cut.run_decompositions())
        # validation / timing inputs: full length, and a shorter random length
        short = int(torch.randint(max(1, T // 4), T, (1,), generator=gen)) if T > 1 else 1
        self.lengths = [T] + ([short] if short < T else [])
        self.inputs = [C.example_inputs(name, self.cfg, T, L, gen, n_tokens=n_tok)
                       for L in self.lengths]
        self.input_names = type(m).input_names
        self.output_names = type(m).output_names
        self.function = type(m).function
        self.C = C
        self._ref = None
        self._torch_ms = None
        with progress.step(name, "time PyTorch eager", self.times, "torch_time_s"):
            self.torch_ms()

    def eager(self, args):
        import torch

        with torch.no_grad(), self._ctx():
            return [t.numpy() for t in self.model(*args)]

    def references(self):
        """PyTorch eager (unpatched) on every input set, and on the unpadded short input."""
        if self._ref is None:
            ref = [self.eager(a) for a in self.inputs]
            unpadded = None
            if len(self.lengths) > 1:
                L = self.lengths[1]
                unpadded = self.eager(self.C.truncate_inputs(self.name, self.inputs[1], L))
            self._ref = (ref, unpadded)
        return self._ref

    def torch_ms(self):
        """PyTorch eager (unpatched) median ms on the full-length input; measured once,
        before any compiled module runs (TVM's spinning worker threads would slow it)."""
        import torch

        if self._torch_ms is None:
            args = self.inputs[0]
            with torch.no_grad(), self._ctx():
                self._torch_ms = _time_ms(lambda: self.model(*args))
        return self._torch_ms


def _port_method(comp, method, out_dir, opts, progress):
    """Lower, build, export, validate and time one component with one method. The
    files are written under temporary names and renamed into place at the end, all of
    them or (failure, Ctrl-C) none."""
    with Staging() as staging:
        report = _port_method_staged(comp, method, out_dir, opts, progress, staging)
        staging.commit()
    return report


def _port_method_staged(comp, method, out_dir, opts, progress, staging):
    import numpy as np
    import tvm
    from tvm import relax

    import kokoro_lstm.tvm as kt

    name, target = comp.name, opts["target"]
    tag = name if not opts.get("multi") else f"{name}/{method}"
    times = {}
    resolved = kt.select_method(target, method)
    dense = opts["dense_method"]
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
    with progress.step(tag, f"lower ({resolved}, dense {dense}"
                       + (f", cuts {'+'.join(applied)}" if applied else "") + ")",
                       times, "lower_s"):
        mod = kt.from_exported_program(ep, lstm_method=resolved, target=target,
                                       unwrap_unit_return_tuple=False)
        mod = _rename_main(mod, comp.function)
        rewrites = {}
        if dense == "native":
            mod, rewrites = kt.rewrite_dense(mod, num_threads=opts["num_threads"] or 0)
            mod = kt.prepare(mod)
    script = mod.script(show_meta=False)
    ir = kt.ir_size(mod)
    os.makedirs(out_dir, exist_ok=True)
    files = {"ir": os.path.join(out_dir, f"{name}_ir.py"),
             "library": os.path.join(out_dir, f"{name}_compiled.so"),
             "report": os.path.join(out_dir, f"{name}_report.json")}
    tmp = {k: staging.path(v) for k, v in files.items()}
    with open(tmp["ir"], "w", encoding="utf-8") as f:
        f.write(script)
    with progress.step(tag, "build", times, "build_s"):
        tgt = tvm.target.Target(target)
        if dense == "native":
            ex = tvm.compile(mod, target=tgt, relax_pipeline=kt.cpu_pipeline(
                tgt, parallel=opts["num_threads"] != 1))
        else:
            ex = tvm.compile(mod, target=tgt)
        staging.export_library(ex, tmp["library"])
    vm = relax.VirtualMachine(ex, tvm.cpu())
    fn = vm[comp.function]
    # outputs: every input set when validating, else the full-length one (for shapes)
    used = comp.inputs if opts["validate"] else comp.inputs[:1]
    tvm_inputs = [_to_tvm([a.numpy() for a in args]) for args in used]
    with progress.step(tag, "run", times, "run_s"):
        t0 = time.perf_counter()
        outputs = [_as_list(fn(*tvm_inputs[0]))]
        first_s = time.perf_counter() - t0  # a cold call: the warm-up of the timing below
        outputs += [_as_list(fn(*ti)) for ti in tvm_inputs[1:]]

    report = {
        "component": name,
        "function": comp.function,
        "inputs": _spec(comp.input_names, [a.numpy() for a in comp.inputs[0]]),
        "outputs": _spec(comp.output_names, outputs[0]),
        "lstm_method_requested": method,
        "lstm_method": resolved,
        "lstm_semantics": opts["semantics"],
        "dense_method": dense,
        "dense_calls": kt.count_dense_calls(mod),
        # products whose constant weight the lowering packed in panels at compile time
        "dense_packed_weights": {"matmuls": rewrites.get("matmul_panels", 0),
                                 "convs": rewrites.get("conv1d_panels", 0),
                                 "constants": rewrites.get("panels_packed", 0)},
        "algebra_cuts": {"applied": applied, "detail": cuts},
        "f0n_input": opts.get("f0n_input", "en") if name == "f0n" else None,
        "runtime_needs": _runtime_needs(ex),
        "target": opts["target_arg"],
        "target_tvm": opts["target_json"],
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
    with progress.step(tag, "time", times, "time_s"):
        report["runtime_ms"] = _time_ms(lambda: fn(*tvm_inputs[0]), warm_s=first_s)
        report["torch_eager_ms"] = comp.torch_ms()

    if opts["validate"]:
        with progress.step(tag, "validate", times, "validate_s"):
            ref, unpadded = comp.references()
        tol = opts["tolerance"]
        per_output = {}
        worst = 0.0
        nan_total = both_total = 0
        for k, oname in enumerate(comp.output_names):
            abs_e = rel_e = 0.0
            nans = both = 0
            for got, want in zip(outputs, ref):
                a, r, n = _compare(got[k], want[k])
                abs_e, rel_e, nans = max(abs_e, a), max(rel_e, r), nans + n
                both += _nan_both(got[k], want[k])
            per_output[oname] = {"max_abs_err": abs_e, "scaled_err": rel_e, "nan_mismatch": nans,
                                 "nan_both": both}
            worst = max(worst, rel_e)
            nan_total += nans
            both_total += both
            progress.note(tag, f"validate {oname} {list(outputs[0][k].shape)}: max abs err "
                               f"{abs_e:.3g}" + ("" if rel_e == abs_e else f" (scaled {rel_e:.3g})")
                               + (f", NaN on one side only at {nans} positions" if nans else "")
                               + (f", NaN on both sides at {both} positions" if both else ""))
        pad_err = None
        if unpadded is not None:
            L = comp.lengths[1]
            errs = []
            for k in range(len(comp.output_names)):
                g = comp.C.valid_region(name, k, outputs[1][k], L)
                w = comp.C.valid_region(name, k, unpadded[k], L)
                if g is not None:
                    a, _, n = _compare(g, w)
                    errs.append(float("inf") if n else a)
            pad_err = max(errs) if errs else None
        passed = bool(worst <= tol and np.isfinite(worst) and nan_total == 0
                      and both_total == 0)
        report["validation"] = {
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
        if nan_total:
            progress.note(tag, f"validation FAILED: NaN on one side only at {nan_total} "
                               "positions")
        elif both_total:
            progress.note(tag, f"validation FAILED: NaN on both sides at {both_total} "
                               "positions (nothing to compare there)")
        elif not passed:
            progress.note(tag, f"validation FAILED: max err {worst:.3g} > tolerance {tol:g}")
    report["times_s"] = dict(comp.times, **times)
    write_report(tmp["report"], report)
    return report


def port(components, methods, *, seq_len=512, aligned_len=512, target="llvm",
         semantics="packed", validate=False, checkpoint=None, no_weights=False,
         config=None, output_dir="tvm_output", num_threads=None, tolerance=DEFAULT_TOL,
         seed=0, verbose=False, progress=None, method_subdirs=None, bert_seq_len=None,
         dense_method="native", algebra_cuts=True, f0n_input="en"):
    """Port ``components`` with each of ``methods``; returns the list of reports (one
    per component and method, in that order). Raises UsageError for bad inputs.

    With several methods (or ``method_subdirs=True``), each method writes into
    ``output_dir/<method>/``; otherwise into ``output_dir``. ``bert_seq_len`` None:
    bert at its max_position_embeddings (512), as kokoro-tvm does. ``algebra_cuts``
    False: export Kokoro's graph as it is (``--no-algebra-cuts``); ``f0n_input``: "en"
    or "d" (``--f0n-input``).
    """
    progress = progress or _Progress(verbose)
    check_num_threads(num_threads)
    _require_deps()
    with _threads(num_threads):
        return _port(components, methods, seq_len=seq_len, aligned_len=aligned_len,
                     target=target, semantics=semantics, validate=validate,
                     checkpoint=checkpoint, no_weights=no_weights, config=config,
                     output_dir=output_dir, num_threads=num_threads, tolerance=tolerance,
                     seed=seed, progress=progress, method_subdirs=method_subdirs,
                     bert_seq_len=bert_seq_len, dense_method=dense_method,
                     algebra_cuts=algebra_cuts, f0n_input=f0n_input)


def resolve_bert_seq_len(cfg, bert_seq_len=None) -> int:
    """bert's static length: ``bert_seq_len``, or by default bert's
    max_position_embeddings (512 for Kokoro-82M) -- kokoro-tvm exports bert at 512
    tokens whatever --seq-len says, and its validation feeds (1, 512)."""
    max_pos = int(cfg["plbert"]["max_position_embeddings"])
    if bert_seq_len is None:
        return max_pos
    if bert_seq_len < 1:
        raise UsageError(f"--bert-seq-len must be positive, got {bert_seq_len}")
    if bert_seq_len > max_pos:
        raise UsageError(f"--bert-seq-len {bert_seq_len} exceeds bert's max_position_embeddings "
                         f"({max_pos})")
    return bert_seq_len


def check_lengths(cfg, components, seq_len, aligned_len, f0n_input="en"):
    """UsageError unless the static lengths the components use are in bounds, checked
    before anything is allocated: tokens (--seq-len: text_encoder, duration, f0n's d)
    at most Kokoro's context, plbert.max_position_embeddings (512 for Kokoro-82M), and
    frames (--aligned-len: f0n) at most that many tokens times max_dur, the most
    frames a token gets at speed 1 (25600 for Kokoro-82M)."""
    max_tokens = int(cfg["plbert"]["max_position_embeddings"])
    max_frames = max_tokens * int(cfg["max_dur"])
    uses_tokens = [c for c in components if c in ("text_encoder", "duration")
                   or (c == "f0n" and f0n_input == "d")]
    if uses_tokens and not 1 <= seq_len <= max_tokens:
        raise UsageError(f"--seq-len must be in 1..{max_tokens} (Kokoro's context, "
                         f"plbert.max_position_embeddings), got {seq_len}")
    if "f0n" in components and not 1 <= aligned_len <= max_frames:
        raise UsageError(f"--aligned-len must be in 1..{max_frames} (the context's "
                         f"{max_tokens} tokens x max_dur {cfg['max_dur']} frames), "
                         f"got {aligned_len}")


def _port(components, methods, *, seq_len, aligned_len, target, semantics, validate,
          checkpoint, no_weights, config, output_dir, num_threads, tolerance, seed,
          progress, method_subdirs, bert_seq_len=None, dense_method="native",
          algebra_cuts=True, f0n_input="en"):
    from . import _components as C

    target_arg = target
    target, target_json = _check_target(target)
    import kokoro_lstm.tvm as kt

    for m in methods:
        if m not in LSTM_METHODS:
            raise UsageError(f"unknown --lstm-method {m!r} (choose from {', '.join(LSTM_METHODS)})")
        try:
            kt.select_method(target, m)
        except (ValueError, NotImplementedError, RuntimeError) as e:
            raise UsageError(str(e).splitlines()[0]) from None
    if dense_method not in DENSE_METHODS:
        raise UsageError(f"unknown --dense-method {dense_method!r} (choose from "
                         f"{', '.join(DENSE_METHODS)})")
    try:
        kt.select_dense_method(target, dense_method)
    except (ValueError, RuntimeError) as e:
        raise UsageError(str(e).splitlines()[0]) from None
    cfg = C.load_config(config)
    for name in components:
        if name not in COMPONENTS:
            raise UsageError(f"unknown component {name!r}")
    check_lengths(cfg, components, seq_len, aligned_len, f0n_input)
    bert_len = resolve_bert_seq_len(cfg, bert_seq_len)
    ckpt = None
    weights = "random (--no-weights)"
    if checkpoint is None and not no_weights:
        progress.note("weights", "no --checkpoint: fetching hexgrad/Kokoro-82M kokoro-v1_0.pth "
                                 "(Hugging Face cache or download; --no-weights for random)")
        checkpoint = C.default_checkpoint()
    if checkpoint is not None:
        ckpt = C.load_checkpoint(checkpoint)
        for name in components:
            for key in CHECKPOINT_KEYS[name]:
                C._entry(ckpt, key)
        weights = os.path.abspath(checkpoint)
    check_seed(seed)
    check_writable_dir(output_dir, "--output-dir")
    km, modules = C.kokoro_modules()
    multi = len(methods) > 1 if method_subdirs is None else method_subdirs
    opts = {"cfg": cfg, "seq_len": seq_len, "aligned_len": aligned_len, "target": target,
            "bert_seq_len": bert_len, "dense_method": dense_method,
            "target_arg": target_arg, "target_json": target_json,
            "semantics": semantics, "validate": validate, "tolerance": tolerance,
            "seed": seed, "weights": weights, "modules": modules,
            "num_threads": num_threads, "multi": multi, "algebra_cuts": bool(algebra_cuts),
            "f0n_input": f0n_input}
    if f0n_input not in ("en", "d"):
        raise UsageError(f"unknown --f0n-input {f0n_input!r} (choose from en, d)")
    if semantics == "padded":
        progress.note("semantics", "padded: pack/pad replaced by identity -- LSTMs run over "
                                   "the padding (the reverse direction reads it first); "
                                   "results differ from Kokoro whenever length < static length")
    reports = []
    for name in components:
        comp = _Component(name, opts, km, ckpt, progress)
        for m in methods:
            out_dir = os.path.join(output_dir, m) if multi else output_dir
            reports.append(_port_method(comp, m, out_dir, opts, progress))
        del comp
    return reports


# ----------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------
def _fmt(v, spec):
    if v is None:
        return "-"
    if isinstance(v, float) and v == float("inf"):
        return "inf"
    return format(v, spec)


def format_table(reports) -> str:
    """The closing summary: component, LSTM method, dense method, algebra cuts applied,
    IR lines, compile s, runtime ms, PyTorch eager ms, max err, padding err."""
    head = ("component", "method", "dense", "cuts", "IR lines", "compile s", "runtime ms",
            "torch ms", "max err", "pad err")
    rows = []
    for r in reports:
        v = r.get("validation") or {}
        meth = r["lstm_method"]
        if r.get("lstm_method_requested") not in (None, meth):
            meth = f"{meth} ({r['lstm_method_requested']})"
        cuts = ",".join((r.get("algebra_cuts") or {}).get("applied") or []) or "-"
        rows.append((r["component"], meth, r.get("dense_method") or "-", cuts, str(r["ir_lines"]),
                     _fmt(r["compile_s"], ".1f"),
                     _fmt(r["runtime_ms"], ".3f"), _fmt(r.get("torch_eager_ms"), ".3f"),
                     _fmt(v.get("max_err"), ".2e") + ("" if v.get("passed", True) else " FAIL"),
                     _fmt(v.get("padding_error"), ".2e")))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 4 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(head), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def run(args) -> int:
    """Run a parsed port-encoder namespace; returns the exit status."""
    def body():
        _check_args(args)
        components = list(COMPONENTS) if args.component == "all" else [args.component]
        return port(components, [args.lstm_method], seq_len=args.seq_len,
                    aligned_len=args.aligned_len, target=args.target,
                    semantics=args.lstm_semantics, validate=args.validate,
                    checkpoint=args.checkpoint, no_weights=args.no_weights,
                    config=args.config, output_dir=args.output_dir,
                    num_threads=args.num_threads, tolerance=args.tolerance,
                    seed=args.seed, verbose=args.verbose,
                    bert_seq_len=args.bert_seq_len, dense_method=args.dense_method,
                    algebra_cuts=args.algebra_cuts, f0n_input=args.f0n_input)

    return run_reports(PROG, args.verbose, body, format_table,
                       footer=f"outputs in {os.path.abspath(args.output_dir)}")


def main(argv=None) -> int:
    """``python -m kokoro_lstm.cli.port_encoder [flags]``; returns the exit status."""
    return port_main("kokoro_lstm.cli.port_encoder", PROG, build_parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
