"""kokoro_lstm.cli: `kokoro-lstm port-encoder` (kokoro-tvm's port_encoder.py drop-in)
and `kokoro-lstm demo`.

Compiles are shared through module-scoped fixtures: each (component, method) pair is
ported once at a small static length and the tests below inspect its outputs.
"""
import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

from conftest import require

torch = require("torch")
tvm = require("tvm")

from tvm import relax  # noqa: E402

from kokoro_lstm.cli import _components as C  # noqa: E402
from kokoro_lstm.cli import _kokoro_modules as own  # noqa: E402
from kokoro_lstm.cli import main  # noqa: E402
from kokoro_lstm.cli.port_encoder import format_table, parse_target  # noqa: E402
from kokoro_lstm.cli.port_encoder import main as pe_main  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = 16  # --seq-len and --aligned-len of every port here
LSTM_COMPONENTS = ("text_encoder", "duration", "f0n")
METHODS = ("native", "tir")
CFG = C.load_config(None)
TOL = 1e-4


def _port(out_dir, component, method="native", *extra):
    argv = ["port-encoder", "--component", component, "--lstm-method", method,
            "--seq-len", str(T), "--aligned-len", str(T), "--validate",
            "--output-dir", str(out_dir), *extra]
    if "--checkpoint" not in extra:
        argv.append("--no-weights")
    return main(argv)


def _report(out_dir, component):
    with open(os.path.join(out_dir, f"{component}_report.json"), encoding="utf-8") as f:
        return json.load(f)


def _subprocess(code, *args, env=None, check=True):
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


def _vm_outputs(lib_path, function, inputs):
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(lib_path)), tvm.cpu())
    res = vm[function](*[tvm.runtime.tensor(np.asarray(a)) for a in inputs])
    return [r.numpy() for r in res]


def _inputs(component, length, seed=7):
    gen = torch.Generator().manual_seed(seed)
    return C.example_inputs(component, CFG, T, length, gen)


# --------------------------------------------------------------------------------------
# end to end: every LSTM component with native and tir, --validate
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    """{(component, method): (exit status, output dir)}, ported once."""
    base = tmp_path_factory.mktemp("ported")
    out = {}
    for method in METHODS:
        for comp in LSTM_COMPONENTS:
            d = base / method
            out[comp, method] = (_port(d, comp, method), d)
    return out


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("component", LSTM_COMPONENTS)
def test_port_end_to_end(ported, component, method):
    rc, d = ported[component, method]
    assert rc == 0
    for suffix in ("_compiled.so", "_ir.py", "_report.json"):
        assert (d / f"{component}{suffix}").is_file()
    r = _report(d, component)
    assert r["component"] == component and r["function"] == f"{component}_forward"
    assert r["lstm_method"] == method and r["lstm_semantics"] == "packed"
    assert r["modules"].startswith("kokoro")
    v = r["validation"]
    assert v["passed"] and v["max_err"] <= TOL and v["lengths"][0] == T
    assert len(v["lengths"]) == 2 and 1 <= v["lengths"][1] < T
    if component != "f0n":
        # packed: a shorter text padded to T gives the unpadded text's numbers
        assert v["padding_error"] is not None and v["padding_error"] <= TOL
    assert r["runtime_ms"] > 0 and r["torch_eager_ms"] > 0 and r["compile_s"] > 0
    ir = (d / f"{component}_ir.py").read_text()
    assert f"def {component}_forward(" in ir
    assert r["ir_lines"] == ir.count("\n") + 1
    assert ('"kokoro_lstm.lstm_forward_v2"' in ir) == (method == "native")
    n_lstm = {"text_encoder": 1, "duration": 4, "f0n": 1}[component]
    assert sum(r["lstm_ops_in_export"].values()) == n_lstm
    # duration with native: the style fold (exact algebra cut) on all four LSTMs
    cut = component == "duration" and method == "native"
    assert r["algebra_cuts"]["applied"] == (["style_fold"] if cut else [])
    assert r["lstm_ops_in_export"].get(
        "kokoro.lstm_forward_gated.default" if cut
        else "kokoro.lstm_forward_packed_bidirectional.default") == n_lstm
    if component == "duration" and method == "tir":
        assert "cuts need 'native'" in r["algebra_cuts"]["detail"]["style_fold"]
    if component == "f0n":
        assert r["algebra_cuts"]["detail"]["style_fold"].startswith("not applicable")
    want_in = {"text_encoder": [[1, T], [1], [1, T]],
               "duration": [[1, 512, T], [1, 128], [1], [1, T]],
               "f0n": [[1, 640, T], [1, 128], [1]]}[component]
    want_out = {"text_encoder": [[1, 512, T]], "duration": [[1, T, 50], [1, T, 640]],
                "f0n": [[1, 2 * T], [1, 2 * T]]}[component]
    assert [i["shape"] for i in r["inputs"]] == want_in
    assert [o["shape"] for o in r["outputs"]] == want_out


def test_summary_table_and_report_reader(ported):
    reports = [_report(ported[c, m][1], c) for m in METHODS for c in LSTM_COMPONENTS]
    table = format_table(reports).splitlines()
    assert table[0].split()[:2] == ["component", "method"]
    assert "max err" in table[0] and "runtime ms" in table[0] and "IR lines" in table[0]
    assert len(table) == 2 + len(reports)
    assert not any("FAIL" in row for row in table)


