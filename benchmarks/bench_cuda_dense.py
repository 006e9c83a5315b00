"""The engine's CUDA convolutions and products (conv1d_v1 / conv1d_transpose_v1 /
matmul_v1 on CUDA tensors, src/cuda/conv.cu) vs PyTorch's (cuDNN, cuBLAS) on Kokoro's
shapes at 64 tokens (221 frames; the generator at 4,420 and 26,520 steps; bert's and
AdaIN's linears).

In one process, alternated every round (the order flips each round): ours (float32
by 3xTF32 on tensor cores), PyTorch with its defaults (cuDNN convolutions TF32,
cuBLAS products float32) and with TF32 off everywhere.
Each variant times ``reps`` back-to-back calls between two CUDA events; per call =
elapsed / reps; medians and minima over ``--rounds``; each output checked against
float64 first.

    python benchmarks/bench_cuda_dense.py --out benchmarks/results/cuda_dense_h200.json
"""
import argparse
import json
import os
import platform
import statistics
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import tvm_ffi  # noqa: E402

import kokoro_lstm.tvm  # noqa: E402,F401  (registers the engine's functions)
from kokoro_lstm.tvm import dense  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cuda import _timed as _event_timed  # noqa: E402

# (name, cin, cout, ksize, stride, pad, dilation, width, transpose)
CASES = [
    ("decoder 1090->1024 k3", 1090, 1024, 3, 1, 1, 1, 221, False),
    ("decoder 1024->1024 k3", 1024, 1024, 3, 1, 1, 1, 221, False),
    ("generator 256 k3 d1", 256, 256, 3, 1, 1, 1, 4420, False),
    ("generator 256 k11 d5", 256, 256, 11, 1, 25, 5, 4420, False),
    ("generator 128 k7 d3", 128, 128, 7, 1, 9, 3, 26520, False),
    ("generator 128 k11 d5", 128, 128, 11, 1, 25, 5, 26520, False),
    ("conv_post 128->22 k7", 128, 22, 7, 1, 3, 1, 26520, False),
    ("upsample 512->256 k20 s10", 512, 256, 20, 10, 5, 1, 442, True),
    ("upsample 256->128 k12 s6", 256, 128, 12, 6, 3, 1, 4420, True),
]
# (name, rows, K, N): products C = A W^T + b
MATMULS = [("bert linear 64x768->768", 64, 768, 768), ("bert FFN 64x768->2048", 64, 768, 2048),
           ("AdaIN style 1x128->2048", 1, 128, 2048)]


def _ours(x, w, b, y, stride, pad, dil, transpose):
    k = w.shape[2]
    if transpose:
        cfg = dense.Conv1dTransposeConfig(stride=stride, pad_l=pad, ksize=k, has_bias=1)
        f = tvm_ffi.get_global_func(dense.CONV1D_TRANSPOSE_FUNC)
    else:
        cfg = dense.Conv1dConfig(stride=stride, pad_l=pad, pad_r=pad, dilation=dil, has_bias=1)
        f = tvm_ffi.get_global_func(dense.CONV1D_FUNC)
    args = [tvm_ffi.Shape(list(cfg))] + [tvm_ffi.from_dlpack(t) for t in (x, w, b, y)]
    return lambda: f(*args)


def _ours_mm(a, w, b, c):
    cfg = dense.MatmulConfig(trans_b=1, has_bias=1)
    f = tvm_ffi.get_global_func(dense.MATMUL_FUNC)
    args = [tvm_ffi.Shape(list(cfg))] + [tvm_ffi.from_dlpack(t) for t in (a, w, b, c)]
    return lambda: f(*args)


def _torch(x, w, b, stride, pad, dil, transpose):
    if transpose:
        return lambda: torch.nn.functional.conv_transpose1d(x, w, b, stride=stride, padding=pad)
    return lambda: torch.nn.functional.conv1d(x, w, b, stride=stride, padding=pad, dilation=dil)


