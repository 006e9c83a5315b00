"""conv1d_v1, conv1d_transpose_v1 and matmul_v1 on CUDA tensors: the engine's
implicit-GEMM kernels (src/cuda/conv.cu) that ``port-encoder`` / ``port-decoder
--target cuda`` put in place of TVM's convolutions and products by constant weights.

Everywhere: the checks that come before the driver (the kernels' compile is
test_cuda.py's test_kernels_compile). On a GPU: Kokoro's shapes and edge cases
against float64 (3xTF32: float32's accuracy), the split reductions, NaN reaching exactly the outputs PyTorch's reach, the same bits run
to run, and a CUDA graph replay equal to the direct call.
"""
import numpy as np
import pytest

from conftest import require
from _fake_dlpack import fake_cuda

torch = require("torch")
tvm_ffi = require("tvm_ffi")
import kokoro_lstm.tvm  # noqa: E402,F401  (registers the engine's functions)
from kokoro_lstm.tvm import dense  # noqa: E402

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _fn(name):
    return tvm_ffi.get_global_func(name)


def _t(a):
    return tvm_ffi.from_dlpack(a)


def _fake(shape):
    return tvm_ffi.from_dlpack(fake_cuda(shape))


def test_cuda_conv_errors_before_the_driver():
    cfg = tvm_ffi.Shape(list(dense.Conv1dConfig(pad_l=1, pad_r=1, w_panels=1)))
    with pytest.raises(ValueError, match="CPU's layout"):
        _fn(dense.CONV1D_FUNC)(cfg, _fake((1, 4, 10)), _fake((1, 12, 32)), _fake((1, 3, 10)))
    cfg = tvm_ffi.Shape(list(dense.Conv1dConfig(pad_l=1, pad_r=1)))
    with pytest.raises(ValueError, match="w must be on the device of the first tensor"):
        _fn(dense.CONV1D_FUNC)(cfg, _fake((1, 4, 10)), _t(torch.zeros(3, 4, 3)), _fake((1, 3, 10)))
    with pytest.raises(ValueError, match="expected 10 output steps"):
        _fn(dense.CONV1D_FUNC)(cfg, _fake((1, 4, 10)), _fake((3, 4, 3)), _fake((1, 3, 9)))
    cfg = tvm_ffi.Shape(list(dense.Conv1dTransposeConfig(stride=4, dilation=2, ksize=3)))
    with pytest.raises(ValueError, match="needs dilation 1"):
        _fn(dense.CONV1D_TRANSPOSE_FUNC)(cfg, _fake((1, 4, 10)), _fake((4, 3, 3)),
                                         _fake((1, 3, 41)))
    mm = _fn(dense.MATMUL_FUNC)
    for bad in (dense.MatmulConfig(trans_b=0), dense.MatmulConfig(trans_b=1, act=1)):
        with pytest.raises(ValueError, match=r"takes B as \[N, K\] \(trans_b 1\)"):
            mm(tvm_ffi.Shape(list(bad)), _fake((2, 4)), _fake((3, 4)), _fake((2, 3)))
    with pytest.raises(ValueError, match="shapes do not match"):
        mm(tvm_ffi.Shape(list(dense.MatmulConfig(trans_b=1))), _fake((2, 4)), _fake((3, 5)),
           _fake((2, 3)))


def _conv(x, w, b, stride, pad, dil, out=None):
    """conv1d_v1 on CUDA tensors into out (NaN-filled when None)."""
    cout, _, k = w.shape
    wout = (x.shape[2] + pad[0] + pad[1] - dil * (k - 1) - 1) // stride + 1
    y = out if out is not None else torch.full((x.shape[0], cout, wout), float("nan"),
                                                device=x.device)
    cfg = tvm_ffi.Shape(list(dense.Conv1dConfig(stride=stride, pad_l=pad[0], pad_r=pad[1],
                                                dilation=dil, has_bias=int(b is not None))))
    _fn(dense.CONV1D_FUNC)(cfg, _t(x), _t(w), *([_t(b)] if b is not None else []), _t(y))
    return y


