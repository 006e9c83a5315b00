"""Kokoro's KModel end to end under torch.compile: patched + compiled vs eager and vs
the best unpatched compile mode (issue 39).

Variants (each its own random KModel, the same weights: ``tests/deploy/tts.py``'s, duration
head set to ``--frames-per-token``): ``eager`` (PyTorch's nn.LSTM), ``patched``
(patch_lstm_modules), ``compiled`` / ``compiled-ro`` (unpatched, torch.compile mode
default / reduce-overhead), ``patched-compiled`` / ``patched-compiled-ro`` (patched,
called under ``exportable_packing()`` so that pack -> LSTM -> pad is one op node).
Each variant's first calls compile and warm up (the compile seconds are in the JSON);
then every round times one ``forward_with_tokens`` per variant, the order rotating,
wall time with a device synchronize. Medians and minima over ``--rounds``; ratio =
eager median / variant median. The durations are checked equal across variants first.

    python benchmarks/bench_compile.py --device cuda --tokens 64 --out results/compile_h100_t64.json
"""
import argparse
from contextlib import nullcontext
import json
import os
import platform
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
import kokoro_lstm.torch_ops as ko  # noqa: E402
from _kmodel import import_kokoro  # noqa: E402
from deploy import tts  # noqa: E402

# Patched variants compile first: TorchDynamo caches compiled frames per code object
# (forward_with_tokens is one for every copy), and an unpatched variant's frames that end
# at an LSTM's graph break pass a patched model's guards, so a patched variant compiled
# after one would inherit its breaks.
VARIANTS = ("eager", "patched", "patched-compiled", "patched-compiled-ro", "compiled",
            "compiled-ro")


def make(name, dev, frames_per_token):
    m = tts.kmodel(seed=0, frames_per_token=frames_per_token).to(dev)  # the same weights
    patched = name.startswith("patched")
    if patched:
        ko.patch_lstm_modules(m)
    fn = m.forward_with_tokens
    if name.endswith("-ro") and patched:
        # CUDA graphs without Inductor's graph partitions: with them, recording the
        # patched KModel fails in cudagraph trees' pool check (torch 2.11)
        fn = torch.compile(fn, options={"triton.cudagraphs": True, "graph_partition": False})
    elif "compiled" in name:
        fn = torch.compile(fn, mode="reduce-overhead" if name.endswith("-ro") else None)

    def call(ids, ref_s):
        with torch.inference_mode(), (ko.exportable_packing() if patched else nullcontext()):
            return fn(ids, ref_s, 1)
    return call


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--frames-per-token", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import_kokoro()  # misaki (KPipeline's G2P) stubbed where it is missing
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    names = a.variants.split(",")
    ids, ref_s = (t.to(dev) for t in tts.inputs(a.tokens, seed=1))
    calls, info, failed = {}, {}, {}
    for n in list(names):
        calls[n] = make(n, dev, a.frames_per_token)
        t0 = time.perf_counter()
        try:
            for _ in range(a.warmup):
                audio, dur = calls[n](ids, ref_s)
                sync()
        except Exception as e:  # noqa: BLE001 - reported, the other variants go on
            failed[n] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"
            print(f"{n}: FAILED {failed[n]}", flush=True)
            names.remove(n)
            continue
        info[n] = {"warmup_s": round(time.perf_counter() - t0, 2), "frames": int(dur.sum()),
                   "samples": int(audio.numel())}
        print(f"{n}: warm-up {info[n]['warmup_s']} s, {info[n]['frames']} frames", flush=True)
    frames = {v["frames"] for v in info.values()}
    if len(frames) != 1:
        raise SystemExit(f"the variants' frame counts differ: {info}")
    times = {n: [] for n in names}
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            sync()
            t0 = time.perf_counter()
            calls[n](ids, ref_s)
            sync()
            times[n].append((time.perf_counter() - t0) * 1e3)
    ref = statistics.median(times["eager"]) if "eager" in times else None
    rows = []
    for n in names:
        med, mn = statistics.median(times[n]), min(times[n])
        row = {"variant": n, "median_ms": round(med, 2), "min_ms": round(mn, 2),
               "x_eager": round(ref / med, 2) if ref else None, **info[n], "ms": times[n]}
        rows.append(row)
        print(f"{n:22s} median {med:8.2f} ms  min {mn:8.2f} ms  x eager "
              f"{row['x_eager']}", flush=True)
    from torch._dynamo.utils import counters

    out = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor(),
           "torch": torch.__version__, "tokens": a.tokens, "frames": frames.pop(),
           "rounds": a.rounds, "rows": rows, "failed": failed,
           "inductor_counters": {k: dict(v) for k, v in counters.items()
                                 if k in ("inductor", "graph_break", "stats")}}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
