"""Benchmark the TVM lowerings of kokoro_lstm.tvm at Kokoro's LSTM shape.

For each method (native, tir, relax, topi) and T: import time, compile time, IR size
(printed TVMScript lines/chars) and the compiled module's runtime on the Relax VM; plus
kokoro_lstm called directly (the engine, no TVM) and torch.nn.LSTM for reference.
Shape: B=1, I=640, H=256, bidirectional (Kokoro's DurationEncoder/ProsodyPredictor LSTMs).

Prints a markdown table and writes JSON to benchmarks/results/tvm.json.

    python benchmarks/bench_tvm.py [--T 64 256] [--methods native tir relax topi]
                                   [--target llvm] [--host-target] [--repeat 20]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

B, I, H = 1, 640, 256


def _time_calls(fn, repeat, min_time=0.3, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    t_end = time.perf_counter() + min_time
    while len(times) < repeat or (time.perf_counter() < t_end and len(times) < 10 * repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
            "runs": len(times)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--methods", nargs="+", default=["native", "tir", "relax", "topi"])
    ap.add_argument("--target", default="llvm", help='"llvm" or a JSON target dict')
    ap.add_argument("--host-target", action="store_true",
                    help="also time tir compiled for the host CPU (mcpu=<host>)")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "tvm.json"))
    args = ap.parse_args(argv)

    import torch
    import tvm
    from tvm import relax

    import kokoro_lstm
    import kokoro_lstm.tvm as kt

    target = json.loads(args.target) if args.target.strip().startswith("{") else args.target
    torch.manual_seed(0)
    model = torch.nn.LSTM(I, H, bidirectional=True).eval()
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    engine = kokoro_lstm.LSTM.from_state_dict(sd)
    rows = []
    variants = [(m, target, m) for m in args.methods]
    if args.host_target:
        cpu = tvm.target.codegen.llvm_get_system_cpu()
        variants.append(("tir", {"kind": "llvm", "mcpu": cpu}, f"tir (mcpu={cpu})"))
    for T in args.T:
        x = np.random.default_rng(0).standard_normal((T, B, I)).astype(np.float32)
        with torch.no_grad():
            ref, (ref_h, ref_c) = model(torch.from_numpy(x))
        ref = ref.numpy()
        ep = torch.export.export(model, (torch.from_numpy(x),))
        ep = ep.run_decompositions(kt.decomposition_table())
        xt = torch.from_numpy(x)
        xa = tvm.runtime.tensor(x)

        def torch_call():
            with torch.no_grad():
                return model(xt)

        # (label, callable, row). kokoro_lstm direct and native (the ratio that matters)
        # are timed interleaved, so that machine load hits them alike; the others one by
        # one afterwards (their worker threads -- TVM's pool, torch's OpenMP with its
        # spin-wait -- would otherwise steal the cores from whatever runs next).
        entries = [("kokoro_lstm (direct)", lambda: engine(x),
                    dict(compile_s=None, import_s=None, ir_lines=None, ir_chars=None,
                         max_abs_err=float(np.abs(engine(x)[0] - ref).max())))]
        slow = [(f"torch.nn.LSTM ({torch.get_num_threads()} threads)", torch_call,
                 dict(compile_s=None, import_s=None, ir_lines=None, ir_chars=None,
                      max_abs_err=0.0))]
        for method, tgt, label in variants:
            t0 = time.perf_counter()
            mod = kt.from_exported_program(ep, lstm_method=method, target=tgt,
                                           run_ep_decomposition=False)
            t1 = time.perf_counter()
            ex = tvm.compile(mod, target=tvm.target.Target(tgt))
            t2 = time.perf_counter()
            vm = relax.VirtualMachine(ex, tvm.cpu())
            out = vm["main"](xa)
            err = max(float(np.abs(out[0].numpy() - ref).max()),
                      float(np.abs(out[1].numpy() - ref_h.numpy()).max()),
                      float(np.abs(out[2].numpy() - ref_c.numpy()).max()))
            size = kt.ir_size(mod)
            row = dict(compile_s=t2 - t1, import_s=t1 - t0, ir_lines=size["lines"],
                       ir_chars=size["chars"], max_abs_err=err)
            (entries if method == "native" else slow).append(
                (label, functools.partial(vm["main"], xa), row))
            print(f"  T={T} {label}: compiled in {t2 - t1:.2f} s, IR {size['lines']} lines, "
                  f"err {err:.2e}", file=sys.stderr)
        # Rounds of blocks: each block runs one method `block` times and drops the first
        # call (other runtimes' worker threads -- TVM's pool, torch's OpenMP -- may still
        # be spinning from the previous block); blocks rotate so load drift hits all alike.
        times = {label: [] for label, _, _ in entries}
        block = 5
        for _ in range(max(1, args.repeat // (block - 1))):
            for label, fn, _ in entries:
                for i in range(block):
                    t0 = time.perf_counter()
                    fn()
                    if i:
                        times[label].append(time.perf_counter() - t0)
        for label, _, row in entries:
            ts = times[label]
            rows.append(dict(method=label, T=T, median_ms=statistics.median(ts) * 1e3,
                             min_ms=min(ts) * 1e3, runs=len(ts), **row))
        for label, fn, row in slow:
            fast = row["ir_lines"] is None or row["ir_lines"] < 1000
            r = _time_calls(fn, args.repeat if fast else max(3, args.repeat // 10),
                            min_time=0.3 if fast else 0.0, warmup=2 if fast else 1)
            rows.append(dict(method=label, T=T, **r, **row))
            time.sleep(0.3)  # let spinning worker threads go idle

    direct = {row["T"]: row["median_ms"] for row in rows if row["method"].startswith("kokoro")}
    for row in rows:
        row["vs_direct"] = row["median_ms"] / direct[row["T"]]

    info = {"platform": platform.platform(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "tvm": tvm.__version__, "torch": torch.__version__,
            "kokoro_lstm": getattr(kokoro_lstm, "__version__", "?"),
            "kokoro_lstm_build": kokoro_lstm.build_info() if hasattr(kokoro_lstm, "build_info") else {},
            "kokoro_lstm_threads": kokoro_lstm.default_num_threads()
            if hasattr(kokoro_lstm, "default_num_threads") else None,
            "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS"),
            "target": args.target, "shape": {"B": B, "I": I, "H": H, "bidirectional": True}}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"info": info, "rows": rows}, fh, indent=2)

    print(f"TVM lowering at Kokoro's shape (B={B}, I={I}, H={H}, bidirectional), "
          f"target {args.target}, {os.cpu_count()} CPUs\n")
    print("| method | T | runtime ms (median) | vs direct | compile s | IR lines | IR chars | max abs err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        comp = "-" if row["compile_s"] is None else f"{row['compile_s']:.2f}"
        lines = "-" if row["ir_lines"] is None else str(row["ir_lines"])
        chars = "-" if row["ir_chars"] is None else str(row["ir_chars"])
        print(f"| {row['method']} | {row['T']} | {row['median_ms']:.3f} | {row['vs_direct']:.2f}x | "
              f"{comp} | {lines} | {chars} | {row['max_abs_err']:.1e} |")
    print(f"\nJSON: {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
