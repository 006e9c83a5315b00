"""The engine's one entry (kl_lstm_forward) and its weight cache, seen from every front:
never stale (in-place ops, .data, NumPy views, a write racing with packing), fork-safe,
one cache shared by the NumPy API and the torch ops, errors that name the argument."""
import multiprocessing
import os
import sys

import numpy as np
import pytest

import kokoro_lstm
from kokoro_lstm import _core, reference

from _forking import run_in_fork
from conftest import require

I, H, T, B = 6, 8, 5, 2
TOL = 2e-6


def _weights(seed=0, bidirectional=False):
    rng = np.random.default_rng(seed)
    sd = {}
    for sfx in ("", "_reverse")[: 2 if bidirectional else 1]:
        sd["weight_ih_l0" + sfx] = rng.uniform(-0.5, 0.5, (4 * H, I)).astype(np.float32)
        sd["weight_hh_l0" + sfx] = rng.uniform(-0.5, 0.5, (4 * H, H)).astype(np.float32)
        sd["bias_ih_l0" + sfx] = rng.uniform(-0.5, 0.5, 4 * H).astype(np.float32)
        sd["bias_hh_l0" + sfx] = rng.uniform(-0.5, 0.5, 4 * H).astype(np.float32)
    return sd


def _ref(sd, x):
    y, _, _ = reference.lstm_forward(x.astype(np.float64), sd["weight_ih_l0"].astype(np.float64),
                                     sd["weight_hh_l0"].astype(np.float64),
                                     sd["bias_ih_l0"].astype(np.float64),
                                     sd["bias_hh_l0"].astype(np.float64))
    return y


def _call(sd, x):
    return kokoro_lstm.lstm_forward(x, sd["weight_ih_l0"], sd["weight_hh_l0"], sd["bias_ih_l0"],
                                    sd["bias_hh_l0"], num_threads=2)[0]


