"""Layer 0's gate input given or augmented by the caller (the entry's ``gate_bias`` and
``x_gates``): the exact algebra behind the CLI's cuts.

* gate_bias [D, B, 4H]: gates = W_x x_t + gate_bias[d, b] + b_ih + b_hh, i.e. an LSTM
  over cat(x, s) with s constant over time equals one over x alone with W_s s folded
  into a per-call bias;
* x_gates: x is layer 0's input projection W_ih x_t, [T, B, D*4H], so a caller can
  compute it elsewhere (at token rate, then spread to frames).

Checked against the float64 reference and against the uncut engine path, for odd
sizes (H not a multiple of 16), both directions, lengths, batch-major layouts, both
dtypes, several layers, and NaN propagation; and every bad argument is an error that
names it.
"""
import numpy as np
import pytest

from kokoro_lstm import _core, reference


def _weights(rng, I, H, L, D, dtype=np.float32):
    w = []
    for layer in range(L):
        for _ in range(D):
            i = I if layer == 0 else D * H
            w += [rng.uniform(-0.3, 0.3, (4 * H, i)), rng.uniform(-0.3, 0.3, (4 * H, H)),
                  rng.uniform(-0.3, 0.3, 4 * H), rng.uniform(-0.3, 0.3, 4 * H)]
    return [a.astype(dtype) for a in w]


def _ref(x, w, L, D, lengths):
    """float64 reference of an L-layer, D-direction LSTM, seq-first x [T, B, I]."""
    inp = x.astype(np.float64)
    for layer in range(L):
        outs = []
        for d in range(D):
            ww = w[(layer * D + d) * 4:(layer * D + d + 1) * 4]
            y, _, _ = reference.lstm_forward(inp, *ww, reverse=d == 1, lengths=lengths)
            outs.append(y)
        inp = np.concatenate(outs, axis=-1)
    return inp


def _run(x, w, L, D, *, lengths=None, gate_bias=None, x_gates=False, batch_first=False,
         dtype="float32", nth=1):
    io = np.float64 if dtype == "float64" else np.float32
    T, B = (x.shape[1], x.shape[0]) if batch_first else x.shape[:2]
    H = w[1].shape[1]
    y = np.empty((B, T, D * H) if batch_first else (T, B, D * H), io)
    hn = np.empty((L * D, B, H), io)
    cn = np.empty((L * D, B, H), io)
    _core.forward(x, lengths, None, None, w, y, hn, cn, num_layers=L, bidirectional=D == 2,
                  has_bias=True, batch_first=batch_first, dtype=dtype, num_threads=nth,
                  gate_bias=gate_bias, x_gates=x_gates)
    return y, hn, cn


def _split(rng, T, B, IX, IS, H, L, D, dtype=np.float32):
    """x [T, B, IX], style s [B, IS], the weights over cat(x, s), W_s per direction and
    the folded gate bias W_s s [D, B, 4H] (computed in float64)."""
    x = rng.standard_normal((T, B, IX)).astype(dtype)
    s = rng.standard_normal((B, IS)).astype(dtype)
    w = _weights(rng, IX + IS, H, L, D, dtype)
    full_x = np.concatenate([x, np.broadcast_to(s, (T, B, IS))], axis=-1)
    cut_w = list(w)
    gb = np.empty((D, B, 4 * H), dtype)
    for d in range(D):
        w_ih = w[d * 4]
        cut_w[d * 4] = np.ascontiguousarray(w_ih[:, :IX])
        gb[d] = (s.astype(np.float64) @ w_ih[:, IX:].astype(np.float64).T).astype(dtype)
    return x, s, full_x, w, cut_w, gb


CASES = [  # T, B, IX, IS, H, L, D
    (9, 1, 13, 5, 7, 1, 2),
    (6, 3, 10, 4, 17, 1, 1),
    (5, 2, 12, 3, 33, 2, 2),
    (1, 1, 4, 2, 16, 1, 2),
]


