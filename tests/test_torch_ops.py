"""kokoro_lstm.torch_ops: the kokoro::lstm_forward* torch.library ops, nn.LSTM patching,
torch.export (+ run_decompositions) and exportable_packing(), against eager PyTorch.

The Kokoro section builds the real kokoro.modules.TextEncoder / ProsodyPredictor
(pip package `kokoro`, random init, Kokoro-82M's config) and needs no network.
"""
import contextlib
import io
import subprocess
import sys
import types
import warnings

import pytest

from conftest import DROPOUT, HIDDEN, KERNEL, MAX_DUR, N_TOKEN, NLAYER, STYLE, require

torch = require("torch")

from torch import nn  # noqa: E402
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence  # noqa: E402

import kokoro_lstm
import kokoro_lstm.torch_ops as ko  # noqa: E402

pytestmark = [
    # torch.export internals (pytree) and Kokoro's weight_norm under export
    pytest.mark.filterwarnings("ignore:.*isinstance\\(treespec, LeafSpec\\).*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:The tensor attributes .* were assigned during export"),
]

TOL = 1e-5  # fp32, against eager PyTorch


def max_err(a, b):
    return (a.detach().double() - b.detach().double()).abs().max().item() if a.numel() else 0.0


def rel_err(a, b):
    """max |a - b| / max(1, max |b|): absolute for O(1) values, relative for large ones."""
    if not a.numel():
        return 0.0
    scale = max(1.0, b.detach().double().abs().max().item())
    return max_err(a, b) / scale


def make_pair(*args, seed=0, dtype=torch.float32, **kw):
    """(unpatched nn.LSTM, patched copy with the same weights)."""
    torch.manual_seed(seed)
    m = nn.LSTM(*args, **kw).to(dtype).eval()
    p = nn.LSTM(*args, **kw).to(dtype).eval()
    p.load_state_dict(m.state_dict())
    ko.patch_lstm_modules(p)
    assert type(p) is ko.KokoroLSTM
    return m, p


def op_nodes(ep):
    return [n for n in ep.graph.nodes if n.op == "call_function"]


def kokoro_nodes(ep):
    return [n for n in op_nodes(ep) if str(n.target).startswith("kokoro.")]


# --------------------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------------------
def test_import_kokoro_lstm_does_not_import_torch():
    code = "import sys, kokoro_lstm; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_schemas_match_kokoro_tvm():
    w = "Tensor weight_ih_l0, Tensor weight_hh_l0, Tensor? bias_ih_l0, Tensor? bias_hh_l0"
    wr = ("Tensor weight_ih_l0_reverse, Tensor weight_hh_l0_reverse, "
          "Tensor? bias_ih_l0_reverse, Tensor? bias_hh_l0_reverse")
    ret = "(Tensor output, Tensor h_n, Tensor c_n)"
    want = {
        "lstm_forward": f"(Tensor input, Tensor h0, Tensor c0, {w}) -> {ret}",
        "lstm_forward_bidirectional": f"(Tensor input, Tensor h0, Tensor c0, {w}, {wr}) -> {ret}",
        "lstm_forward_packed":
            f"(Tensor input, Tensor lengths, Tensor h0, Tensor c0, {w}) -> {ret}",
        "lstm_forward_packed_bidirectional":
            f"(Tensor input, Tensor lengths, Tensor h0, Tensor c0, {w}, {wr}) -> {ret}",
    }
    for name, schema in want.items():
        got = str(getattr(torch.ops.kokoro, name).default._schema)
        assert got == f"kokoro::{name}{schema}", got


# --------------------------------------------------------------------------------------
# the ops, called directly, against nn.LSTM
# --------------------------------------------------------------------------------------
def _weights(m, bidirectional):
    sfx = ("", "_reverse") if bidirectional else ("",)
    return [getattr(m, f"{k}_l0{s}") for s in sfx
            for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]


