"""``kokoro-lstm port-encoder / port-decoder --target cuda`` on a machine without a GPU:
the kernels compile with pip's nvcc into cubin, the library and its report are
written, --validate says in one line that it did not run, and bad targets get
one-line errors. (The GPU suite runs these artifacts: tools/gpu_kokoro.py.)"""
import json
import os
import sys

import pytest

from conftest import REQUIRE, require

require("torch")
tvm = require("tvm")

from kokoro_lstm.cli import main  # noqa: E402
from kokoro_lstm.tvm import _cuda  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy.artifacts import cuda_module_format  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]
ARCH = "cuda -arch=sm_90a"


def _need_nvcc():
    if _cuda.nvcc_dir() is None:
        msg = "no nvcc (pip install nvidia-cuda-nvcc)"
        if REQUIRE:
            pytest.fail(msg + " (KOKORO_LSTM_REQUIRE=1: this test must run)")
        pytest.skip(msg)


def test_text_encoder_compiles_for_cuda(tmp_path, capsys):
    _need_nvcc()
    rc = main(["port-encoder", "--component", "text_encoder", "--seq-len", "8", "--no-weights",
               "--target", ARCH, "--validate", "--output-dir", str(tmp_path)])
    out = capsys.readouterr()
    lib = tmp_path / "text_encoder_compiled.so"
    report = json.loads((tmp_path / "text_encoder_report.json").read_text())
    if _cuda.device() is not None:  # a GPU here: it ran and validated
        assert rc == 0 and report["validation"]["passed"], out.err
        return
    assert rc == 0, out.err
    assert "no CUDA device here" in out.err and "skipped" in out.out
    assert cuda_module_format(str(lib)) == "cubin"
    assert report["target_kind"] == "cuda" and report["target_arch"] == "sm_90a"
    assert report["dense_method"] == "native" and report["lstm_method"] == "native"
    assert report["dense_calls"] == {"kokoro_lstm.conv1d_v1": 3}  # its CNN on the engine's CUDA kernels
    assert report["validation"] == {"skipped": report["validation"]["skipped"], "passed": None}
    assert report["runtime_ms"] is None
    assert [o["shape"] for o in report["outputs"]] == [[1, 512, 8]]
    assert "libnvrtc.so.13" in report["runtime_needs"]["summary"]
    # one CUDA graph after the inputs' copies: the capture function is in the library
    assert b"text_encoder_forward_cuda_graph_capture" in lib.read_bytes()
    assert b"text_encoder_forward_cuda_graph_capture1" not in lib.read_bytes()


def test_stage_inputs_puts_the_lstm_in_the_one_graph():
    """The LSTM's call (which reads the lengths input) lands inside the captured region."""
    from tvm import relax

    from kokoro_lstm.tvm import _cuda as cu
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 3), "float32"))
    n = relax.Var("n", relax.TensorType((1,), "int64"))
    with bb.function("main", [x, n]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(x, x))
            z = bb.emit(relax.call_dps_packed("kokoro_lstm.some_extern", [y, n],
                                              relax.TensorType((4, 3), "float32")))
            w = bb.emit_output(relax.op.multiply(z, z))
        bb.emit_func_output(w)
    mod = cu.stage_inputs(bb.get())
    assert "kl_stage_input0" in mod.script() and "kl_stage_input1" in mod.script()
    tgt = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    from tvm.relax.backend.cuda import pipeline as P
    with tgt, tvm.transform.PassContext(config={"relax.backend.use_cuda_graph": True}):
        seq = tvm.transform.Sequential(P.library_dispatch_passes(tgt) + P.legalize_passes(tgt)
                                       + P.dataflow_lower_passes(tgt)
                                       + [relax.transform.StaticPlanBlockMemory(),
                                          relax.transform.RewriteCUDAGraph()])
        out = seq(mod)
    captures = [gv.name_hint for gv in out.get_global_vars() if "capture" in gv.name_hint]
    assert captures == ["main_cuda_graph_capture"]
    assert "some_extern" in out["main_cuda_graph_capture"].script()