def test_library_reloads_in_fresh_process(ported, tmp_path):
    """Each .so loads in a new process (native: after `import kokoro_lstm`) and gives
    the same outputs as in this process."""
    cases = []
    for (comp, method), (_, d) in sorted(ported.items()):
        inputs = _inputs(comp, T - 5)
        arrays = [a.numpy() for a in inputs]
        expected = _vm_outputs(d / f"{comp}_compiled.so", f"{comp}_forward", arrays)
        np.savez(tmp_path / f"{comp}_{method}_in.npz", *arrays)
        np.savez(tmp_path / f"{comp}_{method}_out.npz", *expected)
        cases.append(f"{d / f'{comp}_compiled.so'}|{comp}|{method}")
    code = """
        import sys
        import kokoro_lstm  # registers the native engine function for tvm
        import numpy as np, tvm
        from tvm import relax
        tmp = sys.argv[1]
        for case in sys.argv[2:]:
            lib, comp, method = case.split("|")
            vm = relax.VirtualMachine(tvm.runtime.load_module(lib), tvm.cpu())
            ins = [tvm.runtime.tensor(a) for a in np.load(f"{tmp}/{comp}_{method}_in.npz").values()]
            got = [r.numpy() for r in vm[comp + "_forward"](*ins)]
            exp = list(np.load(f"{tmp}/{comp}_{method}_out.npz").values())
            assert len(got) == len(exp), case
            assert all(np.array_equal(g, e) for g, e in zip(got, exp)), case
        print("ok", len(sys.argv) - 2)
    """
    out = _subprocess(code, str(tmp_path), *cases).stdout
    assert out.strip() == f"ok {len(cases)}"


_BLOCKED_RELOAD = """
    import sys

    class _Block:
        # kokoro_lstm must not be needed where the artifact runs
        def find_spec(self, name, path=None, target=None):
            if name == "kokoro_lstm" or name.startswith("kokoro_lstm."):
                raise ImportError("kokoro_lstm is blocked in this process")
            return None

    sys.meta_path.insert(0, _Block())
    import numpy as np, tvm
    from tvm import relax
    try:
        import kokoro_lstm  # noqa: F401
        raise SystemExit("kokoro_lstm was importable")
    except ImportError:
        pass
    tmp = sys.argv[1]
    for case in sys.argv[2:]:
        lib, comp, key = case.split("|")
        vm = relax.VirtualMachine(tvm.runtime.load_module(lib), tvm.cpu())
        ins = [tvm.runtime.tensor(a) for a in np.load(f"{tmp}/{key}_in.npz").values()]
        got = [r.numpy() for r in vm[comp + "_forward"](*ins)]
        exp = list(np.load(f"{tmp}/{key}_out.npz").values())
        assert len(got) == len(exp), case
        for g, e in zip(got, exp):
            err = float(np.abs(g.astype(np.float64) - e).max())
            assert err <= 1e-4 * max(1.0, float(np.abs(e).max())), (case, err)
    assert not any(m.startswith("kokoro_lstm") for m in sys.modules)
    print("ok", len(sys.argv) - 2)
"""


def test_default_method_reloads_without_kokoro_lstm(ported, tmp_path, km):
    """The default port (native LSTM, native dense ops) of every component loads and
    runs in a process where kokoro_lstm cannot be imported, matching PyTorch."""
    base = tmp_path / "bert"
    assert pe_main(["--component", "bert", "--bert-seq-len", str(T), "--no-weights",
                    "--validate", "--output-dir", str(base)]) == 0
    libs = {c: ported[c, "native"][1] / f"{c}_compiled.so" for c in LSTM_COMPONENTS}
    libs["bert"] = base / "bert_compiled.so"
    cases = []
    for comp, lib in sorted(libs.items()):
        r = _report(lib.parent, comp)
        assert r["validation"]["passed"] and r["dense_method"] == "native"
        assert r["runtime_needs"]["engine_linked"] and r["dense_calls"]
        if comp in ("text_encoder", "f0n"):  # weight-normed k = 3 / 5 convs on panels
            assert r["dense_packed_weights"]["convs"] > 0
        inputs = _inputs(comp, T - 3)
        model = C.build_component(comp, CFG, km, seed=0)
        with torch.no_grad():
            want = [t.numpy().astype(np.float64) for t in model(*inputs)]
        np.savez(tmp_path / f"{comp}_in.npz", *[a.numpy() for a in inputs])
        np.savez(tmp_path / f"{comp}_out.npz", *want)
        cases.append(f"{lib}|{comp}|{comp}")
    out = _subprocess(_BLOCKED_RELOAD, str(tmp_path), *cases).stdout
    assert out.strip() == f"ok {len(cases)}"


def test_dense_method_tvm_is_self_contained(tmp_path):
    """--dense-method tvm: TVM's own matmul/conv loops; the LSTM still native."""
    assert _port(tmp_path, "text_encoder", "tir", "--dense-method", "tvm") == 0
    r = _report(tmp_path, "text_encoder")
    assert r["dense_method"] == "tvm" and r["dense_calls"] == {}
    assert not r["runtime_needs"]["engine_linked"]
    assert r["validation"]["passed"]


def test_compiled_matches_eager_and_ignores_padding(ported, km):
    """The compiled text_encoder against Kokoro's TextEncoder built with the same seed:
    on a padded input it equals the unpadded eager result on the valid steps."""
    d = ported["text_encoder", "native"][1]
    model = C.build_component("text_encoder", CFG, km, seed=0)  # the CLI's --seed 0
    L = 9
    inputs = _inputs("text_encoder", L, seed=11)
    got = _vm_outputs(d / "text_encoder_compiled.so", "text_encoder_forward",
                      [a.numpy() for a in inputs])[0]
    with torch.no_grad():
        want = model(*inputs)[0].numpy()
        unpadded = model(*C.truncate_inputs("text_encoder", inputs, L))[0].numpy()
    assert np.abs(got - want).max() <= TOL
    assert np.abs(got[..., :L] - unpadded).max() <= TOL
    assert not got[..., L:].any()  # Kokoro masks the padding