@pytest.mark.parametrize("bi", [False, True])
def test_ops_vs_nn_lstm(bi):
    T, B, I, H = 7, 5, 6, 9
    D = 2 if bi else 1
    m, _ = make_pair(I, H, bidirectional=bi, seed=1)
    torch.manual_seed(2)
    x = torch.randn(T, B, I)
    h0, c0 = torch.randn(D, B, H), torch.randn(D, B, H)
    lengths = torch.tensor([3, 7, 1, 5, 6])  # unsorted, contains T and 1
    w = _weights(m, bi)
    with torch.no_grad():
        op = ko.lstm_forward_bidirectional if bi else ko.lstm_forward
        out, h, c = op(x, h0, c0, *w)
        want, (wh, wc) = m(x, (h0, c0))
        assert out.shape == (T, B, D * H) and h.shape == c.shape == (D, B, H)
        assert max(max_err(out, want), max_err(h, wh), max_err(c, wc)) <= TOL

        op = ko.lstm_forward_packed_bidirectional if bi else ko.lstm_forward_packed
        out, h, c = op(x, lengths, h0, c0, *w)
        pk = pack_padded_sequence(x, lengths, enforce_sorted=False)
        want, (wh, wc) = m(pk, (h0, c0))
        want, _ = pad_packed_sequence(want, total_length=T)
        assert max(max_err(out, want), max_err(h, wh), max_err(c, wc)) <= TOL
        # padding is exactly zero
        valid = torch.arange(T)[:, None] < lengths[None, :]
        assert (out[~valid] == 0).all()
        # without biases
        wnb = [t if i % 4 < 2 else None for i, t in enumerate(w)]
        mnb = nn.LSTM(I, H, bidirectional=bi, bias=False).eval()
        mnb.load_state_dict({k: v for k, v in m.state_dict().items() if "bias" not in k})
        out, h, c = op(x, lengths, h0, c0, *wnb)
        want, (wh, wc) = mnb(pack_padded_sequence(x, lengths, enforce_sorted=False),
                             (h0, c0))
        want, _ = pad_packed_sequence(want, total_length=T)
        assert max(max_err(out, want), max_err(h, wh), max_err(c, wc)) <= TOL


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_fake_impl_shapes():
    """The fakes compute the outputs' shapes only (the real op validates)."""
    T, B, I, H = 5, 3, 4, 6
    x, h0, c0 = _meta(T, B, I), _meta(2, B, H), _meta(2, B, H)
    w = [_meta(4 * H, I), _meta(4 * H, H), _meta(4 * H), _meta(4 * H)] * 2
    ln = _meta(B, dtype=torch.int64)
    out, h, c = ko.lstm_forward_packed_bidirectional(x, ln, h0, c0, *w)
    assert out.shape == (T, B, 2 * H) and h.shape == c.shape == (2, B, H)
    out, h, c = ko.lstm_forward(x, h0[:1], c0[:1], *w[:4])
    assert out.shape == (T, B, H) and h.shape == (1, B, H)
    out, h, c = ko.lstm_forward_gated(x, None, None, False, *w)
    assert out.shape == (T, B, 2 * H) and h.shape == c.shape == (2, B, H)


def test_bad_input_errors():
    """The real op refuses bad input with the engine's message (it names the argument),
    the op's name in front; a RuntimeError as torch's own argument errors are."""
    T, B, I, H = 5, 3, 4, 6
    z = torch.zeros
    x, h0, c0 = z(T, B, I), z(2, B, H), z(2, B, H)
    w = [z(4 * H, I), z(4 * H, H), z(4 * H), z(4 * H)] * 2
    ln = torch.full((B,), T, dtype=torch.int64)

    def bad(match, *args, op=ko.lstm_forward_packed_bidirectional):
        with torch.no_grad(), pytest.raises(RuntimeError, match=match) as e:
            op(*args)
        assert str(e.value).startswith(f"kokoro::{op._schema.name.split('::')[1]}: ")
        assert isinstance(e.value, ValueError)  # the engine's refusals are ValueErrors elsewhere

    bad(r"x must be 3-D, got shape \(5, 4\)", z(T, I), ln, h0, c0, *w)
    bad(r"h0 must have shape \(2, 3, 6\), got \(1, 3, 6\)", x, ln, z(1, B, H), c0, *w)
    bad(r"c0 must have shape \(2, 3, 6\)", x, ln, h0, z(2, B + 1, H), *w)
    bad("w_ih of layer 0 must have 4.hidden_size rows", x, ln, h0, c0, z(4 * H + 1, I), *w[1:])
    bad(r"weights\[1\] \(w_hh of layer 0\) must have shape \(24, 6\)", x, ln, h0, c0, w[0],
        z(4 * H, H + 1), *w[2:])
    bad(r"weights\[4\] \(w_ih of layer 0, reverse\) must have shape", x, ln, h0, c0, *w[:4],
        z(4 * H, I + 1), *w[5:])
    bad(r"weights\[3\] \(b_hh of layer 0\) must have shape", x, ln, h0, c0, *w[:3], z(H), *w[4:])
    bad(r"lengths must have shape \(3,\)", x, torch.full((B + 1,), T), h0, c0, *w)
    bad("lengths must have dtype int64, got int32", x, ln.int(), h0, c0, *w)
    bad(r"weights\[0\] \(w_ih of layer 0\) must have dtype float32, got float64", x, ln, h0, c0,
        z(4 * H, I, dtype=torch.float64), *w[1:])
    bad("x must have dtype float32, got float16", z(T, B, I, dtype=torch.float16), ln, h0, c0, *w)
    bad("both be given or both None", x, ln, h0, c0, *w[:2], None, None, *w[4:])
    bad("h0 must have shape", x, h0, z(1, B, H), *w[:4], op=ko.lstm_forward)
    bad(r"lengths\[1\] = 6 is outside 1..5", x, torch.tensor([1, 6, 2]), h0[:1], c0[:1], *w[:2],
        None, None, op=ko.lstm_forward_packed)


