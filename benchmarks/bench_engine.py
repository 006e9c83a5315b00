"""The engine itself: two builds against each other, its pool next to PyTorch's, and
its kernels one by one.

    python benchmarks/bench_engine.py ab A B [--cases 256:16:1,256:64:2] [--rounds 11] [--torch]
    python benchmarks/bench_engine.py next-to-torch [--threads 1,2,16] [--lengths 32,256] [--rounds 41]
    python benchmarks/bench_engine.py kernels [--rounds 21]

ab: two builds of the engine (directories holding a built kokoro_lstm, e.g. a
`git worktree` of the previous commit built in place, put first on each worker's
PYTHONPATH), each in its own worker process; one timed call at a time alternated
between them (A first in even rounds, B first in odd ones), so that a neighbour's load
or a frequency change hits both alike. Cases are T:B:threads at Kokoro's shape
(bidirectional, I=640, H=256, float32); a --pause before each call; with --torch the
workers import torch first, so the engine runs on libgomp's team. Prints each build's
median and minimum and the median of the paired ratios B / A (< 1: B faster).

next-to-torch: our call next to PyTorch in one process. PyTorch's ops run on libgomp's
team, whose threads spin for milliseconds after each op; the engine runs its parallel
jobs on that team when libgomp is loaded (`KOKORO_LSTM_POOL=own` keeps its own pool).
One process per pool (torch imported in both), Kokoro's shape at B=1; each round, in a
rotating order after a --settle-ms pause: our call alone; a torch Conv1d(512, 512, 5)
then our call at once (timed); our call then the conv (timed); torch.nn.LSTM alone and
after the conv (the peer's own penalty). Prints ratios to the alone times; writes
results/next_to_torch_<label>.json.

kernels: `kl_build.py bench-kernels`: ns per call of every kernel of the kernel lists
this CPU can run (benchmarks/c/bench_kernels.c; `make bench-kernels` with the
Makefile's compiler and BLAS).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from _machine import cpu_name
from _procs import PipeWorker

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
I, H = 640, 256
AB_DOC = "Two builds of the engine, alternated call by call, each in its own process."
NEXT_TO_TORCH_DOC = "Our LSTM call next to PyTorch's ops in one process, on each pool."


# ---- ab ---------------------------------------------------------------------------------

def _ab_worker(T: int, B: int, n: int, pause: float, torch_loaded: bool) -> None:
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


def main_ab(argv) -> None:
    ap = argparse.ArgumentParser(prog="bench_engine.py ab", description=AB_DOC)
    ap.add_argument("builds", nargs="*", metavar="A B", help="the two build directories")
    ap.add_argument("--cases", default="256:16:1,256:64:1", help="T:B:threads, comma-separated")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--pause", type=float, default=0.02)
    ap.add_argument("--torch", action="store_true", help="workers import torch (libgomp's team)")
    ap.add_argument("--worker", nargs=3, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _ab_worker(*args.worker, args.pause, args.torch)
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
                argv = [sys.executable, os.path.abspath(__file__), "ab", "--pause", str(args.pause),
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

# ---- next-to-torch ------------------------------------------------------------------------

NEXT_TO_TORCH_WORKER = r"""
import json, sys, time
import numpy as np, torch
import kokoro_lstm
from kokoro_lstm import _core
nth, T, rounds, settle = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
I, H = %d, %d
torch.set_num_threads(nth)
torch.manual_seed(0)
ref = torch.nn.LSTM(I, H, bidirectional=True).eval()
ours = kokoro_lstm.LSTM.from_state_dict({k: v.numpy() for k, v in ref.state_dict().items()},
                                        num_threads=nth)
conv = torch.nn.Conv1d(512, 512, 5, padding=2).eval()
x = np.random.default_rng(0).standard_normal((T, 1, I), dtype=np.float32)
xt = torch.from_numpy(x)
ct = torch.randn(1, 512, max(T, 64))
def us(): ours(x)
def tconv(): conv(ct)
def tlstm(): ref(xt)
def timed(f):
    t0 = time.perf_counter(); f(); return (time.perf_counter() - t0) * 1e3
def alone(): return {"alone": timed(us)}
def after():
    c = timed(tconv); return {"conv_alone": c, "after_torch": timed(us)}