# --------------------------------------------------------------------------------------
# algebra cuts
# --------------------------------------------------------------------------------------
def test_no_algebra_cuts_gives_the_same_numbers(ported, tmp_path):
    """--no-algebra-cuts exports Kokoro's graph as it is; both validate against
    PyTorch, and the two libraries agree on the same inputs (full and short)."""
    assert _port(tmp_path, "duration", "native", "--no-algebra-cuts") == 0
    r = _report(tmp_path, "duration")
    assert r["algebra_cuts"]["applied"] == [] and r["validation"]["passed"]
    assert "--no-algebra-cuts" in r["algebra_cuts"]["detail"]["all"]
    assert r["lstm_ops_in_export"] == {"kokoro.lstm_forward_packed_bidirectional.default": 4}
    cut_dir = ported["duration", "native"][1]
    for L in (T, 5):
        inputs = [a.numpy() for a in _inputs("duration", L, seed=3)]
        a = _vm_outputs(cut_dir / "duration_compiled.so", "duration_forward", inputs)
        b = _vm_outputs(tmp_path / "duration_compiled.so", "duration_forward", inputs)
        for x, y in zip(a, b):
            assert np.abs(x - y).max() <= TOL


@pytest.mark.parametrize("own_modules", [False, True])
def test_style_fold_is_exact_in_eager(km, own_modules):
    """The cut wrapper against the original component in eager PyTorch (Kokoro's
    modules and this package's copies), full and short lengths, at Kokoro's sizes."""
    from kokoro_lstm.cli import _cuts

    model = C.build_component("duration", CFG, own if own_modules else km, seed=1)
    cut, info = _cuts.apply_cuts("duration", model, "packed")
    assert cut is not model and info["style_fold"].startswith("applied")
    for L in (T, 1, 7):
        inputs = _inputs("duration", L, seed=L)
        with torch.no_grad():
            want, got = model(*inputs), cut(*inputs)
        for a, b in zip(want, got):  # float32 rounding, relative to d's values (up to ~6)
            assert a.shape == b.shape and (a - b).abs().max() <= 1e-5 * max(1.0, b.abs().max())
    # padded semantics: the padded steps' style columns are masked to 0, not folded
    same, info = _cuts.apply_cuts("duration", model, "padded")
    assert same is model and info["style_fold"].startswith("not applied: padded")
    assert _cuts.apply_cuts("text_encoder", model, "packed")[1] == {}


def test_token_rate_projection_is_exact_in_eager(km):
    """f0n from d and frame_token: the reference builds en = d^T @ alignment exactly as
    Kokoro does (so it equals f0n on that en), and the cut (projection at token rate,
    gathered to frames) matches it; full and short frame lengths."""
    from kokoro_lstm.cli import _cuts

    ref = C.build_component("f0n", CFG, km, seed=2, f0n_input="d")
    plain = C.build_component("f0n", CFG, km, seed=2)
    cut, info = _cuts.apply_cuts("f0n", ref, "packed")
    assert info[_cuts.TOKEN_RATE].startswith("applied") and cut is not ref
    for L in (24, 9):
        d, ft, style, ln = C.example_inputs("f0n", CFG, 24, L, torch.Generator().manual_seed(L),
                                            n_tokens=7)
        assert ft.min() >= 0 and ft.max() < 7 and (ft.diff() >= 0).all()
        aln = torch.zeros(1, 7, 24)
        aln[0, ft[0], torch.arange(24)] = 1  # Kokoro's pred_aln_trg
        with torch.no_grad():
            want = plain(d.transpose(-1, -2) @ aln, style, ln)
            got_ref, got_cut = ref(d, ft, style, ln), cut(d, ft, style, ln)
        for a, b, c in zip(want, got_ref, got_cut):
            assert (a - b).abs().max() <= 1e-5 and (a - c).abs().max() <= 1e-5
    _, info = _cuts.apply_cuts("f0n", plain, "packed")
    assert info[_cuts.TOKEN_RATE].startswith("not applicable")


def test_f0n_from_d_ports_and_validates(tmp_path):
    """--f0n-input d: the new signature validates with and without the cut, and the two
    libraries agree."""
    for sub, extra in (("cut", ()), ("uncut", ("--no-algebra-cuts",))):
        assert _port(tmp_path / sub, "f0n", "native", "--f0n-input", "d", *extra) == 0
    r, u = _report(tmp_path / "cut", "f0n"), _report(tmp_path / "uncut", "f0n")
    assert r["algebra_cuts"]["applied"] == ["token_rate_projection"] and r["f0n_input"] == "d"
    assert u["algebra_cuts"]["applied"] == [] and u["validation"]["passed"]
    assert r["validation"]["passed"] and r["validation"]["max_err"] <= TOL
    assert r["lstm_ops_in_export"] == {"kokoro.lstm_forward_gated.default": 1}
    assert [i["name"] for i in r["inputs"]] == ["d", "frame_token", "style", "frame_lengths"]
    assert [i["shape"] for i in r["inputs"]] == [[1, T, 640], [1, T], [1, 128], [1]]
    inputs = [a.numpy() for a in C.example_inputs("f0n", CFG, T, 11,
                                                  torch.Generator().manual_seed(5), n_tokens=T)]
    a = _vm_outputs(tmp_path / "cut" / "f0n_compiled.so", "f0n_forward", inputs)
    b = _vm_outputs(tmp_path / "uncut" / "f0n_compiled.so", "f0n_forward", inputs)
    for x, y in zip(a, b):
        assert np.abs(x - y).max() <= TOL


