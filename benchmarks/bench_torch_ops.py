"""Patched (kokoro ops) vs unpatched (PyTorch) eager Kokoro TextEncoder on CPU.

Kokoro-82M's TextEncoder (kokoro.modules.TextEncoder(512, 5, 3, 178), random init,
eval, B=1) at T=64 and T=256, with 1 and 2 threads (torch.set_num_threads and the
engine's thread count via kokoro_lstm.torch_ops.set_num_threads). Rows:

* ``text_encoder``: the whole module (embedding, 3 CNN blocks, pack -> LSTM -> pad);
  "patched" takes a real PackedSequence (pad/pack around the op), "patched+ctx" runs
  under exportable_packing() (the stand-in path an exported program takes).
* ``lstm``: its bidirectional nn.LSTM(512, 256) alone on a padded [1, T, 512] input.

Median of --repeat timed runs (>= 10, the cases interleaved) after --warmup runs,
under torch.inference_mode().
Prints a markdown table and writes JSON to benchmarks/results/torch_ops.json.

    python benchmarks/bench_torch_ops.py [--repeat 20] [--warmup 3] [--out PATH]
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings

import torch

import kokoro_lstm
import kokoro_lstm.torch_ops as ko

HERE = os.path.dirname(os.path.abspath(__file__))


def median_ms(cases, warmup, repeat):
    """{name: fn} -> {name: (median ms, min ms)}. The cases are interleaved (one run
    of each per round), so a change in machine load hits them alike."""
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    times = {k: [] for k in cases}
    for _ in range(repeat):
        for k, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


def build_text_encoders():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import kokoro.modules as km
        torch.manual_seed(0)
        ref = km.TextEncoder(512, 5, 3, 178).eval()
        pat = km.TextEncoder(512, 5, 3, 178).eval()
    ko.patch_lstm_modules(pat)
    pat.load_state_dict(ref.state_dict())
    return ref, pat


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seq", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "torch_ops.json"))
    args = ap.parse_args()
    if args.repeat < 10:
        ap.error("--repeat must be >= 10")

    ref, pat = build_text_encoders()
    load_before = os.getloadavg()
    rows = []
    with torch.inference_mode():
        for T in args.seq:
            tokens = torch.randint(0, 178, (1, T))
            lengths = torch.tensor([T])
            mask = torch.zeros(1, T, dtype=torch.bool)
            x_lstm = torch.randn(1, T, 512)
            want = ref(tokens, lengths, mask)
            err = (pat(tokens, lengths, mask) - want).abs().max().item()
            with ko.exportable_packing():
                err = max(err, (pat(tokens, lengths, mask) - want).abs().max().item())
            err_lstm = (pat.lstm(x_lstm)[0] - ref.lstm(x_lstm)[0]).abs().max().item()
            for nt in args.threads:
                torch.set_num_threads(nt)
                ko.set_num_threads(nt)

                def ctx_run():
                    with ko.exportable_packing():
                        pat(tokens, lengths, mask)

                cases = {
                    ("text_encoder", "pytorch"): lambda: ref(tokens, lengths, mask),
                    ("text_encoder", "patched"): lambda: pat(tokens, lengths, mask),
                    ("text_encoder", "patched+ctx"): ctx_run,
                    ("lstm", "pytorch"): lambda: ref.lstm(x_lstm),
                    ("lstm", "patched"): lambda: pat.lstm(x_lstm),
                }
                res = median_ms(cases, args.warmup, args.repeat)
                for part in ("text_encoder", "lstm"):
                    base = res[(part, "pytorch")][0]
                    row = {"module": part, "T": T, "B": 1, "threads": nt,
                           "pytorch_ms": round(base, 3),
                           "patched_ms": round(res[(part, "patched")][0], 3),
                           "speedup": round(base / res[(part, "patched")][0], 2),
                           "pytorch_min_ms": round(res[(part, "pytorch")][1], 3),
                           "patched_min_ms": round(res[(part, "patched")][1], 3),
                           "max_abs_err": err if part == "text_encoder" else err_lstm}
                    if (part, "patched+ctx") in res:
                        row["patched_ctx_ms"] = round(res[(part, "patched+ctx")][0], 3)
                    rows.append(row)
    ko.set_num_threads(None)

    load_after = os.getloadavg()
    print("| module | T | threads | PyTorch ms median (min) | patched ms median (min) "
          "| patched+ctx ms | speedup (medians) | max abs err |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ctx = f"{r['patched_ctx_ms']:.2f}" if "patched_ctx_ms" in r else "–"
        print(f"| {r['module']} | {r['T']} | {r['threads']} | {r['pytorch_ms']:.2f} "
              f"({r['pytorch_min_ms']:.2f}) | {r['patched_ms']:.2f} "
              f"({r['patched_min_ms']:.2f}) | {ctx} | {r['speedup']:.2f}x | "
              f"{r['max_abs_err']:.1e} |")
    print(f"load average (1 min) before/after: {load_before[0]:.2f} / {load_after[0]:.2f} "
          f"on {os.cpu_count()} CPUs")

    info = {
        "benchmark": "bench_torch_ops",
        "description": "eager Kokoro TextEncoder (512, kernel 5, 3 CNN, 178 tokens) and its "
                       "bidirectional LSTM(512, 256), patched (kokoro ops) vs PyTorch; "
                       "median ms",
        "repeat": args.repeat, "warmup": args.warmup,
        "torch": torch.__version__, "python": platform.python_version(),
        "machine": platform.machine(), "cpu_count": os.cpu_count(),
        "loadavg_1min_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "kokoro_lstm": getattr(kokoro_lstm, "__version__", None),
        "build": kokoro_lstm.build_info() if hasattr(kokoro_lstm, "build_info") else None,
        "results": rows,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(info, f, indent=2)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
