"""Ported Kokoro encoder vs PyTorch eager, each runtime in its own process, rounds
alternated (issue 10).

For each component, static length and thread count: ``port-encoder``'s pipeline
(random weights, --validate, default methods) compiles the component once per
source tree given with ``--tree`` (e.g. the code before and after a change), in a
subprocess with that tree on PYTHONPATH. Then one worker process per compiled
library (TVM runtime only: kokoro_lstm is not importable there, the engine comes
from the library) and one PyTorch eager worker (``torch.set_num_threads(n)``) are
started, and rounds alternate between them: in each round every worker in turn
(the order rotates) sleeps 10 ms, then times ``--reps`` calls. Idle workers block
on a pipe, so only one runtime runs at a time. The table gives, per tree,
compiled / PyTorch of the medians and of the minima over every call.

    python benchmarks/bench_encoder_procs.py --tree before=/path/old --tree after=.
    python benchmarks/bench_encoder_procs.py --components bert --lengths 512 --threads 1

Writes benchmarks/results/encoder_procs_<label>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
THREAD_VARS = ("OMP_NUM_THREADS", "TVM_NUM_THREADS", "KOKORO_LSTM_NUM_THREADS",
               "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

COMPILE = r"""
import json, os, sys
from kokoro_lstm.cli.port_encoder import _Progress, port
class Q(_Progress):
    def note(self, *a): pass
comp, T, nth, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with open(os.devnull, "w") as dn:
    (r,) = port([comp], ["auto"], seq_len=T, aligned_len=T, bert_seq_len=T, validate=True,
                no_weights=True, output_dir=out, num_threads=nth, progress=Q(stream=dn))
print(json.dumps({"library": r["files"]["library"], "function": r["function"],
                  "compile_s": r["compile_s"], "max_err": r["validation"]["max_err"],
                  "passed": r["validation"]["passed"], "dense_calls": r["dense_calls"]}))
"""

WORKER = r"""
import json, sys, time
kind, nth = sys.argv[1], int(sys.argv[2])
import numpy as np
if kind == "torch":
    import torch
    torch.set_num_threads(nth)
    from kokoro_lstm.cli import _components as C
    comp, T, npz = sys.argv[3], int(sys.argv[4]), sys.argv[5]
    km, _ = C.kokoro_modules()
    cfg = C.load_config(None)
    model = C.build_component(comp, cfg, km, seed=0)
    inputs = C.example_inputs(comp, cfg, T, T, torch.Generator().manual_seed(1))
    np.savez(npz, *[a.numpy() for a in inputs])
    def call():
        with torch.no_grad():
            model(*inputs)
else:
    assert "kokoro_lstm" not in sys.modules
    import tvm
    from tvm import relax
    lib, func, npz = sys.argv[3], sys.argv[4], sys.argv[5]
    if nth > 1:
        tvm.get_global_func("runtime.config_threadpool")(0, nth)
    vm = relax.VirtualMachine(tvm.runtime.load_module(lib), tvm.cpu())
    f = vm[func]
    z = np.load(npz)
    args = [tvm.runtime.tensor(z[f"arr_{i}"]) for i in range(len(z.files))]
    def call():
        f(*args)
call(); call()
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd or cmd[0] == "quit":
        break
    ts = []
    for _ in range(int(cmd[1])):
        time.sleep(0.01)
        t0 = time.perf_counter()
        call()
        ts.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps(ts), flush=True)