def test_arguments_on_another_device_are_refused():
    """Issue 28: lengths or gate_bias on meta with the rest on CPU dispatched to the fake
    implementation and came back as CPU tensors of uninitialized memory. Every tensor
    argument must be on the input's device; the error names the argument."""
    T, B, I, H = 5, 3, 4, 6
    x, h0, c0 = torch.randn(T, B, I), torch.zeros(1, B, H), torch.zeros(1, B, H)
    w = [torch.randn(4 * H, I), torch.randn(4 * H, H), torch.randn(4 * H), torch.randn(4 * H)]
    ln = torch.tensor([5, 2, 3])
    gb = torch.zeros(1, B, 4 * H)

    def refused(match, op, *args):
        with torch.no_grad(), pytest.raises(RuntimeError, match=match):
            op(*args)

    refused("lengths is on meta, input on cpu", ko.lstm_forward_packed,
            x, ln.to("meta"), h0, c0, *w)
    refused("lengths is on cpu, input on meta", ko.lstm_forward_packed,
            x.to("meta"), ln, h0.to("meta"), c0.to("meta"), *[t.to("meta") for t in w])
    refused("gate_bias is on meta, input on cpu", ko.lstm_forward_gated,
            x, None, gb.to("meta"), False, *w)
    refused("lengths is on meta, input on cpu", ko.lstm_forward_gated,
            x, ln.to("meta"), gb, False, *w)
    refused("bias_hh_l0 is on meta, input on cpu", ko.lstm_forward_gated,
            x, ln, gb, False, *w[:3], w[3].to("meta"))
    # all on one device: the CPU results, and the fake's shapes on meta
    with torch.no_grad():
        out, _, _ = ko.lstm_forward_gated(x, ln, gb, False, *w)
        want, _, _ = ko.lstm_forward_packed(x, ln, h0, c0, *w)
        assert max_err(out, want) <= TOL
        out, _, _ = ko.lstm_forward_gated(x.to("meta"), ln.to("meta"), gb.to("meta"), False,
                                          *[t.to("meta") for t in w])
        assert out.device.type == "meta" and out.shape == (T, B, H)


def test_opcheck():
    """torch.library.opcheck: schema, fake vs real (shapes and strides), aot dispatch."""
    T, B, I, H = 5, 3, 4, 6
    torch.manual_seed(0)
    x, h0, c0 = torch.randn(T, B, I), torch.randn(2, B, H), torch.randn(2, B, H)
    w = [torch.randn(4 * H, I), torch.randn(4 * H, H), torch.randn(4 * H), torch.randn(4 * H),
         torch.randn(4 * H, I), torch.randn(4 * H, H), None, None]
    w[6:] = [torch.randn(4 * H), torch.randn(4 * H)]
    ln = torch.tensor([2, 5, 1])
    xb = torch.randn(B, T, I).transpose(0, 1)  # batch-major view
    for op, args in ((ko.lstm_forward, (x, h0[:1], c0[:1], *w[:4])),
                     (ko.lstm_forward_bidirectional, (xb, h0, c0, *w)),
                     (ko.lstm_forward_packed, (xb, ln, h0[:1], c0[:1], *w[:2], None, None)),
                     (ko.lstm_forward_packed_bidirectional, (x, ln, h0, c0, *w))):
        torch.library.opcheck(op, args)


def test_thread_count_does_not_change_results():
    _, p = make_pair(16, 40, 2, batch_first=True, bidirectional=True)
    x = torch.randn(3, 12, 16)
    try:
        with torch.no_grad():
            res = []
            for n in (1, 2, 3):
                ko.set_num_threads(n)
                assert ko.get_num_threads() == n
                res.append(p(x))
        for r in res[1:]:
            assert torch.equal(r[0], res[0][0]) and torch.equal(r[1][0], res[0][1][0])
    finally:
        ko.set_num_threads(None)
    assert ko.get_num_threads() >= 1
    with pytest.raises(ValueError):
        ko.set_num_threads(0)


def test_grad_mode_runs_torch_lstm_with_gradients():
    """Outside no_grad, a patched LSTM whose parameters (or input) require grad runs
    PyTorch's own LSTM: same outputs and gradients as nn.LSTM, plain, packed and under
    exportable_packing; without autograd it runs the engine."""
    torch.manual_seed(3)
    m, p = make_pair(4, 5, bidirectional=True, num_layers=2)
    x = torch.randn(3, 2, 4)
    for inp in ("plain", "packed", "export-packed"):
        for mod in (m, p):
            mod.zero_grad()
        xs = [x.clone().requires_grad_(True) for _ in range(2)]
        outs = []
        for mod, xi in zip((m, p), xs):
            lengths = torch.tensor([3, 2])
            if inp == "plain":
                y = mod(xi)[0]
            elif inp == "packed":
                packed = nn.utils.rnn.pack_padded_sequence(xi, lengths, enforce_sorted=False)
                y = nn.utils.rnn.pad_packed_sequence(mod(packed)[0])[0]
            else:
                ctx = ko.exportable_packing() if mod is p else contextlib.nullcontext()
                with ctx:
                    packed = nn.utils.rnn.pack_padded_sequence(xi, lengths, enforce_sorted=False)
                    y = nn.utils.rnn.pad_packed_sequence(mod(packed)[0], total_length=3)[0]
            (y * torch.arange(y.numel()).reshape(y.shape).sin()).sum().backward()
            outs.append(y.detach())
        assert max_err(outs[1], outs[0]) <= TOL, inp
        assert max_err(xs[1].grad, xs[0].grad) <= TOL, inp
        for name, param in m.named_parameters():
            assert max_err(getattr(p, name).grad, param.grad) <= TOL, (inp, name)
    with torch.no_grad():
        assert max_err(p(x)[0], m(x)[0]) <= TOL
    with torch.inference_mode():
        assert max_err(p(x)[0], m(x)[0]) <= TOL
    # the op itself has no backward: calling it with tensors that require grad is an error
    w = [t.requires_grad_() for t in (torch.randn(20, 4), torch.randn(20, 5))]
    with pytest.raises(RuntimeError, match="inference-only.*requires grad"):
        ko.lstm_forward(x, torch.zeros(1, 2, 5), torch.zeros(1, 2, 5), *w, None, None)


