"""The engine's dense externs (src/ops/, src/tvm/kl_tvm_dense.c) and their
Relax rewrite (kokoro_lstm.tvm.dense), plus the CPU pipeline's power rewrite.

Externs are called through tvm_ffi.get_global_func with tvm tensors (strided
views come from torch through DLPack) and checked against NumPy in float64."""
import numpy as np
import pytest

from conftest import require

torch = require("torch")
tvm = require("tvm")
tvm_ffi = require("tvm_ffi")

from tvm import relax  # noqa: E402

import kokoro_lstm.tvm as kt  # noqa: E402  (registers the engine's functions)
from kokoro_lstm.tvm import _schedule, dense  # noqa: E402

RTOL = 2e-5


def _fn(name):
    f = tvm_ffi.get_global_func(name)
    assert f is not None, name
    return f


def _t(a):
    """A tvm tensor sharing memory with a (possibly strided) torch tensor."""
    return tvm_ffi.from_dlpack(a)


def _close(got, want):
    want = np.asarray(want, dtype=np.float64)
    scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=0,
                               atol=RTOL * scale * 10)


def _cfg(cfg):
    """An extern's config (one of dense.CONFIGS' schemas) as the shape it is passed as."""
    return tvm_ffi.Shape(list(cfg))


def _matmul(A, B, C, bias=None, trans_b=False, nth=0):
    cfg = _cfg(dense.MatmulConfig(trans_b=int(trans_b), has_bias=int(bias is not None),
                                   num_threads=nth))
    args = [cfg, _t(A), _t(B)] + ([_t(bias)] if bias is not None else []) + [_t(C)]
    _fn(dense.MATMUL_FUNC)(*args)


def test_config_schemas_match_the_c_side():
    """Every extern's config schema (a NamedTuple) lists the fields of the C side's
    KL_<OP>_CFG_* indices (src/tvm/kl_tvm_*.h) in the same order."""
    import pathlib
    import re

    header = "".join(p.read_text() for p in sorted(
        (pathlib.Path(__file__).resolve().parents[1] / "src" / "tvm").glob("kl_tvm_*.h")))
    for name, schema in dense.CONFIGS.items():
        op = name[len("kokoro_lstm."):-len("_v1")]
        body = re.search(r"enum kl_tvm_%s_cfg \{([^}]*)\}" % op, header)
        assert body, op
        prefix = f"KL_{op.upper()}_CFG_"
        fields = [f.strip()[len(prefix):].lower() for f in body.group(1).split(",") if f.strip()]
        assert fields == list(schema._fields) + ["n"], (op, fields)
        assert schema().abi == dense.ABI_VERSION


# ----------------------------------------------------------------------------------
# matmul
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("a_shape,b_shape,trans_b", [
    ((1, 1), (1, 1), False),
    ((7, 13), (13, 5), False),
    ((3, 129, 67), (67, 300), False),        # 2-D B shared by a batch; tiles + edges
    ((2, 3, 17, 9), (2, 3, 9, 11), False),    # batch dims folded
    ((1, 12, 33, 64), (1, 12, 64, 33), False),  # attention shaped
    ((5, 31, 8), (1, 8, 6), False),           # B's batch all ones
    ((300, 70), (257, 70), True),             # linear: W [N, K] read transposed
    ((4, 10, 16), (4, 19, 16), True),
    ((6, 0), (0, 4), False),                  # K == 0: zeros
])
@pytest.mark.parametrize("nth", [1, 2])
def test_matmul_against_numpy(a_shape, b_shape, trans_b, nth):
    g = torch.Generator().manual_seed(1)
    A = torch.randn(*a_shape, generator=g)
    B = torch.randn(*b_shape, generator=g)
    want = np.matmul(A.double().numpy(),
                     np.swapaxes(B.double().numpy(), -1, -2) if trans_b else B.double().numpy())
    C = torch.full(want.shape, float("nan"))
    _matmul(A, B, C, trans_b=trans_b, nth=nth)
    _close(C.numpy(), want)


def _matmul_panels(A, W, C, bias=None, trans=True, act=0, nth=0, packed=None):
    """matmul_v1 with B = op(W) packed in panels (config value b_panels = 1)."""
    P = torch.from_numpy(dense.pack_panels(W.numpy(), trans)) if packed is None else packed
    cfg = _cfg(dense.MatmulConfig(trans_b=int(trans), has_bias=int(bias is not None),
                                   num_threads=nth, act=act, b_panels=1))
    args = [cfg, _t(A), _t(P)] + ([_t(bias)] if bias is not None else []) + [_t(C)]
    _fn(dense.MATMUL_FUNC)(*args)


@pytest.mark.parametrize("a_shape,n,trans", [
    ((1, 1), 1, True),
    ((13, 7), 33, True),            # partial second panel; 12-row tile + 1
    ((2, 25, 300), 64, False),      # batch over one B; K in two blocks of 256
    ((1, 64, 770), 100, True),      # bert-like linear, K in four blocks, partial panel
    ((255, 31), 31, True),          # one partial panel, many row tiles
    ((6, 0), 5, True),              # K == 0: the bias (here none: zeros)
])
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_matmul_panels_against_numpy(a_shape, n, trans, nth):
    """B packed in panels at compile time (the f32-pgemm kernels), odd shapes."""
    g = torch.Generator().manual_seed(3)
    K = a_shape[-1]
    A = torch.randn(*a_shape, generator=g)
    W = torch.randn(*((n, K) if trans else (K, n)), generator=g)
    want = np.matmul(A.double().numpy(), W.double().numpy().T if trans else W.double().numpy())
    C = torch.full(want.shape, float("nan"))
    _matmul_panels(A, W, C, trans=trans, nth=nth)
    _close(C.numpy(), want)


def test_matmul_panels_bias_gelu_and_threads_bitwise():
    """A strided bias and the GELU epilogue on packed B; 1, 2, 3 threads give the
    same bits (every element one fused multiply-add chain in k order), and so do
    the vector and the scalar kernels (the product; GELU's tanh differs by ISA)."""
    from kokoro_lstm import _core

    g = torch.Generator().manual_seed(4)
    A = torch.randn(1, 70, 300, generator=g)
    W = torch.randn(90, 300, generator=g) * 0.1
    bias_buf = torch.randn(180, generator=g)
    bias = bias_buf[::2]
    x = A.double().numpy() @ W.double().numpy().T + bias.double().numpy()
    want = 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))
    outs = []
    for nth in (1, 2, 3):
        C = torch.full((1, 70, 90), float("nan"))
        _matmul_panels(A, W, C, bias=bias, act=1, nth=nth)
        outs.append(C.numpy().copy())
    _close(outs[0], want)
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    prods = []
    prev = _core.get_isa()
    try:
        for isa in (prev, "scalar"):
            _core.set_isa(isa)
            C = torch.full((1, 70, 90), float("nan"))
            _matmul_panels(A, W, C, bias=bias, nth=2)
            prods.append(C.numpy().copy())
    finally:
        _core.set_isa(prev)
    _close(prods[0], x)
    assert np.array_equal(prods[0], prods[1])


def test_matmul_panels_errors():
    A, W, C = torch.ones(4, 40), torch.ones(70, 40), torch.zeros(4, 70)
    with pytest.raises(ValueError, match=r"compact \[3, 40, 32\] tensor"):
        _matmul_panels(A, W, C, packed=torch.ones(2, 40, 32))        # N = 70 needs 3 panels
    with pytest.raises(ValueError, match=r"compact \[3, 40, 32\] tensor"):
        _matmul_panels(A, W, C, packed=torch.ones(3, 40, 64)[:, :, :32])  # not compact
    cfg = _cfg(dense.MatmulConfig(trans_b=1, b_panels=2))
    with pytest.raises(ValueError, match="unknown B layout"):
        _fn(dense.MATMUL_FUNC)(cfg, _t(A), _t(W), _t(C))