def test_numpy_views_and_in_place_writes_are_never_stale():
    sd = _weights(1)
    x = np.random.default_rng(2).standard_normal((T, B, I)).astype(np.float32)
    kokoro_lstm.clear_cache()
    assert np.abs(_call(sd, x) - _ref(sd, x)).max() < TOL
    assert np.abs(_call(sd, x) - _ref(sd, x)).max() < TOL
    info = kokoro_lstm.cache_info()
    assert (info["misses"], info["hits"], info["entries"]) == (1, 1, 1)
    # a write through a view (same memory, same address): every packed weight kind
    for key in ("weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
        view = sd[key].reshape(-1)[::3]
        view[1] += 0.25
        assert np.abs(_call(sd, x) - _ref(sd, x)).max() < TOL, key
    # W_ih is read in place by the input GEMM on every call: not packed, never stale
    sd["weight_ih_l0"][5, 3] -= 0.5
    assert np.abs(_call(sd, x) - _ref(sd, x)).max() < TOL
    info = kokoro_lstm.cache_info()
    assert info["repacks"] == 3 and info["entries"] == 1


def test_write_racing_with_packing_is_detected_by_the_next_call():
    """The hook runs after packing and before caching (where the old Python cache took
    its saved copy): a write there must make the next call repack."""
    sd = _weights(3)
    x = np.random.default_rng(4).standard_normal((T, B, I)).astype(np.float32)
    kokoro_lstm.clear_cache()
    fired = []

    def write():
        if not fired:
            fired.append(1)
            sd["weight_hh_l0"][7, 2] += 1.0  # the weights packed a moment ago are now old

    _core.set_pack_hook(write)
    try:
        _call(sd, x)  # overlapping the write: may see either weights
    finally:
        _core.set_pack_hook(None)
    assert fired
    for _ in range(3):  # once the writes stop, every call is right
        assert np.abs(_call(sd, x) - _ref(sd, x)).max() < TOL
    assert kokoro_lstm.cache_info()["repacks"] == 1


def test_lstm_class_trusts_its_private_weights_and_frees_its_entry():
    """LSTM's weights are private (state_dict() returns copies): its cache entry is
    keyed to the object, skips the staleness check, and goes when the object does."""
    import gc

    sd = _weights(5, bidirectional=True)
    lstm = kokoro_lstm.LSTM.from_state_dict(sd)
    other = kokoro_lstm.LSTM.from_state_dict(sd)  # same values, its own memory and entry
    x = np.random.default_rng(6).standard_normal((T, B, I)).astype(np.float32)
    kokoro_lstm.clear_cache()
    y1, _ = lstm(x)
    y2, _ = lstm(x)
    y3, _ = other(x)
    assert np.array_equal(y1, y2) and np.array_equal(y1, y3)
    info = kokoro_lstm.cache_info()
    assert (info["entries"], info["hits"], info["misses"]) == (2, 1, 2)
    sd["weight_hh_l0"][:] = 0  # the caller's arrays were copied: no effect
    assert np.array_equal(lstm(x)[0], y1)
    del lstm
    gc.collect()
    assert kokoro_lstm.cache_info()["entries"] == 1  # the dead object's entry is freed


def test_entry_errors_name_the_argument():
    sd = _weights(7)
    x = np.zeros((T, B, I), np.float32)
    w = [sd["weight_ih_l0"], sd["weight_hh_l0"], sd["bias_ih_l0"], sd["bias_hh_l0"]]
    y, hn, cn = (np.zeros((T, B, H), np.float32), np.zeros((1, B, H), np.float32),
                 np.zeros((1, B, H), np.float32))
    kw = dict(num_layers=1, bidirectional=False, has_bias=True)
    with pytest.raises(ValueError, match=r"weights\[1\] \(w_hh of layer 0\) must have shape \(32, 8\)"):
        _core.forward(x, None, None, None, [w[0], w[1][:, :5], w[2], w[3]], y, hn, cn, **kw)
    with pytest.raises(ValueError, match=r"y must have shape \(5, 2, 8\), got \(5, 2, 7\)"):
        _core.forward(x, None, None, None, w, y[..., :7], hn, cn, **kw)
    with pytest.raises(ValueError, match=r"lengths\[1\] = 9 is outside 1..5"):
        _core.forward(x, np.array([1, 9]), None, None, w, y, hn, cn, **kw)
    with pytest.raises(ValueError, match="x must have dtype float32, got float64"):
        _core.forward(x.astype(np.float64), None, None, None, w, y, hn, cn, **kw)
    with pytest.raises(ValueError, match="expected 4 weight tensors"):
        _core.forward(x, None, None, None, w[:3], y, hn, cn, **kw)
    with pytest.raises(ValueError, match=r"h0 must be 3-D, got shape \(2, 8\): expected \(1, 2, 8\)"):
        _core.forward(x, None, hn[0], None, w, y, hn, cn, **kw)
    with pytest.raises(ValueError, match=r"must have shape \(-1, 5\), got \(32, 4\): its columns are x's 5 features"):
        _core.forward(x[..., :5], None, None, None, [w[0][:, :4], *w[1:]], y, hn, cn, **kw)
    with pytest.raises(ValueError, match="y must be writable"):
        y.flags.writeable = False
        _core.forward(x, None, None, None, w, y, hn, cn, **kw)


# ---- fork ----------------------------------------------------------------------------
def _child_call(seed):
    sd = _weights(seed)
    x = np.random.default_rng(seed).standard_normal((T, B, I)).astype(np.float32)
    return float(np.abs(_call(sd, x) - _ref(sd, x)).max())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_after_a_threaded_call():
    """The child inherits the pool's worker count but not its threads: the pool is
    reset in the child (pthread_atfork), so a threaded call there works."""
    assert _child_call(8) < TOL  # workers started in the parent
    # the child must neither deadlock nor crash
    ok = run_in_fork(lambda: b"1" if _child_call(9) < TOL and _child_call(10) < TOL else b"0")
    assert ok == b"1"
    assert _child_call(11) < TOL  # and the parent still works


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_multiprocessing_fork_pool():
    assert _child_call(12) < TOL
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        errs = pool.map_async(_child_call, range(20, 26)).get(timeout=120)
    assert max(errs) < TOL


# ---- torch ---------------------------------------------------------------------------
def test_torch_data_and_numpy_writes_are_never_stale():
    torch = require("torch")
    import kokoro_lstm.torch_ops as ko

    torch.manual_seed(0)
    m = torch.nn.LSTM(I, H, bidirectional=True).eval()
    p = torch.nn.LSTM(I, H, bidirectional=True).eval()
    p.load_state_dict(m.state_dict())
    ko.patch_lstm_modules(p)
    x = torch.randn(T, B, I)
    kokoro_lstm.clear_cache()

    def err():
        with torch.no_grad():
            return (p(x)[0] - m(x)[0]).abs().max().item()

    assert err() < 1e-5 and err() < 1e-5
    for mod in (m, p):  # .data bypasses the version counter
        mod.weight_hh_l0.data.mul_(2)
    assert err() < 1e-5
    for mod in (m, p):  # so does a write through a NumPy view
        mod.bias_hh_l0_reverse.detach().numpy()[3] += 0.5
    assert err() < 1e-5
    assert kokoro_lstm.cache_info()["repacks"] == 2


def test_work_buffers_are_kept_for_the_next_call_and_freed_by_clear_cache():
    """A call's gate buffer is kept for the next calls (no fresh pages to fault in); what
    it held before never shows in a result, and clear_cache frees it."""
    kokoro_lstm.clear_cache()
    assert kokoro_lstm.cache_info()["scratch_bytes"] == 0
    rng = np.random.default_rng(7)
    lstm = kokoro_lstm.LSTM(24, 32, bidirectional=True, num_threads=2)
    xa = rng.standard_normal((40, 3, 24)).astype(np.float32)
    xb = rng.standard_normal((40, 3, 24)).astype(np.float32)
    ya = lstm(xa)[0]
    kept = kokoro_lstm.cache_info()["scratch_bytes"]
    assert kept >= 40 * 3 * 2 * 4 * 32 * 4  # T * B * D * 4H floats
    yb = lstm(xb)[0]
    ys = lstm(xa[:7, :1])[0]  # a smaller call reuses the same buffer
    assert kokoro_lstm.cache_info()["scratch_bytes"] == kept
    assert np.array_equal(lstm(xa)[0], ya) and np.array_equal(lstm(xb)[0], yb)
    assert np.array_equal(lstm(xa[:7, :1])[0], ys)
    sd = lstm.state_dict()
    want = reference.lstm_forward(xa[:7, :1].astype(np.float64), sd["weight_ih_l0"], sd["weight_hh_l0"],
                                  sd["bias_ih_l0"], sd["bias_hh_l0"])[0]
    assert np.abs(ys[..., :32] - want).max() < TOL
    # three layers with lengths: the buffers between layers are kept too; a call after
    # others that filled them gives the same bits as the first
    deep = kokoro_lstm.LSTM(24, 16, num_layers=3, bidirectional=True, num_threads=2)
    lengths = np.array([40, 13, 1])
    y1 = deep(xa, lengths=lengths)[0]
    deep(xb)
    lstm(xb)
    assert np.array_equal(deep(xa, lengths=lengths)[0], y1)
    assert not y1[13:, 1].any() and not y1[1:, 2].any()
    kokoro_lstm.clear_cache()
    assert kokoro_lstm.cache_info()["scratch_bytes"] == 0