# --------------------------------------------------------------------------------------
# patched modules in eager mode
# --------------------------------------------------------------------------------------
CONFIGS = [  # (I, H, num_layers, batch_first, bidirectional, bias)
    (6, 8, 1, False, False, True),
    (6, 8, 1, True, True, True),
    (5, 7, 2, True, True, True),
    (5, 7, 3, False, True, False),
    (4, 9, 2, False, False, True),
]


@pytest.mark.parametrize("I,H,L,bf,bi,bias", CONFIGS)
def test_patched_eager_equals_unpatched(I, H, L, bf, bi, bias):
    m, p = make_pair(I, H, L, bias=bias, batch_first=bf, bidirectional=bi, seed=L)
    T, B = 6, 4
    D = 2 if bi else 1
    torch.manual_seed(3)
    x = torch.randn(B, T, I) if bf else torch.randn(T, B, I)
    hx = (torch.randn(L * D, B, H), torch.randn(L * D, B, H))
    lengths = torch.tensor([4, 6, 1, 3])
    with torch.no_grad():
        for args in ((x,), (x, hx)):
            (o1, (h1, c1)), (o2, (h2, c2)) = m(*args), p(*args)
            assert o2.shape == o1.shape and h2.shape == h1.shape
            assert max(max_err(o1, o2), max_err(h1, h2), max_err(c1, c2)) <= TOL
        # unbatched 2-D input
        xu = x[0] if bf else x[:, 0]
        hu = (hx[0][:, 0], hx[1][:, 0])
        for args in ((xu,), (xu, hu)):
            (o1, (h1, c1)), (o2, (h2, c2)) = m(*args), p(*args)
            assert o2.shape == o1.shape and h2.shape == h1.shape
            assert max(max_err(o1, o2), max_err(h1, h2), max_err(c1, c2)) <= TOL
        # PackedSequence in -> PackedSequence out, unsorted and sorted
        for ln, enforce in ((lengths, False), (torch.tensor([6, 4, 3, 1]), True)):
            pk = pack_padded_sequence(x, ln, batch_first=bf, enforce_sorted=enforce)
            for args in ((pk,), (pk, hx)):
                (o1, (h1, c1)), (o2, (h2, c2)) = m(*args), p(*args)
                assert isinstance(o2, nn.utils.rnn.PackedSequence)
                assert torch.equal(o1.batch_sizes, o2.batch_sizes)
                for a, b in ((o1.sorted_indices, o2.sorted_indices),
                             (o1.unsorted_indices, o2.unsorted_indices)):
                    assert (a is None and b is None) or torch.equal(a, b)
                assert max(max_err(o1.data, o2.data), max_err(h1, h2),
                           max_err(c1, c2)) <= TOL
    # mismatched input size: nn.LSTM's own error
    with torch.no_grad(), pytest.raises(RuntimeError, match="input.size"):
        p(torch.randn(B, T, I + 1) if bf else torch.randn(T, B, I + 1), hx)