def _time(fn, reps):
    """ms per call of ``reps`` back-to-back calls after one warm-up (bench_cuda's timer)."""
    fn()
    return _event_timed(fn, reps)


def _timed(name, variants, args, err, gflop):
    """One row: the variants timed alternated over args.rounds (TF32 off for the
    no-TF32 one, convolutions and products alike)."""
    times = {v: [] for v in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(variants)[::-1]
        for v in order:
            torch.backends.cudnn.allow_tf32 = v != "torch_no_tf32"
            times[v].append(_time(variants[v], args.reps))
    torch.backends.cudnn.allow_tf32 = True
    row = {"case": name, "max_abs_err_vs_float64": err, "gflop": round(gflop, 4)}
    for v, ts in times.items():
        row[v] = {"median_ms": round(statistics.median(ts), 4), "min_ms": round(min(ts), 4)}
    row["ours_tflops"] = round(gflop / row["ours"]["median_ms"], 1)
    for v in ("torch", "torch_no_tf32"):
        row[v + "_over_ours"] = round(row[v]["median_ms"] / row["ours"]["median_ms"], 2)
    print(f"{name:28s} ours {row['ours']['median_ms']:8.3f} ms ({row['ours_tflops']:5.1f} TFLOP/s)  "
          f"torch {row['torch']['median_ms']:8.3f}  no-tf32 {row['torch_no_tf32']['median_ms']:8.3f}  "
          f"err {err:.1e}", flush=True)
    return row


def _conv_row(case, args):
    name, cin, cout, k, stride, pad, dil, width, tr = case
    x = torch.randn(1, cin, width, device="cuda")
    w = torch.randn(*((cin, cout, k) if tr else (cout, cin, k)), device="cuda") / (cin * k) ** 0.5
    b = torch.randn(cout, device="cuda")
    ref = (torch.nn.functional.conv_transpose1d(x.double(), w.double(), b.double(), stride=stride,
                                                padding=pad) if tr else
           torch.nn.functional.conv1d(x.double(), w.double(), b.double(), stride=stride,
                                      padding=pad, dilation=dil))
    y = torch.empty(ref.shape, device="cuda")
    ours = _ours(x, w, b, y, stride, pad, dil, tr)
    ours()
    torch.cuda.synchronize()
    err = (y.double() - ref).abs().max().item()
    theirs = _torch(x, w, b, stride, pad, dil, tr)
    gflop = 2.0 * cin * cout * k * y.shape[2] / (stride if tr else 1) / 1e9
    return _timed(name, {"ours": ours, "torch": theirs, "torch_no_tf32": theirs}, args, err, gflop)


def _matmul_row(case, args):
    name, m, kk, n = case
    a = torch.randn(m, kk, device="cuda")
    w = torch.randn(n, kk, device="cuda") / kk ** 0.5
    b = torch.randn(n, device="cuda")
    ref = a.double() @ w.double().T + b.double()
    c = torch.empty(m, n, device="cuda")
    ours = _ours_mm(a, w, b, c)
    ours()
    torch.cuda.synchronize()
    err = (c.double() - ref).abs().max().item()

    def theirs():
        return torch.nn.functional.linear(a, w, b)
    return _timed(name, {"ours": ours, "torch": theirs, "torch_no_tf32": theirs}, args, err,
                  2.0 * m * kk * n / 1e9)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.manual_seed(0)
    with tvm_ffi.use_torch_stream():
        rows = [_conv_row(c, args) for c in CASES] + [_matmul_row(m, args) for m in MATMULS]
    out = {"question": "the engine's CUDA convolutions and products vs PyTorch's on Kokoro's "
                       "shapes (64 tokens)",
           "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "host": platform.node(),
           "rounds": args.rounds, "reps": args.reps, "rows": rows,
           "total_ms": {v: round(sum(r[v]["median_ms"] for r in rows), 3)
                        for v in ("ours", "torch", "torch_no_tf32")}}
    print(json.dumps(out["total_ms"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