def test_matmul_strided_views_and_bias():
    """Row strides (views into wider buffers), a strided bias, leading-ones bias."""
    g = torch.Generator().manual_seed(2)
    Abuf = torch.randn(40, 50, generator=g)
    Bbuf = torch.randn(30, 70, generator=g)
    A = Abuf[3:40, 5:28]          # [37, 23], row stride 50
    B = Bbuf[2:25, 1:62]          # [23, 61], row stride 70
    bias_buf = torch.randn(2 * 61, generator=g)
    bias = bias_buf[::2]          # stride 2
    Cbuf = torch.full((37, 80), float("nan"))
    C = Cbuf[:, 4:65]             # [37, 61], row stride 80
    _matmul(A, B, C, bias=bias)
    want = A.double().numpy() @ B.double().numpy() + bias.double().numpy()
    _close(C.numpy(), want)
    assert torch.isnan(Cbuf[:, :4]).all() and torch.isnan(Cbuf[:, 65:]).all()
    bias2 = torch.randn(1, 1, 61, generator=g)
    _matmul(A, B, C, bias=bias2)
    _close(C.numpy(), A.double().numpy() @ B.double().numpy() + bias2.double().numpy()[0])


def test_matmul_bitwise_independent_of_threads():
    g = torch.Generator().manual_seed(3)
    A, B = torch.randn(3, 300, 200, generator=g), torch.randn(200, 600, generator=g)
    outs = []
    for nth in (1, 2, 3, 8):  # 6 tiles, split for kl_max_threads() (8, conftest) at every count
        C = torch.empty(3, 300, 600)
        _matmul(A, B, C, nth=nth)
        outs.append(C.clone())
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_matmul_errors():
    f = _fn(dense.MATMUL_FUNC)
    A, B, C = torch.randn(4, 5), torch.randn(6, 3), torch.empty(4, 3)
    cfg = tvm_ffi.Shape(list(dense.MatmulConfig())[:4])  # act and b_panels absent
    with pytest.raises(ValueError, match="shapes do not match"):
        f(cfg, _t(A), _t(B), _t(C))
    with pytest.raises(RuntimeError, match="recompile the module"):
        f(_cfg(dense.MatmulConfig(abi=99)), _t(A), _t(A.T.contiguous()), _t(torch.empty(4, 4)))
    with pytest.raises(TypeError, match="float32"):
        f(cfg, _t(A.double()), _t(torch.randn(5, 3)), _t(C))
    with pytest.raises(ValueError, match="stride 1"):
        f(cfg, _t(torch.randn(5, 4).T), _t(torch.randn(5, 3)), _t(C))
    with pytest.raises(TypeError, match="arguments"):
        f(cfg, _t(A), _t(torch.randn(5, 3)))