def test_rewrite_dense_for_cuda():
    """On a cuda target the convolutions and the products by a constant weight (a
    linear, its bias fused; the weight stored as [N, K]) go to the engine's CUDA
    kernels; a product of two inputs, and every op on an sm_75 target, stay TVM's."""
    import numpy as np
    from tvm import relax

    import kokoro_lstm.tvm as kt
    from kokoro_lstm.tvm import dense

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 6, 4), "float32"))
    z = relax.Var("z", relax.TensorType((1, 4, 5), "float32"))
    W = relax.const(np.arange(12, dtype="float32").reshape(3, 4))  # a linear's [out, in]
    w_in_out = relax.const(np.ones((4, 2), "float32"))              # a [in, out] weight
    cw = relax.const(np.ones((2, 3, 3), "float32"))
    with bb.function("main", [x, z]):
        with bb.dataflow():
            lin = bb.emit(relax.op.add(relax.op.matmul(x, relax.op.permute_dims(W)),
                                       relax.const(np.ones(3, "float32"))))
            kn = bb.emit(relax.op.matmul(x, w_in_out))
            both = bb.emit(relax.op.matmul(x, z))
            conv = bb.emit(relax.op.nn.conv1d(relax.op.permute_dims(lin, [0, 2, 1]), cw,
                                              padding=1))
            out = bb.emit_output(relax.Tuple([lin, kn, both, conv]))
        bb.emit_func_output(out)
    mod, counts = kt.rewrite_dense(bb.get(), target={"kind": "cuda", "arch": "sm_90a"})
    calls = [name for name, _ in dense.dense_calls(mod)]
    assert sorted(calls) == sorted([dense.MATMUL_FUNC, dense.MATMUL_FUNC, dense.CONV1D_FUNC])
    assert counts["bias_fused"] == 1 and all(
        cfg.trans_b == 1 and not cfg.b_panels for name, cfg in dense.dense_calls(mod)
        if name == dense.MATMUL_FUNC)
    consts = [c.value.numpy().shape for c in _constants(mod)]
    assert (2, 4) in [tuple(s) for s in consts]  # w_in_out stored as [N, K]
    assert "R.matmul(x, z" in mod.script()  # two inputs: TVM's own
    legacy, counts = kt.rewrite_dense(bb.get(), target={"kind": "cuda", "arch": "sm_75"})
    assert counts == {} and not dense.dense_calls(legacy)


def _constants(mod):
    """The constant arguments of main's extern calls."""
    from tvm import relax

    return [arg for block in mod["main"].body.blocks for bd in block.bindings
            if isinstance(bd.value, relax.Call) and bd.value.op.name == "relax.call_dps_packed"
            for arg in bd.value.args[1].fields if isinstance(arg, tvm.ir.expr.Constant)]


@pytest.mark.parametrize("argv, message", [
    (["--target", "cuda"], "no GPU here to read the architecture from"),
    (["--target", ARCH, "--lstm-method", "tir"], "not a CPU target"),
])
def test_cuda_target_errors(argv, message, tmp_path, capsys):
    _need_nvcc()
    if _cuda.local_arch() is not None and "architecture" in message:
        pytest.skip("a GPU here names the architecture")
    rc = main(["port-encoder", "--component", "text_encoder", "--seq-len", "8", "--no-weights",
               "--output-dir", str(tmp_path)] + argv)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_cuda_target_without_nvcc(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_cuda, "nvcc_dir", lambda: None)
    for cmd in (["port-encoder", "--component", "text_encoder"], ["port-decoder", "--seq-lens", "8"]):
        rc = main(cmd + ["--no-weights", "--target", ARCH, "--output-dir", str(tmp_path)])
        err = capsys.readouterr().err
        assert rc == 2 and "pip install nvidia-cuda-nvcc" in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert not os.listdir(tmp_path)


def test_arch_compatibility():
    assert _cuda.arch_runs("sm_90a", "sm_90a") and _cuda.arch_runs("sm_90", "sm_90a")
    assert not _cuda.arch_runs("sm_90a", "sm_100a") and not _cuda.arch_runs("sm_90a", "sm_80")
    assert _cuda.arch_runs("sm_80", "sm_86") and not _cuda.arch_runs("sm_86", "sm_80")
    assert not _cuda.arch_runs("sm_80", "sm_90a") and _cuda.arch_runs("sm_100", "sm_103")


def test_cuda_build_compiles_without_fast_math(monkeypatch):
    """TVM's nvcc default --use_fast_math turns powf(x, 3) into NaN for x < 0 (ALBERT's
    GELU: all of bert's output on an H200): builds run with it off, and the environment
    is restored after."""
    _need_nvcc()
    seen = {}

    def fake_compile(mod, target=None, **kw):
        seen["env"] = os.environ.get("TVM_CUDA_NVCC_NO_FAST_MATH")
        seen["mode"] = os.environ.get("TVM_CUDA_COMPILE_MODE")
        return "ex"
    monkeypatch.setattr(tvm, "compile", fake_compile)
    monkeypatch.delenv("TVM_CUDA_NVCC_NO_FAST_MATH", raising=False)
    assert _cuda.build(tvm.IRModule({}), {"kind": "cuda", "arch": "sm_90a"}, cuda_graph=False) == "ex"
    assert seen == {"env": "1", "mode": "nvcc"}
    assert "TVM_CUDA_NVCC_NO_FAST_MATH" not in os.environ
