"""kokoro_lstm.reference (the float64 NumPy oracle) == torch.nn.LSTM (float64)."""
import warnings

import numpy as np
import pytest

from conftest import require

torch = require("torch")

from kokoro_lstm import reference  # noqa: E402

TOL = 1e-10


def _module(I, H, L, bi, proj=0, bias=True, batch_first=False, seed=0):
    torch.manual_seed(seed)
    m = torch.nn.LSTM(I, H, num_layers=L, bias=bias, batch_first=batch_first,
                      bidirectional=bi, proj_size=proj).double()
    m.eval()
    return m


def _params(m):
    return {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}


def _inputs(rng, T, B, I, L, D, H, R, batch_first, with_hx):
    x = rng.standard_normal((B, T, I) if batch_first else (T, B, I))
    hx = None
    if with_hx:
        hx = (rng.standard_normal((L * D, B, R)) * 0.5,
              rng.standard_normal((L * D, B, H)) * 0.5)
    return x, hx


def _torch_run(m, x, hx, lengths=None, batch_first=False):
    xt = torch.from_numpy(x)
    hxt = None if hx is None else tuple(torch.from_numpy(a) for a in hx)
    with torch.no_grad():
        if lengths is None:
            out, (h, c) = m(xt, hxt)
        else:
            T = x.shape[1] if batch_first else x.shape[0]
            packed = torch.nn.utils.rnn.pack_padded_sequence(
                xt, torch.as_tensor(lengths, dtype=torch.int64),
                batch_first=batch_first, enforce_sorted=False)
            pout, (h, c) = m(packed, hxt)
            out, _ = torch.nn.utils.rnn.pad_packed_sequence(
                pout, batch_first=batch_first, total_length=T)
    return out.numpy(), h.numpy(), c.numpy()


def _check(ref, tor):
    out, (h, c) = ref
    tout, th, tc = tor
    for a, b, name in ((out, tout, "output"), (h, th, "h_n"), (c, tc, "c_n")):
        assert a.dtype == np.float64, name
        assert a.shape == b.shape, (name, a.shape, b.shape)
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL, err_msg=name)


# (T, B, I, H, L, bi, proj, batch_first, with_hx, bias)
GRID = [
    (5, 3, 4, 6, 1, False, 0, False, False, True),
    (5, 3, 4, 6, 1, True, 0, False, True, True),
    (7, 2, 3, 5, 2, False, 0, True, True, True),
    (7, 2, 3, 5, 2, True, 0, True, False, True),
    (4, 3, 5, 7, 3, True, 0, False, True, True),
    (4, 1, 1, 1, 3, False, 0, True, True, True),
    (6, 3, 4, 8, 1, False, 3, False, True, True),
    (6, 3, 4, 8, 2, True, 3, True, True, True),
    (6, 2, 4, 8, 3, True, 5, False, False, True),
    (5, 2, 3, 4, 2, True, 0, False, True, False),
    (1, 4, 3, 4, 2, True, 2, True, True, False),
]


@pytest.mark.parametrize("T,B,I,H,L,bi,proj,bf,with_hx,bias", GRID)
def test_matches_torch(T, B, I, H, L, bi, proj, bf, with_hx, bias):
    m = _module(I, H, L, bi, proj, bias, bf)
    D = 2 if bi else 1
    R = proj or H
    rng = np.random.default_rng(T * 100 + B * 10 + L)
    x, hx = _inputs(rng, T, B, I, L, D, H, R, bf, with_hx)
    ref = reference.lstm(x, _params(m), num_layers=L, bidirectional=bi,
                         hx=hx, batch_first=bf, proj_size=proj)
    _check(ref, _torch_run(m, x, hx))


# Unsorted lengths, including one full-length and one length-1 sequence.
PACKED = [
    (6, [3, 6, 1, 4], 3, 5, 1, False, 0, False, False),
    (6, [3, 6, 1, 4], 3, 5, 1, True, 0, True, True),
    (7, [2, 7, 5], 4, 6, 2, True, 0, False, True),
    (7, [5, 1, 7], 4, 6, 2, False, 0, True, False),
    (5, [4, 2, 5, 1, 3], 2, 6, 3, True, 0, True, True),
    (6, [1, 6, 3], 3, 7, 2, True, 4, False, True),
    (6, [6, 2, 4, 5], 3, 7, 1, False, 2, True, True),
    (4, [4], 3, 5, 2, True, 0, False, True),
]


@pytest.mark.parametrize("T,lengths,I,H,L,bi,proj,bf,with_hx", PACKED)
def test_packed_unsorted_matches_torch(T, lengths, I, H, L, bi, proj, bf, with_hx):
    m = _module(I, H, L, bi, proj, True, bf, seed=1)
    D = 2 if bi else 1
    R = proj or H
    B = len(lengths)
    rng = np.random.default_rng(sum(lengths) + 7 * L)
    x, hx = _inputs(rng, T, B, I, L, D, H, R, bf, with_hx)
    # Garbage in the padding must not matter (torch never sees it).
    lens = np.asarray(lengths)
    xs = x if bf else x.transpose(1, 0, 2)
    for b, n in enumerate(lens):
        xs[b, n:] = 1e3
    ref = reference.lstm(x, _params(m), num_layers=L, bidirectional=bi, hx=hx,
                         lengths=lens, batch_first=bf, proj_size=proj)
    _check(ref, _torch_run(m, x, hx, lengths=lens, batch_first=bf))
    # Padding positions are exactly zero.
    out = ref[0] if bf else ref[0].transpose(1, 0, 2)
    for b, n in enumerate(lens):
        assert not out[b, n:].any()


