"""Fuzzing the dense externs' configs and tensors (hypothesis, derandomized): random
shapes and config values, huge, negative and zero ones included, and outputs that alias
an input. Every call either raises a clean ValueError / TypeError naming the extern, or
writes exactly the float64 reference's result (within float32 rounding). A Python-side
rule (`valid`) says which of the two must happen, so a config the engine wrongly
accepts or wrongly refuses fails too.

`make asan` runs this file against the extension built with AddressSanitizer + UBSan
(build-c/asan-ext): there an out-of-bounds access or an overflow aborts the run.
Tensors are NumPy arrays passed through DLPack (tvm_ffi.from_dlpack)."""
import math
import os

import numpy as np
import pytest

from conftest import require

tvm_ffi = require("tvm_ffi")
hypothesis = require("hypothesis")

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import kokoro_lstm  # noqa: E402,F401  (registers the engine's functions with tvm_ffi)
from kokoro_lstm.tvm import dense  # noqa: E402

# Examples per extern: about a minute for the whole file under ASan on 2 cores.
EXAMPLES = int(os.environ.get("KOKORO_LSTM_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck), print_blob=False)

MAX_LEN = 1 << 20        # check.h's KL_CONV_MAX_LEN
MAX_PHASES = 65536       # check.h's KL_CONV_MAX_PHASES
EDGE = [-2**63, -2**62, -2**31, -1, 0, 1, 2**20, 2**20 + 1, 2**31 - 1, 2**31, 2**62, 2**63 - 1]
# a config length: mostly small, sometimes at an edge
LEN = st.one_of(st.integers(0, 4), st.integers(0, 4), st.integers(1, 2), st.sampled_from(EDGE))
THREADS = st.sampled_from([0, 1, 2, 0, -1, 2**31])


def _fn(name):
    return tvm_ffi.get_global_func(name)


def _t(a):
    return tvm_ffi.from_dlpack(a)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _call(name, cfg, args, valid, out, ref):
    """Calls the extern; a valid call must match ref, an invalid one must raise."""
    try:
        _fn(name)(tvm_ffi.Shape([int(v) for v in cfg]), *[_t(a) for a in args])
    except (ValueError, TypeError) as e:
        assert not valid, f"refused a valid call {cfg}: {e}"
        assert str(e).startswith(name + ": "), str(e)
        return
    assert valid, f"accepted an invalid call {cfg}"
    want = ref()
    scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=0, atol=1e-4 * scale)


def _output(rng, shape, alias_of, alias):
    """A NaN-filled output, or (alias) a view of alias_of's memory when it is big enough."""
    n = math.prod(shape)
    if alias and 0 < n <= alias_of.size:
        return alias_of.reshape(-1)[:n].reshape(shape), True
    return np.full(shape, np.nan, np.float32), False


def _ok_threads(n):
    return 0 <= n <= 2**31 - 1


def _start(data, *bounds):
    """A test's first draws: the draw function, a seeded generator and sizes in
    0..bound for each bound."""
    d = data.draw
    rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
    return d, rng, [d(st.integers(0, n)) for n in bounds]


# ---- conv1d ------------------------------------------------------------------------------
@FUZZ
@given(st.data())
def test_fuzz_conv1d(data):
    d, rng, (batch, cin, cout, k, win) = _start(data, 2, 3, 3, 5, 7)
    stride, dil, pl, pr = d(LEN), d(LEN), d(LEN), d(LEN)
    panels, nth = d(st.sampled_from([0, 1, 0, 1, 2])), d(THREADS)
    has_bias, alias = d(st.booleans()), d(st.sampled_from([False, True]))
    span = win + pl + pr - dil * (k - 1) - 1
    wout_true = span // stride + 1 if stride >= 1 and span >= 0 else 0
    wout = min(max(wout_true + d(st.sampled_from([0, 0, 0, 1, -1])), 0), 12)
    x, w, b = _rand(rng, batch, cin, win), _rand(rng, cout, cin, k), _rand(rng, cout)
    W = w
    if panels == 1:
        W = (dense.pack_conv_panels(w) if min(cin, cout, k) >= 1
             else _rand(rng, 2 + -(-cout // 32), 1, 32))   # never the packed shape
    y, aliased = _output(rng, (batch, cout, wout), x, alias)
    valid = (1 <= stride <= MAX_LEN and 1 <= dil <= MAX_LEN and 0 <= pl <= MAX_LEN
             and 0 <= pr <= MAX_LEN and panels in (0, 1) and _ok_threads(nth) and cin >= 1
             and cout >= 1 and k >= 1 and wout == wout_true and not aliased
             and not (panels and stride != 1 and dil != 1) and not (panels and dil > MAX_PHASES))

    def ref():
        out = np.zeros((batch, cout, wout))
        for t in range(wout):
            for j in range(k):
                p = t * stride + j * dil - pl
                if 0 <= p < win:
                    out[:, :, t] += x[:, :, p].astype(np.float64) @ w[:, :, j].T.astype(np.float64)
        return out + (b[None, :, None] if has_bias else 0.0)

    cfg = dense.Conv1dConfig(stride=stride, pad_l=pl, pad_r=pr, dilation=dil,
                              has_bias=int(has_bias), num_threads=nth, w_panels=panels)
    _call(dense.CONV1D_FUNC, cfg, [x, W] + ([b] if has_bias else []) + [y], valid, y, ref)


# ---- transposed convs --------------------------------------------------------------------
def _conv_t_ref(x, w, b, stride, dil, pad, wout, depthwise):
    batch, cin, win = x.shape
    k = w.shape[2]
    cout = w.shape[0] if depthwise else w.shape[1]
    out = np.zeros((batch, cout, wout))
    for i in range(win):
        for j in range(k):
            t = i * stride + j * dil - pad
            if 0 <= t < wout:
                if depthwise:
                    out[:, :, t] += x[:, :, i].astype(np.float64) * w[:, 0, j].astype(np.float64)
                else:
                    out[:, :, t] += x[:, :, i].astype(np.float64) @ w[:, :, j].astype(np.float64)
    return out + (b[None, :, None] if b is not None else 0.0)


@FUZZ
@given(st.data())
def test_fuzz_conv1d_transpose(data):
    d, rng, (batch, cin, cout, k, win, wout) = _start(data, 2, 3, 3, 3, 5, 10)
    stride, dil, pad = d(LEN), d(LEN), d(LEN)
    ksize = d(st.one_of(st.just(k), st.just(k), LEN))
    panels, nth = d(st.sampled_from([0, 1, 0, 1, 3])), d(THREADS)
    has_bias, alias = d(st.booleans()), d(st.sampled_from([False, True]))
    x, w, b = _rand(rng, batch, cin, win), _rand(rng, cin, cout, k), _rand(rng, cout)
    cfg_ok = (1 <= stride <= MAX_PHASES and 1 <= dil <= MAX_LEN and 0 <= pad <= MAX_LEN
              and 1 <= ksize <= MAX_LEN and stride % dil == 0 and panels in (0, 1))
    W = w
    if panels == 1:
        W = (dense.pack_conv_transpose_panels(w, stride, dil)
             if cfg_ok and min(cin, cout, k) >= 1
             else _rand(rng, 2 + -(-cout // 32), 1, 32))   # never the packed shape
    y, aliased = _output(rng, (batch, cout, wout), x, alias)
    valid = (cfg_ok and _ok_threads(nth) and cin >= 1 and cout >= 1 and ksize == k
             and not aliased)
    cfg = dense.Conv1dTransposeConfig(stride=stride, pad_l=pad, dilation=dil, ksize=ksize,
                                       has_bias=int(has_bias), num_threads=nth, w_panels=panels)
    _call(dense.CONV1D_TRANSPOSE_FUNC, cfg, [x, W] + ([b] if has_bias else []) + [y], valid, y,
          lambda: _conv_t_ref(x, w, b if has_bias else None, stride, dil, pad, wout, False))


@FUZZ
@given(st.data())
def test_fuzz_conv1d_transpose_dw(data):
    d, rng, (batch, ch, k, win, wout) = _start(data, 2, 3, 3, 5, 10)
    stride, dil, pad, nth = d(LEN), d(LEN), d(LEN), d(THREADS)
    has_bias, alias = d(st.booleans()), d(st.sampled_from([False, True]))
    x, w, b = _rand(rng, batch, ch, win), _rand(rng, ch, 1, k), _rand(rng, ch)
    y, aliased = _output(rng, (batch, ch, wout), x, alias)
    valid = (1 <= stride <= MAX_LEN and 1 <= dil <= MAX_LEN and 0 <= pad <= MAX_LEN
             and _ok_threads(nth) and ch >= 1 and k >= 1 and not aliased)
    cfg = dense.Conv1dTransposeDwConfig(stride=stride, pad_l=pad, dilation=dil,
                                         has_bias=int(has_bias), num_threads=nth)
    _call(dense.CONV1D_TRANSPOSE_DW_FUNC, cfg, [x, w] + ([b] if has_bias else []) + [y], valid, y,
          lambda: _conv_t_ref(x, w, b if has_bias else None, stride, dil, pad, wout, True))


# ---- matmul ------------------------------------------------------------------------------
def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


@FUZZ
@given(st.data())
def test_fuzz_matmul(data):
    d, rng, (batch, M, K, N) = _start(data, 2, 5, 5, 40)
    trans_b, act, panels = d(st.sampled_from([0, 1, 2])), d(st.sampled_from([0, 1, 2])), d(st.sampled_from([0, 1, 5]))
    nth, has_bias = d(THREADS), d(st.booleans())
    alias = d(st.sampled_from([None, None, None, "A", "B"]))
    A = _rand(rng, batch, M, K)
    Bm = _rand(rng, K, N)                      # op(B), shared by the batch
    B = np.ascontiguousarray(Bm.T) if trans_b == 1 else Bm
    if panels == 1:
        B = dense.pack_panels(Bm.T.copy(), True) if N >= 1 else _rand(rng, 0, K, 32)
    bias = _rand(rng, N)
    C, aliased = _output(rng, (batch, M, N), A if alias == "A" else B, alias is not None)
    valid = (trans_b in (0, 1) and act in (0, 1) and panels in (0, 1) and _ok_threads(nth)
             and not aliased)

    def ref():
        out = A.astype(np.float64) @ Bm.astype(np.float64) + (bias if has_bias else 0.0)
        return _gelu(out) if act == 1 else out

    cfg = dense.MatmulConfig(trans_b=trans_b, has_bias=int(has_bias), num_threads=nth, act=act,
                              b_panels=panels)
    _call(dense.MATMUL_FUNC, cfg, [A, B] + ([bias] if has_bias else []) + [C], valid, C, ref)


# ---- softmax -----------------------------------------------------------------------------
@FUZZ
@given(st.data())
def test_fuzz_softmax(data):
    d, rng, _ = _start(data)
    shape = tuple(d(st.lists(st.integers(0, 4), min_size=1, max_size=3)))
    nth, alias = d(THREADS), d(st.sampled_from([False, False, True]))
    x = _rand(rng, *shape)
    y, aliased = _output(rng, shape, x, alias)
    valid = _ok_threads(nth) and not aliased

    def ref():
        z = x.astype(np.float64)
        if z.size == 0:
            return z
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    _call(dense.SOFTMAX_FUNC, dense.SoftmaxConfig(num_threads=nth), [x, y], valid, y, ref)


# ---- attention ---------------------------------------------------------------------------
@FUZZ
@given(st.data())
def test_fuzz_attention(data):
    d, rng, (B, H, L, S, D) = _start(data, 3, 3, 3, 3, 3)
    layouts = [d(st.sampled_from([0, 1, 0, 1, 2])) for _ in range(4)]
    mask_rank = d(st.sampled_from([None, None, 2, 3, 4, 4, 5, 8]))
    scale_bits = d(st.sampled_from([dense.f32_bits(0.5), dense.f32_bits(0.5), 2**32, -2**31 - 1]))
    nth, alias = d(THREADS), d(st.sampled_from([None, None, None, "q", "v"]))
    q, k, v = _rand(rng, B, H, L, D), _rand(rng, B, H, S, D), _rand(rng, B, H, S, D)
    mask = None
    if mask_rank is not None and mask_rank <= 4:   # [.., L, S], leading dims 1 or [B, H]'s
        lead = [d(st.sampled_from([1, n])) for n in (B, H)][4 - mask_rank:]
        mask = _rand(rng, *lead, L, S)
    elif mask_rank is not None:                      # 5-D to 8-D: refused
        mask = _rand(rng, *([1] * (mask_rank - 2)), L, S)
    src = q if alias == "q" else v
    o, aliased = _output(rng, (B, H, L, D), src, alias is not None)

    def as_layout(a, lay):  # the 4-D array the extern sees for [B, H, rows, D] data
        return a.transpose(0, 2, 1, 3) if lay == 1 else a

    valid = (all(lay in (0, 1) for lay in layouts) and -2**31 <= scale_bits <= 2**32 - 1
             and _ok_threads(nth) and (mask_rank is None or 2 <= mask_rank <= 4) and not aliased)
    args = [as_layout(a, lay) for a, lay in zip((q, k, v), layouts)] + ([mask] if mask is not None else [])
    args.append(as_layout(o, layouts[3]))

    def ref():
        if S == 0:
            return np.zeros((B, H, L, D))
        s = np.einsum("bhld,bhsd->bhls", q.astype(np.float64), k.astype(np.float64)) * 0.5
        if mask is not None:
            s = s + mask.astype(np.float64)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return np.einsum("bhls,bhsd->bhld", e / e.sum(axis=-1, keepdims=True), v.astype(np.float64))

    cfg = dense.AttentionConfig(q_layout=layouts[0], k_layout=layouts[1], v_layout=layouts[2],
                                 o_layout=layouts[3], has_mask=int(mask is not None),
                                 scale_bits=scale_bits, num_threads=nth)
    _call(dense.ATTENTION_FUNC, cfg, args, valid, o, ref)


def test_fuzz_runs_the_build_it_was_asked_for():
    """`make asan` sets KOKORO_LSTM_FUZZ_BUILD to the folder of the ASan extension: the
    fuzzing above must have run that one, not the development build."""
    want = os.environ.get("KOKORO_LSTM_FUZZ_BUILD")
    if not want:
        pytest.skip("not run by make asan")
    assert os.path.realpath(kokoro_lstm.__file__).startswith(os.path.realpath(want))