def before():
    us(); return {"torch_after_us": timed(tconv)}
def lstm_alone(): return {"torch_lstm_alone": timed(tlstm)}
def lstm_after():
    tconv(); return {"torch_lstm_after_torch": timed(tlstm)}
cases = [alone, after, before, lstm_alone, lstm_after]
times = {}
with torch.inference_mode():
    for f in cases * 3: f()
    for r in range(rounds):
        for k in range(len(cases)):
            time.sleep(settle)
            for name, v in cases[(r + k) %% len(cases)]().items():
                times.setdefault(name, []).append(v)
print(json.dumps({"times": times, "pool": _core.pool_info()}))
""" % (I, H)


def _run_next_to_torch(pool: str, nth: int, T: int, rounds: int, settle: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("KOKORO_LSTM_POOL", "OMP_NUM_THREADS")}
    env["KOKORO_LSTM_POOL"] = pool
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", NEXT_TO_TORCH_WORKER, str(nth), str(T), str(rounds), str(settle)],
                       capture_output=True, text=True, env=env, check=False)
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main_next_to_torch(argv) -> None:
    ap = argparse.ArgumentParser(prog="bench_engine.py next-to-torch", description=NEXT_TO_TORCH_DOC)
    ap.add_argument("--threads", default=f"1,2,{os.cpu_count()}")
    ap.add_argument("--lengths", default="32,256")
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--settle-ms", type=float, default=50.0)
    ap.add_argument("--label", default=platform.node() or "local")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    a = ap.parse_args(argv)
    threads = sorted({int(t) for t in a.threads.split(",")})
    rows = []
    print("| T | threads | pool | ours alone ms | after torch / alone | torch after us / conv alone "
          "| torch LSTM alone ms | its after torch / alone |")
    print("|---|---|---|---|---|---|---|---|")
    for T in [int(t) for t in a.lengths.split(",")]:
        for nth in threads:
            for pool in ("own", "auto"):  # one process each
                r = _run_next_to_torch(pool, nth, T, a.rounds, a.settle_ms / 1e3)
                t = r["times"]
                med = {k: statistics.median(v) for k, v in t.items()}
                mn = {k: min(v) for k, v in t.items()}
                row = {"T": T, "threads": nth, "pool": r["pool"]["pool"], "KOKORO_LSTM_POOL": pool,
                       "jobs": {k: r["pool"][k] for k in ("jobs_own", "jobs_openmp")},
                       "median_ms": med, "min_ms": mn, "times_ms": t}
                rows.append(row)
                print(f"| {T} | {nth} | {row['pool']} | {med['alone']:.3f} ({mn['alone']:.3f}) "
                      f"| {med['after_torch'] / med['alone']:.2f} ({mn['after_torch'] / mn['alone']:.2f}) "
                      f"| {med['torch_after_us'] / med['conv_alone']:.2f} "
                      f"({mn['torch_after_us'] / mn['conv_alone']:.2f}) "
                      f"| {med['torch_lstm_alone']:.3f} "
                      f"| {med['torch_lstm_after_torch'] / med['torch_lstm_alone']:.2f} |", flush=True)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"next_to_torch_{a.label}.json")
    with open(path, "w") as f:
        json.dump({"machine": {"cpu": cpu_name(), "cores": os.cpu_count(),
                               "platform": platform.platform(), "python": platform.python_version(),
                               "load": os.getloadavg()},
                   "rounds": a.rounds, "settle_ms": a.settle_ms, "rows": rows}, f, indent=1)
    print(f"wrote {path}")

# ---- kernels ------------------------------------------------------------------------------

def main_kernels(argv) -> None:
    ap = argparse.ArgumentParser(prog="bench_engine.py kernels", description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=21)
    a = ap.parse_args(argv)
    sys.exit(subprocess.call([sys.executable, os.path.join(ROOT, "kl_build.py"), "bench-kernels",
                              "--run", str(a.rounds)], cwd=ROOT))


COMMANDS = {"ab": main_ab, "next-to-torch": main_next_to_torch, "kernels": main_kernels}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__.split("\n\n")[1] if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help")
                 else f"unknown command {sys.argv[1]!r}: one of {', '.join(COMMANDS)}")
    COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
