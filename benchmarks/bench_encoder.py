"""Ported Kokoro encoder vs PyTorch eager on the CPU (issue 10).

For each component, static length and thread count: ``kokoro-lstm port-encoder``'s
pipeline (random weights, --validate, default methods: native LSTM, native dense
ops) compiles the component, then the exported library and PyTorch eager are timed
alternately in this process (median of --reps runs each; which one goes first
alternates, with a 10 ms untimed pause before each call so that a pool still
spin-waiting after the other runtime does not steal cores), with every thread bound
to the count (TVM's pool, the kokoro_lstm engine, PyTorch).

    python benchmarks/bench_encoder.py                    # 64 and 512, 1 and 2 threads
    python benchmarks/bench_encoder.py --lengths 64 --threads 2 --components f0n

Writes benchmarks/results/encoder_<label>.json and prints a Markdown table. f0n runs
at --aligned-len equal to the length; bert at --bert-seq-len equal to it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

from _machine import cpu_name

SETTLE_S = 0.01
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def bench_one(comp, T, nth, reps, out_dir, km, cfg):
    import numpy as np
    import torch
    import tvm
    from tvm import relax

    from kokoro_lstm.cli import _components as C
    from kokoro_lstm.cli.port_encoder import _Progress, _threads, port

    class _Quiet(_Progress):
        def note(self, tag, text):
            pass

    with open(os.devnull, "w") as devnull:
        (r,) = port([comp], ["auto"], seq_len=T, aligned_len=T, bert_seq_len=T, validate=True,
                    no_weights=True, output_dir=out_dir, num_threads=nth,
                    progress=_Quiet(stream=devnull))
    model = C.build_component(comp, cfg, km, seed=0)
    inputs = C.example_inputs(comp, cfg, T, T, torch.Generator().manual_seed(1))
    with _threads(nth):
        vm = relax.VirtualMachine(tvm.runtime.load_module(r["files"]["library"]), tvm.cpu())
        fn = vm[r["function"]]
        args = [tvm.runtime.tensor(a.numpy()) for a in inputs]
        fn(*args)
        with torch.no_grad():
            model(*inputs)
        tv, tt = [], []
        for i in range(reps):
            # alternate which goes first; a 10 ms untimed pause before each call, so
            # that pools still spin-waiting after the other one don't steal cores
            order = (0, 1) if i % 2 == 0 else (1, 0)
            for which in order:
                time.sleep(SETTLE_S)
                if which == 0:
                    t0 = time.perf_counter()
                    fn(*args)
                    tv.append((time.perf_counter() - t0) * 1e3)
                else:
                    with torch.no_grad():
                        t0 = time.perf_counter()
                        model(*inputs)
                        tt.append((time.perf_counter() - t0) * 1e3)
    med = lambda v: float(np.median(v))  # noqa: E731
    return {"component": comp, "length": T, "threads": nth,
            "compiled_ms": round(med(tv), 3), "torch_ms": round(med(tt), 3),
            "ratio": round(med(tv) / med(tt), 3), "compile_s": r["compile_s"],
            "compiled_min_ms": round(min(tv), 3), "torch_min_ms": round(min(tt), 3),
            "loadavg_1min": _loadavg(),
            "max_err": r["validation"]["max_err"], "passed": r["validation"]["passed"],
            "dense_calls": r["dense_calls"], "lstm_method": r["lstm_method"],
            "dense_method": r["dense_method"], "runs": {"compiled": tv, "torch": tt}}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--components", nargs="+",
                   default=["text_encoder", "duration", "f0n", "bert"])
    p.add_argument("--lengths", nargs="+", type=int, default=[64, 512])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--label", default=platform.node() or "host")
    a = p.parse_args(argv)

    from kokoro_lstm.cli import _components as C

    km, _ = C.kokoro_modules()
    cfg = C.load_config(None)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-encoder-") as tmp:
        for T in a.lengths:
            for comp in a.components:
                for nth in a.threads:
                    row = bench_one(comp, T, nth, a.reps, os.path.join(tmp, f"{comp}{T}_{nth}"),
                                    km, cfg)
                    rows.append(row)
                    print(f"{comp:13s} T={T:4d} threads={nth}: compiled {row['compiled_ms']:9.2f} ms"
                          f"  torch {row['torch_ms']:9.2f} ms  ratio {row['ratio']:.2f}"
                          f"  compile {row['compile_s']:.1f} s  err {row['max_err']:.1e}",
                          flush=True)
    import torch
    import tvm

    out = {"machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "label": a.label},
           "versions": {"torch": torch.__version__, "tvm": getattr(tvm, "__version__", "?")},
           "rows": rows}
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    path = os.path.join(ROOT, "benchmarks", "results", f"encoder_{a.label}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("\n| component | T | threads | compiled ms | PyTorch ms | ratio | min: compiled / PyTorch ms "
          "| compile s | max err | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['component']} | {r['length']} | {r['threads']} | {r['compiled_ms']:.1f} | "
              f"{r['torch_ms']:.1f} | {r['ratio']:.2f} | {r['compiled_min_ms']:.1f} / "
              f"{r['torch_min_ms']:.1f} | {r['compile_s']:.1f} | {r['max_err']:.1e} | "
              f"{r['loadavg_1min']:.1f} |")
    print(f"\nwritten {path}")


if __name__ == "__main__":
    main()
