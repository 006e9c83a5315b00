"""Two builds of the engine, A and B, each in its own worker process, one timed
call at a time alternated between them (A first in even rounds, B first in odd
ones), so that a neighbour's load or a frequency change hits both alike; reports
each build's median and minimum in ms and the median of the paired ratios B / A
(< 1: B faster). For A/B of engine changes; bench_batch.py compares runtimes.

Each build is a directory holding a built kokoro_lstm (e.g. a `git worktree` of
the previous commit, built in place), put first on the worker's PYTHONPATH.
Cases are T:B:threads, bidirectional LSTM I=640 H=256 float32 (Kokoro's shape).
A worker sleeps --pause seconds before each timed call; with --torch it imports torch
first (torch.set_num_threads(threads)), so the engine runs on libgomp's team.

    python benchmarks/bench_ab.py /tmp/old /work/main --cases 256:16:1,256:64:2 --rounds 11
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from _procs import PipeWorker

HERE = os.path.dirname(os.path.abspath(__file__))


def _worker(T: int, B: int, n: int, pause: float, torch_loaded: bool) -> None:
    """The PipeWorker protocol: 'ready {"path": ...}', then one JSON line (the
    seconds of one call) per command."""
    import numpy as np
    if torch_loaded:  # the engine's parallel jobs then run on libgomp's team
        import torch
        torch.set_num_threads(n)

    import kokoro_lstm
    x = np.random.default_rng(0).standard_normal((T, B, 640)).astype(np.float32)
    m = kokoro_lstm.LSTM(640, 256, bidirectional=True, num_threads=n)
    for _ in range(3):
        m(x)
    print("ready " + json.dumps({"path": os.path.dirname(kokoro_lstm.__file__)}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        time.sleep(pause)
        t = time.perf_counter()
        m(x)
        print(json.dumps(time.perf_counter() - t), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="*", metavar="A B", help="the two build directories")
    ap.add_argument("--cases", default="256:16:1,256:64:1", help="T:B:threads, comma-separated")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--pause", type=float, default=0.02)
    ap.add_argument("--torch", action="store_true", help="workers import torch (libgomp's team)")
    ap.add_argument("--worker", nargs=3, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(*args.worker, args.pause, args.torch)
        return
    if len(args.builds) != 2:
        ap.error("give two build directories, A and B")
    builds = {"A": os.path.abspath(args.builds[0]), "B": os.path.abspath(args.builds[1])}
    print(f"A = {builds['A']}, B = {builds['B']}", flush=True)
    for case in args.cases.split(","):
        T, B, n = case.split(":")
        workers = {}
        try:
            for k, path in builds.items():
                env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [path, os.environ.get("PYTHONPATH")])))
                argv = [sys.executable, __file__, "--pause", str(args.pause),
                        *(["--torch"] if args.torch else []), "--worker", T, B, n]
                workers[k] = PipeWorker(argv, env, HERE, f"{k} ({path})")
                got = workers[k].info["path"]  # where its kokoro_lstm came from
                if not got.startswith(path):
                    sys.exit(f"build {k}: imported kokoro_lstm from {got}, not {path}")
            ts = {k: [] for k in builds}
            for r in range(args.rounds):
                for k in ("A", "B") if r % 2 == 0 else ("B", "A"):
                    ts[k].append(workers[k].ask("time"))
        finally:
            for w in workers.values():
                w.close()
        ratio = statistics.median(b / a for a, b in zip(ts["A"], ts["B"]))
        cols = "  ".join(f"{k} {statistics.median(v) * 1e3:.2f} (min {min(v) * 1e3:.2f})" for k, v in ts.items())
        print(f"T={T} B={B} threads={n}: {cols} ms  paired B/A {ratio:.3f}", flush=True)


if __name__ == "__main__":
    main()
