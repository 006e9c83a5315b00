"""Counter-based noise (src/ops/random.c, kokoro_lstm.noise, torch.ops.kokoro.random_*,
kokoro_lstm.random_v1 in TVM): Philox4x32-10 against Random123's known answers and a
plain-Python Philox, the draw's rule (element i depends only on seed, stream, i), and
Kokoro's SineGen / SourceModuleHnNSF under counter_noise: the same numbers as the
upstream modules given the same draws, eagerly, under torch.export and compiled."""
import math

import numpy as np
import pytest

from conftest import require

torch = require("torch")

import kokoro_lstm.torch_ops as ko  # noqa: E402
from kokoro_lstm import noise  # noqa: E402

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF

# Random123 kat_vectors, the "philox4x32 10" lines: counter (4 words), key (2), output (4)
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK,) * 4, (MASK, MASK), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def philox(ctr, key):
    """Philox4x32-10 in plain Python (Salmon et al. 2011)."""
    c, k = list(ctr), list(key)
    for r in range(10):
        if r:
            k = [(k[0] + W0) & MASK, (k[1] + W1) & MASK]
        p0, p1 = M0 * c[0], M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & MASK, (p0 >> 32) ^ c[3] ^ k[1], p0 & MASK]
    return tuple(c)


def reference(dist, n, seed, stream):
    """The draw's first n elements by the rule of src/ops/random.h, in float64."""
    seed &= (1 << 64) - 1
    key = (seed & MASK, seed >> 32)
    out = []
    for b in range((n + 3) // 4):
        w = philox((b & MASK, b >> 32, stream & MASK, stream >> 32), key)
        if dist == "uniform":
            out += [(x >> 8) * 2.0 ** -24 for x in w]
        else:
            for p in range(2):
                a = ((w[2 * p] >> 8) + 1) * 2.0 ** -24
                u = (w[2 * p + 1] >> 8) * 2.0 ** -24
                r = math.sqrt(-2.0 * math.log(a))
                out += [r * math.cos(2 * math.pi * u), r * math.sin(2 * math.pi * u)]
    return np.array(out[:n])


@pytest.mark.parametrize("ctr,key,want", KAT)
def test_python_philox_known_answers(ctr, key, want):
    """The test's own Philox is Random123's (the C one is checked in tests/c/test_random.c)."""
    assert philox(ctr, key) == want


@pytest.mark.parametrize("seed,stream", [(0, 0), (1234, 2), (-1, 1), (2 ** 40 + 7, 2 ** 33 + 5)])
def test_draws_match_reference(seed, stream):
    n = 37
    u = noise.uniform(n, seed, stream)
    assert u.dtype == np.float32
    np.testing.assert_array_equal(u, reference("uniform", n, seed, stream).astype(np.float32))
    z = noise.normal(n, seed, stream)
    np.testing.assert_allclose(z, reference("normal", n, seed, stream), rtol=1e-7, atol=1e-7)


def test_draw_rule():
    """Element i depends only on (seed, stream, i): shapes are prefixes, thread counts
    and chunking do not matter; uniforms are in [0, 1) on the 2^-24 grid, normals finite."""
    for draw in (noise.uniform, noise.normal):
        big = draw((300_001,), 99, 3)  # several chunks of the pool
        np.testing.assert_array_equal(draw((300_001,), 99, 3, num_threads=1), big)
        np.testing.assert_array_equal(draw((300_001,), 99, 3, num_threads=4), big)
        np.testing.assert_array_equal(draw((7, 11), 99, 3).ravel(), big[:77])
        assert not np.array_equal(draw(64, 99, 4), big[:64])
        assert not np.array_equal(draw(64, 100, 3), big[:64])
        assert np.isfinite(big).all()
    u = noise.uniform(200_000, 5)
    assert u.min() >= 0 and u.max() < 1 and np.array_equal(u * 2 ** 24, np.floor(u * 2 ** 24))
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.std() - math.sqrt(1 / 12)) < 0.005
    z = noise.normal(200_000, 5)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert abs(np.mean(z ** 4) - 3) < 0.1 and np.abs(z).max() < 5.78
    assert noise.uniform((0, 3), 1).shape == (0, 3)


