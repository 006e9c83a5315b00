"""Do Kokoro's exact algebra cuts pay? (issue 10, item 3)

1. Components (``--components``, default duration and f0n): ``kokoro-lstm port-encoder``'s
   pipeline (random weights, --validate, default methods) compiles each component twice,
   with and without ``--no-algebra-cuts``; both exported libraries are loaded in this
   process and timed in alternating rounds (which goes first alternates; a 10 ms untimed
   pause before each call). Medians and minima. f0n runs with ``--f0n-input d`` (the
   only form a cut applies to) at T tokens and F = 4T frames.
2. The engine alone (``--engine``): one Kokoro LSTM (bidirectional, H 256) at batch 1,
   * style fold: input 640 (x 512 + style 128) vs input 512 + gate_bias (W_s s folded,
     that small matmul included in the timed call);
   * shared's token-rate projection: en [F, 640] -> LSTM, vs P = d W_ih^T at token rate
     [T, 2048] then spread to the F frames (P^T @ alignment as a matmul, or a gather by
     the token index of each frame) and given as the gates (x_gates); durations of 4
     frames per token (F = 4T).
   NumPy's BLAS is held to the same thread count (threadpoolctl).

    python benchmarks/bench_cuts.py --lengths 64 512 --threads 1 --engine
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

SETTLE_S = 0.01
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _stats(v):
    import numpy as np

    return {"median_ms": round(float(np.median(v)), 3), "min_ms": round(float(min(v)), 3)}


def _alternate(fns, reps):
    """{name: [ms]} timing each fn once per round, in alternating order."""
    names = list(fns)
    runs = {n: [] for n in names}
    for n in names:
        fns[n]()
    for i in range(reps):
        order = names if i % 2 == 0 else names[::-1]
        for n in order:
            time.sleep(SETTLE_S)
            t0 = time.perf_counter()
            fns[n]()
            runs[n].append((time.perf_counter() - t0) * 1e3)
    return runs


def bench_component(comp, T, nth, reps, out_dir):
    import tvm
    from tvm import relax
    import torch

    from kokoro_lstm.cli import _components as C
    from kokoro_lstm.cli.port_encoder import _Progress, _threads, port

    class _Quiet(_Progress):
        def note(self, tag, text):
            pass

    reports = {}
    F = 4 * T if comp == "f0n" else T
    for cuts in (True, False):
        with open(os.devnull, "w") as devnull:
            (r,) = port([comp], ["auto"], seq_len=T, aligned_len=F, validate=True,
                        no_weights=True, output_dir=os.path.join(out_dir, str(cuts)),
                        num_threads=nth, progress=_Quiet(stream=devnull), algebra_cuts=cuts,
                        f0n_input="d")
        reports["cut" if cuts else "uncut"] = r
    cfg = C.load_config(None)
    inputs = C.example_inputs(comp, cfg, F, F, torch.Generator().manual_seed(1),
                              n_tokens=T if comp == "f0n" else None)
    fns = {}
    with _threads(nth):
        for k, r in reports.items():
            vm = relax.VirtualMachine(tvm.runtime.load_module(r["files"]["library"]), tvm.cpu())
            fn = vm[r["function"]]
            args = [tvm.runtime.tensor(a.numpy()) for a in inputs]
            fns[k] = (lambda fn=fn, args=args: fn(*args))
        runs = _alternate(fns, reps)
    row = {"what": f"component {comp}" + (f" (--f0n-input d, F = {F})" if F != T else ""),
           "length": T, "threads": nth,
           "cuts_applied": reports["cut"]["algebra_cuts"]["applied"],
           "max_err": {k: r["validation"]["max_err"] for k, r in reports.items()},
           "loadavg_1min": os.getloadavg()[0], "runs": runs}
    for k, v in runs.items():
        row[k] = _stats(v)
    return row


def bench_engine(T, nth, reps):
    import numpy as np
    from threadpoolctl import threadpool_limits

    from kokoro_lstm import _core

    rng = np.random.default_rng(0)
    H, IX, IS, D = 256, 512, 128, 2
    k = 1 / np.sqrt(H)
    w = [rng.uniform(-k, k, s).astype(np.float32) for _ in range(D)
         for s in ((4 * H, IX + IS), (4 * H, H), (4 * H,), (4 * H,))]
    w_x = [np.ascontiguousarray(w[d * 4][:, :IX]) for d in range(D)]
    w_s = [np.ascontiguousarray(w[d * 4][:, IX:]) for d in range(D)]
    cut_w = list(w)
    for d in range(D):
        cut_w[d * 4] = w_x[d]
    y = np.empty((4 * T, 1, D * H), np.float32)
    hn = np.empty((D, 1, H), np.float32)
    cn = np.empty_like(hn)
    kw = dict(num_layers=1, bidirectional=True, has_bias=True, num_threads=nth,
              constant_weights=True, owner=12345)

    def run(x, ww, **more):
        _core.forward(x, None, None, None, ww, y[:x.shape[0]], hn, cn, **kw, **more)

    rows = []
    # style fold, at token rate T
    x = rng.standard_normal((T, 1, IX)).astype(np.float32)
    s = rng.standard_normal((1, IS)).astype(np.float32)
    full = np.ascontiguousarray(np.concatenate([x, np.broadcast_to(s, (T, 1, IS))], -1))

    def folded():
        gb = np.stack([s @ w_s[d].T for d in range(D)])
        run(x, cut_w, gate_bias=gb)

    # shared: F = 4T frames, one token per frame
    F = 4 * T
    dtok = rng.standard_normal((T, IX + IS)).astype(np.float32)
    idx = np.repeat(np.arange(T), 4)
    aln = np.zeros((T, F), np.float32)
    aln[idx, np.arange(F)] = 1
    en = np.ascontiguousarray((dtok.T @ aln).T[:, None, :])  # [F, 1, 640]
    w_cat = np.concatenate([w[0], w[4]], 0)  # [D*4H, 640]

    def token_rate_matmul():
        P = dtok @ w_cat.T                     # [T, D*4H] at token rate
        G = (aln.T @ P)[:, None, :]            # [F, 1, D*4H]
        run(G, w, x_gates=True)

    def token_rate_gather():
        P = dtok @ w_cat.T
        run(P[idx][:, None, :], w, x_gates=True)

    with threadpool_limits(limits=nth):
        runs = _alternate({"uncut": lambda: run(full, w), "cut": folded}, reps)
        rows.append({"what": "engine: style fold (one LSTM, token rate)", "length": T,
                     "threads": nth, "runs": runs,
                     **{k: _stats(v) for k, v in runs.items()}})
        runs = _alternate({"uncut": lambda: run(en, w), "cut_matmul": token_rate_matmul,
                           "cut_gather": token_rate_gather}, reps)
        rows.append({"what": f"engine: shared token-rate projection (F = {F} frames)",
                     "length": T, "threads": nth, "runs": runs,
                     **{k: _stats(v) for k, v in runs.items()}})
    # exactness of what was timed
    run(full, w)
    a = y[:T].copy()
    folded()
    rows[0]["max_abs_diff"] = float(np.abs(y[:T] - a).max())
    run(en, w)
    a = y[:F].copy()
    token_rate_matmul()
    rows[1]["max_abs_diff"] = float(np.abs(y[:F] - a).max())
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--components", nargs="*", default=["duration", "f0n"])
    p.add_argument("--lengths", nargs="+", type=int, default=[64, 512])
    p.add_argument("--threads", nargs="+", type=int, default=[1])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--engine", action="store_true", help="also time the engine alone")
    p.add_argument("--label", default=platform.node() or "host")
    a = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-cuts-") as tmp:
        for T in a.lengths:
            for nth in a.threads:
                if a.engine:
                    rows += bench_engine(T, nth, a.reps)
                for comp in a.components:
                    rows.append(bench_component(comp, T, nth, a.reps,
                                                os.path.join(tmp, f"{comp}{T}_{nth}")))
                for r in rows:
                    if r.get("_printed"):
                        continue
                    r["_printed"] = True
                    cells = "  ".join(f"{k} {r[k]['median_ms']:.2f} (min {r[k]['min_ms']:.2f})"
                                      for k in r["runs"])
                    print(f"{r['what']:55s} T={r['length']:4d} th={r['threads']}: {cells}",
                          flush=True)
    for r in rows:
        r.pop("_printed", None)
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    path = os.path.join(ROOT, "benchmarks", "results", f"cuts_{a.label}.json")
    with open(path, "w") as f:
        json.dump({"machine": {"cores": os.cpu_count(), "label": a.label}, "rows": rows}, f,
                  indent=1)
    print("\n| what | T | threads | variant | median ms | min ms |")
    print("|---|---:|---:|---|---:|---:|")
    for r in rows:
        for k in r["runs"]:
            print(f"| {r['what']} | {r['length']} | {r['threads']} | {k} | "
                  f"{r[k]['median_ms']:.2f} | {r[k]['min_ms']:.2f} |")
    print(f"\nwritten {path}")


if __name__ == "__main__":
    main()