def _conv_t(x, w, b, stride, pad, out_pad, out=None):
    """conv1d_transpose_v1 on CUDA tensors (PyTorch's IOW weight)."""
    cin, cout, k = w.shape
    wout = (x.shape[2] - 1) * stride - 2 * pad + k + out_pad
    y = out if out is not None else torch.full((x.shape[0], cout, wout), float("nan"),
                                                device=x.device)
    cfg = tvm_ffi.Shape(list(dense.Conv1dTransposeConfig(stride=stride, pad_l=pad, ksize=k,
                                                         has_bias=int(b is not None))))
    _fn(dense.CONV1D_TRANSPOSE_FUNC)(cfg, _t(x), _t(w), *([_t(b)] if b is not None else []),
                                     _t(y))
    return y


def _data(shape_x, shape_w, cout, bias, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape_x, generator=g)
    w = torch.randn(*shape_w, generator=g) / np.sqrt(shape_w[1] * shape_w[2])
    b = torch.randn(cout, generator=g) if bias else None
    return x, w, b


def _check(got, want, bound):
    """Within 2e-6 of float64 relative to the largest sum of |terms| (bound: the same
    convolution of |x| and |w|): float32's accuracy over long sums, which TF32's
    (about 2^-11 per product) misses by an order of magnitude."""
    err = (got.double().cpu() - want).abs().max().item()
    assert err <= 2e-6 * bound.abs().max().item(), err


# (batch, cin, cout, ksize, stride, pad, dilation, width, bias): Kokoro's decoder and
# generator convolutions (its widths at 64 tokens), then edge cases: channels and
# widths off the 64-wide tiles, cin * ksize off the 8-wide k slices, stride > 1.
CONVS = [(1, 1090, 1024, 3, 1, (1, 1), 1, 221, True), (1, 514, 1024, 1, 1, (0, 0), 1, 221, False),
         (1, 256, 256, 11, 1, (25, 25), 5, 4420, True), (1, 128, 128, 7, 1, (9, 9), 3, 2000, True),
         (1, 128, 22, 7, 1, (3, 3), 1, 2000, True), (1, 22, 256, 12, 6, (3, 3), 1, 1200, True),
         (2, 5, 7, 3, 2, (2, 1), 2, 50, True), (3, 1, 1, 1, 1, (0, 0), 1, 1, False),
         (1, 65, 130, 5, 3, (0, 4), 1, 257, True)]


@gpu
@pytest.mark.parametrize("case", CONVS)
def test_conv1d_cuda_against_float64(case):
    n, cin, cout, k, stride, pad, dil, w_, bias = case
    x, w, b = _data((n, cin, w_), (cout, cin, k), cout, bias, 1)
    def ref(x, w, b):
        return torch.nn.functional.conv1d(torch.nn.functional.pad(x.double(), pad), w.double(),
                                          b.double() if bias else None, stride=stride,
                                          dilation=dil)
    dx, dw, db = x.cuda(), w.cuda(), (b.cuda() if bias else None)
    got = _conv(dx, dw, db, stride, pad, dil)
    _check(got, ref(x, w, b), ref(x.abs(), w.abs(), b.abs() if bias else None))
    again = _conv(dx, dw, db, stride, pad, dil)
    assert torch.equal(got, again)  # the same bits run to run


# (batch, cin, cout, ksize, stride, pad, output_padding, width, bias): Kokoro's two
# upsamples, then strides not dividing ksize, padding past a phase, batches.
TRANSPOSES = [(1, 512, 256, 20, 10, 5, 0, 442, True), (1, 256, 128, 12, 6, 3, 0, 4420, True),
              (2, 7, 5, 5, 3, 1, 2, 33, True), (1, 3, 70, 2, 4, 0, 3, 17, False),
              (1, 9, 4, 7, 2, 6, 1, 30, True)]