def test_bad_arguments():
    with pytest.raises(TypeError, match="seed"):
        noise.uniform(3, 1.5)
    with pytest.raises(ValueError, match="int64"):
        noise.uniform(3, 2 ** 63)
    with pytest.raises(ValueError, match="stream"):
        noise.normal(3, 1, -1)
    with pytest.raises(ValueError, match="negative"):
        noise.normal((2, -1), 1)


# -- torch ops ----------------------------------------------------------------------------
def test_torch_ops_match_numpy():
    seed = torch.tensor([2 ** 35 + 3])
    for op, draw in ((ko.random_uniform, noise.uniform), (ko.random_normal, noise.normal)):
        t = op(seed, [3, 5, 7], 2)
        assert t.dtype == torch.float32 and t.shape == (3, 5, 7)
        np.testing.assert_array_equal(t.numpy(), draw((3, 5, 7), 2 ** 35 + 3, 2))
    with pytest.raises(RuntimeError, match="int64 tensor of shape"):
        ko.random_normal(torch.tensor([1.0]), [3], 0)
    with pytest.raises(RuntimeError, match="int64 tensor of shape"):
        ko.random_normal(torch.tensor([1, 2]), [3], 0)
    with pytest.raises(RuntimeError, match="stream"):
        ko.random_uniform(seed, [3], -1)


class Draws(torch.nn.Module):
    """The two ops on a seed input, shapes from another input (dynamic under export)."""

    def forward(self, x, seed):
        return (ko.random_uniform(seed, [x.shape[0], 4], 0) + 0 * x[:, :1].sum(),
                ko.random_normal(seed, [x.shape[0], x.shape[1]], 1))


def test_torch_ops_export():
    x, seed = torch.zeros(6, 3), torch.tensor([11])
    ep = torch.export.export(Draws(), (x, seed), strict=False,
                             dynamic_shapes=({0: torch.export.Dim("n", min=2)}, None))
    ep = ep.run_decompositions()
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert "kokoro.random_uniform.default" in targets and "kokoro.random_normal.default" in targets
    for n, s in ((6, 11), (9, 12)):
        got = ep.module()(torch.zeros(n, 3), torch.tensor([s]))
        want = Draws()(torch.zeros(n, 3), torch.tensor([s]))
        assert all(torch.equal(a, b) for a, b in zip(got, want))


# -- Kokoro's noise sources ---------------------------------------------------------------
def _source(harmonics=8):
    istftnet = require("kokoro.istftnet")
    torch.manual_seed(0)
    return istftnet.SourceModuleHnNSF(sampling_rate=24000, upsample_scale=300,
                                      harmonic_num=harmonics, voiced_threshod=10)


