"""kokoro_lstm.tvm: Relax lowering of the kokoro ops and aten lstm, every method.

Compiled modules are shared through module-level caches: one compile per (method, T)
serves the whole {unidirectional, bidirectional} x {no lengths, lengths} matrix (a
single exported program runs the four kokoro ops side by side).
"""
import functools
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import require

tvm = require("tvm")
torch = require("torch")

from tvm import relax  # noqa: E402

import kokoro_lstm.torch_ops  # noqa: E402,F401  (registers torch.ops.kokoro.*)
import kokoro_lstm.tvm as kt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ["topi", "relax", "tir", "native"]
UNROLLED = ("topi", "relax")
I, H, B = 6, 16, 3
TOL = 1e-5
ops = torch.ops.kokoro


def _weights(lstm):
    """kokoro op weight arguments of a one-layer nn.LSTM (None for absent biases)."""
    out = []
    for sfx in ("", "_reverse")[:2 if lstm.bidirectional else 1]:
        for n in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            out.append(getattr(lstm, n + sfx, None))
    return out


def _lengths(T):
    return torch.tensor([max(1, T - 3), T, max(1, (T + 1) // 2)], dtype=torch.int64)


def _torch_lstm(lstm, x, hx, lengths=None):
    """torch.nn.LSTM reference; lengths: pack_padded(enforce_sorted=False) semantics."""
    with torch.no_grad():
        if lengths is None:
            y, (h, c) = lstm(x, hx)
        else:
            bf = lstm.batch_first
            pk = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=bf,
                                                         enforce_sorted=False)
            y, (h, c) = lstm(pk, hx)
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(
                y, batch_first=bf, total_length=x.shape[1 if bf else 0])
    return [y.numpy(), h.numpy(), c.numpy()]


class Quad(torch.nn.Module):
    """The four kokoro ops side by side: (uni, bi) x (no lengths, lengths)."""

    CASES = [(False, False), (True, False), (False, True), (True, True)]  # (bi, packed)

    def __init__(self):
        super().__init__()
        self.lstms = torch.nn.ModuleList(
            [torch.nn.LSTM(I, H, bidirectional=bi) for bi, _ in self.CASES])

    def forward(self, x, lengths, h1, c1, h2, c2):
        outs = []
        for (bi, packed), lstm in zip(self.CASES, self.lstms):
            h, c = (h2, c2) if bi else (h1, c1)
            w = _weights(lstm)
            if packed:
                f = ops.lstm_forward_packed_bidirectional if bi else ops.lstm_forward_packed
                outs.append(f(x, lengths, h, c, *w))
            else:
                f = ops.lstm_forward_bidirectional if bi else ops.lstm_forward
                outs.append(f(x, h, c, *w))
        return tuple(outs)


@functools.lru_cache(maxsize=None)
def _quad(T):
    """(decomposed ExportedProgram, numpy inputs, expected: 4 x [y, h_n, c_n])."""
    torch.manual_seed(T)
    model = Quad().eval()
    x = torch.randn(T, B, I)
    lengths = _lengths(T)
    h1, c1 = torch.randn(1, B, H), torch.randn(1, B, H)
    h2, c2 = torch.randn(2, B, H), torch.randn(2, B, H)
    args = (x, lengths, h1, c1, h2, c2)
    ep = torch.export.export(model, args).run_decompositions(kt.decomposition_table())
    expected = []
    for (bi, packed), lstm in zip(Quad.CASES, model.lstms):
        hx = (h2, c2) if bi else (h1, c1)
        expected.append(_torch_lstm(lstm, x, hx, lengths if packed else None))
    return ep, [a.numpy() for a in args], expected


def _compile(mod):
    return relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())


def _run(vm, inputs, mod=None):
    args = [tvm.runtime.tensor(a) for a in inputs]
    if mod is not None and mod["main"].attrs is not None and "params" in mod["main"].attrs:
        args += list(mod["main"].attrs["params"])
    res = vm["main"](*args)
    return [r.numpy() for r in res]


@functools.lru_cache(maxsize=None)
def _quad_outputs(method, T, keep_params_as_input=False):
    ep, inputs, _ = _quad(T)
    mod = kt.from_exported_program(ep, lstm_method=method, run_ep_decomposition=False,
                                   keep_params_as_input=keep_params_as_input)
    return _run(_compile(mod), inputs, mod)


def _check(got, expected, what=""):
    names = ("output", "h_n", "c_n")
    assert len(got) == len(expected)
    for name, g, e in zip(names, got, expected):
        assert g.shape == e.shape, f"{what} {name}: shape {g.shape} != {e.shape}"
        err = float(np.abs(g - e).max())
        assert err <= TOL, f"{what} {name}: max abs err {err:.3g} > {TOL}"


def _matrix_params():
    out = []
    for method in METHODS:
        for T in (1, 7, 64):
            for bi in (False, True):
                for packed in (False, True):
                    marks = [pytest.mark.slow] if (method in UNROLLED and T == 64) else []
                    out.append(pytest.param(
                        method, T, bi, packed, marks=marks,
                        id=f"{method}-T{T}-{'bi' if bi else 'uni'}-{'len' if packed else 'nolen'}"))
    return out


# ----------------------------------------------------------------------------------
# The matrix: method x direction x lengths x T, against torch.nn.LSTM
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("method,T,bi,packed", _matrix_params())
def test_matrix_vs_torch(method, T, bi, packed):
    k = Quad.CASES.index((bi, packed))
    got = _quad_outputs(method, T)[3 * k:3 * k + 3]
    _check(got, _quad(T)[2][k], f"{method} T={T} bi={bi} packed={packed}")


@pytest.mark.parametrize("method", METHODS)
def test_params_as_inputs(method):
    """keep_params_as_input=True: the weights are runtime inputs, not constants."""
    got = _quad_outputs(method, 7, keep_params_as_input=True)
    for k, expected in enumerate(_quad(7)[2]):
        _check(got[3 * k:3 * k + 3], expected, f"{method} case {Quad.CASES[k]}")


# ----------------------------------------------------------------------------------
# aten lstm.input (exported without decomposing the LSTM): layers, batch_first, proj
# ----------------------------------------------------------------------------------
class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.LSTM(I, H, num_layers=2, bidirectional=True, batch_first=True)
        self.b = torch.nn.LSTM(I, 12, num_layers=3, bias=False)
        self.c = torch.nn.LSTM(I, H, num_layers=2, bidirectional=True, proj_size=5)

    def forward(self, x, h, c):
        ya, (ha, ca) = self.a(x.transpose(0, 1), (h, c))
        yb, (hb, cb) = self.b(x)
        yc, (hc, cc) = self.c(x)
        return ya, ha, ca, yb, hb, cb, yc, hc, cc


@functools.lru_cache(maxsize=None)
def _stack():
    torch.manual_seed(1)
    model = Stack().eval()
    T = 7
    x = torch.randn(T, B, I)
    h, c = torch.randn(4, B, H), torch.randn(4, B, H)
    ep = torch.export.export(model, (x, h, c))
    with torch.no_grad():
        expected = [t.numpy() for t in model(x, h, c)]
    return ep, [x.numpy(), h.numpy(), c.numpy()], expected


@pytest.mark.parametrize("method", METHODS)
def test_aten_multilayer(method):
    ep, inputs, expected = _stack()
    assert any(n.target is torch.ops.aten.lstm.input for n in ep.graph.nodes)
    mod = kt.from_exported_program(ep, lstm_method=method)
    got = _run(_compile(mod), inputs)
    for k, what in enumerate(("2-layer bi batch_first", "3-layer no-bias", "2-layer bi proj")):
        _check(got[3 * k:3 * k + 3], expected[3 * k:3 * k + 3], f"{method} {what}")


def test_upstream_importer_with_convert_map():
    """The plain upstream entry point with convert_map() (no decomposition)."""
    from tvm.relax.frontend.torch import from_exported_program

    ep, inputs, expected = _stack()
    mod = from_exported_program(ep, custom_convert_map=kt.convert_map("tir"),
                                run_ep_decomposition=False)
    got = _run(_compile(mod), inputs)
    _check(got[:3], expected[:3], "upstream importer + convert_map")


@pytest.mark.parametrize("method", ["tir", "native"])
def test_float64(method):
    torch.manual_seed(2)
    lstm = torch.nn.LSTM(I, H, bidirectional=True).double().eval()
    x = torch.randn(5, B, I, dtype=torch.float64)
    ep = torch.export.export(lstm, (x,))
    got = _run(_compile(kt.from_exported_program(ep, lstm_method=method)), [x.numpy()])
    expected = _torch_lstm(lstm, x, None)
    for g, e in zip(got, expected):
        assert g.dtype == np.float64 and np.abs(g - e).max() < 1e-12


@functools.lru_cache(maxsize=None)
def _dynamic_ep():
    """A packed bidirectional kokoro op exported with a symbolic T (2..1024)."""
    torch.manual_seed(3)
    lstm = torch.nn.LSTM(I, H, bidirectional=True).eval()

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = lstm

        def forward(self, x, lengths):
            h0 = x.new_zeros(2, B, H)
            w = _weights(self.lstm)
            return (ops.lstm_forward_packed_bidirectional(x, lengths, h0, h0, *w),
                    ops.lstm_forward_bidirectional(x, h0, h0, *w))

    T = torch.export.Dim("T", min=2, max=1024)
    x = torch.randn(9, B, I)
    ep = torch.export.export(M().eval(), (x, _lengths(9)), dynamic_shapes=({0: T}, None))
    return ep, lstm


@pytest.mark.parametrize("method", ["tir", "native"])
def test_dynamic_sequence_length(method):
    """tir/native take a symbolic T: one compiled module serves every length."""
    ep, lstm = _dynamic_ep()
    vm = _compile(kt.from_exported_program(ep, lstm_method=method))
    for t in (4, 9, 30):
        x = torch.randn(t, B, I)
        got = _run(vm, [x.numpy(), _lengths(t).numpy()])
        _check(got[:3], _torch_lstm(lstm, x, None, _lengths(t)), f"{method} T={t} lengths")
        _check(got[3:], _torch_lstm(lstm, x, None), f"{method} T={t}")


def test_kokoro_style_patched_model():
    """A Kokoro-style module (batch_first, pack_padded_sequence(enforce_sorted=False))
    patched with torch_ops, exported under exportable_packing(), lowered natively."""
    from kokoro_lstm.torch_ops import exportable_packing, patch_lstm_modules

    class Enc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(I, H, batch_first=True, bidirectional=True)

        def forward(self, x, lengths):
            p = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                        enforce_sorted=False)
            y, _ = self.lstm(p)
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True,
                                                          total_length=x.shape[1])
            return y

    torch.manual_seed(4)
    model = Enc().eval()
    x, lengths = torch.randn(B, 11, I), _lengths(11)
    with torch.no_grad():
        expected = model(x, lengths).numpy()
    patch_lstm_modules(model)
    with exportable_packing():
        ep = torch.export.export(model, (x, lengths))
    for method in ("native", "tir"):
        got = _run(_compile(kt.from_exported_program(ep, lstm_method=method)),
                   [x.numpy(), lengths.numpy()])
        assert np.abs(got[0] - expected).max() <= TOL, method