def test_float64():
    m, p = make_pair(5, 6, 2, bidirectional=True, dtype=torch.float64)
    x = torch.randn(4, 3, 5, dtype=torch.float64)
    with torch.no_grad():
        (o1, (h1, c1)), (o2, (h2, c2)) = m(x), p(x)
    assert o2.dtype == torch.float64
    assert max(max_err(o1, o2), max_err(h1, h2), max_err(c1, c2)) <= 1e-12


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_module_runs_like_unpatched(dtype):
    """Issue 28: a patched float16 / bfloat16 LSTM raised under no_grad ("input must be
    float32 or float64", "unsupported ScalarType BFloat16") where the unpatched module
    runs. The ops take float32/float64 only, so it runs PyTorch's LSTM: the same bits."""
    ref = nn.ModuleList([nn.LSTM(6, 4), nn.LSTM(6, 4, 2, batch_first=True, bidirectional=True)])
    ref = ref.to(dtype).eval()
    pat = nn.ModuleList([nn.LSTM(6, 4), nn.LSTM(6, 4, 2, batch_first=True, bidirectional=True)])
    pat = pat.to(dtype).eval()
    pat.load_state_dict(ref.state_dict())
    ko.patch_lstm_modules(pat)
    assert all(isinstance(m, ko.KokoroLSTM) for m in pat)
    torch.manual_seed(0)
    x = torch.randn(5, 3, 6).to(dtype)
    ln = torch.tensor([5, 2, 4])
    with torch.no_grad():
        for r, p in zip(ref, pat):
            for args in ((x,), (x[:, 0],), (pack_padded_sequence(x, ln, enforce_sorted=False),)):
                (o1, (h1, c1)), (o2, (h2, c2)) = r(*args), p(*args)
                o1 = getattr(o1, "data", o1)
                o2 = getattr(o2, "data", o2)
                assert o2.dtype == dtype
                assert torch.equal(o1, o2) and torch.equal(h1, h2) and torch.equal(c1, c2)
            # and under exportable_packing, pack -> LSTM -> pad
            with ko.exportable_packing():
                y, _ = pad_packed_sequence(p(pack_padded_sequence(x, ln, enforce_sorted=False))[0],
                                           total_length=5)
            want, _ = pad_packed_sequence(r(pack_padded_sequence(x, ln, enforce_sorted=False))[0],
                                          total_length=5)
            assert torch.equal(y, want)


def test_batch_major_input_read_in_place():
    """batch_first input: the op sees x.transpose(0, 1) and returns the same layout,
    so the module's output is a plain contiguous [B, T, 2H] tensor."""
    m, p = make_pair(6, 8, batch_first=True, bidirectional=True)
    x = torch.randn(3, 5, 6)
    with torch.no_grad():
        out, _ = p(x)
        assert out.is_contiguous() and max_err(out, m(x)[0]) <= TOL
        # the fake impl predicts the same strides
        fake_out, _, _ = ko.lstm_forward_bidirectional(
            x.to("meta").transpose(0, 1), _meta(2, 3, 8), _meta(2, 3, 8),
            *[t.to("meta") for t in _weights(p, True)])
        real_out, _, _ = ko.lstm_forward_bidirectional(
            x.transpose(0, 1), torch.zeros(2, 3, 8), torch.zeros(2, 3, 8), *_weights(p, True))
        assert fake_out.stride() == real_out.stride()


def test_weight_cache_and_in_place_update():
    m, p = make_pair(6, 8, bidirectional=True)
    x = torch.randn(5, 2, 6)
    ko.clear_cache()
    with torch.no_grad():
        p(x)
        p(x)
        info = kokoro_lstm.cache_info()
        assert info["entries"] == 1 and info["misses"] == 1 and info["hits"] == 1  # packed once
        for mod in (m, p):  # in-place update of one weight: never stale
            mod.weight_hh_l0_reverse.mul_(0.5)
            mod.bias_ih_l0.add_(0.25)
        assert max_err(p(x)[0], m(x)[0]) <= TOL
        info = kokoro_lstm.cache_info()
        assert info["entries"] == 1 and info["repacks"] == 1  # replaced, not kept
        # a new parameter object (load_state_dict copies in place; assignment replaces)
        p.weight_ih_l0 = nn.Parameter(m.weight_ih_l0.detach().clone() * 2)
        m.weight_ih_l0.mul_(2)
        assert max_err(p(x)[0], m(x)[0]) <= TOL


def test_state_dict_round_trip():
    torch.manual_seed(0)
    src = nn.Sequential(nn.LSTM(5, 6, 2, batch_first=True, bidirectional=True))
    dst = nn.Sequential(nn.LSTM(5, 6, 2, batch_first=True, bidirectional=True))
    ko.patch_lstm_modules(dst)
    keys = list(src.state_dict())
    assert list(dst.state_dict()) == keys
    # saved before patching, loaded after
    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)
    buf.seek(0)
    dst.load_state_dict(torch.load(buf))
    x = torch.randn(2, 4, 5)
    with torch.no_grad():
        assert max_err(dst(x)[0], src(x)[0]) <= TOL
    # saved after patching, loaded into an unpatched model
    with torch.no_grad():
        dst[0].weight_hh_l1.mul_(0.5)
    buf = io.BytesIO()
    torch.save(dst.state_dict(), buf)
    buf.seek(0)
    fresh = nn.Sequential(nn.LSTM(5, 6, 2, batch_first=True, bidirectional=True))
    fresh.load_state_dict(torch.load(buf))
    with torch.no_grad():
        assert max_err(dst(x)[0], fresh(x)[0]) <= TOL
    # unpatch
    ko.unpatch_lstm_modules(dst)
    assert type(dst[0]) is nn.LSTM and list(dst.state_dict()) == keys
    with torch.no_grad():
        assert max_err(dst(x)[0], fresh(x)[0]) == 0.0


