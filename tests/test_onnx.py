"""kokoro_lstm.onnx: the kokoro ops exported as ONNX LSTM nodes, run in ONNX Runtime.

Checks ONNX Runtime's LSTM with sequence_lens against the kokoro packed ops' semantics
(outputs past a length are 0, the reverse direction starts at each sequence's last
valid step, h_n/c_n per sequence) and round-trips the real Kokoro TextEncoder and
ProsodyPredictor (pip package `kokoro`, random init, no network).
"""
import warnings

import numpy as np
import pytest

from conftest import DROPOUT, HIDDEN, KERNEL, MAX_DUR, N_TOKEN, NLAYER, STYLE, require

torch = require("torch")
ort = require("onnxruntime")
require("onnxscript")

from torch import nn  # noqa: E402
from torch.export import Dim  # noqa: E402

import kokoro_lstm.onnx as kx  # noqa: E402
import kokoro_lstm.torch_ops as ko  # noqa: E402

TOL = 1e-5


def err(got, want):
    """max|got - want| / max(1, max|want|)."""
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))


def session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run(sess, *arrays):
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, {n: (a.numpy() if isinstance(a, torch.Tensor) else a)
                           for n, a in zip(names, arrays)})


def lstm_nodes(prog):
    return [n for n in prog.model.graph if n.op_type == "LSTM"]


class Packed(nn.Module):
    """pack_padded_sequence -> nn.LSTM -> pad_packed_sequence, with h0/c0 optional."""

    def __init__(self, I, H, layers, bi, batch_first=True, with_state=False):
        super().__init__()
        self.lstm = nn.LSTM(I, H, layers, bidirectional=bi, batch_first=batch_first)
        self.batch_first = batch_first
        self.with_state = with_state

    def forward(self, x, lengths, h0=None, c0=None):
        T = x.shape[1 if self.batch_first else 0]
        p = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=self.batch_first,
                                              enforce_sorted=False)
        y, (h, c) = self.lstm(p, (h0, c0) if self.with_state else None)
        y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=self.batch_first,
                                                total_length=T)
        return y, h, c


class Plain(nn.Module):
    def __init__(self, I, H, layers, bi, bias=True):
        super().__init__()
        self.lstm = nn.LSTM(I, H, layers, bidirectional=bi, bias=bias)

    def forward(self, x, h0, c0):
        y, (h, c) = self.lstm(x, (h0, c0))
        return y, h, c


def _fresh(model):
    torch.manual_seed(0)
    return model.eval()


@pytest.mark.parametrize("bi", [False, True])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_unpacked_with_state(tmp_path, bi, layers, bias):
    m = _fresh(Plain(6, 5, layers, bi, bias))
    D = 2 if bi else 1
    x, h0, c0 = torch.randn(7, 3, 6), torch.randn(layers * D, 3, 5), torch.randn(layers * D, 3, 5)
    with torch.no_grad():
        want = m(x, h0, c0)
    prog = kx.export(m, (x, h0, c0), tmp_path / "m.onnx")
    assert type(m.lstm) is nn.LSTM  # unpatched again
    nodes = lstm_nodes(prog)
    assert len(nodes) == layers  # one node per layer
    assert all(n.attributes["direction"].value == ("bidirectional" if bi else "forward")
               for n in nodes)
    got = run(session(tmp_path / "m.onnx"), x, h0, c0)
    for g, w in zip(got, want):
        assert err(g, w) <= TOL


@pytest.mark.parametrize("bi", [False, True])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("batch_first", [True, False])
def test_packed_lengths_dynamic_shapes(tmp_path, bi, layers, batch_first):
    m = _fresh(Packed(5, 7, layers, bi, batch_first))
    B, T = 3, 9
    x = torch.randn(B, T, 5) if batch_first else torch.randn(T, B, 5)
    ln = torch.tensor([9, 4, 6])
    b, t = Dim("B", min=1, max=64), Dim("T", min=2, max=4096)
    shapes = ({0: b, 1: t} if batch_first else {0: t, 1: b}, {0: b})
    prog = kx.export(m, (x, ln), tmp_path / "m.onnx", dynamic_shapes=shapes)
    nodes = lstm_nodes(prog)
    assert len(nodes) == layers and all(n.inputs[4] is not None for n in nodes)  # sequence_lens
    sess = session(tmp_path / "m.onnx")
    rng = np.random.default_rng(1)
    for B, T in ((3, 9), (2, 17), (1, 1), (5, 30)):
        x = torch.randn(B, T, 5) if batch_first else torch.randn(T, B, 5)
        ln = torch.as_tensor(rng.integers(1, T + 1, size=B))
        ln[rng.integers(B)] = T
        with torch.no_grad():
            want = m(x, ln)
        got = run(sess, x, ln)
        for g, w in zip(got, want):
            assert err(g, w) <= TOL, (B, T, ln)