# --------------------------------------------------------------------------------------
# semantics
# --------------------------------------------------------------------------------------
def test_padded_semantics_is_kokoro_tvm_old_behaviour(tmp_path):
    """--lstm-semantics padded validates against padded eager PyTorch, but the padding
    changes the valid outputs (the reverse direction reads it first)."""
    assert _port(tmp_path, "text_encoder", "tir", "--lstm-semantics", "padded") == 0
    r = _report(tmp_path, "text_encoder")
    assert r["lstm_semantics"] == "padded" and r["validation"]["passed"]
    assert r["lstm_ops_in_export"] == {"kokoro.lstm_forward_bidirectional.default": 1}
    assert r["validation"]["padding_error"] > 1e-3


@pytest.mark.parametrize("component", LSTM_COMPONENTS)
def test_kokoro_tvm_default_flags_build_and_validate(tmp_path, component):
    """kokoro-tvm's defaults, --lstm-method topi --lstm-semantics padded, with this
    CLI's default pipeline (dense ops native, parallel schedules): dlight's Reduction
    rule raised ScheduleError on the unrolled TOPI step (c_t and h_t both outputs)
    and stopped the build; such a function is now left to TVM's default schedule."""
    assert _port(tmp_path, component, "topi", "--lstm-semantics", "padded") == 0
    r = _report(tmp_path, component)
    assert r["lstm_method"] == "topi" and r["lstm_semantics"] == "padded"
    assert r["dense_method"] == "native" and r["num_threads"] is None
    assert r["validation"]["passed"], r["validation"]