@pytest.mark.parametrize("T,B,IX,IS,H,L,D", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gate_bias_is_style_folded(T, B, IX, IS, H, L, D, dtype):
    rng = np.random.default_rng(T * 100 + H)
    io = np.float64 if dtype == "float64" else np.float32
    x, s, full_x, w, cut_w, gb = _split(rng, T, B, IX, IS, H, L, D, io)
    lengths = rng.integers(1, T + 1, B).astype(np.int64) if B > 1 else None
    want = _ref(full_x, w, L, D, lengths)
    uncut = _run(np.ascontiguousarray(full_x), w, L, D, lengths=lengths, dtype=dtype)
    cut = _run(x, cut_w, L, D, lengths=lengths, gate_bias=gb, dtype=dtype)
    tol = 1e-12 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(cut[0], want, atol=tol, rtol=0)
    for a, b in zip(cut, uncut):
        np.testing.assert_allclose(a, b, atol=tol, rtol=0)


@pytest.mark.parametrize("T,B,IX,IS,H,L,D", CASES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_x_gates_is_the_projection(T, B, IX, IS, H, L, D, with_bias):
    rng = np.random.default_rng(T * 7 + H + with_bias)
    x, s, full_x, w, cut_w, gb = _split(rng, T, B, IX, IS, H, L, D)
    lengths = rng.integers(1, T + 1, B).astype(np.int64) if B > 1 else None
    want = _ref(full_x, w, L, D, lengths)
    src, ww = (x, cut_w) if with_bias else (full_x, w)
    # the caller's projection W_ih x_t, direction-major rows of D*4H
    gates = np.concatenate([src.astype(np.float64) @ ww[d * 4].astype(np.float64).T
                            for d in range(D)], axis=-1).astype(np.float32)
    got = _run(gates, w, L, D, lengths=lengths, x_gates=True,
               gate_bias=gb if with_bias else None)
    np.testing.assert_allclose(got[0], want, atol=2e-5, rtol=0)
    uncut = _run(np.ascontiguousarray(full_x), w, L, D, lengths=lengths)
    for a, b in zip(got, uncut):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=0)


@pytest.mark.parametrize("nth", [1, 2, 3])
def test_batch_first_and_threads_bitwise(nth):
    """Any thread count gives the same bits; batch-major x (read in place) gives
    seq-major's within float32 rounding (the caller's W_ih goes to BLAS sgemm, whose
    per-element order depends on a row's place in the call on some CPUs: OpenBLAS's
    Haswell kernels), and its bits when the gates are given (no GEMM)."""
    rng = np.random.default_rng(5)
    T, B, IX, IS, H, D = 11, 4, 9, 6, 20, 2
    x, s, full_x, w, cut_w, gb = _split(rng, T, B, IX, IS, H, 1, D)
    lengths = np.array([11, 3, 7, 1], np.int64)
    base = _run(x, cut_w, 1, D, lengths=lengths, gate_bias=gb)
    np.testing.assert_array_equal(_run(x, cut_w, 1, D, lengths=lengths, gate_bias=gb, nth=nth)[0],
                                  base[0])
    xb = np.ascontiguousarray(x.transpose(1, 0, 2))
    got = _run(xb, cut_w, 1, D, lengths=lengths, gate_bias=gb, batch_first=True, nth=nth)
    np.testing.assert_array_equal(
        got[0], _run(xb, cut_w, 1, D, lengths=lengths, gate_bias=gb, batch_first=True)[0])
    np.testing.assert_allclose(got[0].transpose(1, 0, 2), base[0], atol=1e-6, rtol=0)
    gates = np.concatenate([x @ cut_w[d * 4].T for d in range(D)], axis=-1)
    g1 = _run(np.ascontiguousarray(gates.transpose(1, 0, 2)), w, 1, D, lengths=lengths,
              x_gates=True, gate_bias=gb, batch_first=True, nth=nth)
    g2 = _run(gates, w, 1, D, lengths=lengths, x_gates=True, gate_bias=gb, nth=1)
    np.testing.assert_array_equal(g1[0].transpose(1, 0, 2), g2[0])


def test_x_gates_in_place_and_strided():
    """H a multiple of 16 and no gate bias: the gates are read where they lie, also
    from a strided view (rows wider than D*4H)."""
    rng = np.random.default_rng(9)
    T, B, I, H, D = 7, 2, 5, 16, 2
    w = _weights(rng, I, H, 1, D)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    gates = np.concatenate([x @ w[d * 4].T for d in range(D)], axis=-1)
    wide = np.zeros((T, B, D * 4 * H + 8), np.float32)
    wide[..., :D * 4 * H] = gates
    want = _run(x, w, 1, D)
    for g in (gates, wide[..., :D * 4 * H]):
        got = _run(g, w, 1, D, x_gates=True)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, atol=2e-6, rtol=0)


