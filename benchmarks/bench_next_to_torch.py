"""Our LSTM call next to PyTorch in one process (issue 11: "a call made right after a
torch parallel op is <= 1.15x of the same call alone").

PyTorch's CPU ops run on libgomp's team, whose threads spin-wait for milliseconds after
each op; a thread pool of our own started then competes with them for the cores. The
engine runs its parallel jobs on that team instead when libgomp is loaded
(``kokoro_lstm._core.pool_info()``); ``KOKORO_LSTM_POOL=own`` keeps its own pool. This
script compares the two, each in its own process (torch imported in both), Kokoro's
LSTM shape (bidirectional, 640 -> 256, B=1) at T in --lengths, threads in --threads.
Each round, in a rotating order and after a --settle-ms pause (the torch team's spin
ends in ~6 ms, so "alone" is a call with every pool asleep):

* ``alone``: our call;
* ``after torch``: a torch Conv1d(512, 512, 5) over max(T, 64) steps, then at once our
  call (timed);
* ``torch after us``: our call, then at once the conv (timed), against ``conv alone``
  (the conv timed in the previous case);
* ``torch LSTM alone`` / ``after torch``: torch.nn.LSTM of the same shape, the peer's
  own penalty.

Prints ratios of medians (and of minima) to the alone time; writes
benchmarks/results/next_to_torch_<label>.json.

    python benchmarks/bench_next_to_torch.py [--threads 1,2,16] [--lengths 32,256] [--rounds 41]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

from _machine import cpu_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
I, H = 640, 256

WORKER = r"""
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


def run(pool: str, nth: int, T: int, rounds: int, settle: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("KOKORO_LSTM_POOL", "OMP_NUM_THREADS")}
    env["KOKORO_LSTM_POOL"] = pool
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", WORKER, str(nth), str(T), str(rounds), str(settle)],
                       capture_output=True, text=True, env=env, check=False)
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default=f"1,2,{os.cpu_count()}")
    ap.add_argument("--lengths", default="32,256")
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--settle-ms", type=float, default=50.0)
    ap.add_argument("--label", default=platform.node() or "local")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    a = ap.parse_args()
    threads = sorted({int(t) for t in a.threads.split(",")})
    rows = []
    print("| T | threads | pool | ours alone ms | after torch / alone | torch after us / conv alone "
          "| torch LSTM alone ms | its after torch / alone |")
    print("|---|---|---|---|---|---|---|---|")
    for T in [int(t) for t in a.lengths.split(",")]:
        for nth in threads:
            for pool in ("own", "auto"):  # one process each
                r = run(pool, nth, T, a.rounds, a.settle_ms / 1e3)
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


if __name__ == "__main__":
    main()