# ----------------------------------------------------------------------------------
# IR size: tir/native independent of T, unrolled methods grow
# ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _ir_ep(T):
    torch.manual_seed(5)
    lstm = torch.nn.LSTM(I, H).eval()
    return torch.export.export(lstm, (torch.randn(T, 1, I),))  # keeps one aten.lstm node


def _ir_lines(method, T):
    mod = kt.from_exported_program(_ir_ep(T), lstm_method=method, run_ep_decomposition=False)
    return kt.ir_size(mod)["lines"]


@pytest.mark.parametrize("method", METHODS)
def test_ir_size(method):
    small, large = _ir_lines(method, 16), _ir_lines(method, 512)
    if method in UNROLLED:
        assert large > 10 * small, (method, small, large)
    else:
        assert large == small, (method, small, large)
        assert small < 200, (method, small)


# ----------------------------------------------------------------------------------
# Native runtime: weight cache freshness, registration, exported libraries
# ----------------------------------------------------------------------------------
def test_native_weights_never_stale():
    """Weights passed as inputs and updated in place are re-packed, not served stale."""
    torch.manual_seed(6)
    lstm = torch.nn.LSTM(I, H, bidirectional=True).eval()
    x = torch.randn(5, B, I)
    ep = torch.export.export(lstm, (x,))
    mod = kt.from_exported_program(ep, lstm_method="native", keep_params_as_input=True)
    vm = _compile(mod)
    params = [tvm.runtime.tensor(p.numpy()) for p in mod["main"].attrs["params"]]
    xin = tvm.runtime.tensor(x.numpy())

    def run():
        return [r.numpy() for r in vm["main"](xin, *params)]

    _check(run(), _torch_lstm(lstm, x, None))
    _check(run(), _torch_lstm(lstm, x, None))  # cache hit
    info = kt.cache_info()
    # one element of one weight, changed in place (same tensor, same address)
    names = [n for n, _ in lstm.named_parameters()]
    k = names.index("weight_hh_l0_reverse")
    w = params[k].numpy()
    w[3, 4] += 0.5
    params[k].copyfrom(w)
    with torch.no_grad():
        getattr(lstm, "weight_hh_l0_reverse")[3, 4] += 0.5
    _check(run(), _torch_lstm(lstm, x, None), "after in-place update")
    assert kt.cache_info()["repacks"] == info["repacks"] + 1