def test_nan_propagates():
    rng = np.random.default_rng(3)
    T, B, IX, IS, H, D = 6, 2, 5, 3, 9, 2
    x, s, full_x, w, cut_w, gb = _split(rng, T, B, IX, IS, H, 1, D)
    gb[0, 1, 3] = np.nan  # forward direction, batch 1 only
    y, hn, cn = _run(x, cut_w, 1, D, gate_bias=gb)
    # step 0: unit 3 only (h0 = 0); from step 1 on W_hh h spreads it to every unit
    assert np.isnan(y[0, 1, 3]) and np.isnan(y[1:, 1, :H]).all()
    assert np.isfinite(y[:, 0, :]).all()
    assert np.isfinite(y[:, 1, H:]).all()
    gates = np.concatenate([x @ cut_w[d * 4].T for d in range(D)], axis=-1)
    gates[2, 0, 4 * H + 1] = np.nan  # reverse direction, batch 0, step 2
    y, hn, cn = _run(gates, w, 1, D, x_gates=True, gate_bias=None)
    assert np.isnan(y[2, 0, H + 1]) and np.isnan(y[:2, 0, H:]).all()
    assert np.isfinite(y[3:, 0, H:]).all()
    assert np.isfinite(y[:, 0, :H]).all() and np.isfinite(y[:, 1]).all()


def _bad(match, x, w, **kw):
    T, B = x.shape[:2]
    H = w[1].shape[1]
    y = np.empty((T, B, 2 * H), np.float32)
    hn = np.empty((2, B, H), np.float32)
    with pytest.raises(ValueError, match=match):
        _core.forward(x, None, None, None, w, y, hn, np.empty_like(hn), num_layers=1,
                      bidirectional=True, has_bias=True, num_threads=1, **kw)


def test_bad_arguments():
    rng = np.random.default_rng(1)
    T, B, I, H = 4, 2, 6, 5
    w = _weights(rng, I, H, 1, 2)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    gb = np.zeros((2, B, 4 * H), np.float32)
    _bad(r"gate_bias must have shape \(2, 2, 20\), got \(1, 2, 20\)", x, w, gate_bias=gb[:1])
    _bad(r"gate_bias must be 3-D, got shape \(2, 20\)", x, w, gate_bias=gb[0])
    _bad("gate_bias must have dtype float32, got float64", x, w,
         gate_bias=gb.astype(np.float64))
    _bad("gate_bias must be contiguous", x, w,
         gate_bias=np.zeros((2, B, 8 * H), np.float32)[..., ::2])
    with pytest.raises(TypeError, match="gate_bias must be a numpy.ndarray"):
        _core.forward(x, None, None, None, w, np.empty((T, B, 2 * H), np.float32),
                      None, None, num_layers=1, bidirectional=True, has_bias=True,
                      gate_bias=[0.0])
    # x_gates: x's features must be D*4H
    _bad(r"x \(layer 0's gates, x_gates\) must have 40 features \(num_directions 2 x 4 x "
         r"hidden_size 5\), got 6", x, w, x_gates=True)
    g = np.zeros((T, B, 40), np.float32)
    _bad(r"x \(layer 0's gates, x_gates\) must have dtype float32, got float64", g.astype(np.float64),
         w, x_gates=True)
    _bad(r"x \(layer 0's gates, x_gates\): this layout cannot be read in place", g[..., ::-1], w,
         x_gates=True)
    # without x_gates, a gates-shaped x is an input of the wrong size
    _bad(r"weights\[0\] \(w_ih of layer 0\) must have shape \(-1, 40\)", g, w)
    # with x_gates, layer 0's w_ih is still checked (its rows give H)
    w2 = list(w)
    w2[0] = np.zeros((19, I), np.float32)
    _bad("w_ih of layer 0 must have 4\\*hidden_size rows, got 19", g, w2, x_gates=True)
    # the right call works
    y = np.empty((T, B, 2 * H), np.float32)
    hn = np.empty((2, B, H), np.float32)
    _core.forward(g, None, None, None, w, y, hn, np.empty_like(hn), num_layers=1,
                  bidirectional=True, has_bias=True, num_threads=1, x_gates=True, gate_bias=gb)