# ----------------------------------------------------------------------------------
# conv1d and the depthwise transposed conv
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("cin,cout,k,stride,pad,dil,w", [
    (5, 7, 1, 1, (0, 0), 1, 13),
    (16, 9, 3, 1, (1, 1), 1, 21),
    (12, 20, 5, 1, (2, 2), 1, 17),
    (3, 4, 5, 2, (1, 3), 2, 19),   # stride, dilation, asymmetric padding
    (8, 6, 3, 1, (0, 0), 1, 3),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv1d_against_torch(cin, cout, k, stride, pad, dil, w, bias):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, cin, w, generator=g)
    wt = torch.randn(cout, cin, k, generator=g)
    b = torch.randn(cout, generator=g) if bias else None
    want = torch.nn.functional.conv1d(
        torch.nn.functional.pad(x.double(), pad), wt.double(),
        b.double() if bias else None, stride=stride, dilation=dil).numpy()
    y = torch.full(want.shape, float("nan"))
    cfg = _cfg(dense.Conv1dConfig(stride=stride, pad_l=pad[0], pad_r=pad[1], dilation=dil,
                                   has_bias=int(bias)))
    _fn(dense.CONV1D_FUNC)(cfg, _t(x), _t(wt), *([_t(b.view(1, cout, 1))] if bias else []), _t(y))
    _close(y.numpy(), want)


def test_conv1d_shape_error():
    x, wt, y = torch.randn(1, 4, 10), torch.randn(3, 4, 3), torch.empty(1, 3, 9)
    cfg = tvm_ffi.Shape(list(dense.Conv1dConfig(pad_l=1, pad_r=1))[:7])  # w_panels absent
    with pytest.raises(ValueError, match="expected 10 output steps"):
        _fn(dense.CONV1D_FUNC)(cfg, _t(x), _t(wt), _t(y))


def _conv_panels(x, wt, y, pad, bias=None, nth=0, packed=None, stride=1, dil=1):
    """conv1d_v1 with w packed in panels over (tap, channel) (config value w_panels = 1)."""
    P = torch.from_numpy(dense.pack_conv_panels(wt.numpy())) if packed is None else packed
    cfg = _cfg(dense.Conv1dConfig(stride=stride, pad_l=pad[0], pad_r=pad[1], dilation=dil,
                                   has_bias=int(bias is not None), num_threads=nth, w_panels=1))
    cout = y.shape[1]
    _fn(dense.CONV1D_FUNC)(cfg, _t(x), _t(P), *([_t(bias.view(1, cout, 1))] if bias is not None else []),
                            _t(y))


@pytest.mark.parametrize("cin,cout,k,pad,w,stride,dil", [
    (16, 9, 3, (1, 1), 21, 1, 1),
    (12, 40, 5, (2, 2), 17, 1, 1),      # a partial second panel
    (70, 33, 5, (6, 3), 30, 1, 1),      # K = 350 over two K blocks; windows of padding only
    (4, 6, 3, (0, 0), 3, 1, 1),         # one output step
    (8, 5, 2, (0, 1), 300, 1, 1),       # an even kernel; 300 steps: two row blocks
    (22, 40, 12, (3, 3), 61, 6, 1),     # Kokoro's noise_convs[0], short: strided
    (1, 1, 3, (1, 1), 16, 2, 1),        # F0_conv / N_conv
    (3, 7, 4, (0, 0), 30, 5, 1),        # stride > kernel: input steps skipped
    (16, 9, 3, (3, 3), 40, 1, 3),       # Kokoro's resblock convs, short: dilated, 'same'
    (10, 33, 11, (25, 25), 260, 1, 5),  # dilation 5 over 11 taps, two row blocks per phase
    (6, 5, 3, (0, 2), 9, 1, 4),         # fewer outputs than phases
    (100, 9, 11, (5, 5), 40, 1, 1),     # ksize cin > 1024: on x transposed, not in x's layout
    (100, 9, 11, (10, 10), 60, 1, 2),   # the same, dilated (phases)
    (250, 300, 4, (1, 2), 20, 1, 1),    # W over 1 MiB: on x transposed
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv1d_panels_against_torch(cin, cout, k, pad, w, stride, dil, bias):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, cin, w, generator=g)
    wt = torch.randn(cout, cin, k, generator=g)
    b = torch.randn(cout, generator=g) if bias else None
    want = torch.nn.functional.conv1d(torch.nn.functional.pad(x.double(), pad), wt.double(),
                                      b.double() if bias else None, stride=stride,
                                      dilation=dil).numpy()
    ys = []
    for nth in (1, 2, 3):
        y = torch.full(want.shape, float("nan"))
        _conv_panels(x, wt, y, pad, bias=b, nth=nth, stride=stride, dil=dil)
        _close(y.numpy(), want)
        ys.append(y.numpy())
    assert all(np.array_equal(ys[0], o) for o in ys[1:])   # any thread count, same bits


@pytest.mark.parametrize("stride,dil", [(1, 3), (3, 1)])
def test_conv1d_panels_nan_confined(stride, dil):
    """NaN in x reaches exactly the outputs torch's reach, strided or dilated."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1, 5, 50, generator=g)
    x[0, 2, 20] = float("nan")
    wt = torch.randn(4, 5, 3, generator=g)
    want = torch.nn.functional.conv1d(x, wt, stride=stride, padding=2, dilation=dil)
    y = torch.empty_like(want)
    _conv_panels(x, wt, y, (2, 2), stride=stride, dil=dil)
    assert torch.isnan(y).any() and torch.equal(torch.isnan(y), torch.isnan(want))


def test_conv1d_panels_errors():
    x, wt = torch.randn(1, 4, 10), torch.randn(3, 4, 3)
    y = torch.empty(1, 3, 10)
    P = torch.from_numpy(dense.pack_conv_panels(wt.numpy()))
    f = _fn(dense.CONV1D_FUNC)
    with pytest.raises(ValueError, match="stride 1 or dilation 1"):
        f(_cfg(dense.Conv1dConfig(stride=2, pad_l=2, pad_r=2, dilation=2, w_panels=1)), _t(x), _t(P),
          _t(torch.empty(1, 3, 5)))
    with pytest.raises(ValueError, match=r"w packed in panels must be \[1, ksize \* 4, 32\]"):
        _conv_panels(x, wt, y, (1, 1), packed=torch.ones(1, 13, 32))   # 13 is no multiple of 4
    with pytest.raises(ValueError, match="w packed in panels must be"):
        _conv_panels(x, wt, torch.empty(1, 33, 10), (1, 1))             # 33 channels need 2 panels
    with pytest.raises(ValueError, match="unknown w layout"):
        f(_cfg(dense.Conv1dConfig(pad_l=1, pad_r=1, w_panels=2)), _t(x), _t(P), _t(y))
    with pytest.raises(ValueError, match="expected 10 output steps"):
        _conv_panels(x, wt, torch.empty(1, 3, 9), (1, 1))


def test_matmul_overlapping_rows():
    """A's rows may overlap (a convolution's shifted windows) only when B is packed in
    panels; elsewhere overlapping rows are refused, not read as compact."""
    g = torch.Generator().manual_seed(8)
    base = torch.randn(40 * 6 + 18, generator=g)
    A = base.as_strided((40, 24), (6, 1))          # rows 6 apart, 24 long
    W = torch.randn(10, 24, generator=g)
    want = A.double().numpy() @ W.double().numpy().T
    C = torch.full((40, 10), float("nan"))
    _matmul_panels(A, W, C)
    _close(C.numpy(), want)
    with pytest.raises(ValueError, match="rows of a matrix overlap"):
        _matmul(A, W, torch.empty(40, 10), trans_b=True)


@pytest.mark.parametrize("k,stride,pad,out_pad", [(3, 2, 1, 1), (4, 3, 0, 0), (1, 1, 0, 0)])
def test_conv1d_transpose_dw_against_torch(k, stride, pad, out_pad):
    g = torch.Generator().manual_seed(5)
    C, W = 6, 11
    x = torch.randn(1, C, W, generator=g)
    wt = torch.randn(C, 1, k, generator=g)
    want = torch.nn.functional.conv_transpose1d(x.double(), wt.double(), stride=stride,
                                                padding=pad, output_padding=out_pad,
                                                groups=C).numpy()
    y = torch.full(want.shape, float("nan"))
    cfg = _cfg(dense.Conv1dTransposeDwConfig(stride=stride, pad_l=pad))
    _fn(dense.CONV1D_TRANSPOSE_DW_FUNC)(cfg, _t(x), _t(wt), _t(y))
    _close(y.numpy(), want)


def _conv_transpose(x, w, y, stride, pad, dil, bias=None, nth=0, panels=True, packed=None):
    """conv1d_transpose_v1 (groups 1), w packed by phase (w_panels = 1) or raw IOW."""
    if panels:
        P = (torch.from_numpy(dense.pack_conv_transpose_panels(w.numpy(), stride, dil))
             if packed is None else packed)
    cfg = _cfg(dense.Conv1dTransposeConfig(stride=stride, pad_l=pad, dilation=dil, ksize=w.shape[2],
                                            has_bias=int(bias is not None), num_threads=nth,
                                            w_panels=int(panels)))
    _fn(dense.CONV1D_TRANSPOSE_FUNC)(cfg, _t(x), _t(P if panels else w),
                                      *([_t(bias)] if bias is not None else []), _t(y))


@pytest.mark.parametrize("batch,cin,cout,k,stride,pad,out_pad,dil,w", [
    (1, 512, 256, 20, 10, 5, 0, 1, 9),     # Kokoro's generator.ups[0], short
    (1, 256, 128, 12, 6, 3, 0, 1, 30),     # generator.ups[1], short
    (2, 5, 7, 4, 2, 1, 1, 1, 9),           # batch, output padding
    (1, 3, 40, 3, 5, 0, 2, 1, 6),          # stride > kernel: phases without taps; partial panel
    (2, 8, 33, 7, 6, 4, 1, 2, 10),         # dilation dividing stride
    (1, 6, 5, 5, 3, 7, 0, 3, 8),           # padding > kernel, dilation == stride
    (1, 70, 9, 9, 1, 4, 0, 1, 40),         # stride 1: one phase, K = 630 over three K blocks
    (1, 22, 1, 20, 5, 0, 0, 1, 13),        # an iSTFT-like overlap-add to one channel
    (3, 4, 6, 1, 1, 0, 0, 1, 1),           # one tap, one step
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv1d_transpose_against_torch(batch, cin, cout, k, stride, pad, out_pad, dil, w, bias):
    """ConvTranspose1d with groups 1, weights packed by phase or raw; any thread
    count gives the same bits."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(batch, cin, w, generator=g)
    wt = torch.randn(cin, cout, k, generator=g)
    b = torch.randn(cout, generator=g) if bias else None
    want = torch.nn.functional.conv_transpose1d(
        x.double(), wt.double(), b.double() if bias else None, stride=stride, padding=pad,
        output_padding=out_pad, dilation=dil).numpy()
    ys = []
    for panels, nth in ((True, 1), (True, 2), (True, 3), (False, 2)):
        y = torch.full(want.shape, float("nan"))
        _conv_transpose(x, wt, y, stride, pad, dil, bias=b, nth=nth, panels=panels)
        _close(y.numpy(), want)
        ys.append(y.numpy())
    assert all(np.array_equal(ys[0], o) for o in ys[1:])


def test_thread_count_follows_the_work():
    """A call runs at most one thread per KL_DENSE_MIN_MACS (2^22) multiply-adds,
    panels' padded columns counted: asked for 4, ups-like conv_transposes of
    2.4 and 3.6 times that run 2 and 3 threads, a small one none but the caller's;
    the bits are those of 1 thread."""
    from kokoro_lstm import _core

    g = torch.Generator().manual_seed(13)
    wt = torch.randn(64, 64, 12, generator=g) * 0.05
    lasts = []
    for w, want_threads in ((200, 2), (300, 3), (10, None)):
        x = torch.randn(1, 64, w, generator=g)
        ref = torch.nn.functional.conv_transpose1d(x, wt, stride=6, padding=3)
        ys = []
        for nth in (1, 2, 4):
            y = torch.empty_like(ref)
            _conv_transpose(x, wt, y, 6, 3, 1, nth=nth)
            ys.append(y)
            if nth == 4:
                lasts.append(_core.pool_info()["last_threads"])
        _close(ys[0].numpy(), ref.double().numpy())
        assert all(torch.equal(ys[0], o) for o in ys[1:])
    assert lasts == [2, 3, 3]  # the small call started no parallel job


def test_conv1d_transpose_nan_and_inf_propagate_as_torch():
    """NaN or inf in x reaches exactly the outputs torch's reach (no zero weight
    multiplies them: stride > kernel leaves phases without taps)."""
    g = torch.Generator().manual_seed(12)
    for k, stride, dil in ((3, 2, 1), (2, 5, 1), (3, 4, 2)):
        x = torch.randn(1, 3, 12, generator=g)
        x[0, 1, 4] = float("nan")
        x[0, 2, 7] = float("inf")
        wt = torch.rand(3, 4, k, generator=g) + 0.5   # positive: inf stays inf
        want = torch.nn.functional.conv_transpose1d(x, wt, stride=stride, padding=1, dilation=dil)
        y = torch.empty_like(want)
        _conv_transpose(x, wt, y, stride, 1, dil)
        assert torch.equal(torch.isnan(y), torch.isnan(want)) and torch.isnan(y).any()
        assert torch.equal(torch.isinf(y), torch.isinf(want))


def test_conv1d_transpose_errors():
    x, wt = torch.randn(1, 4, 10), torch.randn(4, 3, 5)
    y = torch.empty(1, 3, 21)
    f = _fn(dense.CONV1D_TRANSPOSE_FUNC)
    with pytest.raises(ValueError, match="dilation not a divisor of stride"):
        f(_cfg(dense.Conv1dTransposeConfig(stride=2, dilation=3, ksize=5)), _t(x), _t(wt), _t(y))
    with pytest.raises(ValueError, match=r"w packed by phase must be \[1, 20, 32\]"):
        _conv_transpose(x, wt, y, 2, 1, 1, packed=torch.ones(1, 16, 32))
    with pytest.raises(ValueError, match="shapes do not match"):
        _conv_transpose(x, torch.randn(3, 3, 5), y, 2, 1, 1, panels=False)
    with pytest.raises(ValueError, match="unknown w layout"):
        f(_cfg(dense.Conv1dTransposeConfig(stride=2, ksize=5, w_panels=3)), _t(x), _t(wt), _t(y))
    with pytest.raises(ValueError, match="bias must have one value"):
        _conv_transpose(x, wt, y, 2, 1, 1, bias=torch.randn(4))
    with pytest.raises(ValueError, match="does not divide"):
        dense.pack_conv_transpose_panels(wt.numpy(), 2, 3)


@pytest.mark.parametrize("stride,pad,dil", [(0, 0, 1), (2, -1, 1), (2, 0, 0)])
def test_conv1d_transpose_bad_stride_padding_dilation(stride, pad, dil):
    """Both transposed convs (groups 1 and depthwise) refuse a stride or dilation
    below 1 and a negative padding with the same message."""
    x, y = torch.randn(1, 4, 10), torch.empty(1, 4, 21)
    msg = r"invalid config \(stride, padding or dilation\)"
    with pytest.raises(ValueError, match=msg):
        _fn(dense.CONV1D_TRANSPOSE_FUNC)(
            _cfg(dense.Conv1dTransposeConfig(stride=stride, pad_l=pad, dilation=dil, ksize=3)),
            _t(x), _t(torch.randn(4, 4, 3)), _t(y))
    with pytest.raises(ValueError, match=msg):
        _fn(dense.CONV1D_TRANSPOSE_DW_FUNC)(
            _cfg(dense.Conv1dTransposeDwConfig(stride=stride, pad_l=pad, dilation=dil)),
            _t(x), _t(torch.randn(4, 1, 3)), _t(y))


# ----------------------------------------------------------------------------------
# the Relax rewrite, end to end through tvm.compile
# ----------------------------------------------------------------------------------
def _build(make):
    bb = relax.BlockBuilder()
    make(bb)
    return bb.get()


def _run(mod, inputs, dense):
    if dense:
        mod, counts = kt.rewrite_dense(mod)
        mod = kt.prepare(mod)
        ex = tvm.compile(mod, target="llvm", relax_pipeline=kt.cpu_pipeline("llvm"))
    else:
        counts = {}
        ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return out.numpy(), counts, ex


def test_rewrite_linear_attention_and_conv():
    rng = np.random.default_rng(0)
    W = rng.standard_normal((24, 10)).astype("float32")
    bias = rng.standard_normal(24).astype("float32")
    Wc = rng.standard_normal((6, 4, 5)).astype("float32")
    bc = rng.standard_normal((1, 6, 1)).astype("float32")
    Wt = rng.standard_normal((6, 1, 3)).astype("float32")
    Wg = rng.standard_normal((6, 3, 4)).astype("float32")

    def make(bb):
        x = relax.Var("x", relax.TensorType((1, 7, 10), "float32"))
        y = relax.Var("y", relax.TensorType((1, 4, 9), "float32"))
        with bb.function("main", [x, y]):
            with bb.dataflow():
                wt = bb.emit(relax.op.permute_dims(relax.const(W), [1, 0]))
                h = bb.emit(relax.op.matmul(x, wt))                 # linear, W read transposed
                h = bb.emit(relax.op.add(h, relax.const(bias)))     # bias fused
                q = bb.emit(relax.op.reshape(h, (1, 7, 2, 12)))
                q = bb.emit(relax.op.permute_dims(q, [0, 2, 1, 3]))  # [1, 2, 7, 12]
                k = bb.emit(relax.op.permute_dims(q, [0, 1, 3, 2]))  # [1, 2, 12, 7]
                s = bb.emit(relax.op.matmul(q, k))                  # batched [1, 2, 7, 7]
                p = bb.emit(relax.op.nn.softmax(s, axis=-1))
                o = bb.emit(relax.op.matmul(p, q))                  # [1, 2, 7, 12]: attention
                s2 = bb.emit(relax.op.matmul(h, relax.op.permute_dims(h, [0, 2, 1])))
                s2 = bb.emit(relax.op.nn.softmax(s2, axis=-1))      # a softmax of its own
                o = bb.emit(relax.op.power(o, relax.const(3.0, "float32")))
                c = bb.emit(relax.op.nn.conv1d(y, relax.const(Wc), padding=[2, 2]))  # [1, 6, 9]
                c = bb.emit(relax.op.add(c, relax.const(bc)))
                u = bb.emit(relax.op.nn.conv1d_transpose(c, relax.const(Wt), strides=[2],
                                                         padding=[1, 1], output_padding=[1],
                                                         groups=6))  # [1, 6, 18]
                v = bb.emit(relax.op.nn.conv1d_transpose(c, relax.const(Wg), strides=[3],
                                                         padding=[1, 1]))  # groups 1: [1, 3, 26]
                r = bb.emit(relax.op.add(relax.op.sum(o), relax.op.sum(u)))
                r = bb.emit(relax.op.add(r, relax.op.sum(v)))
                r = bb.emit(relax.op.add(r, relax.op.sum(s2)))
                out = bb.emit_output(relax.op.reshape(r, (1,)))
            bb.emit_func_output(out)

    mod = _build(make)
    inputs = [rng.standard_normal((1, 7, 10)).astype("float32"),
              rng.standard_normal((1, 4, 9)).astype("float32")]
    want, _, _ = _run(mod, inputs, dense=False)
    got, counts, ex = _run(mod, inputs, dense=True)
    assert counts["matmul"] == 2 and counts["bias_fused"] == 2
    assert counts["conv1d_transpose_dw"] == 1 and counts["attention"] == 1
    assert counts["conv1d_panels"] == 1  # its constant weight packed in panels
    assert counts["conv1d_transpose_panels"] == 1
    text = ex.as_text()  # the compiled VM calls every extern by name
    assert all(n in text for n in set(dense.CONFIGS) - {dense.INSTANCE_NORM_FUNC}), text
    assert counts["softmax"] == 1
    assert kt.uses_engine(ex)
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_rewrite_packs_constant_weights_once():
    """Linears on one constant weight (ALBERT's layers share theirs) read it packed
    in panels, packed once; a product of two computed tensors stays on OpenBLAS.
    Results as TVM's own lowering."""
    rng = np.random.default_rng(5)
    W = rng.standard_normal((40, 300)).astype("float32")   # K = 300: two K blocks
    B = rng.standard_normal((300, 33)).astype("float32")   # [K, N], a partial panel

    def make(bb):
        x = relax.Var("x", relax.TensorType((1, 13, 300), "float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                wt = bb.emit(relax.op.permute_dims(relax.const(W), [1, 0]))
                c = relax.const(B)
                h1 = bb.emit(relax.op.matmul(x, wt))                 # [1, 13, 40]
                h2 = bb.emit(relax.op.matmul(relax.op.negative(x), wt))  # (not a copy of h1)
                h3 = bb.emit(relax.op.matmul(x, c))                  # [1, 13, 33]
                g = bb.emit(relax.op.matmul(h1, relax.op.permute_dims(h2, [0, 2, 1])))
                r = bb.emit(relax.op.add(relax.op.sum(g), relax.op.sum(h3)))
                out = bb.emit_output(relax.op.reshape(r, (1,)))
            bb.emit_func_output(out)

    mod = _build(make)
    rewritten, counts = kt.rewrite_dense(mod)
    assert counts["matmul"] == 4 and counts["matmul_panels"] == 3
    assert counts["panels_packed"] == 2  # W once for both linears, B once
    x = rng.standard_normal((1, 13, 300)).astype("float32")
    want, _, _ = _run(mod, [x], dense=False)
    got, _, _ = _run(mod, [x], dense=True)
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_rewrite_convs_on_panels_weight_norm_folded():
    """A conv whose weight is computed from constants (weight norm, as torch.export
    keeps it) gets that weight evaluated at compile time and packed in panels, its
    computation dropped, as do a strided and a dilated one; a conv on a computed
    weight, one both strided and dilated and a 1-tap one stay on im2col + OpenBLAS.
    Results as TVM's own lowering."""
    rng = np.random.default_rng(9)
    v = rng.standard_normal((8, 6, 3)).astype("float32")
    gain = rng.standard_normal((8, 1, 1)).astype("float32")
    bc = rng.standard_normal((1, 8, 1)).astype("float32")
    w3 = rng.standard_normal((8, 8, 3)).astype("float32")
    w1 = rng.standard_normal((4, 8, 1)).astype("float32")

    def make(bb):
        x = relax.Var("x", relax.TensorType((1, 6, 20), "float32"))
        wp = relax.Var("wp", relax.TensorType((8, 8, 5), "float32"))
        with bb.function("main", [x, wp]):
            with bb.dataflow():
                vc = relax.const(v)
                nrm = bb.emit(relax.op.sqrt(relax.op.sum(relax.op.multiply(vc, vc), axis=[1, 2],
                                                         keepdims=True)))
                w = bb.emit(relax.op.divide(relax.op.multiply(relax.const(gain), vc), nrm))
                c = bb.emit(relax.op.nn.conv1d(x, w, padding=[1, 1]))              # panels
                c = bb.emit(relax.op.add(c, relax.const(bc)))                       # bias fused
                c = bb.emit(relax.op.nn.conv1d(c, wp, padding=[2, 2]))             # computed w
                c3 = relax.const(w3)
                c = bb.emit(relax.op.nn.conv1d(c, c3, strides=[2]))                # strided
                c = bb.emit(relax.op.nn.conv1d(c, c3, dilation=[3], padding=[3, 3]))  # dilated
                c = bb.emit(relax.op.nn.conv1d(c, c3, strides=[2], dilation=[2]))  # both: BLAS
                c = bb.emit(relax.op.nn.conv1d(c, relax.const(w1)))                # 1 tap
                out = bb.emit_output(c)
            bb.emit_func_output(out)

    mod = _build(make)
    rewritten, counts = kt.rewrite_dense(mod)
    assert counts["conv1d"] == 6 and counts["conv1d_panels"] == 3 and counts["bias_fused"] == 1
    assert counts["panels_packed"] == 2   # w3 once for its two convs on panels
    text = rewritten.script(show_meta=False)
    assert "R.sqrt" not in text and "R.divide" not in text   # the weight norm is gone
    inputs = [rng.standard_normal((1, 6, 20)).astype("float32"),
              rng.standard_normal((8, 8, 5)).astype("float32")]
    want, _, _ = _run(mod, inputs, dense=False)
    got, _, _ = _run(mod, inputs, dense=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("masked", [False, True])
def test_rewrite_torch_sdpa_decomposition(masked):
    """torch.export's SDPA decomposition (q/k scaled, bool mask -> -inf, softmax, the
    fully-masked-row fix, head transposes around it) becomes one attention extern
    reading and writing [B, L, H, D] in place, and matches PyTorch, a fully masked
    query row included (zeros, like PyTorch's CPU SDPA)."""
    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(24, 72)

        def forward(self, x, mask):
            B, L, _ = x.shape
            q, k, v = self.qkv(x).view(B, L, 3, 4, 6).unbind(2)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            m = mask[:, None, :, :] if masked else None
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                                 scale=0.3)
            return o.transpose(1, 2).reshape(B, L, 24)

    torch.manual_seed(0)
    model = Attn().eval()
    x = torch.randn(1, 37, 24)
    mask = torch.rand(1, 37, 37) > 0.3
    mask[0, 4, :] = False                     # a query that sees nothing
    with torch.no_grad():
        want = model(x, mask).numpy()
    ep = torch.export.export(model, (x, mask))
    mod = kt.from_exported_program(ep)
    mod, counts = dense.rewrite_dense(mod, num_threads=2)
    assert counts.get("attention") == 1, counts
    text = mod.script(show_meta=False)
    assert "permute_dims" not in text and "softmax" not in text
    ex = tvm.compile(kt.prepare(mod), target="llvm", relax_pipeline=kt.cpu_pipeline("llvm"))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x.numpy()), tvm.runtime.tensor(mask.numpy()))
    got = (out if hasattr(out, "numpy") else out[0]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if masked:
        assert np.all(got[0, 4] == 0)


def test_rewrite_torch_conv_transpose_weight_norm():
    """torch.export of weight-normed ConvTranspose1d's (groups 1, as Kokoro's
    generator.ups; with bias, output padding, stride > kernel, dilation) becomes
    conv1d_transpose_v1 calls, weights folded and packed at compile time, biases
    fused; a depthwise one stays on its own extern and a dilation that does not
    divide the stride on TVM's loops."""
    from torch.nn.utils import weight_norm

    class Ups(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = weight_norm(torch.nn.ConvTranspose1d(12, 8, 20, 10, padding=5))
            self.b = torch.nn.ConvTranspose1d(8, 6, 3, 5, padding=1, output_padding=2, bias=False)
            self.c = torch.nn.ConvTranspose1d(6, 5, 3, 2, padding=2, dilation=2)
            self.d = torch.nn.ConvTranspose1d(5, 5, 4, 2, padding=1, groups=5)
            self.e = torch.nn.ConvTranspose1d(5, 3, 3, 2, dilation=3)

        def forward(self, x):
            return self.e(self.d(self.c(self.b(self.a(x)))))

    torch.manual_seed(13)
    model = Ups().eval()
    x = torch.randn(1, 12, 7)
    with torch.no_grad():
        want = model(x).numpy()
    mod = kt.from_exported_program(torch.export.export(model, (x,)))
    mod, counts = dense.rewrite_dense(mod)
    assert counts.get("conv1d_transpose") == 3 and counts.get("conv1d_transpose_panels") == 3, counts
    assert counts.get("conv1d_transpose_dw") == 1 and counts.get("bias_fused") == 2, counts
    assert "R.sqrt" not in mod.script(show_meta=False)       # the weight norm is gone
    ex = tvm.compile(kt.prepare(mod), target="llvm", relax_pipeline=kt.cpu_pipeline("llvm"))
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    got = (out if hasattr(out, "numpy") else out[0]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_rewrite_kokoro_custom_stft_convs():
    """Kokoro's CustomSTFT (KModel(disable_complex=True)), as its Generator uses it:
    the forward transform's strided conv1d (1 -> 11 bins, 20 taps, hop 5) on
    panels and the inverse's conv_transpose1d (11 bins -> 1, groups 1) on
    conv1d_transpose_v1, on its DFT buffers (constants)."""
    cs = require("kokoro.custom_stft")

    class StftRoundTrip(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stft = cs.CustomSTFT(filter_length=20, hop_length=5, win_length=20)

        def forward(self, x):
            st = self.stft
            real = torch.nn.functional.conv1d(x, st.weight_forward_real, stride=st.hop_length)
            imag = torch.nn.functional.conv1d(x, st.weight_forward_imag, stride=st.hop_length)
            return st.inverse(torch.sqrt(real * real + imag * imag + 1e-14), torch.atan2(imag, real))

    torch.manual_seed(14)
    model = StftRoundTrip().eval()
    x = torch.randn(1, 1, 620)
    with torch.no_grad():
        want = model(x).numpy()
    mod = kt.from_exported_program(torch.export.export(model, (x,)))
    mod, counts = dense.rewrite_dense(mod)
    assert counts.get("conv1d_panels") == 2 and counts.get("conv1d_transpose_panels") == 2, counts
    ex = tvm.compile(kt.prepare(mod), target="llvm", relax_pipeline=kt.cpu_pipeline("llvm"))
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    got = (out if hasattr(out, "numpy") else out[0]).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_rewrite_leaves_dynamic_and_non_float32_alone():
    def make(bb):
        n = tvm.tirx.Var("n", "int64")
        x = relax.Var("x", relax.TensorType((n, 8), "float32"))
        z = relax.Var("z", relax.TensorType((3, 8), "float64"))
        with bb.function("main", [x, z]):
            with bb.dataflow():
                a = bb.emit(relax.op.matmul(x, relax.const(np.ones((8, 2), "float32"))))
                b = bb.emit(relax.op.matmul(z, relax.const(np.ones((8, 2)), "float64")))
                out = bb.emit_output(relax.Tuple([a, b]))
            bb.emit_func_output(out)

    mod, counts = kt.rewrite_dense(_build(make))
    assert counts == {} and "kokoro_lstm." not in mod.script(show_meta=False)


def test_power_rewrite_is_exact_enough():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 33)).astype("float32")

    def make(bb):
        v = relax.Var("x", relax.TensorType((4, 33), "float32"))
        with bb.function("main", [v]):
            with bb.dataflow():
                a = bb.emit(relax.op.power(v, relax.const(3.0, "float32")))
                b = bb.emit(relax.op.power(relax.op.abs(v), relax.const(0.5, "float32")))
                c = bb.emit(relax.op.power(v, relax.const(2.0, "float32")))
                out = bb.emit_output(relax.op.add(relax.op.add(a, b), c))
            bb.emit_func_output(out)

    mod = _build(make)
    simplified = _schedule.simplify_power(mod)
    assert "R.power" not in simplified.script(show_meta=False)
    ex = tvm.compile(simplified, target="llvm")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    xd = x.astype(np.float64)
    np.testing.assert_allclose(got, xd ** 3 + np.abs(xd) ** 0.5 + xd ** 2, rtol=1e-6, atol=1e-6)


def test_num_threads_compiled_into_engine_calls():
    """rewrite_dense(num_threads=n) puts n into every extern's config and into the
    LSTM engine call's config (kokoro_lstm.lstm_forward_v2's num_threads)."""
    from kokoro_lstm.tvm import _native

    cfg = list(_native.Config(abi=_native.ABI_VERSION, num_layers=1, num_directions=1,
                              has_lengths=0, has_hx=0, batch_first=0, proj_size=0, has_bias=0,
                              constant_weights=0, dtype=0, num_threads=0, reverse=0))

    def make(bb):
        x = relax.Var("x", relax.TensorType((3, 4), "float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                y = bb.emit(relax.call_dps_packed(_native.FUNC_NAME, [relax.ShapeExpr(cfg), x],
                                                  relax.TensorType((3, 4), "float32")))
                z = bb.emit(relax.op.matmul(y, relax.const(np.ones((4, 2), "float32"))))
                out = bb.emit_output(z)
            bb.emit_func_output(out)

    mod, counts = kt.rewrite_dense(_build(make), num_threads=3)
    assert counts == {"matmul": 1, "matmul_panels": 1, "panels_packed": 1, "lstm_threads": 1}
    text = mod.script(show_meta=False)
    want = cfg[:10] + [3] + cfg[11:]
    assert f"R.shape([{', '.join(map(str, want))}])" in text, text
    assert f"R.shape([{', '.join(map(str, dense.MatmulConfig(num_threads=3, b_panels=1)))}])" in text


# ----------------------------------------------------------------------------------
# softmax
# ----------------------------------------------------------------------------------
def _softmax_ref(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - m)
        return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("isa", ["active", "scalar", "avx2", "avx512"])
def test_softmax_against_numpy(isa):
    from kokoro_lstm import _core

    before = _core.get_isa()
    if isa != "active":
        try:
            _core.set_isa(isa)
        except Exception:  # noqa: BLE001 - this CPU lacks it
            pytest.skip(f"{isa} not available")
    try:
        g = torch.Generator().manual_seed(6)
        for shape in [(1,), (3, 17), (2, 5, 33), (4, 512), (7, 1)]:
            x = torch.randn(*shape, generator=g) * 10
            x.view(-1)[::3] = -1e30           # masked entries (-inf-like)
            y = torch.full(shape, float("nan"))
            _fn(dense.SOFTMAX_FUNC)(_cfg(dense.SoftmaxConfig()), _t(x), _t(y))
            np.testing.assert_allclose(y.numpy(), _softmax_ref(x.numpy()), rtol=1e-5, atol=1e-7)
        x = torch.full((2, 9), float("-inf"))
        x[1, 3] = 0.5
        y = torch.empty(2, 9)
        _fn(dense.SOFTMAX_FUNC)(_cfg(dense.SoftmaxConfig(num_threads=2)), _t(x), _t(y))
        assert torch.isnan(y[0]).all()        # an all -inf row: NaN, as in PyTorch
        assert y[1, 3] == 1.0 and y[1].sum() == 1.0
    finally:
        _core.set_isa(before)


# ----------------------------------------------------------------------------------
# fused attention
# ----------------------------------------------------------------------------------
def _attn_ref(q, k, v, mask, scale):
    """float64 attention over [B, H, rows, D] arrays; a fully masked row gives zeros."""
    s = np.einsum("bhld,bhsd->bhls", q.astype(np.float64), k.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask.astype(np.float64)
    with np.errstate(invalid="ignore"):
        p = _softmax_ref(s)
    dead = np.all(s == -np.inf, axis=-1, keepdims=True)
    p = np.where(dead, 0.0, p)
    return np.einsum("bhls,bhsd->bhld", p, v.astype(np.float64))


def _attention(q, k, v, o, mask=None, layouts=(0, 0, 0, 0), scale=0.125, nth=0):
    lq, lk, lv, lo = layouts
    cfg = _cfg(dense.AttentionConfig(q_layout=lq, k_layout=lk, v_layout=lv, o_layout=lo,
                                      has_mask=int(mask is not None),
                                      scale_bits=dense.f32_bits(scale), num_threads=nth))
    args = [cfg, _t(q), _t(k), _t(v)] + ([_t(mask)] if mask is not None else []) + [_t(o)]
    _fn(dense.ATTENTION_FUNC)(*args)


def _bhld(x, layout):
    """A [B, H, rows, D] torch tensor stored in layout 1 ([B, rows, H, D]) as a view."""
    return x.transpose(1, 2).contiguous().transpose(1, 2) if layout else x


@pytest.mark.parametrize("B,H,L,S,D", [(1, 1, 1, 1, 1), (1, 3, 7, 5, 9), (2, 2, 130, 67, 16),
                                       (1, 12, 33, 33, 64), (1, 2, 257, 300, 8)])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("mask_kind", ["none", "row", "full"])
def test_attention_against_numpy(B, H, L, S, D, layout, mask_kind):
    g = torch.Generator().manual_seed(B * 100 + L)
    q, k, v = (torch.randn(B, H, n, D, generator=g) for n in (L, S, S))
    mask = None
    if mask_kind == "row":     # [1, 1, L, S] broadcast (bert's padding mask), some -inf
        mask = torch.zeros(1, 1, L, S)
        mask[..., S // 2:] = float("-inf") if S > 1 else 0.0
    elif mask_kind == "full":  # [B, H, L, S], finite values
        mask = torch.randn(B, H, L, S, generator=g)
    want = _attn_ref(q.numpy(), k.numpy(), v.numpy(), None if mask is None else mask.numpy(), 0.3)
    # q, k and o through layout-1 views (strided: rows stride H*D), v as given
    o = _bhld(torch.full((B, H, L, D), float("nan")), layout)
    _attention(_t_perm(_bhld(q, layout), layout), _t_perm(_bhld(k, layout), layout), v,
               _t_perm(o, layout), mask, (layout, layout, 0, layout), scale=0.3)
    _close(o.numpy(), want)


def _t_perm(x, layout):
    """The 4-D tensor the extern sees: [B, H, rows, D] (layout 0) or [B, rows, H, D] (1)."""
    return x.transpose(1, 2) if layout else x


def test_attention_masked_rows_nan_and_threads():
    g = torch.Generator().manual_seed(3)
    B, H, L, S, D = 1, 4, 200, 150, 32
    q, k, v = (torch.randn(B, H, n, D, generator=g) for n in (L, S, S))
    mask = torch.zeros(B, 1, L, S)
    mask[0, 0, 5, :] = float("-inf")          # a fully masked row: zeros
    mask[0, 0, 6, :-1] = float("-inf")        # one key left: exactly v[.., -1, :]
    q[0, 1, 9, 0] = float("nan")              # NaN in: a NaN row out (that head only)
    outs = []
    for nth in (1, 2, 3):
        o = torch.empty(B, H, L, D)
        _attention(q, k, v, o, mask, scale=0.2, nth=nth)
        outs.append(o)
    bits = [o.view(torch.int32) for o in outs]               # bitwise, NaNs included
    assert all(torch.equal(bits[0], b) for b in bits[1:])
    o = outs[0]
    assert (o[0, :, 5] == 0).all()
    torch.testing.assert_close(o[0, :, 6], v[0, :, -1], rtol=0, atol=1e-6)
    assert torch.isnan(o[0, 1, 9]).all() and not torch.isnan(o[0, 0]).any()
    ok = ~torch.isnan(o)
    want = _attn_ref(q.numpy(), k.numpy(), v.numpy(), mask.numpy(), 0.2)
    _close(o[ok].numpy(), want[ok.numpy()])


def test_attention_errors():
    q = torch.zeros(1, 2, 4, 8)
    o = torch.zeros(1, 2, 4, 8)
    with pytest.raises(ValueError, match="shapes do not match"):
        _attention(q, torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 6, 8), o)
    with pytest.raises(ValueError, match="mask"):
        _attention(q, q, q, o, mask=torch.zeros(1, 1, 4, 5))
    with pytest.raises(ValueError, match="unit stride"):
        _attention(q, q, q, torch.zeros(1, 2, 8, 4).transpose(2, 3))
    with pytest.raises(ValueError, match="layouts"):
        _attention(q, q, q, o, layouts=(2, 0, 0, 0))


# ----------------------------------------------------------------------------------
# GELU (tanh form) epilogue of the matmul extern
# ----------------------------------------------------------------------------------
def _gelu_tanh(x):
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("M,K,N,bias", [(1, 1, 1, False), (7, 13, 1030, True),
                                        (130, 64, 513, True), (3, 0, 17, True)])
def test_matmul_gelu_epilogue(M, K, N, bias):
    g = torch.Generator().manual_seed(M + N)
    A = torch.randn(M, K, generator=g)
    W = torch.randn(N, K, generator=g)
    b = torch.randn(N, generator=g) if bias else None
    if M > 1 and K > 0:
        A[1, 0] = float("nan")                # a NaN row stays NaN
    outs = []
    for nth in (1, 2):
        C = torch.full((M, N), 7.0)
        cfg = tvm_ffi.Shape(list(dense.MatmulConfig(trans_b=1, has_bias=int(bias), num_threads=nth,
                                                     act=1))[:5])  # b_panels absent
        _fn(dense.MATMUL_FUNC)(*([cfg, _t(A), _t(W)] + ([_t(b)] if bias else []) + [_t(C)]))
        outs.append(C)
    assert torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32))
    want = A.double().numpy() @ W.double().numpy().T + (b.double().numpy() if bias else 0.0)
    want = _gelu_tanh(want)
    got = outs[0].numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    _close(got[ok], want[ok])
    with pytest.raises(ValueError, match="activation"):
        cfg = _cfg(dense.MatmulConfig(trans_b=1, num_threads=1, act=9))
        _fn(dense.MATMUL_FUNC)(cfg, _t(A), _t(W), _t(torch.empty(M, N)))


def test_rewrite_linear_gelu_new():
    """Linear -> transformers' gelu_new (ALBERT's FFN activation) becomes one matmul
    call with the bias and the GELU fused, and matches PyTorch."""
    import math

    class FFN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(24, 70)
            self.down = torch.nn.Linear(70, 24)

        def forward(self, x):
            h = self.up(x)
            h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                            * (h + 0.044715 * torch.pow(h, 3.0))))
            return self.down(h)

    torch.manual_seed(0)
    model = FFN().eval()
    x = torch.randn(1, 33, 24)
    with torch.no_grad():
        want = model(x).numpy()
    mod = kt.from_exported_program(torch.export.export(model, (x,)))
    mod, counts = dense.rewrite_dense(mod, num_threads=2)
    assert counts.get("gelu_fused") == 1 and counts.get("matmul") == 2, counts
    assert "tanh" not in mod.script(show_meta=False)
    ex = tvm.compile(kt.prepare(mod), target="llvm", relax_pipeline=kt.cpu_pipeline("llvm"))
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    got = (out if hasattr(out, "numpy") else out[0]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------
# configs and tensors a caller chose: refused, named, before memory is touched
# ----------------------------------------------------------------------------------
def _in_subprocess(code):
    """Runs code (with _fn, _t, _cfg, dense, torch at hand) in a fresh interpreter: a
    defect there crashes the child, not this test run. Returns (returncode, output)."""
    import os
    import subprocess
    import sys
    import textwrap

    prelude = textwrap.dedent("""
        import torch, tvm_ffi
        import kokoro_lstm.tvm
        from kokoro_lstm.tvm import dense
        _fn = tvm_ffi.get_global_func
        _t = tvm_ffi.from_dlpack
        _cfg = lambda c: tvm_ffi.Shape(list(c))
    """)
    r = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ))
    return r.returncode, r.stdout + r.stderr


