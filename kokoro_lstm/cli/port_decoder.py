"""``kokoro-lstm port-decoder``: compile Kokoro's decoder with Apache TVM.

A drop-in for kokoro-tvm's ``port_decoder.py`` (same flags, files and function
names): the dense ops run on the kokoro_lstm engine's kernels, the decoder's random
numbers are drawn at run time (never zeros, never baked constants)::

    kokoro-lstm port-decoder --seq-len 192 --checkpoint kokoro-v1_0.pth --validate
    kokoro-lstm port-decoder --seq-lens 128,256,512 --output-dir tvm_output --no-weights

Files: ``decoder_compiled.so`` (``--output`` or in ``--output-dir``), or with several
``--seq-lens`` one ``decoder_compiled_seq{F}.so`` per bucket (the names kokoro-tvm's
Rust runtime looks for); beside each, ``decoder_report.json`` /
``decoder_seq{F}_report.json``; with ``--dump-ir`` also
``decoder_before_opt_seq{F}.py`` (the imported module), ``decoder_decomposed_seq{F}.py``
(after the dense rewrite, what the pipeline gets) and ``decoder_legalized_seq{F}.py``.
Each library (``kokoro_lstm.tvm.export_library``: the engine linked in, no Python
needed) holds two Relax VM functions::

    decoder_forward(asr f32[1,512,F], F0 f32[1,2F], N f32[1,2F], s f32[1,128]) -> audio
    decoder_forward_seeded(asr, F0, N, s, seed int64[1]) -> audio

``audio`` is f32[1,1,samples], what Kokoro's Decoder returns (KModel squeezes it).
``decoder_forward`` draws a fresh seed per call; ``decoder_forward_seeded`` with a seed
reproduces a call exactly, and gives the audio of PyTorch's Decoder inside
``kokoro_lstm.noise.counter_noise(decoder, seed)``, which ``--validate`` checks.

The decoder is Kokoro's with ``disable_complex=True`` (the STFT as convolutions; see
:mod:`kokoro_lstm.cli._decoder`). ``--tune`` / ``--tune-trials`` / ``--tune-dir`` are
accepted and do nothing: there is no tuning step.

Exit status: 0 success, 1 validation above tolerance or with NaN on either side (or
a failed step), 2 bad flags, paths or files (one line on stderr), 130 Ctrl-C (one
line; no half-written file left behind).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from ._args import (DEFAULT_TOL, _check_target, _Parser, _require_deps, add_common_arguments,
                    DENSE_HELP, TARGET_HELP, check_num_threads, check_seed, check_thread_env,
                    check_writable_dir)
from ._artifact import (Staging, _compare, native_dense, _nan_both, _rename_main, _sync, _time_ms,
                        _versions, build_executable, run_device, target_fields, write_report)
from ._command import _Progress, _threads, port_main, run_reports
from ._components import UsageError
from ..tvm.dense.configs import DENSE_METHODS

__all__ = ["build_parser", "add_arguments", "main", "run", "port", "parse_seq_lens",
           "library_path"]

PROG = "kokoro-lstm port-decoder"
DEFAULT_FRAMES = 150
#: the Decoder's instance norms need two frames (PyTorch refuses one)
MIN_FRAMES = 2
#: the most frames a 24 GB machine ports with Kokoro-82M's config: peak memory is about
#: 2.6 GB + 0.78 MB per frame with --validate (0.44 without), ~15 GB at 16384 frames and
#: ~23 GB at the 25600 of Kokoro's context (512 tokens x max_dur 50); real speech has
#: about 4 frames per token.
MAX_FRAMES = 16384
EXT = ".so"


# ----------------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--seq-len", type=int, default=DEFAULT_FRAMES,
                   help=f"static frame count F of asr [1,512,F] (F0 and N have 2F), "
                        f"{MIN_FRAMES}..{MAX_FRAMES} (default {DEFAULT_FRAMES})")
    p.add_argument("--seq-lens", metavar="F1,F2,...",
                   help="one library per bucket, decoder_compiled_seq{F}.so in --output-dir "
                        "(overrides --seq-len)")
    p.add_argument("--output", metavar="PATH",
                   help="library path of a single build (default: --output-dir/"
                        "decoder_compiled.so)")
    p.add_argument("--output-dir", default=".", help="output directory (default: .)")
    p.add_argument("--target", default="llvm", help=TARGET_HELP)
    p.add_argument("--dense-method", default="native", choices=DENSE_METHODS, help=DENSE_HELP)
    p.add_argument("--validate", action="store_true",
                   help="run the library against PyTorch's Decoder on random inputs with the "
                        "same noise seed; exit 1 above --tolerance or where either side "
                        "is NaN")
    add_common_arguments(p, checkpoint="its 'decoder' entry is read",
                         tolerance="the audio's max|tvm - torch|",
                         seed="the random weights, inputs and --validate's noise")
    p.add_argument("--dump-ir", action="store_true",
                   help="write decoder_{before_opt,decomposed,legalized}_seq{F}.py beside "
                        "the library")
    p.add_argument("--debug", action="store_true",
                   help="show TVM's and PyTorch's warnings and full tracebacks")
    p.add_argument("-v", "--verbose", action="store_true", help="the same as --debug")
    p.add_argument("--tune", action="store_true",
                   help="accepted for kokoro-tvm compatibility: there is no tuning step")
    p.add_argument("--tune-trials", type=int, default=2000, help="accepted; no effect")
    p.add_argument("--tune-dir", default="tuning_logs", help="accepted; no effect")
    return p


def build_parser(prog=PROG) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description=__doc__.split("\n\n")[0].replace("``", ""))
    return add_arguments(p)


def parse_seq_lens(text, seq_len=DEFAULT_FRAMES):
    """The sorted distinct frame counts of ``--seq-lens`` ("128,256"), else
    ``[seq_len]``; UsageError for anything but integers in MIN_FRAMES..MAX_FRAMES."""
    if text is None:
        lens = [seq_len]
    else:
        parts = [t.strip() for t in str(text).split(",") if t.strip()]
        if not parts:
            raise UsageError(f"--seq-lens {text!r} names no length (e.g. 128,256)")
        lens = []
        for t in parts:
            try:
                lens.append(int(t))
            except ValueError:
                raise UsageError(f"--seq-lens: {t!r} is not an integer") from None
    for n in lens:
        if not MIN_FRAMES <= n <= MAX_FRAMES:
            flag = "--seq-lens" if text is not None else "--seq-len"
            raise UsageError(f"{flag} must be in {MIN_FRAMES}..{MAX_FRAMES} frames (the "
                             f"decoder's instance norms need {MIN_FRAMES}; at most what a "
                             f"24 GB machine can port), got {n}")
    return sorted(set(lens))


def library_path(output_dir, frames, bucketed, output=None):
    """Where a build's library goes: ``output``, else ``decoder_compiled.so`` (one
    build) or ``decoder_compiled_seq{F}.so`` (buckets) in ``output_dir``."""
    if output and not bucketed:
        return output
    name = f"decoder_compiled_seq{frames}{EXT}" if bucketed else f"decoder_compiled{EXT}"
    return os.path.join(output_dir, name)


def _check_args(args):
    lens = parse_seq_lens(args.seq_lens, args.seq_len)
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
    if args.output and args.seq_lens is not None and len(lens) > 1:
        raise UsageError("--output names one library; several --seq-lens write "
                         "decoder_compiled_seq{F}.so into --output-dir")
    if os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        raise UsageError(f"--output-dir {args.output_dir} exists and is not a directory")
    if args.output:
        if os.path.isdir(args.output):
            raise UsageError(f"--output {args.output} is a directory (give the library's path)")
        parent = os.path.dirname(os.path.abspath(args.output))
        if os.path.exists(parent) and not os.path.isdir(parent):
            raise UsageError(f"--output {args.output}: {parent} is not a directory")
    check_seed(args.seed)
    return lens


# ----------------------------------------------------------------------------------
# The pipeline
# ----------------------------------------------------------------------------------
def _dtype(t):
    """A tensor's dtype as NumPy spells it ("float32"), as the encoder's report does."""
    return str(t.dtype).removeprefix("torch.")


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _lower(ep, frames, opts, dump):
    """Relax module of the exported decoder: imported, renamed, dense ops rewritten,
    decoder_forward added; the IR dumps written when asked (``dump``: stage -> path)."""
    import tvm

    import kokoro_lstm.tvm as kt

    from . import _decoder as D

    ep = ep.run_decompositions(D.decomposition_table())
    mod = kt.from_exported_program(ep, target=opts["target"], unwrap_unit_return_tuple=True,
                                   run_ep_decomposition=False,
                                   custom_convert_map=D.convert_map())
    mod = _rename_main(mod, D.SEEDED_FUNCTION)
    if dump:
        _write(dump["before_opt"], mod.script())
    mod, rewrites = native_dense(mod, opts)
    mod = kt.with_fresh_seed(mod, seeded=D.SEEDED_FUNCTION, name=D.FUNCTION)
    if dump:
        from tvm import relax
        from tvm.relax.backend.cpu_generic import pipeline as cpu
        from tvm.relax.backend.cuda import pipeline as cuda

        tgt = tvm.target.Target(opts["target"])
        passes = cuda if tgt.kind.name == "cuda" else cpu  # the build's own pipeline
        with tgt:
            dec = relax.transform.DecomposeOpsForInference()(mod)
            _write(dump["decomposed"], dec.script())
            leg = tvm.transform.Sequential(passes.library_dispatch_passes(tgt)
                                           + passes.legalize_passes(tgt))(mod)
            _write(dump["legalized"], leg.script())
    return mod, rewrites


def _port_one(model, frames, path, opts, progress):
    """Export, lower, build and write the library for ``frames``; validate and time
    it. Returns the report. The files are written under temporary names and renamed
    into place at the end, all of them or (failure, Ctrl-C) none."""
    with Staging() as staging:
        report = _port_one_staged(model, frames, path, opts, progress, staging)
        staging.commit()
    return report


def _port_one_staged(model, frames, path, opts, progress, staging):
    import numpy as np
    import torch
    import tvm
    from tvm import relax

    import kokoro_lstm.tvm as kt

    from . import _decoder as D

    tag = f"decoder F={frames}"
    times = {}
    cfg = opts["cfg"]
    gen = torch.Generator().manual_seed(opts["seed"] + 1)
    inputs = D.example_inputs(cfg, frames, gen)
    seed_t = torch.tensor([opts["seed"]], dtype=torch.int64)
    part = D.DecoderPart(model)
    # PyTorch eager first: the compiled module's spinning pool threads would slow it
    with progress.step(tag, "time PyTorch eager", times, "torch_time_s"), torch.no_grad():
        torch_ms = _time_ms(lambda: model(*inputs))
    with progress.step(tag, "export", times, "export_s"), torch.no_grad():
        ep = torch.export.export(part, inputs + (seed_t,), strict=False)
    out_dir = os.path.dirname(os.path.abspath(path))
    report_name = (f"decoder_seq{frames}_report.json" if opts["bucketed"]
                   else "decoder_report.json")
    files = {"library": os.path.abspath(path),
             "report": os.path.join(out_dir, report_name)}
    if opts["dump_ir"]:
        for stage in ("before_opt", "decomposed", "legalized"):
            files[f"ir_{stage}"] = os.path.join(out_dir, f"decoder_{stage}_seq{frames}.py")
    tmp = {k: staging.path(v) for k, v in files.items()}
    dump = {stage: tmp[f"ir_{stage}"] for stage in ("before_opt", "decomposed", "legalized")
            if f"ir_{stage}" in tmp}
    with progress.step(tag, f"lower (dense {opts['dense_method']})", times, "lower_s"):
        mod, rewrites = _lower(ep, frames, opts, dump)
    del ep
    with progress.step(tag, "build", times, "build_s"):
        ex = build_executable(mod, opts)
    with progress.step(tag, "export library", times, "export_library_s"):
        staging.export_library(ex, tmp["library"])
    dev, why_not = run_device(opts)
    if dev is None:  # a cuda library where no GPU here runs it: written, described, not run
        progress.note(tag, why_not)
        with torch.no_grad():
            audio = part(*inputs, seed_t).numpy()
        runtime_ms = None
    else:
        vm = relax.VirtualMachine(ex, dev)
        tvm_in = [tvm.runtime.tensor(a.numpy(), device=dev) for a in inputs]
        seeded, fresh = vm[D.SEEDED_FUNCTION], vm[D.FUNCTION]
        tvm_seed = tvm.runtime.tensor(seed_t.numpy(), device=dev)
        with progress.step(tag, "run", times, "run_s"):
            t0 = time.perf_counter()
            audio = seeded(*tvm_in, tvm_seed).numpy()
            first_s = time.perf_counter() - t0
        with progress.step(tag, "time", times, "time_s"):
            runtime_ms = _time_ms(lambda: _sync(fresh(*tvm_in), dev), warm_s=first_s)
    ir = kt.ir_size(mod)
    report = {
        "component": "decoder",
        "functions": {D.FUNCTION: "fresh noise per call",
                      D.SEEDED_FUNCTION: "noise drawn from the seed input"},
        "frames": frames,
        "inputs": [{"name": n, "shape": list(a.shape), "dtype": _dtype(a)}
                   for n, a in zip(D.INPUT_NAMES, inputs + (seed_t,))],
        "output": {"name": "audio", "shape": list(audio.shape), "dtype": str(audio.dtype)},
        "stft": "CustomSTFT (disable_complex=True)",
        "dense_method": opts["dense_method"],
        "dense_calls": kt.count_dense_calls(mod),
        "dense_packed_weights": {"matmuls": rewrites.get("matmul_panels", 0),
                                 "convs": rewrites.get("conv1d_panels", 0),
                                 "constants": rewrites.get("panels_packed", 0)},
        **target_fields(opts, ex),
        "weights": opts["weights"], "modules": opts["modules"],
        "ir_lines": ir["lines"], "ir_chars": ir["chars"],
        # torch.export to the written library
        "compile_s": round(times["export_s"] + times["lower_s"] + times["build_s"]
                           + times["export_library_s"], 3),
        "runtime_ms": runtime_ms,
        "torch_eager_ms": torch_ms,
        "num_threads": opts["num_threads"],
        "tune": "no tuning step (--tune ignored)" if opts["tune"] else None,
        "validation": None,
        "files": files,
        "versions": _versions(),
    }
    if opts["validate"] and dev is None:
        report["validation"] = {"skipped": why_not, "passed": None}
    elif opts["validate"]:
        with progress.step(tag, "validate", times, "validate_s"), torch.no_grad():
            want = part(*inputs, seed_t).numpy()
            again = seeded(*tvm_in, tvm_seed).numpy()
            other = fresh(*tvm_in).numpy()
        abs_e, _, nans = _compare(audio, want)
        both = _nan_both(audio, want)
        tol = opts["tolerance"]
        passed = bool(abs_e <= tol and np.isfinite(abs_e) and nans == 0 and both == 0)
        report["validation"] = {
            "reference": "PyTorch eager kokoro.istftnet.Decoder (disable_complex=True) inside "
                         "kokoro_lstm.noise.counter_noise(decoder, seed)",
            "seed": opts["seed"], "tolerance": tol, "max_abs_err": abs_e,
            "max_abs_audio": (float(np.nanmax(np.abs(want)))
                              if np.isfinite(want).any() else None),
            "nan_mismatch": nans, "nan_both": both, "passed": passed,
            "seeded_reproducible": bool(np.array_equal(audio, again, equal_nan=True)),
            "fresh_noise_differs_from_seeded": bool(not np.array_equal(audio, other)),
        }
        progress.note(tag, f"validate audio {list(audio.shape)}: max abs err {abs_e:.3g}"
                           + (f", NaN on one side only at {nans} positions" if nans else ""))
        if nans:
            progress.note(tag, f"validation FAILED: NaN on one side only at {nans} positions")
        elif both:
            progress.note(tag, f"validation FAILED: NaN on both sides at {both} positions "
                               "(nothing to compare there)")
        elif not passed:
            progress.note(tag, f"validation FAILED: max err {abs_e:.3g} > tolerance {tol:g}")
    report["times_s"] = times
    write_report(tmp["report"], report)
    return report


def port(seq_lens, *, output=None, output_dir=".", target="llvm", validate=False,
         checkpoint=None, no_weights=False, config=None, num_threads=None,
         tolerance=DEFAULT_TOL, seed=0, verbose=False, progress=None, dense_method="native",
         dump_ir=False, tune=False):
    """Build one decoder library per frame count in ``seq_lens``; returns the reports
    (one per length, in order). Raises UsageError for bad inputs."""
    progress = progress or _Progress(verbose)
    check_num_threads(num_threads)
    _require_deps()
    with _threads(num_threads):
        return _port(list(seq_lens), output=output, output_dir=output_dir, target=target,
                     validate=validate, checkpoint=checkpoint, no_weights=no_weights,
                     config=config, num_threads=num_threads, tolerance=tolerance, seed=seed,
                     progress=progress, dense_method=dense_method, dump_ir=dump_ir,
                     tune=tune)


def _port(seq_lens, *, output, output_dir, target, validate, checkpoint, no_weights, config,
          num_threads, tolerance, seed, progress, dense_method, dump_ir, tune):
    from . import _components as C
    from . import _decoder as D

    target_arg = target
    target, target_json = _check_target(target)
    import kokoro_lstm.tvm as kt

    if dense_method not in DENSE_METHODS:
        raise UsageError(f"unknown --dense-method {dense_method!r} (choose from "
                         f"{', '.join(DENSE_METHODS)})")
    try:
        kt.select_dense_method(target, dense_method)
    except (ValueError, RuntimeError) as e:
        raise UsageError(str(e).splitlines()[0]) from None
    if not seq_lens:
        raise UsageError("no frame count given")
    parse_seq_lens(",".join(map(str, seq_lens)))
    cfg = C.load_config(config)
    ist = D.check_decoder_config(cfg, f"config {config}" if config else "config")
    D.check_samples(ist, seq_lens, MAX_FRAMES)
    check_seed(seed)
    D.decoder_classes()
    bucketed = len(seq_lens) > 1
    if output and bucketed:
        raise UsageError("--output names one library; several --seq-lens write "
                         "decoder_compiled_seq{F}.so into --output-dir")
    ckpt = None
    weights = "random (--no-weights)"
    if checkpoint is None and not no_weights:
        progress.note("weights", "no --checkpoint: fetching hexgrad/Kokoro-82M kokoro-v1_0.pth "
                                 "(Hugging Face cache or download; --no-weights for random)")
        checkpoint = C.default_checkpoint()
    if checkpoint is not None:
        ckpt = C.load_checkpoint(checkpoint)
        C._entry(ckpt, D.CHECKPOINT_KEY)
        weights = os.path.abspath(checkpoint)
    check_writable_dir(output_dir, "--output-dir")  # created even with --output, as kokoro-tvm
    if output and not bucketed:
        check_writable_dir(os.path.dirname(os.path.abspath(output)), f"--output {output}:")
    if tune:
        progress.note("tune", "--tune ignored: there is no tuning step (the dense ops run on "
                              "the engine's kernels, the rest is scheduled without tuning)")
    from importlib.metadata import version

    try:
        modules = f"kokoro {version('kokoro')}"
    except Exception:  # noqa: BLE001
        modules = "kokoro"
    opts = {"cfg": cfg, "target": target, "target_arg": target_arg,
            "target_json": target_json, "dense_method": dense_method, "validate": validate,
            "tolerance": tolerance, "seed": seed, "weights": weights, "modules": modules,
            "num_threads": num_threads, "dump_ir": dump_ir, "tune": tune,
            "bucketed": bucketed}
    with progress.step("decoder", "build model"):
        model = D.build_decoder(cfg, ckpt, seed=seed)
    del ckpt
    return [_port_one(model, n, library_path(output_dir, n, bucketed, output), opts, progress)
            for n in seq_lens]


# ----------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------
def format_table(reports) -> str:
    """The closing summary: frames, dense method, compile s, runtime ms, PyTorch eager
    ms, max err, library."""
    head = ("frames", "dense", "compile s", "runtime ms", "torch ms", "max err", "library")
    rows = []
    for r in reports:
        v = r.get("validation")
        err = ("-" if not v else "skipped" if "skipped" in v
               else f"{v['max_abs_err']:.2e}" + ("" if v["passed"] else " FAIL"))
        ms = "-" if r["runtime_ms"] is None else f"{r['runtime_ms']:.1f}"
        rows.append((str(r["frames"]), r["dense_method"], f"{r['compile_s']:.1f}",
                     ms, f"{r['torch_eager_ms']:.1f}", err,
                     os.path.basename(r["files"]["library"])))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.ljust(w) if i in (1, 6) else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def run(args) -> int:
    """Run a parsed port-decoder namespace; returns the exit status."""
    verbose = args.verbose or args.debug

    def body():
        lens = _check_args(args)
        return port(lens, output=args.output, output_dir=args.output_dir, target=args.target,
                    validate=args.validate, checkpoint=args.checkpoint,
                    no_weights=args.no_weights, config=args.config,
                    num_threads=args.num_threads, tolerance=args.tolerance, seed=args.seed,
                    verbose=verbose, dense_method=args.dense_method, dump_ir=args.dump_ir,
                    tune=args.tune)

    return run_reports(PROG, verbose, body, format_table)


def main(argv=None) -> int:
    """``python -m kokoro_lstm.cli.port_decoder [flags]``; returns the exit status."""
    return port_main("kokoro_lstm.cli.port_decoder", PROG, build_parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
