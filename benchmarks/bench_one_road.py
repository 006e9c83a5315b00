"""The cost of the one road into the engine (kl_lstm_forward), at Kokoro's shape
(I=640, H=256, bidirectional, B=1, float32):

* ``check``: the weight cache's staleness check — the same call with the check
  (the default) and with ``constant_weights=True`` (trusted, no check), alternated,
  at T=32 and T=256; plus the fingerprint of the checked bytes (2 MiB + 16 KiB)
  alone (``_core.bench_fingerprint``, warm buffer).
* ``torch_op``: ``kokoro::lstm_forward_bidirectional`` per call at T=16 against a
  direct ``_core.forward`` on preallocated arrays: the op's own overhead.
* ``tvm``: the ``native`` method inside a compiled TVM module (weights as
  constants) against the direct call (when TVM is installed).

Each measurement alternates its variants round by round; medians and minima of
per-call times over the rounds are reported. Prints a Markdown table and writes
JSON (``--json``). Run with ``--old PATH`` to time the torch op of another
kokoro_lstm checkout (e.g. the commit before the one road) in a subprocess.

    python benchmarks/bench_one_road.py [--threads 1,2] [--rounds 15] [--json out.json]
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

import numpy as np

I, H = 640, 256


def _weights(rng):
    w = []
    for _ in range(2):
        w += [rng.uniform(-0.06, 0.06, (4 * H, I)).astype(np.float32),
              rng.uniform(-0.06, 0.06, (4 * H, H)).astype(np.float32),
              rng.uniform(-0.06, 0.06, 4 * H).astype(np.float32),
              rng.uniform(-0.06, 0.06, 4 * H).astype(np.float32)]
    return w


def _alternate(variants: dict, rounds: int, calls: int) -> dict:
    """{name: fn} -> {name: (median_ms, min_ms)} per call, variants alternated."""
    times = {k: [] for k in variants}
    names = list(variants)
    for fn in variants.values():  # warm-up (packs the weights, starts the pool)
        for _ in range(3):
            fn()
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            for _ in range(calls):
                variants[k]()
            times[k].append((time.perf_counter() - t0) / calls * 1e3)
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


def bench_check(threads, rounds):
    from kokoro_lstm import _core

    rng = np.random.default_rng(0)
    w = _weights(rng)
    rows = []
    for T in (32, 256):
        x = rng.standard_normal((T, 1, I)).astype(np.float32)
        y = np.empty((T, 1, 2 * H), np.float32)
        hn, cn = np.empty((2, 1, H), np.float32), np.empty((2, 1, H), np.float32)
        for nth in threads:
            def call(const, nth=nth, x=x, y=y):
                _core.forward(x, None, None, None, w, y, hn, cn, num_layers=1, bidirectional=True,
                              has_bias=True, num_threads=nth, constant_weights=const)
            r = _alternate({"checked": lambda: call(False), "trusted": lambda: call(True)},
                           rounds, 40 if T == 32 else 6)
            fp = _core.bench_fingerprint(2 * 4 * H * H * 4 + 4 * 4 * H * 4, nth, 50) * 1e3
            rows.append({"T": T, "threads": nth, "checked_ms": r["checked"], "trusted_ms": r["trusted"],
                         "fingerprint_ms": fp,
                         "check_pct_median": 100 * (r["checked"][0] / r["trusted"][0] - 1),
                         "check_pct_min": 100 * (r["checked"][1] / r["trusted"][1] - 1),
                         "fingerprint_pct": 100 * fp / r["trusted"][0]})
    return rows


def _torch_op_times(threads, rounds, T=16):
    """Per-call ms of the bidirectional kokoro op and (new road only) the direct call."""
    import torch

    import kokoro_lstm
    import kokoro_lstm.torch_ops as ko

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(I, H, bidirectional=True).eval()
    x = torch.randn(T, 1, I)
    h0 = torch.zeros(2, 1, H)
    w = [p.detach() for p in lstm.parameters()]
    out = {}
    for nth in threads:
        kokoro_lstm.set_num_threads(nth) if hasattr(kokoro_lstm, "set_num_threads") else \
            ko.set_num_threads(nth)
        variants = {"op": lambda: ko.lstm_forward_bidirectional(x, h0, h0, *w)}
        if hasattr(kokoro_lstm._core, "forward"):
            from kokoro_lstm import _core

            xn, wn = x.numpy(), [t.numpy() for t in w]
            y = np.empty((T, 1, 2 * H), np.float32)
            hn, cn = np.empty((2, 1, H), np.float32), np.empty((2, 1, H), np.float32)
            h0n = h0.numpy()
            variants["direct"] = lambda: _core.forward(
                xn, None, h0n, h0n, wn, y, hn, cn, num_layers=1, bidirectional=True,
                has_bias=True, num_threads=nth)
        with torch.inference_mode():
            out[nth] = _alternate(variants, rounds, 100)
    return out


def bench_torch_op(threads, rounds, old=None):
    new = _torch_op_times(threads, rounds)
    old_t = None
    if old:
        code = (f"import sys, json; sys.path.insert(0, {old!r}); sys.path.insert(1, {os.path.dirname(__file__)!r}); "
                f"import bench_one_road as b; print(json.dumps(b._torch_op_times({list(threads)!r}, {rounds})))")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (old, os.environ.get("PYTHONPATH", "")) if p))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           cwd=old, timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"old checkout failed:\n{r.stderr[-2000:]}")
        old_t = {int(k): v for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items()}
    rows = []
    for nth in threads:
        row = {"T": 16, "threads": nth, "op_ms": new[nth]["op"], "direct_ms": new[nth]["direct"],
               "op_overhead_us": 1e3 * (new[nth]["op"][0] - new[nth]["direct"][0])}
        if old_t:
            row["old_op_ms"] = old_t[nth]["op"]
        rows.append(row)
    return rows


def bench_tvm(threads, rounds):
    try:
        import tvm
        from tvm import relax
    except ImportError:
        return None
    import torch

    import kokoro_lstm
    import kokoro_lstm.torch_ops as ko
    import kokoro_lstm.tvm as kt
    from kokoro_lstm import _core

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(I, H, bidirectional=True).eval()
    ko.patch_lstm_modules(lstm)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = lstm

        def forward(self, x):
            return self.lstm(x)[0]

    rows = []
    for T in (32, 256):
        x = torch.randn(T, 1, I)
        ep = torch.export.export(M(), (x,))
        mod = kt.from_exported_program(ep, lstm_method="native")
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        xt = tvm.runtime.tensor(x.numpy())
        xn = x.numpy()
        wn = [p.detach().numpy() for p in lstm.parameters()]
        y = np.empty((T, 1, 2 * H), np.float32)
        hn, cn = np.empty((2, 1, H), np.float32), np.empty((2, 1, H), np.float32)
        for nth in threads:
            _core.set_num_threads(nth)  # what the native call (num_threads 0) uses
            r = _alternate({
                "tvm": lambda: vm["main"](xt),
                "direct": lambda: _core.forward(xn, None, None, None, wn, y, hn, cn, num_layers=1,
                                                bidirectional=True, has_bias=True, num_threads=nth,
                                                constant_weights=True)},
                rounds, 40 if T == 32 else 6)
            rows.append({"T": T, "threads": nth, "tvm_ms": r["tvm"], "direct_ms": r["direct"],
                         "ratio_median": r["tvm"][0] / r["direct"][0],
                         "ratio_min": r["tvm"][1] / r["direct"][1]})
    kokoro_lstm._threads.sync_engine()
    return rows


def _fmt(p):
    return f"{p[0]:.3f} ({p[1]:.3f})"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--old", help="another kokoro_lstm checkout (built) to time the torch op of")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--skip", default="", help="comma list of check,torch_op,tvm to skip")
    a = ap.parse_args(argv)
    threads = [int(t) for t in a.threads.split(",")]
    skip = set(filter(None, a.skip.split(",")))
    res = {"machine": {"platform": platform.platform(), "processor": platform.processor(),
                       "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}}
    print(f"# kokoro_lstm one road, {res['machine']}; medians (min) of {a.rounds} alternated rounds, ms per call")
    if "check" not in skip:
        res["check"] = bench_check(threads, a.rounds)
        print("\n| T | threads | checked | trusted | check cost (median / min) | fingerprint alone |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in res["check"]:
            print(f"| {r['T']} | {r['threads']} | {_fmt(r['checked_ms'])} | {_fmt(r['trusted_ms'])} | "
                  f"{r['check_pct_median']:+.1f}% / {r['check_pct_min']:+.1f}% | "
                  f"{1e3 * r['fingerprint_ms']:.0f} us ({r['fingerprint_pct']:.1f}%) |")
    if "torch_op" not in skip:
        res["torch_op"] = bench_torch_op(threads, a.rounds, a.old)
        print("\n| T | threads | torch op | direct call | op overhead | old torch op |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in res["torch_op"]:
            old = _fmt(r["old_op_ms"]) if "old_op_ms" in r else "-"
            print(f"| {r['T']} | {r['threads']} | {_fmt(r['op_ms'])} | {_fmt(r['direct_ms'])} | "
                  f"{r['op_overhead_us']:.0f} us | {old} |")
    if "tvm" not in skip:
        res["tvm"] = bench_tvm(threads, a.rounds)
        if res["tvm"]:
            print("\n| T | threads | TVM native | direct (trusted) | ratio (median / min) |")
            print("|---:|---:|---:|---:|---:|")
            for r in res["tvm"]:
                print(f"| {r['T']} | {r['threads']} | {_fmt(r['tvm_ms'])} | {_fmt(r['direct_ms'])} | "
                      f"{r['ratio_median']:.3f} / {r['ratio_min']:.3f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