def test_conv1d_transpose_huge_stride_refused():
    """A stride of 2^62 overflowed the phase table's size (5 * stride int64s): a heap
    overflow. Now a ValueError naming the stride."""
    rc, out = _in_subprocess("""
        x, w, y = torch.randn(1, 2, 3), torch.randn(2, 3, 1), torch.zeros(1, 3, 3)
        try:
            _fn(dense.CONV1D_TRANSPOSE_FUNC)(_cfg(dense.Conv1dTransposeConfig(
                stride=2**62, ksize=1, w_panels=0)), _t(x), _t(w), _t(y))
        except ValueError as e:
            print("refused:", e)
    """)
    assert rc == 0 and "refused:" in out and "stride 4611686018427387904 too large" in out, out


def test_attention_mask_rank_above_4_refused():
    """A 5-D to 8-D mask indexed below the [B, H, L, S] arrays (a stack write out of
    bounds); masks have 2 to 4 dimensions."""
    q, o = torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8)
    for nd in (5, 8):
        mask = torch.zeros((1,) * (nd - 2) + (4, 4))
        with pytest.raises(ValueError, match="mask must have 2 to 4 dimensions, got %d" % nd):
            _attention(q, q.clone(), q.clone(), o, mask=mask)


def test_conv1d_huge_dilation_refused():
    """dilation 2^62 over 5 taps: dilation * (ksize - 1) wrapped to 0, so an empty
    convolution (the window is longer than x) was computed as 5 output steps."""
    x, w, y = torch.randn(1, 2, 5), torch.randn(3, 2, 5), torch.full((1, 3, 5), float("nan"))
    with pytest.raises(ValueError, match="dilation 4611686018427387904 too large"):
        _fn(dense.CONV1D_FUNC)(_cfg(dense.Conv1dConfig(dilation=2**62)), _t(x), _t(w), _t(y))
    assert torch.isnan(y).all()  # untouched