@pytest.mark.parametrize("bi,proj,with_hx,bf", [
    (False, 0, False, False), (True, 0, True, False),
    (True, 3, True, True), (False, 2, False, True)])
def test_unbatched_matches_torch(bi, proj, with_hx, bf):
    T, I, H, L = 5, 3, 6, 2
    D = 2 if bi else 1
    R = proj or H
    m = _module(I, H, L, bi, proj, True, bf, seed=2)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((T, I))
    hx = None
    if with_hx:
        hx = (rng.standard_normal((L * D, R)), rng.standard_normal((L * D, H)))
    ref = reference.lstm(x, _params(m), num_layers=L, bidirectional=bi, hx=hx,
                         batch_first=bf, proj_size=proj)
    assert ref[0].shape == (T, D * R)
    assert ref[1][0].shape == (L * D, R)
    assert ref[1][1].shape == (L * D, H)
    _check(ref, _torch_run(m, x, hx))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("proj", [0, 3])
@pytest.mark.parametrize("use_lengths", [False, True])
def test_lstm_forward_single_direction(reverse, proj, use_lengths):
    """lstm_forward on its own == the matching direction of a torch LSTM."""
    T, B, I, H = 6, 3, 4, 5
    m = _module(I, H, 1, True, proj, True, False, seed=4)
    p = _params(m)
    sfx = "_l0_reverse" if reverse else "_l0"
    R = proj or H
    rng = np.random.default_rng(5)
    x = rng.standard_normal((T, B, I))
    h0 = rng.standard_normal((B, R))
    c0 = rng.standard_normal((B, H))
    lengths = np.array([4, 6, 1]) if use_lengths else None
    y, hn, cn = reference.lstm_forward(
        x, p["weight_ih" + sfx], p["weight_hh" + sfx], p["bias_ih" + sfx],
        p["bias_hh" + sfx], h0, c0, reverse=reverse, lengths=lengths,
        w_hr=p.get("weight_hr" + sfx))
    assert y.shape == (T, B, R) and hn.shape == (B, R) and cn.shape == (B, H)
    d = 1 if reverse else 0
    hx = (np.zeros((2, B, R)), np.zeros((2, B, H)))
    hx[0][d], hx[1][d] = h0, c0
    out, th, tc = _torch_run(m, x, hx, lengths=lengths)
    np.testing.assert_allclose(y, out[:, :, d * R:(d + 1) * R], rtol=0, atol=TOL)
    np.testing.assert_allclose(hn, th[d], rtol=0, atol=TOL)
    np.testing.assert_allclose(cn, tc[d], rtol=0, atol=TOL)
    # batch_first gives the transposed result.
    y2, hn2, cn2 = reference.lstm_forward(
        x.transpose(1, 0, 2), p["weight_ih" + sfx], p["weight_hh" + sfx],
        p["bias_ih" + sfx], p["bias_hh" + sfx], h0, c0, reverse=reverse,
        lengths=lengths, batch_first=True, w_hr=p.get("weight_hr" + sfx))
    np.testing.assert_array_equal(y2, y.transpose(1, 0, 2))
    np.testing.assert_array_equal(hn2, hn)
    np.testing.assert_array_equal(cn2, cn)


def test_nan_inf_propagate_like_torch():
    T, B, I, H, L = 6, 4, 3, 5, 2
    m = _module(I, H, L, True, 0, True, False, seed=6)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((T, B, I))
    x[2, 0, 1] = np.nan
    x[4, 1, 0] = np.inf
    x[0, 2, 2] = -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning may escape
        ref = reference.lstm(x, _params(m), num_layers=L, bidirectional=True)
    tor = _torch_run(m, x, None)
    for a, b in zip((ref[0], ref[1][0], ref[1][1]), tor):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        fin = np.isfinite(b)
        np.testing.assert_allclose(a[fin], b[fin], rtol=0, atol=TOL)
    assert np.isnan(ref[0]).any()
    # Batch element 3 is clean and must stay clean.
    assert np.isfinite(ref[0][:, 3]).all()


def test_extreme_gates_no_warnings():
    """Huge pre-activations saturate (sigmoid -> 0/1, tanh -> +-1) silently."""
    T, B, I, H = 3, 2, 2, 3
    rng = np.random.default_rng(8)
    w_ih = rng.standard_normal((4 * H, I)) * 1e3
    w_hh = rng.standard_normal((4 * H, H)) * 1e3
    x = rng.standard_normal((T, B, I)) * 1e3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y, h, c = reference.lstm_forward(x, w_ih, w_hh)
    m = torch.nn.LSTM(I, H).double()
    with torch.no_grad():
        m.weight_ih_l0.copy_(torch.from_numpy(w_ih))
        m.weight_hh_l0.copy_(torch.from_numpy(w_hh))
        m.bias_ih_l0.zero_()
        m.bias_hh_l0.zero_()
    out, th, tc = _torch_run(m, x, None)
    np.testing.assert_allclose(y, out, rtol=0, atol=TOL)
    np.testing.assert_allclose(c, tc[0], rtol=0, atol=1e-9)


def test_reference_does_not_import_torch():
    import ast
    import inspect
    tree = ast.parse(inspect.getsource(reference))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    assert "torch" not in names