ISAS = ("scalar", "avx2", "avx512", "avx512-bf16", "avx512-amx", "neon", "neon-bf16")


@pytest.fixture(params=ISAS)
def isa(request):
    orig = _core.get_isa()
    try:
        _core.set_isa(request.param)
    except ValueError:
        pytest.skip(f"CPU lacks {request.param}")
    try:
        _core.cache_clear()  # engines are built under the ISA active when packed
        yield request.param
    finally:
        _core.set_isa(orig)
        _core.cache_clear()


@pytest.mark.parametrize("dtype,tol", [("float32", 2e-5), ("bfloat16", 3e-2), ("float16", 3e-3)])
def test_every_isa_and_weight_type(isa, dtype, tol):
    """Each ISA's path (the bfloat16 input GEMM with AVX512_BF16 included) adds the
    gate bias and takes given gates the same way."""
    rng = np.random.default_rng(11)
    T, B, IX, IS, H, D = 13, 2, 21, 6, 19, 2
    x, s, full_x, w, cut_w, gb = _split(rng, T, B, IX, IS, H, 1, D)
    lengths = np.array([13, 8], np.int64)
    want = _ref(full_x, w, 1, D, lengths)
    cut = _run(x, cut_w, 1, D, lengths=lengths, gate_bias=gb, dtype=dtype)
    assert np.abs(cut[0] - want).max() <= tol
    gates = np.concatenate([x.astype(np.float64) @ cut_w[d * 4].astype(np.float64).T
                            for d in range(D)], axis=-1).astype(np.float32)
    given = _run(gates, w, 1, D, lengths=lengths, gate_bias=gb, x_gates=True, dtype=dtype)
    assert np.abs(given[0] - want).max() <= tol


# ---- the fronts: kokoro::lstm_forward_gated (torch) and the tvm-ffi function --------

def _torch_case(seed=0, T=9, B=2, IX=12, IS=4, H=8):
    from conftest import require

    torch = require("torch")
    import kokoro_lstm.torch_ops as ko

    torch.manual_seed(seed)
    lstm = torch.nn.LSTM(IX + IS, H, bidirectional=True).eval().requires_grad_(False)
    x = torch.randn(T, B, IX)
    s = torch.randn(B, IS)
    lengths = torch.tensor([T, max(1, T - 4)][:B])
    w = []
    for sfx in ("", "_reverse"):
        w += [getattr(lstm, "weight_ih_l0" + sfx)[:, :IX].contiguous(),
              getattr(lstm, "weight_hh_l0" + sfx), getattr(lstm, "bias_ih_l0" + sfx),
              getattr(lstm, "bias_hh_l0" + sfx)]
    gb = torch.stack([s @ getattr(lstm, "weight_ih_l0" + sfx)[:, IX:].T
                      for sfx in ("", "_reverse")])
    full = torch.cat([x, s.expand(T, B, IS)], -1)
    packed = torch.nn.utils.rnn.pack_padded_sequence(full, lengths, enforce_sorted=False)
    ref, _ = lstm(packed)
    ref, _ = torch.nn.utils.rnn.pad_packed_sequence(ref, total_length=T)
    return torch, ko, lstm, x, s, lengths, w, gb, ref


