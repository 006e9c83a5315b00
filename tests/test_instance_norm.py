"""Instance norm on the engine (src/ops/norm.c, kokoro_lstm.instance_norm_v1) and its
Relax rewrite (kokoro_lstm.tvm.dense: instance_norm and Kokoro's AdaIN1d fused): safe on
constant rows (TVM 0.27's own lowering computes rsqrt(E[x^2] - E[x]^2 + eps), NaN when
rounding makes that negative), NaN in gives NaN out, PyTorch's numbers within 1e-5."""
import numpy as np
import pytest

from conftest import require

torch = require("torch")
tvm = require("tvm")
tvm_ffi = require("tvm_ffi")

from tvm import relax  # noqa: E402

import kokoro_lstm.tvm as kt  # noqa: E402  (registers the engine's functions)
from kokoro_lstm.tvm import dense  # noqa: E402

F = torch.nn.functional


def _extern(x, weight=None, bias=None, scale=None, shift=None, eps=1e-5, num_threads=0, snake=None):
    f = tvm_ffi.get_global_func(dense.INSTANCE_NORM_FUNC)
    y = torch.empty_like(x)
    cfg = dense.InstanceNormConfig(has_weight=int(weight is not None), has_bias=int(bias is not None),
                                    has_scale=int(scale is not None), has_shift=int(shift is not None),
                                    has_snake=int(snake is not None), eps_bits=dense.f64_bits(eps),
                                    num_threads=num_threads)
    args = [x] + [t for t in (weight, bias, scale, shift) if t is not None] + list(snake or ()) + [y]
    f(tvm_ffi.Shape(list(cfg)), *[tvm_ffi.from_dlpack(t) for t in args])
    return y


def _torch(x, weight=None, bias=None, scale=None, shift=None, eps=1e-5, snake=None):
    y = F.instance_norm(x, weight=weight, bias=bias, eps=eps)
    y = y if scale is None else scale * y + shift
    if snake is not None:  # Kokoro's AdaINResBlock1: x + (1 / a) * sin(a * x) ** 2
        a, c = (t.reshape(1, -1, *([1] * (x.dim() - 2))) for t in snake)
        y = y + c * torch.sin(a * y) ** 2
    return y


@pytest.mark.parametrize("shape", [(1, 1, 2), (1, 7, 5), (1, 512, 300), (2, 33, 1000), (3, 4, 2, 9)])
def test_matches_torch(shape):
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=g) * 3 + 2
    C, N = shape[1], shape[0]
    w, b = torch.randn(C, generator=g), torch.randn(C, generator=g)
    for args in ({}, {"weight": w, "bias": b}, {"bias": b},
                 {"weight": w, "bias": b, "scale": 1 + torch.randn(N, C, 1, generator=g),
                  "shift": torch.randn(N, C, 1, generator=g)},
                 {"scale": torch.randn(C, 1, generator=g), "shift": torch.randn(1, C, 1, generator=g)}):
        if len(shape) > 3 and "scale" in args:
            args = {k: (v.reshape(v.shape + (1,)) if k in ("scale", "shift") else v) for k, v in args.items()}
        got, want = _extern(x, **args), _torch(x, **args)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("scale", [0.5, 30.0, 3e4])
def test_snake_matches_torch(scale):
    """AdaIN then Snake in one call: PyTorch's numbers within 1e-5 relative (its sin is
    SLEEF's, ours the f32-vsnake kernels'), up to arguments past the kernels' range
    (3e4 * a beyond 65536: libm there); inf and NaN rows give NaN."""
    g = torch.Generator().manual_seed(int(scale))
    x = torch.randn(1, 40, 1003, generator=g) * 3 + 2
    w, b = torch.randn(40, generator=g), torch.randn(40, generator=g)
    sc, sh = 1 + torch.randn(1, 40, 1, generator=g), torch.randn(1, 40, 1, generator=g) * scale
    a = torch.rand(40, generator=g) * 2 + 0.2
    snake = (a, 1 / a)
    got, want = _extern(x, w, b, sc, sh, snake=snake), _torch(x, w, b, sc, sh, snake=snake)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * scale)
    for nth in (1, 2, 3):
        assert torch.equal(_extern(x, w, b, sc, sh, snake=snake, num_threads=nth), got)
    x[0, 7, 5], x[0, 9, 0] = float("nan"), float("inf")
    got = _extern(x, w, b, sc, sh, snake=snake)
    assert got[0, 7].isnan().all() and got[0, 9].isnan().all()
    assert not got[0, :7].isnan().any() and not got[0, 10:].isnan().any()


