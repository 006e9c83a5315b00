"""torch.compile through patched LSTMs: no graph break at the LSTM, the kokoro op one
node of the graph, and the compiled LSTM's outputs bitwise equal to eager.

Most cases compile with the ``aot_eager`` backend (Dynamo's capture and AOTAutograd
with the ops' fakes, as Inductor sees them, in seconds); a few go through Inductor
(default and ``max-autotune``). The KModel case compiles Kokoro's own model, patched.
"""
import pytest

from conftest import require

torch = require("torch")

from torch import nn  # noqa: E402
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence  # noqa: E402

import kokoro_lstm.torch_ops as ko  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def patched(*args, seed=0, dtype=torch.float32, **kw):
    torch.manual_seed(seed)
    return ko.patch_lstm_modules(nn.LSTM(*args, **kw).to(dtype).eval())


def kokoro_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"
            and str(n.target).startswith("kokoro.")]


def assert_same(a, b):
    """Bitwise equal, recursively over tuples and PackedSequences."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), (a - b).abs().max()
    else:
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            if x is not None or y is not None:
                assert_same(x, y)


def test_patched_lstm_is_no_nn_lstm_but_an_rnnbase():
    """Dynamo refuses nn.LSTM instances (torch/_dynamo/variables/builder.py); the
    patched class keeps nn.RNNBase's machinery and nn.LSTM's methods instead."""
    m = patched(8, 4, bidirectional=True)
    assert isinstance(m, nn.RNNBase) and not isinstance(m, nn.LSTM)
    assert type(ko.unpatch_lstm_modules(m)) is nn.LSTM
    assert isinstance(ko.KokoroLSTM(8, 4, num_layers=2), nn.RNNBase)
    assert ko.KokoroLSTM(8, 4).state_dict().keys() == nn.LSTM(8, 4).state_dict().keys()


def test_explain_shows_no_break_and_one_node_per_layer():
    m = patched(16, 8, num_layers=2, bidirectional=True, batch_first=True)
    with torch.no_grad():
        ex = torch._dynamo.explain(m)(torch.randn(2, 5, 16))
    assert ex.graph_break_count == 0 and ex.graph_count == 1, ex.break_reasons
    nodes = kokoro_nodes(ex.graphs[0])
    assert [str(n.target) for n in nodes] == ["kokoro.lstm_forward_bidirectional.default"] * 2


def _packed(x, lengths, enforce_sorted):
    return pack_padded_sequence(x, torch.tensor(lengths), batch_first=True,
                                enforce_sorted=enforce_sorted)


CASES = {
    # name: (LSTM kwargs, the call's arguments for dtype d)
    "uni": (dict(), lambda d: (torch.randn(7, 2, 16, dtype=d),)),
    "bi_batch_first": (dict(bidirectional=True, batch_first=True),
                       lambda d: (torch.randn(2, 7, 16, dtype=d),)),
    "two_layers_hx": (dict(num_layers=2, bidirectional=True),
                      lambda d: (torch.randn(7, 3, 16, dtype=d),
                                 (torch.randn(4, 3, 8, dtype=d), torch.randn(4, 3, 8, dtype=d)))),
    "unbatched": (dict(bidirectional=True), lambda d: (torch.randn(7, 16, dtype=d),)),
    "no_bias": (dict(bias=False), lambda d: (torch.randn(7, 2, 16, dtype=d),)),
    "packed_input": (dict(bidirectional=True, batch_first=True),
                     lambda d: (_packed(torch.randn(3, 7, 16, dtype=d), [4, 7, 2], False),)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fullgraph_equals_eager(case, dtype):
    kw, args = CASES[case]
    m = patched(16, 8, dtype=dtype, **kw)
    args = args(dtype)
    with torch.no_grad():
        want = m(*args)
        got = torch.compile(m, fullgraph=True, backend="aot_eager")(*args)
    assert_same(got, want)


def test_sorted_packed_input_compiles_with_one_break():
    """enforce_sorted=True leaves no sorted_indices: the batch size is read from
    batch_sizes[0] (one break); the results are still eager's."""
    m = patched(16, 8, bidirectional=True, batch_first=True)
    seq = _packed(torch.randn(3, 7, 16), [7, 4, 2], True)
    with torch.no_grad():
        want = m(seq)
        got = torch.compile(m, backend="aot_eager")(seq)
    assert_same(got, want)