# --------------------------------------------------------------------------------------
# checkpoints
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, km):
    """A Kokoro-layout .pth with random weights: 'text_encoder' saved with a `module.`
    prefix (as in Kokoro's releases), 'predictor' without."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(1234)
        te = km.TextEncoder(512, 5, 3, 178).eval()
        pred = km.ProsodyPredictor(128, 512, 3, 50, 0.2).eval()
    with torch.no_grad():  # make the LSTM biases and norms non-trivial too
        for p in list(te.parameters()) + list(pred.parameters()):
            p.add_(0.01 * torch.randn_like(p))
    path = tmp_path_factory.mktemp("ckpt") / "kokoro-test.pth"
    torch.save({"text_encoder": {"module." + k: v for k, v in te.state_dict().items()},
                "predictor": pred.state_dict(),
                "decoder": {}}, path)
    return path, te, pred


def test_checkpoint_round_trip(checkpoint, tmp_path, km):
    path, _, _ = checkpoint
    assert _port(tmp_path, "text_encoder", "native", "--checkpoint", str(path)) == 0
    assert _port(tmp_path, "duration", "tir", "--checkpoint", str(path)) == 0
    for comp in ("text_encoder", "duration"):
        r = _report(tmp_path, comp)
        assert r["weights"] == str(path.resolve()) and r["validation"]["passed"]
    # the compiled modules against PyTorch models loaded from that checkpoint
    ck = torch.load(path, map_location="cpu", weights_only=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        te = km.TextEncoder(512, 5, 3, 178).eval()
        pred = km.ProsodyPredictor(128, 512, 3, 50, 0.2).eval()
    te.load_state_dict({k.removeprefix("module."): v for k, v in ck["text_encoder"].items()})
    pred.load_state_dict(ck["predictor"])
    L = 11
    ins = _inputs("text_encoder", L, seed=3)
    got = _vm_outputs(tmp_path / "text_encoder_compiled.so", "text_encoder_forward",
                      [a.numpy() for a in ins])
    with torch.no_grad():
        want = te(*ins)
    assert np.abs(got[0] - want.numpy()).max() <= TOL
    ins = _inputs("duration", L, seed=4)
    got = _vm_outputs(tmp_path / "duration_compiled.so", "duration_forward",
                      [a.numpy() for a in ins])
    d_en, style, ln, mask = ins
    with torch.no_grad():
        # ProsodyPredictor.forward: DurationEncoder -> packed lstm -> duration_proj
        al = torch.eye(T)[None]
        duration, _ = pred(d_en, style, ln, al, mask)
        d = pred.text_encoder(d_en, style, ln, mask)
    assert np.abs(got[0] - duration.numpy()).max() <= TOL
    assert np.abs(got[1] - d.numpy()).max() <= TOL


def test_checkpoint_missing_keys_exit_2(checkpoint, tmp_path, capsys):
    path, te, pred = checkpoint
    sd = pred.state_dict()
    del sd["shared.weight_hh_l0_reverse"], sd["F0_proj.bias"]
    bad = tmp_path / "bad.pth"
    torch.save({"predictor": sd}, bad)
    assert _port(tmp_path, "f0n", "native", "--checkpoint", str(bad)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "2 missing key(s)" in err[-1] and "shared.weight_hh_l0_reverse" in err[-1]
    assert "F0_proj.bias" in err[-1]
    # an entry the component needs is absent
    assert _port(tmp_path, "text_encoder", "native", "--checkpoint", str(bad)) == 2
    assert "no 'text_encoder' entry" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.so"))


# --------------------------------------------------------------------------------------
# Kokoro module copies (the fallback when the kokoro package is missing)
# --------------------------------------------------------------------------------------
def test_own_modules_match_kokoro(km):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pairs = [(km.TextEncoder(512, 5, 3, 178), own.TextEncoder(512, 5, 3, 178)),
                 (km.ProsodyPredictor(128, 512, 3, 50, 0.2),
                  own.ProsodyPredictor(128, 512, 3, 50, 0.2))]
    for real, mine in pairs:
        a, b = real.state_dict(), mine.state_dict()
        assert list(a) == list(b)
        assert all(a[k].shape == b[k].shape and a[k].dtype == b[k].dtype for k in a)
        assert [n for n, _ in real.named_buffers()] == [n for n, _ in mine.named_buffers()]
        mine.load_state_dict(a, strict=True)
        real.eval(), mine.eval()
    (te_r, te_o), (pp_r, pp_o) = pairs
    n = 10
    ln = torch.tensor([7])
    mask = torch.arange(n)[None] >= ln[:, None]
    tok = torch.randint(0, 178, (1, n))
    d_en, s = torch.randn(1, 512, n), torch.randn(1, 128)
    al = torch.eye(n)[None]
    with torch.no_grad():
        assert torch.equal(te_r(tok, ln, mask), te_o(tok, ln, mask))
        for x, y in zip(pp_r(d_en, s, ln, al, mask), pp_o(d_en, s, ln, al, mask)):
            assert torch.equal(x, y)
        en = torch.randn(1, 640, n)
        for x, y in zip(pp_r.F0Ntrain(en, s), pp_o.F0Ntrain(en, s)):
            assert torch.equal(x, y)
    # CustomAlbert: the same class shape (AlbertModel returning last_hidden_state)
    from transformers import AlbertConfig

    cfg = AlbertConfig(vocab_size=178, hidden_size=32, num_attention_heads=2,
                       intermediate_size=40, num_hidden_layers=2, max_position_embeddings=16)
    torch.manual_seed(0)
    r = km.CustomAlbert(cfg).eval()
    torch.manual_seed(0)
    o = own.CustomAlbert(cfg).eval()
    assert list(r.state_dict()) == list(o.state_dict())
    ids = torch.randint(0, 178, (1, 8))
    with torch.no_grad():
        assert torch.equal(r(ids), o(ids))


def test_own_modules_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("KOKORO_LSTM_FORCE_OWN_MODULES", "1")
    assert _port(tmp_path, "duration", "native") == 0
    r = _report(tmp_path, "duration")
    assert r["modules"] == "kokoro_lstm.cli._kokoro_modules" and r["validation"]["passed"]


def test_falls_back_when_kokoro_is_missing():
    code = """
        import sys
        sys.modules["kokoro"] = None  # as if not installed
        from kokoro_lstm.cli import _components as C
        km, desc = C.kokoro_modules()
        assert desc == "kokoro_lstm.cli._kokoro_modules", desc
        m = C.build_component("f0n", C.load_config(None), km)
        print(type(m.shared).__module__, sum(p.numel() for p in m.shared.parameters()))
    """
    out = _subprocess(code).stdout.split()
    assert out == ["torch.nn.modules.rnn", str(2 * (4 * 256 * (640 + 256) + 8 * 256))]


# --------------------------------------------------------------------------------------
# usage errors: exit 2, one line
# --------------------------------------------------------------------------------------
BAD = [
    (["port-encoder"], "required: --component"),
    (["port-encoder", "--component", "decoder"], "invalid choice"),
    (["port-encoder", "--component", "f0n", "--lstm-method", "cudnn"], "invalid choice"),
    (["port-encoder", "--component", "f0n", "--seq-len", "x"], "invalid int"),
    (["port-encoder", "--component", "f0n", "--checkpoint", "/nonexistent/k.pth"],
     "checkpoint file not found"),
    (["port-encoder", "--component", "f0n", "--no-weights", "--config", "/nonexistent/c.json"],
     "config file not found"),
    (["port-encoder", "--component", "f0n", "--no-weights", "--target", "rocm"],
     "unsupported target kind 'rocm'"),
    (["port-encoder", "--component", "f0n", "--no-weights", "--target", "metal-macos"],
     "needs macOS with Metal"),
    (["port-encoder", "--component", "f0n", "--no-weights", "--target", "metal-ios"],
     "needs macOS with Metal"),
    (["port-encoder", "--component", "f0n", "--no-weights", "--lstm-method", "mps"],
     "macOS"),
    (["port-encoder", "--component", "f0n", "--no-weights", "--target", "llvm -nosuch=1"],
     "invalid target"),
    (["port-encoder", "--component", "f0n", "--no-weights", "--aligned-len", "0"],
     "--aligned-len must be positive"),
    (["port-encoder", "--component", "bert", "--no-weights", "--bert-seq-len", "513"],
     "max_position_embeddings"),
    (["port-encoder", "--component", "bert", "--no-weights", "--bert-seq-len", "0"],
     "--bert-seq-len must be positive"),
    (["port-encoder", "--component", "f0n", "--no-weights", "--dense-method", "mkl"],
     "invalid choice"),
    (["port-encoder", "--component", "f0n", "--no-weights", "--checkpoint", __file__],
     "exclude each other"),
    (["port-encoder", "--component", "f0n", "--checkpoint", __file__],
     "cannot read checkpoint"),
    (["nosuch"], "invalid choice"),
    # sizes and counts are bounded before anything is allocated (issue 28: these ran
    # until the OOM killer)
    (["port-encoder", "--component", "duration", "--no-weights", "--seq-len", "1000000000"],
     "--seq-len must be in 1..512"),
    (["port-encoder", "--component", "f0n", "--no-weights", "--f0n-input", "d",
      "--seq-len", "513"], "--seq-len must be in 1..512"),
    (["port-encoder", "--component", "f0n", "--no-weights", "--aligned-len", "1000000000"],
     "--aligned-len must be in 1..25600"),
    (["port-encoder", "--component", "duration", "--no-weights", "--num-threads", "1000000000"],
     "--num-threads must be at most 512"),
    (["demo", "--seq-len", "1000000000"], "--seq-len must be in 1..512"),
    (["demo", "--num-threads", "513"], "--num-threads must be at most 512"),
    # issue 28: an overflow traceback (exit 1) before the bounds above
    (["port-encoder", "--component", "text_encoder", "--no-weights", "--seq-len", str(2**63)],
     "--seq-len must be in 1..512"),
]


BAD += [
    # issue 37: one frame died in f0n's instance norm after the export had begun
    (["port-encoder", "--component", "f0n", "--no-weights", "--aligned-len", "1"],
     "--aligned-len must be at least 2 for f0n"),
    # issue 37: beyond int64 was a traceback
    (["port-encoder", "--component", "duration", "--no-weights", "--seed", str(2**63)],
     "--seed must be in"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a[1:]) or a[0] for a, _ in BAD])
def test_usage_errors_exit_2(argv, message, capsys, tmp_path):
    try:
        rc = main(argv + ["--output-dir", str(tmp_path / "out")] if argv[0] == "port-encoder"
                  and len(argv) > 2 else argv)
    except SystemExit as e:
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "out").exists()


def test_bad_config_exit_2(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    assert _port(tmp_path, "f0n", "native", "--config", str(bad)) == 2
    assert "cannot read config" in capsys.readouterr().err
    bad.write_text(json.dumps({"hidden_dim": -4}))
    assert _port(tmp_path, "f0n", "native", "--config", str(bad)) == 2
    assert "'hidden_dim' must be a positive integer" in capsys.readouterr().err


def _one_line_error(capsys, message):
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("kokoro-lstm port-encoder: error: ") and message in last, err


def test_deeply_nested_config_exit_2(tmp_path, capsys):
    """Issue 28: json's decoder recursed past Python's limit: RecursionError, exit 1."""
    bad = tmp_path / "config.json"
    bad.write_text('{"plbert": ' + "[" * 100000 + "]" * 100000 + "}")
    assert _port(tmp_path, "text_encoder", "native", "--config", str(bad)) == 2
    _one_line_error(capsys, "nested too deeply")


def test_even_text_encoder_kernel_size_exit_2(tmp_path, capsys):
    """Issue 28: an even kernel shortens TextEncoder's output by one step; the mask no
    longer broadcast (a traceback, exit 1). Refused with the config's other checks."""
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"text_encoder_kernel_size": 4}))
    assert _port(tmp_path, "text_encoder", "native", "--config", str(bad)) == 2
    _one_line_error(capsys, "'text_encoder_kernel_size' must be odd")
    assert not list(tmp_path.glob("*.so"))