def test_threads_bitwise_and_in_place():
    x = torch.randn(1, 256, 3000) + 5
    w, b = torch.randn(256), torch.randn(256)
    ref = _extern(x, w, b, num_threads=1)
    for nth in (2, 3, 4):
        assert torch.equal(_extern(x, w, b, num_threads=nth), ref)
    f = tvm_ffi.get_global_func(dense.INSTANCE_NORM_FUNC)
    cfg = dense.InstanceNormConfig(has_weight=1, has_bias=1, eps_bits=dense.f64_bits(1e-5))
    xt = tvm_ffi.from_dlpack(x)
    f(tvm_ffi.Shape(list(cfg)), xt, tvm_ffi.from_dlpack(w), tvm_ffi.from_dlpack(b), xt)  # y is x
    assert torch.equal(x, ref)


def test_constant_rows_and_nan():
    """A constant row normalizes to exactly 0 (then the affine and AdaIN parameters);
    PyTorch gives 0 within its rounding. A NaN poisons its own row only."""
    x = torch.randn(1, 6, 4000)
    for r, v in enumerate((3.7, -1e4, 0.0, 1e-30)):
        x[0, r] = v
    w, b = torch.randn(6), torch.randn(6)
    s, t = torch.randn(1, 6, 1), torch.randn(1, 6, 1)
    got = _extern(x, w, b, s, t)
    want_const = (s * b[None, :, None] + t)[0, :4, 0]
    torch.testing.assert_close(got[0, :4], want_const[:, None].expand(4, 4000), rtol=1e-6, atol=1e-6)
    # torch's float mean of a constant row is off by its rounding, which the normalization
    # magnifies (to 3e-2 at -1e4): compared on the other rows
    keep = [0, 2, 3, 4, 5]
    torch.testing.assert_close(got[:, keep], _torch(x, w, b, s, t)[:, keep], rtol=0, atol=2e-3)
    assert torch.equal(_extern(x)[0, :4], torch.zeros(4, 4000))
    x[0, 5, 17] = float("nan")
    got = _extern(x, w, b, s, t)
    assert got[0, 5].isnan().all() and not got[0, :5].isnan().any()


def test_bad_arguments():
    f = tvm_ffi.get_global_func(dense.INSTANCE_NORM_FUNC)
    x, y = torch.randn(1, 4, 8), torch.empty(1, 4, 8)
    T = tvm_ffi.from_dlpack
    eps = dense.f64_bits(1e-5)
    with pytest.raises(Exception, match="calling convention"):
        f(tvm_ffi.Shape([2, 0, 0, 0, 0, 0, eps, 0]), T(x), T(y))
    with pytest.raises(Exception, match="expected 4 arguments"):
        f(tvm_ffi.Shape([1, 1, 0, 0, 0, 0, eps, 0]), T(x), T(y))
    with pytest.raises(Exception, match="weight must hold C = 4"):
        f(tvm_ffi.Shape([1, 1, 0, 0, 0, 0, eps, 0]), T(x), T(torch.ones(5)), T(y))
    with pytest.raises(Exception, match="eps"):
        f(tvm_ffi.Shape([1, 0, 0, 0, 0, 0, dense.f64_bits(-1.0), 0]), T(x), T(y))
    with pytest.raises(Exception, match="y must have x's shape"):
        f(tvm_ffi.Shape([1, 0, 0, 0, 0, 0, eps, 0]), T(x), T(torch.empty(1, 4, 7)))
    with pytest.raises(Exception, match="3 or more"):
        f(tvm_ffi.Shape([1, 0, 0, 0, 0, 0, eps, 0]), T(torch.randn(4, 8)), T(torch.empty(4, 8)))
    with pytest.raises(Exception, match="snake_c must hold C = 4"):
        f(tvm_ffi.Shape([1, 0, 0, 0, 0, 1, eps, 0]), T(x), T(torch.ones(4)), T(torch.ones(3)), T(y))
    with pytest.raises(Exception, match="expected 5 arguments"):
        f(tvm_ffi.Shape([1, 0, 0, 0, 0, 1, eps, 0]), T(x), T(torch.ones(4)), T(y))
    with pytest.raises(Exception, match="compact"):
        f(tvm_ffi.Shape([1, 0, 0, 0, 0, 0, eps, 0]), T(torch.randn(1, 4, 16)[..., ::2]), T(y))