class Encoder(nn.Module):
    """pack_padded_sequence -> LSTM -> pad_packed_sequence, as Kokoro's TextEncoder."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 24)
        self.lstm = nn.LSTM(24, 8, batch_first=True, bidirectional=True)
        self.out = nn.Linear(16, 4)

    def forward(self, x, lengths):
        h = torch.relu(self.proj(x))
        h = pack_padded_sequence(h, lengths, batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(h)
        h, _ = pad_packed_sequence(h, batch_first=True, total_length=x.shape[1])
        return h, self.out(h)


def test_exportable_packing_compiles_pack_lstm_pad_without_break():
    """pack_padded_sequence is skipped by Dynamo (a break); under exportable_packing()
    pack -> LSTM -> pad is one packed op with the lengths as a graph input."""
    torch.manual_seed(0)
    model = ko.patch_lstm_modules(Encoder().eval())
    x, lengths = torch.randn(3, 9, 16), torch.tensor([9, 3, 6])
    with torch.no_grad(), ko.exportable_packing():
        ex = torch._dynamo.explain(model)(x, lengths)
        assert ex.graph_break_count == 0, ex.break_reasons
        assert [str(n.target) for n in kokoro_nodes(ex.graphs[0])] == \
            ["kokoro.lstm_forward_packed_bidirectional.default"]
        torch._dynamo.reset()
        want = model(x, lengths)
        got = torch.compile(model, fullgraph=True, backend="aot_eager")(x, lengths)
        assert_same(got, want)
        # other lengths, same compiled code (lengths are data, not guards)
        lengths2 = torch.tensor([2, 9, 5])
        assert_same(torch.compile(model, fullgraph=True, backend="aot_eager")(x, lengths2),
                    model(x, lengths2))


@pytest.mark.parametrize("mode", [None, "max-autotune"])
def test_inductor_model_containing_a_patched_lstm(mode):
    """Inductor (default and max-autotune): the LSTM's outputs bitwise equal to eager,
    the rest of the model within float32 rounding."""
    torch.manual_seed(0)
    model = ko.patch_lstm_modules(Encoder().eval())
    x, lengths = torch.randn(2, 9, 16), torch.tensor([9, 4])
    with torch.no_grad(), ko.exportable_packing():
        want = model(x, lengths)
        got = torch.compile(model, fullgraph=True, mode=mode)(x, lengths)
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-6)
    # the LSTM alone, its inputs fixed: bitwise
    h = torch.randn(2, 9, 24)
    with torch.no_grad():
        assert_same(torch.compile(model.lstm, fullgraph=True, mode=mode)(h), model.lstm(h))


def test_hooks_state_dict_and_unpatch_survive_compile():
    m = patched(16, 8, bidirectional=True)
    seen = []
    handle = m.register_forward_hook(lambda mod, args, out: seen.append(out[0].shape))
    x = torch.randn(5, 2, 16)
    with torch.no_grad():
        torch.compile(m, fullgraph=True, backend="aot_eager")(x)
    assert seen == [torch.Size([5, 2, 16])]
    handle.remove()
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    plain = nn.LSTM(16, 8, bidirectional=True)
    plain.load_state_dict(sd)
    ko.unpatch_lstm_modules(m)
    with torch.no_grad():
        torch.testing.assert_close(m(x)[0], plain(x)[0])


def test_export_keeps_one_node():
    m = patched(16, 8, bidirectional=True, batch_first=True)
    ep = torch.export.export(m, (torch.randn(1, 6, 16),)).run_decompositions()
    assert [str(n.target) for n in ep.graph.nodes if n.op == "call_function"
            and str(n.target).startswith("kokoro.")] == \
        ["kokoro.lstm_forward_bidirectional.default"]


# ------------------------------------------------------------------------------------------
# CUDA (the lent GPU machine): Inductor and CUDA graphs
# ------------------------------------------------------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@cuda
@pytest.mark.parametrize("mode", [None, "reduce-overhead", "max-autotune"])
def test_cuda_compiled_lstm_is_eager_bitwise(mode):
    """Kokoro's shape on the GPU: the compiled call (CUDA graphs with reduce-overhead:
    none skipped, no allocation on replay) gives eager's bits for every new input."""
    from torch._dynamo.utils import counters

    counters.clear()
    m = patched(640, 256, bidirectional=True, batch_first=True).cuda()
    c = torch.compile(m, fullgraph=True, mode=mode)
    with torch.no_grad():
        for i in range(4):  # warm-up, record, replays
            x = torch.randn(1, 64, 640, device="cuda")
            if i == 3:
                before = torch.cuda.memory_stats()["allocation.all.allocated"]
            got = c(x)
            if i == 3:
                torch.cuda.synchronize()
                allocs = torch.cuda.memory_stats()["allocation.all.allocated"] - before
            assert_same(got, m(x))
    if mode == "reduce-overhead":
        assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
        assert allocs == 0, allocs


# ------------------------------------------------------------------------------------------
# Kokoro's KModel (random weights), patched and compiled
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kmodel():
    require("kokoro")
    from deploy import tts

    return ko.patch_lstm_modules(tts.kmodel(seed=0, frames_per_token=3, jitter=1.0))


def _tokens(n):
    from deploy import tts

    return tts.inputs(n, seed=n)


@pytest.mark.slow
def test_kmodel_compiles_breaking_only_at_its_durations(kmodel):
    """Compiled (aot_eager): only Kokoro's own data-dependent ops break the graph (the
    text mask's arange(lengths.max()) and the durations' repeat_interleave), none at an
    LSTM; the same durations and the same audio as eager under the counter-based noise."""
    from torch._dynamo.utils import counters

    from kokoro_lstm.noise import counter_noise

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    counters.clear()
    ids, ref_s = _tokens(12)
    f = torch.compile(kmodel.forward_with_tokens, backend=backend)
    with torch.inference_mode(), ko.exportable_packing(), counter_noise(kmodel, 7):
        audio0, dur0 = kmodel.forward_with_tokens(ids, ref_s, 1)
        audio1, dur1 = f(ids, ref_s, 1)
    reasons = sorted(counters["graph_break"])
    assert len(graphs) == 3 and all(r.startswith(("Data dependent operator",
                                                  "Dynamic shape operator")) for r in reasons), \
        reasons
    lstms = [n for g in graphs for n in kokoro_nodes(g) if "lstm_forward" in str(n.target)]
    assert len(lstms) == 6  # Kokoro's six LSTMs, one op node each
    assert torch.equal(dur0, dur1)
    torch.testing.assert_close(audio1, audio0, rtol=0, atol=1e-5)