def _subprocess(code, *args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def test_import_is_light_and_registers_lazily():
    out = _subprocess("""
        import sys
        import kokoro_lstm, kokoro_lstm.tvm
        assert "tvm" not in sys.modules and "torch" not in sys.modules, "heavy import"
        assert "tvm_ffi" not in sys.modules
        import tvm_ffi
        print(tvm_ffi.get_global_func("kokoro_lstm.lstm_forward_v2", allow_missing=True) is not None)
    """)
    assert out.strip() == "True"


def test_native_function_errors_name_the_argument():
    """The C function validates through the engine's entry: errors come back through
    tvm-ffi as Python exceptions naming the argument."""
    import tvm_ffi

    f = tvm_ffi.get_global_func(kt.NATIVE_FUNC_NAME)
    T_, B_, I_, H_ = 3, 2, 4, 5
    t = lambda *shape, dtype="float32": tvm.runtime.tensor(np.zeros(shape, dtype))
    cfg = [2, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    args = [t(T_, B_, I_), t(4 * H_, I_), t(4 * H_, H_), t(4 * H_), t(4 * H_),
            t(T_, B_, H_), t(1, B_, H_), t(1, B_, H_)]
    f(tvm_ffi.Shape(cfg), *args)  # valid
    bad = list(args)
    bad[2] = t(4 * H_, H_ + 1)
    with pytest.raises(ValueError, match=r"weights\[1\] \(w_hh of layer 0\) must have shape \(20, 5\)"):
        f(tvm_ffi.Shape(cfg), *bad)
    bad = list(args)
    bad[0] = t(T_, B_, I_, dtype="float64")
    with pytest.raises(ValueError, match="x must have dtype float32, got float64"):
        f(tvm_ffi.Shape(cfg), *bad)
    with pytest.raises(RuntimeError, match="calling convention 1"):
        f(tvm_ffi.Shape([1] + cfg[1:]), *args)
    with pytest.raises(TypeError, match="expected 9 arguments for this config, got 8"):
        f(tvm_ffi.Shape(cfg), *args[:-1])


@pytest.mark.parametrize("index,name,value", [
    (1, "num_layers", 2**32 + 1), (1, "num_layers", 0), (2, "num_directions", 2**32 + 1),
    (3, "has_lengths", 2), (4, "has_hx", -1), (5, "batch_first", 2**32), (6, "proj_size", 2**32),
    (6, "proj_size", -1), (7, "has_bias", 2**32 + 1), (8, "constant_weights", 3),
    (9, "dtype", 7), (9, "dtype", 2**32), (10, "num_threads", 2**31), (10, "num_threads", -1),
    (11, "reverse", 2**33), (12, "has_gate_bias", 2), (13, "x_gates", 2**32 + 1)])
def test_native_config_values_are_range_checked(index, name, value):
    """Every config value is checked before it is narrowed to an int: 2**32 + 1 layers
    used to run as one layer, dtype code 7 as float32."""
    import tvm_ffi

    f = tvm_ffi.get_global_func(kt.NATIVE_FUNC_NAME)
    T_, B_, I_, H_ = 3, 2, 4, 5
    t = lambda *shape: tvm.runtime.tensor(np.zeros(shape, "float32"))
    cfg = [2, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]
    args = [t(T_, B_, I_), t(4 * H_, I_), t(4 * H_, H_), t(4 * H_), t(4 * H_),
            t(T_, B_, H_), t(1, B_, H_), t(1, B_, H_)]
    f(tvm_ffi.Shape(cfg), *args)  # valid
    cfg[index] = value
    with pytest.raises(ValueError, match=name):
        f(tvm_ffi.Shape(cfg), *args)


# Blocks every import of kokoro_lstm in a subprocess: an exported native library must
# run there, with only TVM's runtime (the engine is linked into the library).
_BLOCK_KOKORO = """
import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "kokoro_lstm":
            raise ImportError("kokoro_lstm is blocked in this process")
sys.meta_path.insert(0, _Block())
"""


def test_export_library_fresh_process(tmp_path):
    """kt.export_library, then load and run in a fresh process: one in which
    kokoro_lstm cannot be imported at all (the library carries the engine and
    registers its function when loaded), and ones that import it before or after
    tvm. Uni/bi, lengths, h0/c0 (the quad), 2- and 3-layer, proj (the stack)."""
    cases = {"quad": _quad(7)[:2], "stack": _stack()[:2]}
    for name, (ep, inputs) in cases.items():
        np.savez(tmp_path / f"inputs_{name}.npz", *inputs)
        for method in ("native", "tir"):
            mod = kt.from_exported_program(ep, lstm_method=method)
            ex = tvm.compile(mod, target="llvm")
            kt.export_library(ex, tmp_path / f"{name}_{method}.so")
            np.savez(tmp_path / f"expected_{name}_{method}.npz",
                     *_run(relax.VirtualMachine(ex, tvm.cpu()), inputs))
    code = _BLOCK_KOKORO + """
import sys
d, order = sys.argv[1], sys.argv[2]
unblock = lambda: sys.meta_path.remove(next(f for f in sys.meta_path if isinstance(f, _Block)))
if order == "kokoro-first":
    unblock()
    import kokoro_lstm
import numpy as np, tvm
from tvm import relax
if order == "tvm-first":
    unblock()
    import kokoro_lstm
for name in ("quad", "stack"):
    inputs = list(np.load(f"{d}/inputs_{name}.npz").values())
    for method in ("native", "tir"):
        vm = relax.VirtualMachine(tvm.runtime.load_module(f"{d}/{name}_{method}.so"), tvm.cpu())
        got = [r.numpy() for r in vm["main"](*[tvm.runtime.tensor(a) for a in inputs])]
        exp = list(np.load(f"{d}/expected_{name}_{method}.npz").values())
        assert len(got) == len(exp) and len(exp) in (9, 12), (name, len(got))
        assert all(np.array_equal(g, e) for g, e in zip(got, exp)), (name, method)
assert ("kokoro_lstm" in sys.modules) == (order != "blocked")
print("ok")
"""
    for order in ("blocked", "kokoro-first", "tvm-first"):
        assert _subprocess(code, str(tmp_path), order).strip().endswith("ok"), order


_RUN_ONE = _BLOCK_KOKORO + """
import sys
import numpy as np, tvm
from tvm import relax
lib, data = sys.argv[1], np.load(sys.argv[2])
inputs = [data[k] for k in sorted(k for k in data.files if k.startswith("in"))]
vm = relax.VirtualMachine(tvm.runtime.load_module(lib), tvm.cpu())
got = [r.numpy() for r in vm["main"](*[tvm.runtime.tensor(a) for a in inputs])]
exp = [data[k] for k in sorted(k for k in data.files if k.startswith("out"))]
assert len(got) == len(exp), (len(got), len(exp))
assert all(np.array_equal(g, e) for g, e in zip(got, exp))
assert not any(m.startswith("kokoro_lstm") for m in sys.modules)
print("ok")
"""


def _save_case(path, inputs, outputs):
    np.savez(path, **{f"in{k:02d}": a for k, a in enumerate(inputs)},
             **{f"out{k:02d}": a for k, a in enumerate(outputs)})


def test_export_finds_blas_at_run_time_not_from_the_build(tmp_path, monkeypatch):
    """A pip install builds in a temporary environment whose BLAS is gone afterwards:
    exporting must not use a BLAS path recorded at build time (here one that no longer
    exists), and the library must load where kokoro_lstm cannot be imported."""
    from kokoro_lstm import _build_config

    monkeypatch.setattr(_build_config, "BLAS_LINK",
                        ["-L/tmp/pip-build-env-gone/scipy_openblas32/lib", "-lscipy_openblas"]
                        if _build_config.BLAS == "scipy-openblas32" else
                        ["-L/tmp/pip-build-env-gone/lib", "-lopenblas_gone"], raising=False)
    ep, inputs = _quad(5)[:2]
    ex = tvm.compile(kt.from_exported_program(ep, lstm_method="native"), target="llvm")
    kt.export_library(ex, tmp_path / "quad.so")
    _save_case(tmp_path / "quad.npz", inputs, _run(relax.VirtualMachine(ex, tvm.cpu()), inputs))
    assert "gone" not in " ".join(kt.export_options()["options"])
    assert _subprocess(_RUN_ONE, str(tmp_path / "quad.so"), str(tmp_path / "quad.npz")).strip() == "ok"


def test_export_names_the_missing_blas(monkeypatch):
    """No BLAS of the kind the engine was built against: one line naming what to
    install (the scipy-openblas32 wheel, or the system OpenBLAS)."""
    from kokoro_lstm import _build_config
    from kokoro_lstm.tvm import _link

    monkeypatch.setattr(_build_config, "BLAS", "scipy-openblas32")
    monkeypatch.setitem(sys.modules, "scipy_openblas32", None)  # import fails
    with pytest.raises(_link.BlasNotFound, match=r"pip install scipy-openblas32$"):
        kt.export_options()
    monkeypatch.setattr(_build_config, "BLAS", "system")
    monkeypatch.setenv("PATH", "")  # neither pkg-config nor ldconfig
    with pytest.raises(_link.BlasNotFound, match=r"apt-get install libopenblas-dev"):
        kt.export_options()


class _DenseThenLstm(torch.nn.Module):
    """Linear + conv1d (the engine's dense externs) before a tir LSTM."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(I, 2 * I)
        self.conv = torch.nn.Conv1d(2 * I, I, 3, padding=1)
        self.lstm = torch.nn.LSTM(I, H, bidirectional=True)

    def forward(self, x):
        y = self.conv(torch.tanh(self.proj(x)).permute(1, 2, 0)).permute(2, 0, 1)
        return self.lstm(y)[0]


def test_plain_export_library_carries_the_engine(tmp_path):
    """TVM's own ``ex.export_library(path)``, no kokoro_lstm helper: a module lowered
    with the native LSTM, and one whose dense ops went to the engine's externs
    (rewrite_dense, tir LSTM), load and run where kokoro_lstm cannot be imported, with
    this process's numbers (which match PyTorch's)."""
    torch.manual_seed(3)
    dense_model = _DenseThenLstm().eval()
    x = torch.randn(6, B, I)
    with torch.no_grad():
        dense_want = [dense_model(x).numpy()]
    dense_ep = torch.export.export(dense_model, (x,))
    dense_mod, counts = kt.rewrite_dense(kt.from_exported_program(dense_ep, lstm_method="tir"))
    assert counts.get("matmul") and counts.get("conv1d"), counts
    ep, inputs, expected = _quad(5)
    cases = {"native": (kt.from_exported_program(ep, lstm_method="native",
                                                 run_ep_decomposition=False),
                        inputs, [a for triple in expected for a in triple]),
             "dense": (dense_mod, [x.numpy()], dense_want)}
    for name, (mod, ins, want) in cases.items():
        ex = tvm.compile(mod, target="llvm")
        assert kt.uses_engine(ex)
        ex.export_library(str(tmp_path / f"{name}.so"))
        got = _run(relax.VirtualMachine(ex, tvm.cpu()), ins)
        _check(got[:3], want[:3], name)
        _save_case(tmp_path / f"{name}.npz", ins, got)
        out = _subprocess(_RUN_ONE, str(tmp_path / f"{name}.so"), str(tmp_path / f"{name}.npz"))
        assert out.strip() == "ok", name


# ----------------------------------------------------------------------------------
# API surface
# ----------------------------------------------------------------------------------
def test_select_method():
    assert kt.select_method("llvm") == "native"
    assert kt.select_method({"kind": "llvm", "mcpu": "generic"}) == "native"
    assert kt.select_method(tvm.target.Target("llvm")) == "native"
    assert kt.select_method("llvm", "tir") == "tir"
    assert kt.select_method("cuda") == "native"  # the engine's CUDA backend
    assert kt.select_method("cuda", "native") == "native"
    assert kt.select_method("rocm") == "relax"
    with pytest.raises(ValueError, match="not a CPU or cuda target"):
        kt.select_method("rocm", "native")
    assert kt.select_dense_method("cuda", "native") == "native"  # convolutions, products
    with pytest.raises(ValueError, match="not a CPU or cuda target"):
        kt.select_dense_method("rocm", "native")
    with pytest.raises(NotImplementedError, match="macOS"):
        kt.select_method("llvm", "mps")
    with pytest.raises(NotImplementedError, match="macOS"):
        kt.convert_map("mps")
    with pytest.raises(ValueError, match="unknown lstm_method"):
        kt.select_method("llvm", "cudnn")


def test_convert_map_keys():
    keys = set(kt.convert_map("tir"))
    assert keys == {"lstm.input", "lstm_forward.default", "lstm_forward_bidirectional.default",
                    "lstm_forward_packed.default", "lstm_forward_packed_bidirectional.default",
                    "lstm_forward_gated.default",
                    "random_uniform.default", "random_normal.default"}  # kokoro_lstm.noise's ops


@pytest.mark.parametrize("method", UNROLLED)
def test_unrolled_methods_need_static_length(method):
    with pytest.raises(Exception, match="static sequence length"):
        kt.from_exported_program(_dynamic_ep()[0], lstm_method=method)


def test_bench_script_json(tmp_path):
    """benchmarks/bench_tvm.py runs and writes its JSON (tiny run)."""
    out = tmp_path / "tvm.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_tvm.py"),
                    "--T", "4", "--methods", "native", "tir", "--repeat", "2",
                    "--out", str(out)], check=True, capture_output=True, cwd=ROOT, timeout=300)
    rows = json.loads(out.read_text())["rows"]
    assert {r["method"] for r in rows} >= {"native", "tir", "kokoro_lstm (direct)"}


@pytest.mark.parametrize("nth", [2**32 + 1, 2**31, -1])
def test_dense_config_num_threads_is_range_checked(nth):
    """A dense function's num_threads is checked before it is narrowed to an int
    (2**32 + 1 used to run as 1 thread, negative counts as the default)."""
    import tvm_ffi
    from kokoro_lstm.tvm import dense

    f = tvm_ffi.get_global_func(dense.SOFTMAX_FUNC)
    x = tvm.runtime.tensor(np.ones((2, 3), "float32"))
    y = tvm.runtime.tensor(np.zeros((2, 3), "float32"))
    f(tvm_ffi.Shape(list(dense.SoftmaxConfig(num_threads=1))), x, y)  # valid
    assert np.allclose(y.numpy(), 1 / 3)
    with pytest.raises(ValueError, match="num_threads"):
        f(tvm_ffi.Shape(list(dense.SoftmaxConfig(num_threads=nth))), x, y)