def test_ort_packed_semantics_match_the_kokoro_ops(tmp_path):
    """ONNX Runtime's LSTM(sequence_lens) against the kokoro packed op directly: zeros
    past each length, reverse from each sequence's last valid step, h_n/c_n per
    sequence; and unlike plain padded ORT (no sequence_lens)."""
    T, B, I, H = 8, 4, 3, 5
    m = _fresh(Packed(I, H, 1, True, batch_first=False, with_state=True))
    x, ln = torch.randn(T, B, I), torch.tensor([8, 1, 5, 3])
    h0, c0 = torch.randn(2, B, H), torch.randn(2, B, H)
    prog = kx.export(m, (x, ln, h0, c0), tmp_path / "m.onnx")
    assert len(lstm_nodes(prog)) == 1
    got_y, got_h, got_c = run(session(tmp_path / "m.onnx"), x, ln, h0, c0)
    w = [p.detach() for p in m.lstm._flat_weights]
    with torch.no_grad():
        y, h, c = ko.lstm_forward_packed_bidirectional(x, ln, h0, c0, *w)
    assert err(got_y, y) <= TOL and err(got_h, h) <= TOL and err(got_c, c) <= TOL
    for b, n in enumerate(ln.tolist()):
        assert not got_y[n:, b].any()  # zeros past the length
        # each sequence alone, unpadded, gives the same numbers
        with torch.no_grad():
            yb, hb, cb = ko.lstm_forward_bidirectional(
                x[:n, b:b + 1].contiguous(), h0[:, b:b + 1].contiguous(),
                c0[:, b:b + 1].contiguous(), *w)
        assert err(got_y[:n, b:b + 1], yb) <= TOL
        assert err(got_h[:, b:b + 1], hb) <= TOL and err(got_c[:, b:b + 1], cb) <= TOL


def test_translation_table_with_torch_onnx_export(tmp_path):
    """The by-hand path: patch + exportable_packing + custom_translation_table."""
    m = _fresh(Packed(4, 6, 1, True))
    x, ln = torch.randn(2, 5, 4), torch.tensor([3, 5])
    with torch.no_grad():
        want = m(x, ln)
    table = kx.translation_table()
    assert set(table) == {ko.lstm_forward, ko.lstm_forward_bidirectional,
                          ko.lstm_forward_packed, ko.lstm_forward_packed_bidirectional}
    ko.patch_lstm_modules(m)
    try:
        with ko.exportable_packing():
            torch.onnx.export(m, (x, ln), str(tmp_path / "m.onnx"), dynamo=True,
                              custom_translation_table=table, verbose=False)
    finally:
        ko.unpatch_lstm_modules(m)
    got = run(session(tmp_path / "m.onnx"), x, ln)
    for g, w in zip(got, want):
        assert err(g, w) <= TOL


def test_without_the_table_torch_fails_naming_the_op(tmp_path):
    """What a user hits without this module (documents why it exists)."""
    m = _fresh(Plain(3, 4, 1, True))
    args = (torch.randn(5, 1, 3), torch.zeros(2, 1, 4), torch.zeros(2, 1, 4))
    ko.patch_lstm_modules(m)
    try:
        with pytest.raises(Exception, match="kokoro"):
            torch.onnx.export(m, args, str(tmp_path / "m.onnx"), dynamo=True, verbose=False)
    finally:
        ko.unpatch_lstm_modules(m)


# --------------------------------------------------------------------------------------
# the real Kokoro modules (Kokoro-82M's config, random init)
# --------------------------------------------------------------------------------------
def _build(factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight_norm deprecation, dropout with 1 layer
        torch.manual_seed(0)
        return factory().eval().requires_grad_(False)


def _mask(lengths, T):
    return torch.arange(T)[None, :] >= lengths[:, None]


def test_kokoro_text_encoder_onnx(km, tmp_path):
    model = _build(lambda: km.TextEncoder(HIDDEN, KERNEL, NLAYER, N_TOKEN))
    B, T = 2, 24
    ln = torch.tensor([17, 24])
    args = (torch.randint(0, N_TOKEN, (B, T)), ln, _mask(ln, T))
    b, t = Dim("B", min=1, max=16), Dim("T", min=2, max=512)
    prog = kx.export(model, args, tmp_path / "te.onnx",
                     dynamic_shapes=({0: b, 1: t}, {0: b}, {0: b, 1: t}))
    assert len(lstm_nodes(prog)) == 1
    assert all(type(m) is nn.LSTM for m in model.modules() if isinstance(m, nn.LSTM))
    sess = session(tmp_path / "te.onnx")
    for B, T, ln in ((2, 24, [17, 24]), (3, 40, [40, 5, 1]), (1, 11, [11])):
        ln = torch.tensor(ln)
        args = (torch.randint(0, N_TOKEN, (B, T)), ln, _mask(ln, T))
        with torch.no_grad():
            want = model(*args)
        (got,) = run(sess, *args)
        assert err(got, want) <= TOL, (B, T, ln)


class _Duration(nn.Module):
    """ProsodyPredictor.forward: DurationEncoder (3 packed LSTMs) + lstm (packed) +
    duration_proj, and the aligned features en."""

    def __init__(self, km):
        super().__init__()
        self.pp = km.ProsodyPredictor(STYLE, HIDDEN, NLAYER, MAX_DUR, DROPOUT)

    def forward(self, d_en, style, lengths, alignment, m):
        return self.pp(d_en, style, lengths, alignment, m)


def test_kokoro_duration_predictor_onnx(km, tmp_path):
    model = _build(lambda: _Duration(km))
    B, T, F = 2, 20, 33
    ln = torch.tensor([20, 13])
    args = (torch.randn(B, HIDDEN, T), torch.randn(B, STYLE), ln, torch.rand(T, F),
            _mask(ln, T))
    prog = kx.export(model, args, tmp_path / "dur.onnx")
    assert len(lstm_nodes(prog)) == 4  # 3 DurationEncoder LSTMs + predictor.lstm
    sess = session(tmp_path / "dur.onnx")
    for ln in ([20, 13], [7, 20], [1, 20]):
        ln = torch.tensor(ln)
        args = (torch.randn(B, HIDDEN, T), torch.randn(B, STYLE), ln, torch.rand(T, F),
                _mask(ln, T))
        with torch.no_grad():
            want = model(*args)
        got = run(sess, *args)
        for g, w in zip(got, want):
            assert err(g, w) <= TOL, ln
