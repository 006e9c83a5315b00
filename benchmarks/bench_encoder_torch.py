"""PyTorch eager alone (no TVM, no kokoro_lstm engine in the process) for the encoder
components of bench_encoder.py: a reference free of other thread pools.

    python benchmarks/bench_encoder_torch.py --threads 2 --lengths 64 512
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--components", nargs="+", default=["text_encoder", "duration", "f0n", "bert"])
    p.add_argument("--lengths", nargs="+", type=int, default=[64, 512])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    import numpy as np
    import torch

    from kokoro_lstm.cli import _components as C

    torch.set_num_threads(a.threads)
    km, _ = C.kokoro_modules()
    cfg = C.load_config(None)
    rows = []
    for T in a.lengths:
        for comp in a.components:
            model = C.build_component(comp, cfg, km, seed=0)
            inputs = C.example_inputs(comp, cfg, T, T, torch.Generator().manual_seed(1))
            ts = []
            with torch.no_grad():
                model(*inputs)
                for _ in range(a.reps):
                    time.sleep(0.01)
                    t0 = time.perf_counter()
                    model(*inputs)
                    ts.append((time.perf_counter() - t0) * 1e3)
            rows.append({"component": comp, "length": T, "threads": a.threads,
                         "torch_ms": round(float(np.median(ts)), 3), "runs": ts,
                         "loadavg_1min": os.getloadavg()[0]})
            print(f"{comp:13s} T={T:4d} threads={a.threads}: torch alone {rows[-1]['torch_ms']:.2f} ms",
                  flush=True)
    path = os.path.join(ROOT, "benchmarks", "results", f"encoder_torch_alone_{a.threads}t.json")
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