def test_huge_padding_is_a_config_error():
    """pad_l = 2^62 overflowed the transposed input's size (a crash, or "out of memory");
    now a config error naming pad_l, from every convolution."""
    rc, out = _in_subprocess("""
        x = torch.randn(1, 2, 4)
        calls = [
            (dense.CONV1D_TRANSPOSE_FUNC, dense.Conv1dTransposeConfig(pad_l=2**62, ksize=1, w_panels=0),
             torch.randn(2, 3, 1), torch.zeros(1, 3, 4)),
            (dense.CONV1D_FUNC, dense.Conv1dConfig(pad_l=2**62), torch.randn(3, 2, 1), torch.zeros(1, 3, 4)),
            (dense.CONV1D_TRANSPOSE_DW_FUNC, dense.Conv1dTransposeDwConfig(pad_l=2**62),
             torch.randn(2, 1, 1), torch.zeros(1, 2, 4)),
        ]
        for name, cfg, w, y in calls:
            try:
                _fn(name)(_cfg(cfg), _t(x), _t(w), _t(y))
                print("computed", name)
            except ValueError as e:
                print("refused:", e)
    """)
    assert rc == 0, out
    assert out.count("refused:") == 3 and out.count("pad_l 4611686018427387904 too large") == 3, out


@pytest.mark.parametrize("which", ["matmul", "conv1d", "conv_t", "conv_t_dw", "softmax", "attention",
                                   "instance_norm"])