@pytest.mark.parametrize("where", ["entry", "state_dict"])
def test_checkpoint_non_string_key_exit_2(where, tmp_path, capsys):
    """Issue 28: an int key failed inside string operations ('int' object has no
    attribute 'startswith'; sorted() of mixed keys): a traceback, exit 1."""
    path = tmp_path / "bad.pth"
    if where == "entry":
        torch.save({"text_encoder": {}, 0: {}}, path)
        message = "entry key 0 is not a string"
    else:
        torch.save({"text_encoder": {0: torch.zeros(1)}}, path)
        message = "entry 'text_encoder' has the key 0, not a string"
    assert _port(tmp_path, "text_encoder", "native", "--checkpoint", str(path)) == 2
    _one_line_error(capsys, message)
    # an absent entry beside a non-string key (sorted() of the keys in its message)
    torch.save({1: {}, "predictor": {}}, path)
    assert _port(tmp_path, "text_encoder", "native", "--checkpoint", str(path)) == 2
    _one_line_error(capsys, "entry key 1 is not a string")


def test_console_entry_points_exit_2():
    """`python -m kokoro_lstm.cli.port_encoder` and `python -m kokoro_lstm.cli`: one
    line on stderr, exit 2, no traceback."""
    for argv in (["-m", "kokoro_lstm.cli.port_encoder", "--component", "f0n", "--no-weights",
                  "--target", "metal-macos"],
                 ["-m", "kokoro_lstm.cli", "port-encoder", "--component", "f0n",
                  "--checkpoint", "/nonexistent.pth"]):
        r = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in r.stderr


def test_import_is_light():
    code = """
        import sys
        import kokoro_lstm.cli
        heavy = [m for m in ("torch", "tvm", "kokoro", "transformers") if m in sys.modules]
        assert not heavy, heavy
        print("ok")
    """
    assert _subprocess(code).stdout.strip() == "ok"


def test_parse_target():
    assert parse_target("llvm") == {"kind": "llvm"}
    assert parse_target("llvm -mcpu=znver4 -mattr=+avx2,+fma -num-cores=2") == {
        "kind": "llvm", "mcpu": "znver4", "mattr": ["+avx2", "+fma"], "num-cores": 2}
    assert parse_target('{"kind": "llvm", "mcpu": "x86-64-v3"}') == {
        "kind": "llvm", "mcpu": "x86-64-v3"}
    assert parse_target("cuda -arch=sm_90a") == {"kind": "cuda", "arch": "sm_90a"}
    assert parse_target('{"kind": "cuda", "arch": "sm_80"}') == {"kind": "cuda", "arch": "sm_80"}
    for bad in ("c", "rocm", "", "metal-ios"):
        with pytest.raises(C.UsageError):
            parse_target(bad)