# -- the Relax rewrite ---------------------------------------------------------------------
def _compile(module, inputs):
    ep = torch.export.export(module, inputs)
    mod, counts = kt.rewrite_dense(kt.from_exported_program(ep))
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return counts, lambda *a: [o.numpy() for o in vm["main"](*[tvm.runtime.tensor(t.numpy()) for t in a])]


def test_adain_rewrite():
    """Kokoro's AdaIN1d becomes one instance_norm_v1: PyTorch's numbers within 1e-5,
    no NaN on constant channels."""
    istftnet = require("kokoro.istftnet")
    torch.manual_seed(0)
    m = istftnet.AdaIN1d(128, 256).eval()
    with torch.no_grad():
        m.norm.weight.normal_()
        m.norm.bias.normal_()
    x, s = torch.randn(1, 256, 400) * 2 + 1, torch.randn(1, 128)
    counts, run = _compile(m, (x, s))
    assert counts.get("instance_norm") == 1 and counts.get("adain_fused") == 1
    with torch.no_grad():
        np.testing.assert_allclose(run(x, s)[0], m(x, s).numpy(), rtol=0, atol=1e-5)
        x[0, :100] = 3.7
        got = run(x, s)[0]
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, m(x, s).numpy(), rtol=0, atol=2e-3)


def _adain_resblock(seed=1):
    istftnet = require("kokoro.istftnet")
    torch.manual_seed(seed)
    m = istftnet.AdaINResBlock1(64, 3, (1, 3, 5), style_dim=128).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
        for a in list(m.alpha1) + list(m.alpha2):
            a.uniform_(0.3, 2.0)
    return m, torch.randn(1, 64, 600), torch.randn(1, 128)


def test_snake_rewrite():
    """Kokoro's AdaINResBlock1: each AdaIN1d and the Snake after it become one
    instance_norm_v1 (six per block); within 2e-5 of PyTorch's numbers in float64
    (twelve layers deep: PyTorch's own float32 result is 2.8e-5 off on an AVX2
    EPYC, ours 6.5e-6, so float32 PyTorch is no reference at this tolerance)."""
    m, x, s = _adain_resblock()
    counts, run = _compile(m, (x, s))
    assert counts.get("instance_norm") == 6 and counts.get("snake_fused") == 6
    want = _adain_resblock()[0].double()
    with torch.no_grad():
        np.testing.assert_allclose(run(x, s)[0], want(x.double(), s.double()).numpy(), rtol=0, atol=2e-5)


class _SnakeShared(torch.nn.Module):
    """A Snake whose input is used again after it: not fused."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.InstanceNorm1d(32)
        self.alpha = torch.nn.Parameter(torch.rand(1, 32, 1) + 0.5)

    def forward(self, x):
        y = self.norm(x)
        return y + (1 / self.alpha) * torch.sin(self.alpha * y) ** 2, y * 2


def test_snake_not_fused_when_shared():
    x = torch.randn(1, 32, 300)
    m = _SnakeShared().eval()
    counts, run = _compile(m, (x,))
    assert counts.get("instance_norm") == 1 and not counts.get("snake_fused")
    with torch.no_grad():
        for got, want in zip(run(x), m(x)):
            np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-5)


class _Norms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.InstanceNorm1d(64)                 # no affine
        self.b = torch.nn.InstanceNorm1d(64, affine=True)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) * 2.0  # a product that is not AdaIN's


def test_instance_norm_rewrite():
    x = torch.randn(1, 64, 500)
    x[0, 3] = -2.5
    m = _Norms().eval()
    with torch.no_grad():
        m.b.weight.normal_()
        m.b.bias.normal_()
    counts, run = _compile(m, (x,))
    assert counts.get("instance_norm") == 2 and not counts.get("adain_fused")
    got = run(x)[0]
    assert not np.isnan(got).any()
    with torch.no_grad():
        np.testing.assert_allclose(got, m(x).numpy(), rtol=0, atol=1e-4)