def test_output_aliasing_an_input_refused(which):
    """An output sharing memory with an input was computed silently wrong (its
    elements overwritten while still read); now refused, naming both."""
    g = torch.Generator().manual_seed(21)
    if which == "matmul":
        A, B = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
        call = lambda: _fn(dense.MATMUL_FUNC)(_cfg(dense.MatmulConfig()), _t(A), _t(B), _t(A))
        names = "C and A"
    elif which == "conv1d":
        x = torch.randn(1, 4, 12, generator=g)
        y = x.view(-1)[:40].view(1, 4, 10)          # y's memory is x's first 40 floats
        w = torch.randn(4, 4, 3, generator=g)
        call = lambda: _fn(dense.CONV1D_FUNC)(_cfg(dense.Conv1dConfig()), _t(x), _t(w), _t(y))
        names = "y and x"
    elif which == "conv_t":
        x = torch.randn(1, 4, 10, generator=g)
        w = torch.randn(4, 4, 1, generator=g)
        call = lambda: _fn(dense.CONV1D_TRANSPOSE_FUNC)(
            _cfg(dense.Conv1dTransposeConfig(ksize=1, w_panels=0)), _t(x), _t(w), _t(x))
        names = "y and x"
    elif which == "conv_t_dw":
        x = torch.randn(1, 4, 10, generator=g)
        w = torch.randn(4, 1, 1, generator=g)
        call = lambda: _fn(dense.CONV1D_TRANSPOSE_DW_FUNC)(
            _cfg(dense.Conv1dTransposeDwConfig()), _t(x), _t(w), _t(x))
        names = "y and x"
    elif which == "softmax":
        x = torch.randn(3, 7, generator=g)
        call = lambda: _fn(dense.SOFTMAX_FUNC)(_cfg(dense.SoftmaxConfig()), _t(x), _t(x))
        names = "y and x"
    elif which == "instance_norm":   # y may be x itself, but not x shifted by a row
        buf = torch.randn(1, 5, 6, generator=g)
        x, y = buf[:, :4], buf[:, 1:]
        cfg = _cfg(dense.InstanceNormConfig(eps_bits=dense.f64_bits(1e-5)))
        call = lambda: _fn(dense.INSTANCE_NORM_FUNC)(cfg, _t(x), _t(y))
        names = "y and x"
    else:
        q = torch.randn(1, 2, 4, 8, generator=g)
        k, v = torch.randn(1, 2, 4, 8, generator=g), torch.randn(1, 2, 4, 8, generator=g)
        call = lambda: _attention(q, k, v, v)
        names = "o and v"
    with pytest.raises(ValueError, match=names + " overlap in memory"):
        call()