def _f0(n=3000):
    g = torch.Generator().manual_seed(1)
    f0 = torch.rand(1, n, 1, generator=g) * 300
    f0[:, n // 3:n // 2] = 0  # an unvoiced stretch
    return f0


def _upstream_with_draws(m, f0, seed):
    """The unpatched module with torch.rand / torch.randn_like returning the draws
    counter_noise promises (streams 0, 1, 2)."""
    dim = m.l_sin_gen.dim
    orig = torch.rand, torch.randn_like

    def rand(*shape, **kw):
        return torch.from_numpy(noise.uniform(shape, seed, noise.STREAM_SINE_PHASE))

    def randn_like(t, **kw):
        stream = noise.STREAM_SINE_NOISE if t.shape[-1] == dim else noise.STREAM_SOURCE_NOISE
        return torch.from_numpy(noise.normal(tuple(t.shape), seed, stream))

    torch.rand, torch.randn_like = rand, randn_like
    try:
        return m(f0)
    finally:
        torch.rand, torch.randn_like = orig


def test_counter_noise_is_upstream_with_these_draws():
    m, f0 = _source(), _f0()
    with noise.counter_noise(m, 1234) as same:
        assert same is m
        got = m(f0)
        again = m(f0)
    assert "forward" not in m.__dict__ and "forward" not in m.l_sin_gen.__dict__  # restored
    want = _upstream_with_draws(m, f0, 1234)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert all(torch.equal(a, b) for a, b in zip(got, again))
    with noise.counter_noise(m, torch.tensor([1235])):
        other = m(f0)
    assert not torch.equal(got[1], other[1]) and not torch.equal(got[0], other[0])


def test_counter_noise_errors():
    with pytest.raises(ValueError, match="no Kokoro SineGen"):
        with noise.counter_noise(torch.nn.Linear(2, 2), 1):
            pass
    with pytest.raises(ValueError, match="int64 of shape"):
        with noise.counter_noise(_source(), torch.tensor([1, 2])):
            pass
    m = _source()
    m.l_sin_gen.flag_for_pulse = True
    with pytest.raises(ValueError, match="flag_for_pulse"):
        with noise.counter_noise(m, 1):
            pass


class Seeded(torch.nn.Module):
    """A SourceModuleHnNSF whose seed is a call input (how a decoder is exported)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, f0, seed):
        with noise.counter_noise(self.m, seed):
            return self.m(f0)


def test_counter_noise_export_seed_input():
    m, f0 = _source(), _f0()
    ep = torch.export.export(Seeded(m), (f0, torch.tensor([7])), strict=False)
    ep = ep.run_decompositions()
    seeds = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "seed"]
    assert len(seeds) == 1 and len(seeds[0].users) == 3  # streams 0, 1, 2
    for s in (7, 8):
        got = ep.module()(f0, torch.tensor([s]))
        want = Seeded(m)(f0, torch.tensor([s]))
        assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-5)


# -- TVM: kokoro_lstm.random_v1 / fresh_seed_v1 ------------------------------------------
def test_random_config_matches_the_c_side():
    """RandomConfig lists the KL_RANDOM_CFG_* indices of src/tvm/kl_tvm_random.h in order."""
    import pathlib
    import re

    require("tvm")
    from kokoro_lstm.tvm import _noise

    header = (pathlib.Path(__file__).resolve().parents[1] / "src" / "tvm" / "kl_tvm_random.h").read_text()
    body = re.search(r"enum kl_tvm_random_cfg \{([^}]*)\}", header).group(1)
    fields = [f.strip()[len("KL_RANDOM_CFG_"):].lower() for f in body.split(",") if f.strip()]
    assert fields == list(_noise.RandomConfig._fields) + ["n"]
    assert f'"{_noise.RANDOM_FUNC}"' in header and f'"{_noise.FRESH_SEED_FUNC}"' in header


def test_tvm_externs_direct():
    """random_v1 fills any compact float32 tensor with the draw; bad configs and
    arguments raise; fresh_seed_v1 never repeats."""
    require("tvm")
    tvm_ffi = require("tvm_ffi")
    import kokoro_lstm.tvm  # noqa: F401  (registers the engine's functions)
    from kokoro_lstm.tvm import _noise

    rnd = tvm_ffi.get_global_func(_noise.RANDOM_FUNC)
    seed = tvm_ffi.from_dlpack(torch.tensor([-5]))
    y = torch.empty(4, 5, 6)
    rnd(tvm_ffi.Shape(list(_noise.RandomConfig(dist=1, stream=3))), seed, tvm_ffi.from_dlpack(y))
    np.testing.assert_array_equal(y.numpy(), noise.normal((4, 5, 6), -5, 3))
    for cfg, match in (((1, 2, 0, 0), "dist"), ((1, 0, -1, 0), "stream"),
                       ((2, 0, 0, 0), "calling convention"), ((1, 0, 0), "calling convention")):
        with pytest.raises(Exception, match=match):
            rnd(tvm_ffi.Shape(list(cfg)), seed, tvm_ffi.from_dlpack(y))
    with pytest.raises(Exception, match="float32"):
        rnd(tvm_ffi.Shape(list(_noise.RandomConfig())), seed,
            tvm_ffi.from_dlpack(torch.empty(3, dtype=torch.float64)))
    with pytest.raises(Exception, match="one element"):
        rnd(tvm_ffi.Shape(list(_noise.RandomConfig())), tvm_ffi.from_dlpack(torch.tensor([1, 2])),
            tvm_ffi.from_dlpack(y))
    with pytest.raises(Exception, match="compact"):
        rnd(tvm_ffi.Shape(list(_noise.RandomConfig())), seed, tvm_ffi.from_dlpack(y[:, ::2]))
    fresh = tvm_ffi.get_global_func(_noise.FRESH_SEED_FUNC)
    s = torch.zeros(1, dtype=torch.int64)
    seen = set()
    for _ in range(20000):
        fresh(tvm_ffi.from_dlpack(s))
        seen.add(int(s[0]))
    assert len(seen) == 20000
    with pytest.raises(Exception, match="int64"):
        fresh(tvm_ffi.from_dlpack(torch.zeros(1)))


class DrawsSeeded(torch.nn.Module):
    """What a decoder does with its draws: uniform phases with column 0 zeroed, noise
    scaled by the input, a second noise."""

    def forward(self, x, seed):
        u = ko.random_uniform(seed, [x.shape[0], 9], 0)
        u[:, 0] = 0
        z = ko.random_normal(seed, [x.shape[0], x.shape[1], 9], 1)
        return x.unsqueeze(-1) * 0.003 * z + u[:, None, :], ko.random_normal(seed, list(x.shape), 2)


_RUN_NOISE = """
import sys
import numpy as np
import tvm
from tvm import relax
lib = tvm.runtime.load_module(sys.argv[1])
vm = relax.VirtualMachine(lib, tvm.cpu())
x = tvm.runtime.tensor(np.load(sys.argv[2])["x"])
out = {}
for s in (7, 8):
    got = vm["forward_seeded"](x, tvm.runtime.tensor(np.array([s], np.int64)))
    out[f"a{s}"], out[f"b{s}"] = got[0].numpy(), got[1].numpy()
for k in range(2):
    got = vm["forward"](x)
    out[f"fa{k}"], out[f"fb{k}"] = got[0].numpy(), got[1].numpy()
np.savez(sys.argv[3], **out)
print("ok")
"""


def test_compiled_noise_is_eager_noise(tmp_path):
    """torch.export -> kokoro_lstm.tvm -> export_library, run in a process where
    kokoro_lstm cannot be imported: a seed gives bitwise PyTorch's numbers, another
    seed others; the fresh-seed function differs from call to call."""
    import os
    import subprocess
    import sys
    import textwrap

    tvm = require("tvm")
    from tvm import relax

    import kokoro_lstm.tvm as kt
    from kokoro_lstm.tvm import _noise

    x = torch.rand(1, 2000, generator=torch.Generator().manual_seed(3))
    ep = torch.export.export(DrawsSeeded(), (x, torch.tensor([7])), strict=False)
    mod = kt.from_exported_program(ep)
    assert [(c.dist, c.stream) for c in _noise.random_calls(mod)] == [(0, 0), (1, 1), (1, 2)]
    mod = tvm.IRModule({tvm.ir.GlobalVar("forward_seeded") if g.name_hint == "main" else g:
                        f.with_attr("global_symbol", "forward_seeded") for g, f in mod.functions.items()},
                       attrs=mod.attrs)
    mod = kt.with_fresh_seed(mod, seeded="forward_seeded", name="forward")
    with pytest.raises(ValueError, match="already"):
        kt.with_fresh_seed(mod, seeded="forward_seeded", name="forward")
    with pytest.raises(ValueError, match="no function"):
        kt.with_fresh_seed(mod, seeded="nope", name="other")
    bb = relax.BlockBuilder()
    v = relax.Var("v", relax.TensorType((2,), "float32"))
    with bb.function("f", [v]):
        bb.emit_func_output(v)
    with pytest.raises(ValueError, match="must be the seed"):
        kt.with_fresh_seed(bb.get(), seeded="f", name="g")
    ex = tvm.compile(mod, target="llvm")
    kt.export_library(ex, tmp_path / "noise.so")
    np.savez(tmp_path / "x.npz", x=x.numpy())
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    block = ("import importlib.abc, sys\n"
             "class _Block(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path, target=None):\n"
             "        if name.split('.')[0] == 'kokoro_lstm':\n"
             "            raise ImportError('kokoro_lstm is blocked in this process')\n"
             "sys.meta_path.insert(0, _Block())\n")
    r = subprocess.run([sys.executable, "-c", block + textwrap.dedent(_RUN_NOISE),
                        str(tmp_path / "noise.so"), str(tmp_path / "x.npz"), str(tmp_path / "out.npz")],
                       cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    out = np.load(tmp_path / "out.npz")
    for s in (7, 8):
        want = DrawsSeeded()(x, torch.tensor([s]))
        np.testing.assert_array_equal(out[f"a{s}"], want[0].numpy())
        np.testing.assert_array_equal(out[f"b{s}"], want[1].numpy())
    assert not np.array_equal(out["b7"], out["b8"])
    assert not np.array_equal(out["fb0"], out["fb1"]) and not np.array_equal(out["fa0"], out["fa1"])
    assert abs(out["fb0"].std() - 1) < 0.1  # a real normal draw, not zeros


def test_counter_noise_kokoro_decoder():
    """Kokoro's whole Decoder (random init, Kokoro-82M's istftnet settings, 8 frames):
    a seed reproduces the audio, and it is upstream's audio given the same draws."""
    istftnet = require("kokoro.istftnet")
    import warnings

    from kokoro_lstm.cli._decoder import ISTFTNET as cfg
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight_norm's deprecation
        dec = istftnet.Decoder(dim_in=512, style_dim=128, dim_out=80, **cfg).eval()
    F = 8
    g = torch.Generator().manual_seed(2)
    asr, s = torch.randn(1, 512, F, generator=g), torch.randn(1, 128, generator=g)
    F0, N = torch.rand(1, 2 * F, generator=g) * 200, torch.randn(1, 2 * F, generator=g)
    F0[:, 4:7] = 0  # unvoiced frames
    dim = dec.generator.m_source.l_sin_gen.dim
    with torch.no_grad():
        with noise.counter_noise(dec, 5):
            a = dec(asr, F0, N, s)
            b = dec(asr, F0, N, s)
        orig = torch.rand, torch.randn_like
        torch.rand = lambda *shape, **kw: torch.from_numpy(noise.uniform(shape, 5, 0))
        torch.randn_like = lambda t, **kw: torch.from_numpy(
            noise.normal(tuple(t.shape), 5, 1 if t.shape[-1] == dim else 2))
        try:
            want = dec(asr, F0, N, s)
        finally:
            torch.rand, torch.randn_like = orig
    assert a.shape == (1, 1, 600 * F) and torch.isfinite(a).all()
    assert torch.equal(a, b) and torch.equal(a, want)


def test_compiled_noise_dynamic_shape():
    """A draw whose shape is a symbolic dimension of an input: TVM passes the run-time
    shape to random_v1, and the numbers are PyTorch's for every length."""
    tvm = require("tvm")
    from tvm import relax

    import kokoro_lstm.tvm as kt

    class Scaled(torch.nn.Module):
        def forward(self, x, seed):
            return x * ko.random_normal(seed, [x.shape[0], x.shape[1]], 1)

    x = torch.rand(1, 300)
    ep = torch.export.export(Scaled(), (x, torch.tensor([7])), strict=False,
                             dynamic_shapes=({1: torch.export.Dim("L", min=2, max=10 ** 5)}, None))
    vm = relax.VirtualMachine(tvm.compile(kt.from_exported_program(ep), target="llvm"), tvm.cpu())
    for n in (300, 17, 5001):
        xx = torch.rand(1, n)
        got = vm["main"](tvm.runtime.tensor(xx.numpy()), tvm.runtime.tensor(np.array([7])))[0]
        np.testing.assert_array_equal(got.numpy(), Scaled()(xx, torch.tensor([7])).numpy())