@gpu
@pytest.mark.parametrize("case", TRANSPOSES)
def test_conv1d_transpose_cuda_against_float64(case):
    n, cin, cout, k, stride, pad, out_pad, w_, bias = case
    x, w, b = _data((n, cin, w_), (cin, cout, k), cout, bias, 2)
    def ref(x, w, b):
        return torch.nn.functional.conv_transpose1d(x.double(), w.double(),
                                                    b.double() if bias else None, stride=stride,
                                                    padding=pad, output_padding=out_pad)
    got = _conv_t(x.cuda(), w.cuda(), b.cuda() if bias else None, stride, pad, out_pad)
    _check(got, ref(x, w, b), ref(x.abs(), w.abs(), b.abs() if bias else None))


# (A's shape, N, bias): bert's projection and FFN at 64 tokens, AdaIN's style products
# (one row), a batch folded into rows, sizes off every tile
MATMULS = [((1, 64, 768), 768, True), ((1, 64, 768), 2048, True), ((1, 128), 2048, True),
           ((3, 5, 7), 9, False), ((1, 130, 33), 70, True)]


@gpu
@pytest.mark.parametrize("case", MATMULS)
def test_matmul_cuda_against_float64(case):
    shape, n, bias = case
    g = torch.Generator().manual_seed(6)
    a = torch.randn(*shape, generator=g)
    w = torch.randn(n, shape[-1], generator=g) / np.sqrt(shape[-1])
    b = torch.randn(n, generator=g) if bias else None

    def ref(a, w, b):
        y = a.double() @ w.double().T
        return y + b.double() if bias else y
    c = torch.full(shape[:-1] + (n,), float("nan"), device="cuda")
    cfg = tvm_ffi.Shape(list(dense.MatmulConfig(trans_b=1, has_bias=int(bias))))
    _fn(dense.MATMUL_FUNC)(cfg, _t(a.cuda()), _t(w.cuda()), *([_t(b.cuda())] if bias else []),
                           _t(c))
    _check(c, ref(a, w, b), ref(a.abs(), w.abs(), b.abs() if bias else None))


@gpu
def test_cuda_conv_nan_confined():
    """NaN in x reaches exactly the outputs torch's reach."""
    x, w, _ = _data((1, 5, 50), (4, 5, 3), 4, False, 3)
    x[0, 2, 20] = float("nan")
    want = torch.nn.functional.conv1d(x, w, stride=2, padding=2, dilation=3)
    got = _conv(x.cuda(), w.cuda(), None, 2, (2, 2), 3).cpu()
    assert torch.isnan(got).any() and torch.equal(torch.isnan(got), torch.isnan(want))
    wt = torch.randn(5, 4, 6)
    want = torch.nn.functional.conv_transpose1d(x, wt, stride=3, padding=1)
    got = _conv_t(x.cuda(), wt.cuda(), None, 3, 1, 0).cpu()
    assert torch.equal(torch.isnan(got), torch.isnan(want))


@gpu
def test_cuda_conv_graph_replay():
    """Both kernels captured in a CUDA graph (launched on the stream tvm-ffi names)
    replay as called, allocating nothing."""
    x, w, b = _data((1, 64, 300), (96, 64, 7), 96, True, 4)
    _, wt, bt = _data((1, 96, 300), (96, 32, 12), 32, True, 5)
    dx, dw, db, dwt, dbt = x.cuda(), w.cuda(), b.cuda(), wt.cuda(), bt.cuda()
    want1 = _conv(dx, dw, db, 1, (3, 3), 1)
    want2 = _conv_t(want1, dwt, dbt, 6, 3, 0)
    y1 = torch.empty(1, 96, 300, device="cuda")
    y2 = torch.empty(1, 32, 1800, device="cuda")
    g = torch.cuda.CUDAGraph()
    with tvm_ffi.use_torch_stream(torch.cuda.graph(g)):
        _conv(dx, dw, db, 1, (3, 3), 1, out=y1)
        _conv_t(y1, dwt, dbt, 6, 3, 0, out=y2)
    y1.fill_(float("nan"))
    y2.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y1, want1) and torch.equal(y2, want2)