def test_patch_skips_projection_and_overridden_forward():
    class MyLSTM(nn.LSTM):
        def forward(self, input, hx=None):
            return super().forward(input, hx)

    class Plain(nn.LSTM):
        pass

    model = nn.ModuleDict({"proj": nn.LSTM(4, 6, proj_size=3), "mine": MyLSTM(4, 5),
                           "plain": Plain(4, 5), "lstm": nn.LSTM(4, 5)})
    with pytest.warns(UserWarning) as rec:
        ko.patch_lstm_modules(model)
    msgs = " ".join(str(r.message) for r in rec)
    assert "proj_size" in msgs and "overrides" in msgs
    assert type(model["proj"]) is nn.LSTM and type(model["mine"]) is MyLSTM
    assert isinstance(model["plain"], ko.KokoroLSTM) and isinstance(model["plain"], Plain)
    assert type(model["lstm"]) is ko.KokoroLSTM
    ko.unpatch_lstm_modules(model)
    assert type(model["plain"]) is Plain and type(model["lstm"]) is nn.LSTM


# --------------------------------------------------------------------------------------
# torch.export
# --------------------------------------------------------------------------------------
class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(12, 16, 2, batch_first=True, bidirectional=True)
        self.proj = nn.Linear(32, 3)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return self.proj(y), h, c


def test_export_two_layer_bidirectional_batch_first():
    torch.manual_seed(0)
    ref = TwoLayer().eval()
    model = TwoLayer().eval()
    model.load_state_dict(ref.state_dict())
    ko.patch_lstm_modules(model)
    x = torch.randn(2, 10, 12)
    ep = torch.export.export(model, (x,)).run_decompositions()
    targets = [str(n.target) for n in op_nodes(ep)]
    assert targets.count("kokoro.lstm_forward_bidirectional.default") == 2, targets
    assert not [t for t in targets if "lstm" in t and not t.startswith("kokoro.")], targets
    # one addmm (the Linear), no per-step matmuls or gate activations
    assert targets.count("aten.addmm.default") == 1, targets
    assert not [t for t in targets if any(k in t for k in ("sigmoid", "tanh", ".mm."))]
    with torch.no_grad():
        x2 = torch.randn(2, 10, 12)
        for a, b in zip(ep.module()(x2), ref(x2)):
            assert max_err(a, b) <= TOL


class PackPad(nn.Module):
    """The Kokoro pattern: pack -> LSTM -> pad -> copy into a full-length buffer."""

    def __init__(self, I=6, H=8):
        super().__init__()
        self.lstm = nn.LSTM(I, H, 1, batch_first=True, bidirectional=True)

    def forward(self, x, lengths):
        T = x.shape[1]
        y = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                              enforce_sorted=False)
        y, (h, c) = self.lstm(y)
        y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True)
        full = torch.zeros(y.shape[0], T, y.shape[2])
        full[:, :y.shape[1]] = y
        return full, h, c


def test_export_pack_pad_unsorted_lengths():
    torch.manual_seed(0)
    ref = PackPad().eval()
    model = PackPad().eval()
    model.load_state_dict(ref.state_dict())
    ko.patch_lstm_modules(model)
    B, T = 4, 9
    x = torch.randn(B, T, 6)
    with ko.exportable_packing():
        ep = torch.export.export(model, (x, torch.tensor([5, 9, 2, 7])))
    assert nn.utils.rnn.pack_padded_sequence is pack_padded_sequence  # restored
    ep = ep.run_decompositions()
    ko_nodes = kokoro_nodes(ep)
    assert [str(n.target) for n in ko_nodes] == \
        ["kokoro.lstm_forward_packed_bidirectional.default"]
    lengths_arg = ko_nodes[0].args[1]
    assert lengths_arg.op == "placeholder" and lengths_arg.name == "lengths"
    assert not [n for n in op_nodes(ep) if "lstm" in str(n.target)
                and not str(n.target).startswith("kokoro.")]
    run = ep.module()
    with torch.no_grad():
        for ln in ([5, 9, 2, 7], [1, 3, 8, 2], [9, 9, 9, 9], [4, 1, 1, 6]):
            ln = torch.tensor(ln)
            x = torch.randn(B, T, 6)
            want = ref(x, ln)
            for a, b in zip(run(x, ln), want):
                assert a.shape == b.shape and max_err(a, b) <= TOL
            # and the patched module in eager mode, inside and outside the context
            with ko.exportable_packing():
                got = model(x, ln)
            for a, b in zip(got, want):
                assert max_err(a, b) <= TOL
            for a, b in zip(model(x, ln), want):
                assert max_err(a, b) <= TOL