def test_zero_kernel_size_or_channels_named():
    """A zero kernel size or zero channels got the kernel's bare "invalid argument"."""
    f = _fn(dense.CONV1D_FUNC)
    with pytest.raises(ValueError, match="x has no channels"):
        f(_cfg(dense.Conv1dConfig()), _t(torch.zeros(1, 0, 4)), _t(torch.zeros(3, 0, 3)),
          _t(torch.zeros(1, 3, 2)))
    with pytest.raises(ValueError, match="w has no output channels"):
        f(_cfg(dense.Conv1dConfig()), _t(torch.zeros(1, 2, 4)), _t(torch.zeros(0, 2, 3)),
          _t(torch.zeros(1, 0, 2)))
    with pytest.raises(ValueError, match="w has kernel size 0"):
        f(_cfg(dense.Conv1dConfig()), _t(torch.zeros(1, 2, 4)), _t(torch.zeros(3, 2, 0)),
          _t(torch.zeros(1, 3, 5)))
    with pytest.raises(ValueError, match="ksize must be in 1"):
        _fn(dense.CONV1D_TRANSPOSE_FUNC)(_cfg(dense.Conv1dTransposeConfig(ksize=0, w_panels=0)),
                                          _t(torch.zeros(1, 2, 4)), _t(torch.zeros(2, 3, 0)),
                                          _t(torch.zeros(1, 3, 3)))
    with pytest.raises(ValueError, match="w has kernel size 0"):
        _fn(dense.CONV1D_TRANSPOSE_DW_FUNC)(_cfg(dense.Conv1dTransposeDwConfig()),
                                             _t(torch.zeros(1, 2, 4)), _t(torch.zeros(2, 1, 0)),
                                             _t(torch.zeros(1, 2, 3)))