def test_target_variant_and_num_threads(tmp_path):
    env_before = os.environ.get("TVM_NUM_THREADS"), os.environ.get("KOKORO_LSTM_NUM_THREADS")
    threads_before = torch.get_num_threads()
    rc = _port(tmp_path, "f0n", "tir", "--target", "llvm -mcpu=x86-64 -num-cores=2",
               "--num-threads", "1")
    assert rc == 0
    # the thread settings are restored afterwards
    assert (os.environ.get("TVM_NUM_THREADS"),
            os.environ.get("KOKORO_LSTM_NUM_THREADS")) == env_before
    assert torch.get_num_threads() == threads_before
    r = _report(tmp_path, "f0n")
    assert r["target"] == "llvm -mcpu=x86-64 -num-cores=2" and '"mcpu":"x86-64"' in r["target_tvm"]
    assert r["num_threads"] == 1 and r["validation"]["passed"]
    # --num-threads is compiled into every dense extern call (their config's num_threads)
    from kokoro_lstm.tvm import dense

    ir = (tmp_path / "f0n_ir.py").read_text()
    calls = re.findall(r'"(kokoro_lstm\.(?:matmul|conv1d|conv1d_transpose_dw)_v1)", '
                       r'\(R\.shape\(\[([0-9, ]+)\]\)', ir)
    cfgs = [dense.CONFIGS[name](*map(int, vals.split(", "))) for name, vals in calls]
    assert cfgs and all(c.num_threads == 1 for c in cfgs), cfgs


def test_validation_failure_exits_1(tmp_path, capsys):
    """A tolerance nothing can meet: the port completes, validation fails, exit 1."""
    rc = _port(tmp_path, "text_encoder", "native", "--tolerance", "1e-30")
    assert rc == 1
    r = _report(tmp_path, "text_encoder")
    assert not r["validation"]["passed"]
    captured = capsys.readouterr()
    assert "validation FAILED" in captured.err and "FAIL" in captured.out


def test_compare_counts_nan_mismatches():
    """Issue 28: max(0.0, nan) == 0.0 let an all-NaN side validate with error 0. NaN on
    one side only is counted; NaN on both sides and equal infinities agree."""
    from kokoro_lstm.cli._artifact import _compare

    nan, inf = float("nan"), float("inf")
    want = np.array([[1.0, 2.0, nan, inf], [-3.0, 4.0, 5.0, -inf]])
    assert _compare(want, want) == (0.0, 0.0, 0)
    got = want.copy()
    got[0, 0], got[1, 2] = nan, 5.5  # one NaN where want is finite, one plain error
    assert _compare(got, want) == (0.5, 0.5 / 5.0, 1)
    assert _compare(want, got) == (0.5, 0.5 / 5.5, 1)
    got = np.full_like(want, nan)
    a, r, n = _compare(got, want)
    assert n == 7 and (a, r) == (0.0, 0.0)
    assert _compare(np.zeros(2, np.float32), np.full(2, nan))[2] == 2
    assert _compare(np.array([inf]), np.array([1.0]))[0] == inf
    assert _compare(np.zeros(3), np.zeros(4)) == (inf, inf, 0)