def test_export_dynamic_shapes_and_strict():
    """Symbolic B and T (one program for every shape) and strict (TorchDynamo) export."""
    torch.manual_seed(0)
    ref = PackPad().eval()
    model = PackPad().eval()
    model.load_state_dict(ref.state_dict())
    ko.patch_lstm_modules(model)
    x, ln = torch.randn(4, 9, 6), torch.tensor([5, 9, 2, 7])
    Bd, Td = torch.export.Dim("B", min=2, max=64), torch.export.Dim("T", min=2, max=512)
    with ko.exportable_packing():
        dyn = torch.export.export(model, (x, ln), dynamic_shapes=({0: Bd, 1: Td}, {0: Bd}))
        strict = torch.export.export(model, (x, ln), strict=True)
    for ep in (dyn, strict):
        ep = ep.run_decompositions()
        assert [str(n.target) for n in kokoro_nodes(ep)] == \
            ["kokoro.lstm_forward_packed_bidirectional.default"]
    with torch.no_grad():
        for B, T in ((3, 17), (2, 4)):
            x, ln = torch.randn(B, T, 6), torch.randint(1, T + 1, (B,))
            for a, b in zip(dyn.module()(x, ln), ref(x, ln)):
                assert a.shape == b.shape and max_err(a, b) <= TOL
        x, ln = torch.randn(4, 9, 6), torch.tensor([3, 1, 9, 4])
        for a, b in zip(strict.module()(x, ln), ref(x, ln)):
            assert max_err(a, b) <= TOL


def test_exportable_packing_semantics():
    """pad_packed_sequence on the stand-in: total_length, padding_value, batch_first
    conversion, a stand-in that never met an LSTM, and names imported elsewhere
    (this test module's own `from torch.nn.utils.rnn import ...` names included)."""
    orig_pack, orig_pad = pack_padded_sequence, pad_packed_sequence  # locals: not patched
    m, p = make_pair(5, 6, batch_first=False, bidirectional=True)
    T, B = 7, 3
    x = torch.randn(T, B, 5)
    ln = torch.tensor([4, 7, 2])
    mod = types.ModuleType("kokoro_test_fake_module")
    mod.pack_padded_sequence = orig_pack
    mod.pad_packed_sequence = orig_pad
    sys.modules[mod.__name__] = mod
    try:
        with torch.no_grad():
            want, (wh, _) = m(orig_pack(x, ln, enforce_sorted=False))
            with ko.exportable_packing(), ko.exportable_packing():  # nests
                for f in (mod.pack_padded_sequence, nn.utils.rnn.pack_padded_sequence,
                          pack_padded_sequence):
                    assert f is ko._export_pack_padded_sequence
                assert mod.pad_packed_sequence is ko._export_pad_packed_sequence
                got, (gh, _) = p(mod.pack_padded_sequence(x, ln, enforce_sorted=False))
                assert isinstance(got, ko.ExportPackedSequence)
                for kw in ({"total_length": 7}, {"total_length": 10, "padding_value": -1.0},
                           {"batch_first": True, "padding_value": 3.0}, {}):
                    a, la = mod.pad_packed_sequence(got, **kw)
                    b, lb = orig_pad(want, **kw)
                    assert a.shape == b.shape and torch.equal(la, lb)  # max(ln) == T here
                    assert max_err(a, b) <= TOL
                assert max_err(gh, wh) <= TOL
                # without total_length the stand-in pads to the input's T, not max(lengths)
                a, _ = pad_packed_sequence(p(pack_padded_sequence(x[:, :2], ln[:2]))[0])
                assert a.shape[0] == T
                # pack -> pad with nothing in between masks the padding too
                a, _ = pad_packed_sequence(pack_padded_sequence(x, ln, enforce_sorted=False),
                                           total_length=T)
                b, _ = orig_pad(orig_pack(x, ln, enforce_sorted=False), total_length=T)
                assert torch.equal(a, b)
                # a real PackedSequence still works with pad_packed_sequence
                a, _ = pad_packed_sequence(want)
                assert a.shape[0] == 7
                # an unpatched LSTM cannot consume the stand-in: clear error
                with pytest.raises(AttributeError, match="patched LSTM"):
                    m(pack_padded_sequence(x, ln, enforce_sorted=False))
            for f, o in ((mod.pack_padded_sequence, orig_pack), (pack_padded_sequence, orig_pack),
                         (mod.pad_packed_sequence, orig_pad), (pad_packed_sequence, orig_pad),
                         (torch.nn.utils.rnn.pad_packed_sequence, orig_pad)):
                assert f is o
    finally:
        del sys.modules[mod.__name__]


