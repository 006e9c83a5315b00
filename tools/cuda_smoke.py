"""A few small CUDA calls over the recurrence paths (the cluster path with both
exchanges), the noise kernel and the convolutions and products (the TVM externs on
CUDA tensors, edge tiles included), for compute-sanitizer (memcheck, racecheck,
synccheck): `make test-gpu` runs it under each tool."""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kokoro_lstm import _core  # noqa: E402


def run(I, H, L, D, proj, B, T, lengths, dtype="float32"):
    rng = np.random.default_rng(0)
    R = proj or H
    ws = []
    for layer in range(L):
        for _ in range(D):
            ws += [rng.standard_normal((4 * H, I if layer == 0 else D * R)) * 0.2,
                   rng.standard_normal((4 * H, R)) * 0.2, rng.standard_normal(4 * H) * 0.1,
                   rng.standard_normal(4 * H) * 0.1]
            if proj:
                ws.append(rng.standard_normal((proj, H)) * 0.2)
    t = lambda a: torch.tensor(a, dtype=torch.float32, device="cuda")
    y = torch.empty((T, B, D * R), device="cuda")
    hn, cn = torch.empty((L * D, B, R), device="cuda"), torch.empty((L * D, B, H), device="cuda")
    ln = np.maximum(1, T - np.arange(B) % T).astype(np.int64) if lengths else None
    _core.forward(t(rng.standard_normal((T, B, I))), ln, t(rng.standard_normal((L * D, B, R))),
                  t(rng.standard_normal((L * D, B, H))), [t(w) for w in ws], y, hn, cn,
                  num_layers=L, bidirectional=D == 2, has_bias=True, proj_size=proj, dtype=dtype,
                  stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()


for path, exchange in (("cluster", "mbarrier"), ("cluster", "barrier"), ("step", "mbarrier")):
    os.environ["KOKORO_LSTM_CUDA_RECURRENCE"] = path
    os.environ["KOKORO_LSTM_CUDA_EXCHANGE"] = exchange
    print(f"== {path} {exchange}", flush=True)
    run(64, 256, 1, 2, 0, 1, 6, False)
    run(16, 64, 2, 2, 0, 5, 5, True, "bfloat16")
    run(8, 32, 1, 1, 0, 40, 4, True)
os.environ["KOKORO_LSTM_CUDA_RECURRENCE"] = "step"
run(10, 24, 2, 2, 12, 4, 5, True)
print("== noise", flush=True)
seed = torch.tensor([7], device="cuda")
for dist in (0, 1):
    for n in (1, 5, 4099):  # whole and partial Philox blocks
        out = torch.empty(n, device="cuda")
        _core.random_fill_cuda(dist, seed.data_ptr(), 3, n, out.data_ptr(), out.device.index,
                               torch.cuda.current_stream().cuda_stream)
print("== convolutions", flush=True)
import tvm_ffi  # noqa: E402

import kokoro_lstm.tvm  # noqa: E402,F401  (registers the engine's functions)
from kokoro_lstm.tvm import dense  # noqa: E402

T = tvm_ffi.from_dlpack
for cin, cout, k, stride, pad, dil, w in ((5, 70, 3, 2, 2, 3, 67), (9, 3, 11, 1, 5, 1, 130)):
    x, wt, b = (torch.randn(2, cin, w, device="cuda"), torch.randn(cout, cin, k, device="cuda"),
                torch.randn(cout, device="cuda"))
    y = torch.empty(2, cout, (w + 2 * pad - dil * (k - 1) - 1) // stride + 1, device="cuda")
    cfg = dense.Conv1dConfig(stride=stride, pad_l=pad, pad_r=pad, dilation=dil, has_bias=1)
    tvm_ffi.get_global_func(dense.CONV1D_FUNC)(tvm_ffi.Shape(list(cfg)), T(x), T(wt), T(b), T(y))
    wt = torch.randn(cin, cout, k, device="cuda")
    y = torch.empty(2, cout, (w - 1) * stride - 2 * pad + k + 1, device="cuda")
    cfg = dense.Conv1dTransposeConfig(stride=stride, pad_l=pad, ksize=k)
    tvm_ffi.get_global_func(dense.CONV1D_TRANSPOSE_FUNC)(tvm_ffi.Shape(list(cfg)), T(x), T(wt), T(y))
for m, k, n in ((1, 128, 70), (67, 300, 9)):  # products: one row; rows and columns off the tiles
    a, wt, b, c = (torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda"),
                   torch.randn(n, device="cuda"), torch.empty(m, n, device="cuda"))
    cfg = dense.MatmulConfig(trans_b=1, has_bias=1)
    tvm_ffi.get_global_func(dense.MATMUL_FUNC)(tvm_ffi.Shape(list(cfg)), T(a), T(wt), T(b), T(c))
torch.cuda.synchronize()
print("cuda_smoke: ok")