def test_torch_gated_op_matches_nn_lstm():
    torch, ko, lstm, x, s, lengths, w, gb, ref = _torch_case()
    out, h_n, c_n = ko.lstm_forward_gated(x, lengths, gb, False, *w)
    assert (out - ref).abs().max() <= 2e-6
    # given gates: W_x x + (the gate bias folded in by the caller)
    gates = torch.cat([x @ w[0].T, x @ w[4].T], -1)
    out2, _, _ = ko.lstm_forward_gated(gates, lengths, gb, True, *w)
    assert (out2 - ref).abs().max() <= 2e-6
    # unidirectional: reverse weights omitted
    out3, h3, _ = ko.lstm_forward_gated(x, None, gb[:1], False, *w[:4])
    assert out3.shape == (x.shape[0], x.shape[1], w[1].shape[1]) and h3.shape[0] == 1
    with pytest.raises(ValueError, match=r"lstm_forward_gated: gate_bias must have shape"):
        ko.lstm_forward_gated(x, lengths, gb[:1], False, *w)
    with pytest.raises(ValueError, match=r"must have 64 features"):
        ko.lstm_forward_gated(x, lengths, gb, True, *w)


def test_torch_gated_op_exports_and_lowers_natively():
    """torch.export keeps one node; TVM's native method lowers it (others refuse it)."""
    torch, ko, lstm, x, s, lengths, w, gb, ref = _torch_case(B=1, T=7)
    from conftest import require

    tvm = require("tvm")
    from tvm import relax

    import kokoro_lstm.tvm as kt

    ws = [lstm.weight_ih_l0[:, 12:], lstm.weight_ih_l0_reverse[:, 12:]]

    class M(torch.nn.Module):
        def forward(self, x, s, lengths):
            g = torch.stack([s @ ww.T for ww in ws])
            return ko.lstm_forward_gated(x, lengths, g, False, *w)[0]

    ep = torch.export.export(M(), (x, s, lengths))
    ops = [str(n.target) for n in ep.run_decompositions().graph.nodes if "lstm" in str(n.target)]
    assert ops == ["kokoro.lstm_forward_gated.default"]
    mod = kt.from_exported_program(ep, lstm_method="native")
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(a.numpy()) for a in (x, s, lengths)])
    got = got[0] if not hasattr(got, "numpy") else got
    assert np.abs(got.numpy() - ref.numpy()).max() <= 2e-6
    with pytest.raises(Exception, match="lowered by lstm_method='native' only"):
        kt.from_exported_program(ep, lstm_method="tir")


def test_tvm_function_gate_config():
    """The tvm-ffi function's two optional cfg values: the 14-value cfg with a gate bias
    and x_gates works; bad values and argument counts are errors."""
    from conftest import require

    tvm = require("tvm")
    import tvm_ffi

    import kokoro_lstm.tvm as kt

    f = tvm_ffi.get_global_func(kt.NATIVE_FUNC_NAME)
    rng = np.random.default_rng(0)
    T, B, I, H = 3, 2, 4, 5
    w = _weights(rng, I, H, 1, 1)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    gb = rng.standard_normal((1, B, 4 * H)).astype(np.float32)
    t = tvm.runtime.tensor
    outs = lambda: [t(np.zeros((T, B, H), np.float32)), t(np.zeros((1, B, H), np.float32)),  # noqa: E731
                    t(np.zeros((1, B, H), np.float32))]
    base = [2, 1, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0]
    o = outs()
    f(tvm_ffi.Shape(base + [1, 0]), t(x), t(gb), *map(t, w), *o)
    want, _, _ = _run(x, w, 1, 1, gate_bias=gb)
    np.testing.assert_array_equal(o[0].numpy(), want)
    gates = (x @ w[0].T).astype(np.float32)
    o = outs()
    f(tvm_ffi.Shape(base + [1, 1]), t(gates), t(gb), *map(t, w), *o)
    np.testing.assert_allclose(o[0].numpy(), want, atol=2e-6, rtol=0)
    o = outs()
    f(tvm_ffi.Shape(base + [0, 0]), t(x), *map(t, w), *o)  # the options off: as v2's 12
    with pytest.raises(ValueError, match=r"\(x_gates\) must be in 0..1, got 7"):
        f(tvm_ffi.Shape(base + [0, 7]), t(x), *map(t, w), *outs())
    with pytest.raises(TypeError, match="expected 10 arguments for this config, got 9"):
        f(tvm_ffi.Shape(base + [1, 0]), t(x), *map(t, w), *outs())  # the gate bias missing
    with pytest.raises(RuntimeError, match="with 12 or 14"):
        f(tvm_ffi.Shape(base + [1]), t(x), *map(t, w), *outs())