def test_exportable_packing_is_confined_to_its_thread():
    """Issue 28: while one thread was inside exportable_packing(), a plain nn.LSTM fed
    by pack_padded_sequence in another thread got the export stand-in and failed. Only
    the thread inside the context gets the stand-in; others meanwhile get PyTorch's."""
    import threading

    m, p = make_pair(4, 5)
    x, ln = torch.randn(6, 2, 4), torch.tensor([6, 3])
    with torch.no_grad():
        want, _ = pad_packed_sequence(m(pack_padded_sequence(x, ln))[0])
    inside, leave = threading.Event(), threading.Event()
    seen = {}

    def exporting():
        try:
            with ko.exportable_packing():
                seen["exporter"] = type(nn.utils.rnn.pack_padded_sequence(x, ln))
                inside.set()
                leave.wait(60)
                seen["exporter_after"] = type(nn.utils.rnn.pack_padded_sequence(x, ln))
        finally:
            inside.set()

    t = threading.Thread(target=exporting)
    t.start()
    try:
        assert inside.wait(60)
        assert nn.utils.rnn.pack_padded_sequence is ko._export_pack_padded_sequence
        with torch.no_grad():
            packed = nn.utils.rnn.pack_padded_sequence(x, ln)
            assert isinstance(packed, nn.utils.rnn.PackedSequence)
            for lstm in (m, p):  # plain and patched
                got, _ = nn.utils.rnn.pad_packed_sequence(lstm(packed)[0])
                assert max_err(got, want) <= TOL
    finally:
        leave.set()
        t.join()
    assert seen == {"exporter": ko.ExportPackedSequence,
                    "exporter_after": ko.ExportPackedSequence}
    assert nn.utils.rnn.pack_padded_sequence is pack_padded_sequence  # restored


# --------------------------------------------------------------------------------------
# the real Kokoro modules (pip package `kokoro`; Kokoro-82M's config, random init)
# --------------------------------------------------------------------------------------
def _twins(factory):
    """(reference, patched) instances with identical weights; the patched one loads
    the reference's state_dict after patching."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight_norm deprecation, dropout with 1 layer
        torch.manual_seed(0)
        ref = factory().eval()
        model = factory().eval()
    ko.patch_lstm_modules(model)
    model.load_state_dict(ref.state_dict())
    return ref, model


def _mask(lengths, T):
    return torch.arange(T)[None, :] >= lengths[:, None]


def test_kokoro_text_encoder_export(km):
    ref, model = _twins(lambda: km.TextEncoder(HIDDEN, KERNEL, NLAYER, N_TOKEN))
    B, T = 2, 24
    tokens = torch.randint(0, N_TOKEN, (B, T))
    ln = torch.tensor([17, 24])
    with ko.exportable_packing():
        ep = torch.export.export(model, (tokens, ln, _mask(ln, T)))
    ep = ep.run_decompositions()
    assert [str(n.target) for n in kokoro_nodes(ep)] == \
        ["kokoro.lstm_forward_packed_bidirectional.default"]
    run = ep.module()
    with torch.no_grad():
        for ln in ([17, 24], [24, 5], [1, 12]):
            ln = torch.tensor(ln)
            tokens = torch.randint(0, N_TOKEN, (B, T))
            want = ref(tokens, ln, _mask(ln, T))
            assert rel_err(run(tokens, ln, _mask(ln, T)), want) <= TOL
            assert rel_err(model(tokens, ln, _mask(ln, T)), want) <= TOL  # eager, patched


class _Prosody(nn.Module):
    """ProsodyPredictor.forward (DurationEncoder + lstm) and F0Ntrain (shared)."""

    def __init__(self, km):
        super().__init__()
        self.pp = km.ProsodyPredictor(STYLE, HIDDEN, NLAYER, MAX_DUR, DROPOUT)

    def forward(self, d_en, style, lengths, alignment, m):
        duration, en = self.pp(d_en, style, lengths, alignment, m)
        f0, n = self.pp.F0Ntrain(en, style)
        return duration, en, f0, n


def _alignment(T, seed):
    g = torch.Generator().manual_seed(seed)
    dur = torch.randint(1, 4, (T,), generator=g)
    return (torch.arange(T).repeat_interleave(dur)[None, :] ==
            torch.arange(T)[:, None]).float()  # [T, F], one token per frame


def test_kokoro_prosody_predictor_export(km):
    ref, model = _twins(lambda: _Prosody(km))
    T = 20
    al = _alignment(T, 0)
    d_en, style = torch.randn(1, HIDDEN, T), torch.randn(1, STYLE)
    ln = torch.tensor([T])
    with ko.exportable_packing():
        ep = torch.export.export(model, (d_en, style, ln, al, _mask(ln, T)))
    ep = ep.run_decompositions()
    targets = [str(n.target) for n in kokoro_nodes(ep)]
    # 3 DurationEncoder LSTMs + predictor.lstm (packed), shared (unpacked)
    assert targets.count("kokoro.lstm_forward_packed_bidirectional.default") == 4, targets
    assert targets.count("kokoro.lstm_forward_bidirectional.default") == 1, targets
    assert not [n for n in op_nodes(ep) if "lstm" in str(n.target)
                and not str(n.target).startswith("kokoro.")]
    run = ep.module()
    with torch.no_grad():
        for n_valid in (T, 13):  # a shorter text in the same static shape
            ln = torch.tensor([n_valid])
            d_en, style = torch.randn(1, HIDDEN, T), torch.randn(1, STYLE)
            args = (d_en, style, ln, al, _mask(ln, T))
            want = ref(*args)
            for a, b in zip(run(*args), want):
                assert a.shape == b.shape and rel_err(a, b) <= TOL
            for a, b in zip(model(*args), want):
                assert rel_err(a, b) <= TOL
