"""Batched bidirectional LSTM, each runtime in its own process: kokoro_lstm vs
torch.nn.LSTM vs ONNX Runtime (issue 11, batch recurrence).

Case: T in {256} (--lengths), I=640, H=256, bidirectional float32, B in {16, 64}
(--batches), threads in {1, 2} (--threads); B=1 with short T is Kokoro's short call. Every runtime lives in its own worker process
(this script with --worker RUNTIME), started once per (B, threads); the parent
checks each worker's output against torch (max-abs 1e-4), then alternates
timed rounds: each round asks every worker for one timed call, starting from a
different worker each round, so a neighbour's load hits them alike. A worker
sleeps --settle seconds before each timed call (ORT/OpenMP threads that spin
after the previous call have parked). Reports median and minimum in ms and the
spread (max/min - 1) of each runtime's rounds; writes JSON to
benchmarks/results/batch.json (--out).

    python benchmarks/bench_batch.py [--batches 16,64] [--lengths 256] [--threads 1,2] [--rounds 15]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIMES = ["ours", "torch", "ort"]
I, H = 640, 256


def _worker(runtime: str, T: int, B: int, n: int) -> None:
    """Reads commands from stdin: 'check' -> writes the output as .npy to a
    path, 'time' -> one timed call, prints seconds; 'quit'."""
    os.environ.setdefault("OMP_NUM_THREADS", str(n))
    import numpy as np
    import torch
    sys.path.insert(0, HERE)
    import bench_lstm as bl

    torch.set_num_threads(n)
    case = bl.Case(f"T={T} B={B}", T, B=B, I=I, H=H)
    module = bl.make_module(case)
    x = bl.make_input(case)
    build = {"ours": bl._ours("float32"), "torch": bl._build_torch, "ort": bl._build_ort}[runtime]
    with torch.inference_mode():
        run = build(case, module, x, n)
        for _ in range(2):
            run()
        print("ready", flush=True)
        for line in sys.stdin:
            cmd = line.split()
            if not cmd or cmd[0] == "quit":
                break
            if cmd[0] == "check":
                np.save(cmd[1], bl._np(run()[0]))
                print("ok", flush=True)
            elif cmd[0] == "time":
                time.sleep(float(cmd[1]))
                t0 = time.perf_counter()
                run()
                print(time.perf_counter() - t0, flush=True)


def bench(T: int, B: int, n: int, rounds: int, settle: float, tmp: str) -> dict:
    import numpy as np
    env = dict(os.environ, OMP_NUM_THREADS=str(n))
    procs = {r: subprocess.Popen([sys.executable, __file__, "--worker", r, "--T", str(T),
                                  "--B", str(B), "--n", str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=env) for r in RUNTIMES}

    def ask(r, cmd):
        procs[r].stdin.write(cmd + "\n")
        procs[r].stdin.flush()
        return procs[r].stdout.readline().strip()

    try:
        for r in RUNTIMES:
            assert procs[r].stdout.readline().strip() == "ready", r
        outs = {}
        for r in RUNTIMES:
            path = os.path.join(tmp, f"bench_batch_{os.getpid()}_{r}.npy")
            assert ask(r, f"check {path}") == "ok"
            outs[r] = np.load(path)
            os.remove(path)
        err = {r: float(np.max(np.abs(outs[r] - outs["torch"]))) for r in RUNTIMES}
        if max(err.values()) > 1e-4:
            raise SystemExit(f"T={T} B={B} n={n}: outputs differ from torch: {err}")
        times = {r: [] for r in RUNTIMES}
        for i in range(rounds):
            s = i % len(RUNTIMES)
            for r in RUNTIMES[s:] + RUNTIMES[:s]:
                times[r].append(float(ask(r, f"time {settle}")))
    finally:
        for p in procs.values():
            try:
                p.stdin.write("quit\n")
                p.stdin.flush()
            except OSError:
                pass
            p.wait()
    res = {"T": T, "B": B, "threads": n, "max_abs_vs_torch": err, "times_s": times, "ms": {}}
    for r in RUNTIMES:
        t = times[r]
        res["ms"][r] = {"median": statistics.median(t) * 1e3, "min": min(t) * 1e3,
                        "spread": max(t) / min(t) - 1.0}
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--T", type=int)
    ap.add_argument("--B", type=int)
    ap.add_argument("--n", type=int)
    ap.add_argument("--batches", default="16,64")
    ap.add_argument("--lengths", default="256")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--settle", type=float, default=0.05)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "batch.json"))
    a = ap.parse_args()
    if a.worker:
        _worker(a.worker, a.T, a.B, a.n)
        return
    import numpy, onnxruntime, torch
    sys.path.insert(0, os.path.dirname(HERE))
    import kokoro_lstm
    results = []
    for T, B in [(t, b) for t in map(int, a.lengths.split(",")) for b in map(int, a.batches.split(","))]:
        for n in map(int, a.threads.split(",")):
            r = bench(T, B, n, a.rounds, a.settle, "/tmp")
            results.append(r)
            ms = r["ms"]
            peer = min(ms["torch"]["median"], ms["ort"]["median"])
            print(f"T={T:4d} B={B:3d} threads={n}: " + "  ".join(
                f"{k} {v['median']:7.1f} ms (min {v['min']:7.1f}, spread {v['spread'] * 100:3.0f}%)"
                for k, v in ms.items()) + f"  faster peer / ours = {peer / ms['ours']['median']:.2f}x",
                flush=True)
    info = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "load_before": os.getloadavg(), "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__, "numpy": numpy.__version__,
            "kokoro_lstm": getattr(kokoro_lstm, "__version__", "?"), "rounds": a.rounds,
            "settle_s": a.settle, "case": {"I": I, "H": H, "bidirectional": True}}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"machine": info, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