"""


def _env(nth, pythonpath):
    env = dict(os.environ)
    for v in THREAD_VARS:
        env[v] = str(nth)
    env["PYTHONPATH"] = pythonpath
    return env


class Worker:
    def __init__(self, argv, env, cwd):
        self.p = subprocess.Popen([PY, "-c", WORKER] + argv, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)
        line = self.p.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError(f"worker {argv[:2]} failed to start")

    def run(self, reps):
        self.p.stdin.write(f"run {reps}\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
        except OSError:
            pass
        self.p.wait()


def bench(comp, T, nth, trees, rounds, reps, tmp):
    import numpy as np

    built = {}
    for name, path in trees:
        out = os.path.join(tmp, f"{name}_{comp}{T}_{nth}")
        r = subprocess.run([PY, "-c", COMPILE, comp, str(T), str(nth), out], cwd=path,
                           env=_env(nth, path), capture_output=True, text=True, check=True)
        built[name] = json.loads(r.stdout.strip().splitlines()[-1])
    npz = os.path.join(tmp, f"in_{comp}{T}.npz")
    workers = {"torch": Worker(["torch", str(nth), comp, str(T), npz], _env(nth, ROOT), ROOT)}
    empty = tempfile.mkdtemp(dir=tmp)  # no kokoro_lstm importable from here
    for name, _ in trees:
        workers[name] = Worker(["tvm", str(nth), built[name]["library"], built[name]["function"],
                                npz], _env(nth, ""), empty)
    times = {k: [] for k in workers}
    order = list(workers)
    try:
        for i in range(rounds):
            rot = order[i % len(order):] + order[:i % len(order)]
            for k in rot:
                times[k] += workers[k].run(reps)
    finally:
        for w in workers.values():
            w.close()
    med = {k: float(np.median(v)) for k, v in times.items()}
    mn = {k: float(min(v)) for k, v in times.items()}
    row = {"component": comp, "length": T, "threads": nth, "torch_ms": med["torch"],
           "torch_min_ms": mn["torch"], "loadavg_1min": os.getloadavg()[0], "trees": {}}
    for name, _ in trees:
        row["trees"][name] = {"compiled_ms": med[name], "compiled_min_ms": mn[name],
                              "ratio": med[name] / med["torch"], "ratio_min": mn[name] / mn["torch"],
                              **{k: built[name][k] for k in ("compile_s", "max_err", "passed",
                                                              "dense_calls")},
                              "runs": times[name]}
    row["torch_runs"] = times["torch"]
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", default=[],
                   help="NAME=PATH of a source tree (built in place); default: this one")
    p.add_argument("--components", nargs="+", default=["text_encoder", "duration", "f0n", "bert"])
    p.add_argument("--lengths", nargs="+", type=int, default=[64, 512])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--label", default=platform.node() or "host")
    a = p.parse_args(argv)
    trees = [tuple(t.split("=", 1)) for t in a.tree] or [("this", ROOT)]
    trees = [(n, os.path.abspath(pth)) for n, pth in trees]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-procs-") as tmp:
        for T in a.lengths:
            for comp in a.components:
                for nth in a.threads:
                    row = bench(comp, T, nth, trees, a.rounds, a.reps, tmp)
                    rows.append(row)
                    txt = "  ".join(f"{n} {r['compiled_ms']:8.1f} ms ratio {r['ratio']:.2f} "
                                    f"(min {r['ratio_min']:.2f}) err {r['max_err']:.1e}"
                                    for n, r in row["trees"].items())
                    print(f"{comp:13s} T={T:4d} thr={nth}: torch {row['torch_ms']:8.1f} ms  {txt}"
                          f"  load {row['loadavg_1min']:.1f}", flush=True)
    out = {"machine": {"cpu": _cpu(), "cores": os.cpu_count(), "label": a.label},
           "trees": dict(trees), "rounds": a.rounds, "reps": a.reps, "rows": rows}
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    path = os.path.join(ROOT, "benchmarks", "results", f"encoder_procs_{a.label}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    names = [n for n, _ in trees]
    print("\n| component | T | threads | PyTorch ms | " +
          " | ".join(f"{n} ms | {n} ratio (min)" for n in names) + " | load |")
    print("|---|---:|---:|---:|" + "---:|---:|" * len(names) + "---:|")
    for r in rows:
        cells = " | ".join(f"{r['trees'][n]['compiled_ms']:.1f} | {r['trees'][n]['ratio']:.2f} "
                           f"({r['trees'][n]['ratio_min']:.2f})" for n in names)
        print(f"| {r['component']} | {r['length']} | {r['threads']} | {r['torch_ms']:.1f} | "
              f"{cells} | {r['loadavg_1min']:.1f} |")
    print(f"\nwritten {path}")


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


if __name__ == "__main__":
    main()
