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
import os
import sys

from ._args import (DEFAULT_TOL, _check_target, _Parser, _require_deps, add_common_arguments,
                    DENSE_HELP, TARGET_HELP, check_num_threads, check_seed, check_thread_env,
                    check_writable_dir, parse_target)
from ._command import _Progress, _threads, port_main, run_reports
from ._components import COMPONENTS, CHECKPOINT_KEYS, UsageError
from ..tvm.dense.configs import DENSE_METHODS
from ._encoder_build import port_method
from ._encoder_export import _Component

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
    p.add_argument("--target", default="llvm", help=TARGET_HELP)
    p.add_argument("--lstm-method", default="auto", choices=LSTM_METHODS,
                   help="LSTM lowering (kokoro_lstm.tvm): auto (native on CPU), native (the "
                        "kokoro_lstm C engine), tir (while-loop TIR), relax / topi (unrolled), "
                        "mps (macOS only)")
    p.add_argument("--dense-method", default="native", choices=DENSE_METHODS, help=DENSE_HELP)
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
            reports.append(port_method(comp, m, out_dir, opts, progress))
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
                     "skipped" if "skipped" in v else
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
