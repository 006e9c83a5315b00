"""``kokoro-lstm demo``: port Kokoro's text_encoder and duration with several LSTM
methods (random weights, validated against PyTorch) and print one table.

    kokoro-lstm demo                       # --seq-len 32, methods native tir relax
    kokoro-lstm demo --methods native tir --output-dir demo_out

Each component is built and exported once, then lowered and compiled with every
method into ``<output-dir>/<method>/`` (a temporary directory unless
``--output-dir``). Columns: IR lines of the Relax module, compile seconds (lower +
build), the dense-op lowering (native: the engine's OpenBLAS externs), runtime of the compiled module (median ms), PyTorch eager (unpatched) ms on
the same input, max error against PyTorch, and the padding error (a shorter text
padded to --seq-len against the same text unpadded: ~1e-6 with packed semantics).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

__all__ = ["add_arguments", "run", "demo"]

DEFAULT_METHODS = ("native", "tir", "relax")
COMPONENTS = ("text_encoder", "duration")


def add_arguments(p):
    p.add_argument("--seq-len", type=int, default=32, help="static text length (default 32)")
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS),
                   choices=("native", "tir", "relax", "topi"),
                   help="LSTM methods to compare (default: native tir relax)")
    p.add_argument("--components", nargs="+", default=list(COMPONENTS),
                   choices=("text_encoder", "duration", "f0n", "bert"),
                   help="components (default: text_encoder duration)")
    p.add_argument("--lstm-semantics", default="packed", choices=("packed", "padded"),
                   help="packed: LSTMs honour the runtime lengths; padded: pack/pad replaced "
                        "by identity (see port-encoder)")
    p.add_argument("--target", default="llvm",
                   help='TVM target: llvm or an llvm variant such as "llvm -mcpu=znver4"')
    p.add_argument("--dense-method", default="native", choices=("native", "tvm"),
                   help="matmul/conv1d lowering: native (engine's OpenBLAS externs, default) "
                        "or tvm (TVM's own loops)")
    p.add_argument("--output-dir", default=None,
                   help="where the libraries and reports go (default: a temporary directory)")
    p.add_argument("--num-threads", type=int, metavar="N",
                   help="threads for TVM, the kokoro_lstm engine and PyTorch (default: the "
                        "usable cores)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show TVM's and PyTorch's warnings")
    return p


def demo(*, seq_len=32, methods=DEFAULT_METHODS, components=COMPONENTS, output_dir=None,
         semantics="packed", target="llvm", num_threads=None, verbose=False, stream=None,
         dense_method="native"):
    """Run the demo; returns (reports, table text). Prints the table to ``stream``
    (stdout by default)."""
    from .port_encoder import format_table, port

    stream = stream or sys.stdout
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kokoro-lstm-demo-") as tmp:
        out = output_dir or tmp
        reports = port(list(components), list(methods), seq_len=seq_len, aligned_len=seq_len,
                       target=target, semantics=semantics, validate=True, no_weights=True,
                       output_dir=out, num_threads=num_threads, verbose=verbose,
                       method_subdirs=True, bert_seq_len=seq_len, dense_method=dense_method)
    table = format_table(reports)
    total = time.perf_counter() - t0
    stream.write(f"Kokoro-82M encoder, random weights, T={seq_len}, {semantics} semantics, "
                 f"target {target}, dense ops: {dense_method}\n{table}\n")
    needs = sorted({r["runtime_needs"]["summary"] for r in reports if r.get("runtime_needs")})
    for n in needs:
        stream.write(f"artifacts need at run time: {n}\n")
    where = os.path.abspath(output_dir) if output_dir else "a temporary directory (removed)"
    stream.write(f"total {total:.0f} s; libraries and reports in {where}\n")
    stream.flush()
    return reports, table


def run(args) -> int:
    from ._command import run_guarded

    if args.seq_len < 1:
        sys.stderr.write("kokoro-lstm demo: error: --seq-len must be positive\n")
        return 2
    result, rc = run_guarded("kokoro-lstm demo", args.verbose, lambda: demo(
        seq_len=args.seq_len, methods=args.methods, components=args.components,
        output_dir=args.output_dir, semantics=args.lstm_semantics, target=args.target,
        num_threads=args.num_threads, verbose=args.verbose, dense_method=args.dense_method))
    if rc:
        return rc
    reports, _ = result
    failed = [r for r in reports if r["validation"] and not r["validation"]["passed"]]
    return 1 if failed else 0
