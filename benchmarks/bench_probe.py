"""In-process timing of kokoro_lstm.LSTM alone (no peers), for comparing builds of
the engine: run it once per build, each from its own directory, alternating the
builds in a shell loop (the A/B numbers in RESULTS.md for the 16-thread
recurrence came from it), e.g.

    for r in 1 2 3; do for v in A B; do PYTHONPATH=/tmp/$v python benchmarks/bench_probe.py \\
        --cases 640:1,640:4 --threads 8,16 | sed "s/^/$v /"; done; done

Cases are I:B (H=256, bidirectional, T from --T); --sleep pauses before each
timed call (cold calls: the pool's workers have gone to sleep)."""
import argparse
import statistics
import time

import numpy as np

import kokoro_lstm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="16:1,640:1,16:16,640:16", help="I:B pairs")
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--reps", type=int, default=None, help="timed calls (default 31, 15 for B > 1)")
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds before each timed call")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    for case in args.cases.split(","):
        I, B = (int(v) for v in case.split(":"))
        x = rng.standard_normal((args.T, B, I)).astype(np.float32)
        for n in (int(t) for t in args.threads.split(",")):
            m = kokoro_lstm.LSTM(I, 256, bidirectional=True, num_threads=n, dtype=args.dtype)
            for _ in range(5):
                m(x)
            ts = []
            for _ in range(args.reps or (31 if B == 1 else 15)):
                time.sleep(args.sleep)
                t = time.perf_counter()
                m(x)
                ts.append(time.perf_counter() - t)
            med, mn = statistics.median(ts), min(ts)
            print(f"T={args.T} I={I} B={B} threads={n} {args.dtype}: median {med * 1e3:.3f} ms "
                  f"min {mn * 1e3:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