@pytest.mark.parametrize("side", ["torch", "compiled", "both"])
def test_validation_nan_fails(side, tmp_path, capsys, monkeypatch):
    """Issue 28: PyTorch's output all NaN and the artifact's finite (or the reverse)
    reported max_abs_err 0.0, passed, exit 0. Issue 37: both all NaN passed the same
    way (nothing compared), and the report held a bare NaN (not JSON). Now each fails
    (exit 1), the report counts the positions and is strict JSON."""
    import kokoro_lstm.cli._encoder_build as build
    from kokoro_lstm.cli._encoder_export import _Component

    def all_nan(arrays):
        return [np.full_like(a, np.nan) for a in arrays]

    if side in ("torch", "both"):
        eager = _Component.eager
        monkeypatch.setattr(_Component, "eager", lambda self, args: all_nan(eager(self, args)))
    if side in ("compiled", "both"):
        as_list = build._as_list
        monkeypatch.setattr(build, "_as_list", lambda res: all_nan(as_list(res)))
    assert _port(tmp_path, "text_encoder", "native") == 1
    with open(os.path.join(tmp_path, "text_encoder_report.json"), encoding="utf-8") as f:
        rep = json.load(f, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    v = rep["validation"]
    n = 2 * 512 * T  # both input sets, every position of t_en [1, 512, T]
    mismatch, both = (0, n) if side == "both" else (n, 0)
    assert not v["passed"] and v["nan_mismatch"] == mismatch and v["nan_both"] == both, v
    assert v["outputs"]["t_en"]["nan_mismatch"] == mismatch
    captured = capsys.readouterr()
    if side == "both":
        assert f"NaN on both sides at {n} positions" in captured.err
    else:
        assert f"NaN on one side only at {n} positions" in captured.err
    assert "FAIL" in captured.out


def test_reports_are_strict_json(tmp_path):
    """NaN and infinities are written as null (json.dump's default writes NaN)."""
    from kokoro_lstm.cli._artifact import write_report

    path = tmp_path / "r.json"
    write_report(path, {"a": float("nan"), "b": [1.5, float("inf")], "c": {"d": -float("inf")}})
    text = path.read_text()
    assert json.loads(text) == {"a": None, "b": [1.5, None], "c": {"d": None}}
    assert "NaN" not in text and "Infinity" not in text


# --------------------------------------------------------------------------------------
# bert and the demo (the biggest)
# --------------------------------------------------------------------------------------
def test_bert_length_defaults_to_kokoro_tvm():
    """bert is exported at 512 tokens whatever --seq-len says (kokoro-tvm's
    port_encoder.py; its validation feeds (1, 512)); --bert-seq-len overrides."""
    from kokoro_lstm.cli.port_encoder import build_parser, resolve_bert_seq_len

    args = build_parser().parse_args(["--component", "bert", "--seq-len", "64"])
    assert args.bert_seq_len is None and args.seq_len == 64
    assert args.dense_method == "native"  # on every target (on cuda: convolutions, products)
    assert resolve_bert_seq_len(CFG, args.bert_seq_len) == 512
    assert resolve_bert_seq_len(CFG, 64) == 64
    with pytest.raises(C.UsageError, match="max_position_embeddings"):
        resolve_bert_seq_len(CFG, 600)


@pytest.mark.slow
def test_bert_end_to_end(tmp_path):
    rc = pe_main(["--component", "bert", "--seq-len", "4", "--bert-seq-len", "8", "--no-weights",
                  "--validate", "--output-dir", str(tmp_path)])
    assert rc == 0
    r = _report(tmp_path, "bert")
    assert r["bert_seq_len"] == 8 and r["static_length"] == 8 and r["seq_len"] == 4
    assert r["dense_method"] == "native" and r["dense_calls"]["kokoro_lstm.matmul_v1"] > 0
    # every layer's attention fused (padding masked: 4 of 8 keys), GELU in the FFN matmul
    assert r["dense_calls"].get("kokoro_lstm.attention_v1", 0) > 0
    assert "kokoro_lstm.softmax_v1" not in r["dense_calls"]
    # linears on weights packed at compile time; ALBERT's 12 layers share one set
    packed = r["dense_packed_weights"]
    assert 0 < packed["constants"] < packed["matmuls"] <= r["dense_calls"]["kokoro_lstm.matmul_v1"]
    assert r["runtime_needs"]["engine_linked"]
    assert [i["shape"] for i in r["inputs"]] == [[1, 8], [1, 8]]
    assert [o["shape"] for o in r["outputs"]] == [[1, 512, 8]]
    assert r["validation"]["passed"] and r["validation"]["padding_error"] <= TOL
    assert r["lstm_ops_in_export"] == {}


@pytest.mark.slow
def test_demo_subcommand(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kokoro_lstm.cli", "demo", "--seq-len", "8",
                        "--methods", "native", "tir", "relax", "--output-dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    rows = [ln.split() for ln in r.stdout.splitlines()]
    body = [row for row in rows if row and row[0] in ("text_encoder", "duration")]
    assert sorted((row[0], row[1]) for row in body) == sorted(
        (c, m) for c in ("text_encoder", "duration") for m in ("native", "tir", "relax"))
    assert all(row[2] == "native" for row in body)  # the dense method column
    assert all(row[3] == ("style_fold" if row[:2] == ["duration", "native"] else "-")
               for row in body)  # the algebra cuts column
    ir = {(row[0], row[1]): int(row[4]) for row in body}
    assert ir["duration", "relax"] > ir["duration", "tir"] > ir["duration", "native"]
    for m in ("native", "tir", "relax"):
        assert (tmp_path / m / "duration_compiled.so").is_file()


def test_unwritable_output_dir_exit_2_before_the_build(tmp_path, capsys):
    """Issue 37: an existing, unwritable --output-dir was found when the first file was
    written, after the export (exit 1); now before anything is built."""
    if os.geteuid() == 0:
        d = "/proc"  # os.access says yes to root; creating a file there fails
    else:
        d = str(tmp_path / "ro")
        os.mkdir(d, 0o555)
    t0 = time.perf_counter()
    rc = main(["port-encoder", "--component", "duration", "--no-weights", "--seq-len", "8",
               "--output-dir", d])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "--output-dir" in err[0] and "is not writable" in err[0], err
    assert time.perf_counter() - t0 < 60


@pytest.mark.parametrize("command", ["port-encoder", "port-decoder", "demo"])
def test_help_shows_defaults(command):
    """Issue 37: `port-encoder --help` showed no defaults."""
    r = subprocess.run([sys.executable, "-m", "kokoro_lstm.cli", command, "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.split())
    want = {"port-encoder": ["(default: 512)", "(default: tvm_output)", "(default: 0)",
                             "(default: llvm)", "(default: auto)"],
            "port-decoder": ["(default 150)", "(default: llvm)", "(default: 0)"],
            "demo": ["(default 32)", "(default: llvm)", "(default: packed)"]}[command]
    missing = [w for w in want if w not in flat]
    assert not missing, (missing, r.stdout)


# --------------------------------------------------------------------------------------
# Ctrl-C
# --------------------------------------------------------------------------------------
def _default_sigint():
    """In the child before exec: SIGINT handled and unblocked, as a user's shell starts a
    command, whatever the test process's own state (in the full suite its children
    started with SIGINT not acted upon)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def interrupt_during(argv, step, out_dir, delay=2.0, timeout=900):
    """Runs `python -m kokoro_lstm.cli argv` and sends SIGINT ``delay`` s after stderr
    shows ``step`` starting; returns (exit status, stderr, files left in out_dir)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-m", "kokoro_lstm.cli", *argv], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=_default_sigint)
    err, sent, end = b"", None, time.monotonic() + timeout
    try:
        os.set_blocking(p.stderr.fileno(), False)
        while p.poll() is None and time.monotonic() < end:
            if select.select([p.stderr], [], [], 0.1)[0]:
                err += p.stderr.read() or b""
            if sent is None and step.encode() in err:
                time.sleep(delay)
                p.send_signal(signal.SIGINT)
                sent = time.monotonic()
        p.wait(timeout=max(1.0, end - time.monotonic()))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err += p.stderr.read() or b""
    assert sent is not None, f"{step!r} never started:\n{err.decode()[-3000:]}"
    files = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []
    return p.returncode, err.decode(), files


def test_ctrl_c_during_the_build_exits_130(tmp_path):
    """Ctrl-C while port-encoder builds: exit 130, one line, and no file of the
    component left (its IR was written before the build, and stayed)."""
    out = tmp_path / "out"
    rc, err, files = interrupt_during(
        ["port-encoder", "--component", "text_encoder", "--seq-len", str(T), "--no-weights",
         "--output-dir", str(out)], "[text_encoder] build ...", out, delay=0.3)
    assert rc == 130, err[-3000:]
    assert err.rstrip().splitlines()[-1] == "kokoro-lstm port-encoder: interrupted", err[-3000:]
    assert files == [], files
