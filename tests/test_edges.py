"""Edges a new user hits: thread rules (one count for every front, threadpoolctl,
torch's setting, cgroup CPU quotas, caps) and bad input (a clear ValueError/TypeError
naming the argument or variable; exit 2 and one line from the CLI)."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import warnings

import pytest

from conftest import require

import kokoro_lstm  # noqa: E402
from kokoro_lstm import _threads  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _reset_threads():
    yield
    kokoro_lstm.set_num_threads(None)


def small_lstm(**kw):
    return kokoro_lstm.LSTM(3, 4, bidirectional=True, **kw)


X = np.random.default_rng(0).standard_normal((5, 2, 3)).astype(np.float32)


# --------------------------------------------------------------------------------------
# threads
# --------------------------------------------------------------------------------------
def test_one_count_for_every_front():
    torch = require("torch")
    import kokoro_lstm.torch_ops as ko

    kokoro_lstm.set_num_threads(1)
    assert kokoro_lstm.get_num_threads() == 1
    assert ko.get_num_threads() == 1 and kokoro_lstm.default_num_threads() == 1
    ko.set_num_threads(2)
    assert kokoro_lstm.get_num_threads() == 2 and kokoro_lstm.default_num_threads() == 2
    ko.set_num_threads(None)
    assert kokoro_lstm.get_num_threads() == ko.get_num_threads() >= 1
    del torch


def test_torch_thread_setting_limits_the_default(monkeypatch):
    torch = require("torch")
    monkeypatch.delenv("KOKORO_LSTM_NUM_THREADS", raising=False)
    monkeypatch.setenv("KOKORO_LSTM_MAX_THREADS", "4")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert kokoro_lstm.get_num_threads() == 1
        kokoro_lstm.set_num_threads(3)  # an explicit count is not limited by torch's
        assert kokoro_lstm.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_threadpoolctl_sees_and_limits_our_pool():
    threadpoolctl = require("threadpoolctl")
    ours = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "kokoro_lstm"]
    assert len(ours) == 1, threadpoolctl.threadpool_info()
    assert os.path.basename(ours[0]["filepath"]).startswith("_core")
    assert ours[0]["num_threads"] == kokoro_lstm.get_num_threads()
    kokoro_lstm.set_num_threads(2)
    m = small_lstm()
    want = m(X)[0]
    with threadpoolctl.threadpool_limits(1):
        assert kokoro_lstm.get_num_threads() == 1
        # an explicit count is capped by the limit too
        assert kokoro_lstm.numpy_api._num_threads(2) == 1
        assert np.array_equal(m(X, num_threads=2)[0], want)
    assert kokoro_lstm.get_num_threads() == 2  # restored
    assert kokoro_lstm._core.thread_limit() == 0
    with threadpoolctl.threadpool_limits(limits=1, user_api="kokoro_lstm"):
        assert kokoro_lstm.get_num_threads() == 1
    assert kokoro_lstm.get_num_threads() == 2


def test_requests_are_capped_at_usable_cores(monkeypatch):
    monkeypatch.delenv("KOKORO_LSTM_MAX_THREADS", raising=False)
    cores = _threads.usable_cores()
    kokoro_lstm.set_num_threads(10**6)
    assert kokoro_lstm.get_num_threads() == cores
    m = small_lstm(num_threads=10**6)
    out = m(X)[0]
    out2 = kokoro_lstm.lstm_forward(X, *list(m.state_dict().values())[:4],
                                    num_threads=10**6)[0]
    assert out.shape == (5, 2, 8) and out2.shape == (5, 2, 4)
    # no pool of 511 threads left behind
    assert len(os.listdir("/proc/self/task")) < 64
    monkeypatch.setenv("KOKORO_LSTM_MAX_THREADS", "3")
    assert kokoro_lstm.get_num_threads() == 3


@pytest.mark.parametrize("bad", [2**31, 10**20, 0, -1, 1.5, True, "2"])
def test_num_threads_validation_names_the_argument(bad):
    with pytest.raises(ValueError, match="num_threads"):
        kokoro_lstm.set_num_threads(bad)
    with pytest.raises(ValueError, match="num_threads"):
        small_lstm(num_threads=bad)
    m = small_lstm()
    with pytest.raises(ValueError, match="num_threads"):
        m(X, num_threads=bad)
    w = list(m.state_dict().values())[:4]
    with pytest.raises(ValueError, match="num_threads"):
        kokoro_lstm.lstm_forward(X, *w, num_threads=bad)
    assert m(X, num_threads=np.int64(2))[0].shape == (5, 2, 8)  # NumPy ints are fine


@pytest.mark.parametrize("var", ["KOKORO_LSTM_NUM_THREADS", "KOKORO_LSTM_MAX_THREADS"])
@pytest.mark.parametrize("value", ["99999999999999999999", "2147483648", "0", "-2", "abc",
                                   "1.5", "9" * 5000])
def test_thread_env_validation_names_the_variable(monkeypatch, var, value):
    monkeypatch.delenv(var, raising=False)
    default = kokoro_lstm.get_num_threads()
    monkeypatch.setenv(var, value)
    # ignored, with a one-line warning naming it (the C engine ignores it too)
    with pytest.warns(RuntimeWarning, match=var) as w:
        assert kokoro_lstm.get_num_threads() == default
    msg = str(w[0].message)
    assert len(msg) < 200 and "\n" not in msg and "ignored" in msg
    with warnings.catch_warnings():  # once per value: the next calls are silent
        warnings.simplefilter("error")
        assert small_lstm()(X)[0].shape == (5, 2, 8)
    monkeypatch.setenv(var, value + "x")  # another value warns again
    with pytest.warns(RuntimeWarning, match=var):
        assert small_lstm()(X)[0].shape == (5, 2, 8)


@pytest.mark.parametrize("value", ["64MB", "-5", "abc", "1.5", str(2**40 + 1), "9" * 5000])
def test_cache_env_validation_names_the_variable(monkeypatch, value):
    """Issue 37: a KOKORO_LSTM_CACHE_MB the engine ignores (cache.c: a whole number of
    MiB in 0..2**40, else the default) was ignored silently; it warns like a bad thread
    variable, once per value, at a call or in cache_info()."""
    monkeypatch.setenv("KOKORO_LSTM_CACHE_MB", value)
    with pytest.warns(RuntimeWarning, match="KOKORO_LSTM_CACHE_MB") as w:
        kokoro_lstm.cache_info()
    msg = str(w[0].message)
    assert len(msg) < 200 and "\n" not in msg and "ignored" in msg and "1024 MiB" in msg
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert small_lstm()(X)[0].shape == (5, 2, 8)
    monkeypatch.setenv("KOKORO_LSTM_CACHE_MB", value + "x")
    with pytest.warns(RuntimeWarning, match="KOKORO_LSTM_CACHE_MB"):
        assert small_lstm()(X)[0].shape == (5, 2, 8)


@pytest.mark.parametrize("value", ["64", " 7", "+3", "0", "", "  "])
def test_cache_env_that_parses_is_silent(monkeypatch, value):
    import warnings

    monkeypatch.setenv("KOKORO_LSTM_CACHE_MB", value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kokoro_lstm.cache_info()


def test_cpu_device_ids_are_one_host_memory():
    """Issue 37: x on cpu:1 (a TVM tensor on tvm.cpu(1)) was refused with "x is on cpu:1
    but x is on cpu:0". Every CPU device id is the same memory: the call runs, with the
    same bits as on cpu:0, whatever the ids of the other tensors."""
    tvm = require("tvm")
    from kokoro_lstm import _core

    T, B, I, H = 5, 2, 3, 4
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, B, I), dtype=np.float32)
    h0 = rng.standard_normal((1, B, H), dtype=np.float32)
    ws = [rng.standard_normal(s, dtype=np.float32) for s in ((4 * H, I), (4 * H, H), (4 * H,),
                                                             (4 * H,))]

    def run(dev_x, dev_h0):
        y = np.zeros((T, B, H), np.float32)
        _core.forward(tvm.runtime.tensor(x, device=tvm.cpu(dev_x)), None,
                      tvm.runtime.tensor(h0, device=tvm.cpu(dev_h0)), None, ws, y, None, None,
                      num_layers=1, bidirectional=False, has_bias=True)
        return y

    want = run(0, 0)
    for ids in ((1, 1), (1, 0), (0, 1)):
        assert np.array_equal(run(*ids), want), ids


def test_num_threads_env_sets_the_default(monkeypatch):
    monkeypatch.setenv("KOKORO_LSTM_NUM_THREADS", " 3 ")
    assert kokoro_lstm.get_num_threads() == 3 == kokoro_lstm.default_num_threads()
    kokoro_lstm.set_num_threads(1)  # set_num_threads wins
    assert kokoro_lstm.get_num_threads() == 1


def _cgroup(tmp_path, proc, files):
    root = tmp_path / "cg"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    root.mkdir(exist_ok=True)
    pf = tmp_path / "proc_self_cgroup"
    pf.write_text(proc)
    return str(root), str(pf)


def test_cgroup_v2_quota(tmp_path):
    root, proc = _cgroup(tmp_path, "0::/\n", {"cpu.max": "150000 100000\n"})
    assert _threads.cgroup_cpu_limit(root, proc) == pytest.approx(1.5)
    assert _threads.usable_cores(root, proc) == min(2, len(os.sched_getaffinity(0)))
    root, proc = _cgroup(tmp_path / "none", "0::/\n", {"cpu.max": "max 100000\n"})
    assert _threads.cgroup_cpu_limit(root, proc) is None
    assert _threads.usable_cores(root, proc) == len(os.sched_getaffinity(0))


def test_cgroup_v2_nested_smallest_quota_wins(tmp_path):
    root, proc = _cgroup(tmp_path, "0::/a/b\n", {
        "a/b/cpu.max": "max 100000", "a/cpu.max": "50000 100000", "cpu.max": "400000 100000"})
    assert _threads.cgroup_cpu_limit(root, proc) == pytest.approx(0.5)
    assert _threads.usable_cores(root, proc) == 1  # a fraction of a CPU still gets one


def test_cgroup_v1_quota(tmp_path):
    proc = "4:memory:/x\n3:cpu,cpuacct:/\n0::/\n"
    root, pf = _cgroup(tmp_path, proc, {"cpu,cpuacct/cpu.cfs_quota_us": "100000\n",
                                        "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    assert _threads.cgroup_cpu_limit(root, pf) == pytest.approx(1.0)
    assert _threads.usable_cores(root, pf) == 1
    root, pf = _cgroup(tmp_path / "none", proc, {"cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
                                                 "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    assert _threads.cgroup_cpu_limit(root, pf) is None


def test_cgroup_quota_sets_the_default(monkeypatch, tmp_path):
    monkeypatch.delenv("KOKORO_LSTM_NUM_THREADS", raising=False)
    monkeypatch.delenv("KOKORO_LSTM_MAX_THREADS", raising=False)
    _threads._set_cgroup_paths(*_cgroup(tmp_path, "0::/\n", {"cpu.max": "100000 100000\n"}))
    try:
        assert kokoro_lstm.get_num_threads() == 1
        kokoro_lstm.set_num_threads(8)  # capped at the quota
        assert kokoro_lstm.get_num_threads() == 1
    finally:
        _threads._set_cgroup_paths()


def test_missing_cgroup_files(tmp_path):
    assert _threads.cgroup_cpu_limit(str(tmp_path / "nope"), str(tmp_path / "nope2")) is None


# --------------------------------------------------------------------------------------
# bad input: library
# --------------------------------------------------------------------------------------
def test_huge_layer_index_is_reported_at_once():
    sd = small_lstm().state_dict()
    sd["weight_ih_l10000000"] = sd["weight_ih_l0"]
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"missing key 'weight_ih_l1'.*layer 10000000"):
        kokoro_lstm.LSTM.from_state_dict(sd)
    assert time.perf_counter() - t0 < 1.0
    # a gap in the layers is reported the same way
    m = kokoro_lstm.LSTM(3, 4, num_layers=3)
    sd = {k: v for k, v in m.state_dict().items() if "_l1" not in k}
    with pytest.raises(ValueError, match=r"missing key 'weight_ih_l1'"):
        kokoro_lstm.LSTM.from_state_dict(sd)


@pytest.mark.parametrize("value", ["garbage", "AVX2", " avx2"])
def test_unknown_isa_env_warns(value):
    code = "import warnings; warnings.simplefilter('always'); import kokoro_lstm"
    env = dict(os.environ, KOKORO_LSTM_ISA=value, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "KOKORO_LSTM_ISA" in r.stderr and "scalar, avx2, avx512" in r.stderr, r.stderr
    assert repr(value) in r.stderr


def test_known_isa_env_is_silent():
    code = "import warnings; warnings.simplefilter('error'); import kokoro_lstm"
    env = dict(os.environ, KOKORO_LSTM_ISA="scalar", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "KOKORO_LSTM_ISA" not in r.stderr, r.stderr


@pytest.mark.parametrize("value, warns", [("128", True), ("avx", True), ("256", False), ("512", False)])
def test_f16_widen_env(value, warns):
    """float16 results do not depend on the widening; a value other than 256/512 warns."""
    code = ("import warnings; warnings.simplefilter('always'); import numpy as np, kokoro_lstm\n"
            "g = np.random.default_rng(0)\n"
            "x, w_ih, w_hh, b = (g.standard_normal(s).astype(np.float32) * 0.3 for s in\n"
            "                    [(9, 1, 7), (160, 7), (160, 40), (160,)])\n"
            "np.save(__import__('sys').argv[1], kokoro_lstm.lstm_forward(\n"
            "    x, w_ih, w_hh, b, dtype='float16', num_threads=1)[0])\n"
            "print('narrow', kokoro_lstm.build_info()['f16_narrow_rows'])")
    out = {}
    for v in (value, "512"):
        env = dict(os.environ, KOKORO_LSTM_F16_WIDEN=v, PYTHONPATH=ROOT)
        path = os.path.join(ROOT, "build", f"f16_widen_{v}_{os.getpid()}.npy")
        r = subprocess.run([sys.executable, "-c", code, path], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        if v == value:
            assert ("KOKORO_LSTM_F16_WIDEN" in r.stderr) == warns, r.stderr
        if v in ("256", "512"):  # build_info reports the setting
            assert f"narrow {v == '256'}" in r.stdout, r.stdout
        out[v] = np.load(path)
        os.remove(path)
    assert np.array_equal(out[value], out["512"])


# ---- torch ops -----------------------------------------------------------------------
def _op_args(B=2, T=5, I=3, H=4, D=1):
    torch = require("torch")
    x = torch.randn(T, B, I)
    h = torch.zeros(D, B, H)
    w = []
    for _ in range(D):
        w += [torch.randn(4 * H, I), torch.randn(4 * H, H), torch.randn(4 * H),
              torch.randn(4 * H)]
    return x, h, w


@pytest.mark.parametrize("index,name", [(0, "weight_ih_l0"), (1, "weight_hh_l0")])
def test_op_none_weight_names_it(index, name):
    import kokoro_lstm.torch_ops as ko

    x, h, w = _op_args()
    w[index] = None
    with pytest.raises(TypeError, match=f"kokoro::lstm_forward: {name} is required"):
        ko.lstm_forward(x, h, h, *w)


@pytest.mark.parametrize("bi", [False, True])
@pytest.mark.parametrize("drop", [2, 3])
def test_op_lone_bias_is_worded_for_op_arguments(bi, drop):
    import kokoro_lstm.torch_ops as ko

    D = 2 if bi else 1
    x, h, w = _op_args(D=D)
    w[drop] = None
    names = ["bias_ih_l0", "bias_hh_l0"]
    given, missing = names[1 - (drop - 2)], names[drop - 2]
    op = ko.lstm_forward_bidirectional if bi else ko.lstm_forward
    with pytest.raises(ValueError, match=f"{given} is given but {missing} is None") as e:
        op(x, h, h, *w)
    assert "state" not in str(e.value) and "key" not in str(e.value)
    if bi:  # the reverse direction's too
        x, h, w = _op_args(D=2)
        w[6] = None
        with pytest.raises(ValueError, match="bias_hh_l0_reverse is given but "
                                             "bias_ih_l0_reverse is None"):
            op(x, h, h, *w)


# --------------------------------------------------------------------------------------
# bad input: CLI (exit 2, one line)
# --------------------------------------------------------------------------------------
def _cli(tmp_path, capsys, *extra, component="text_encoder", weights=True):
    require("torch")
    from kokoro_lstm.cli import main

    argv = ["port-encoder", "--component", component, "--seq-len", "8", "--output-dir",
            str(tmp_path / "out"), *extra]
    if weights:
        argv.append("--no-weights")
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return rc, err


@pytest.mark.parametrize("config,message", [
    ({"plbert": "oops"}, "'plbert' must be a JSON object"),
    ({"plbert": {"hidden_size": "big"}}, "'plbert.hidden_size' must be a positive integer"),
    ({"plbert": {"hidden_size": 770}}, "multiple of plbert.num_attention_heads"),
    ({"hidden_dim": 1000000000}, "'hidden_dim' must be a positive integer of at most"),
    ({"hidden_dim": 511}, "'hidden_dim' must be even"),
    ({"n_token": True}, "'n_token' must be a positive integer"),
    ({"dropout": 2}, "'dropout' must be a number in [0, 1)"),
])
def test_bad_config_values_exit_2(tmp_path, capsys, config, message):
    require("tvm")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    rc, err = _cli(tmp_path, capsys, "--config", str(path))
    assert rc == 2 and len(err) == 1 and message in err[0], err


def test_corrupt_checkpoint_exit_2_without_unsafe_advice(tmp_path, capsys):
    torch = require("torch")
    require("tvm")
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"\x80\x02garbage" * 64)
    truncated = tmp_path / "truncated.pth"
    torch.save({"text_encoder": {"w": torch.zeros(3)}}, str(truncated))
    data = truncated.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    objects = tmp_path / "objects.pth"
    torch.save({"text_encoder": {"w": _Obj()}}, str(objects))
    for path, what in ((garbage, "not a PyTorch checkpoint"),
                       (truncated, "not a PyTorch checkpoint"),
                       (objects, "Python objects other than tensors")):
        rc, err = _cli(tmp_path, capsys, "--checkpoint", str(path), weights=False)
        assert rc == 2 and len(err) == 1, err
        assert "cannot read checkpoint" in err[0] and what in err[0], err
        assert "weights_only" not in err[0] and "False" not in err[0], err


class _Obj:
    pass


def test_missing_tvm_says_which_package(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tvm", None)  # `import tvm` raises ImportError
    rc, err = _cli(tmp_path, capsys)
    assert rc == 2 and len(err) == 1, err
    assert "apache-tvm is not installed (in a clone of kokoro_lstm: pip install '.[tvm]'" \
        in err[0], err
    assert "invalid target" not in err[0]


def test_bert_without_transformers_names_the_extra(tmp_path, capsys, monkeypatch):
    require("tvm")
    monkeypatch.setitem(sys.modules, "transformers", None)
    rc, err = _cli(tmp_path, capsys, component="bert")
    assert rc == 2, err
    assert "needs transformers" in err[-1] and "pip install '.[bert]'" in err[-1], err
    assert "Traceback" not in "\n".join(err)


def test_extras_install_what_the_messages_name():
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert any(d.startswith("transformers") for d in extras["bert"])
    assert any(d.startswith("apache-tvm") for d in extras["tvm"])
    assert any(d.startswith("onnxscript") for d in extras["onnx"])
    assert {"torch", "apache-tvm", "transformers"} <= {
        d.split(">")[0].split("=")[0] for d in extras["cli"]}
    # issue 37: port-decoder's Kokoro classes (the version the CLI is tested with)
    assert "kokoro==0.9.4" in extras["cli"]


@pytest.mark.parametrize("flag_env", [("--num-threads", "2147483648"),
                                      ("env", "99999999999999999999")])
def test_cli_thread_counts_exit_2(tmp_path, capsys, monkeypatch, flag_env):
    require("tvm")
    kind, value = flag_env
    if kind == "env":
        monkeypatch.setenv("KOKORO_LSTM_NUM_THREADS", value)
        rc, err = _cli(tmp_path, capsys)
        name = "KOKORO_LSTM_NUM_THREADS"
    else:
        rc, err = _cli(tmp_path, capsys, kind, value)
        name = "--num-threads"
    assert rc == 2 and len(err) == 1 and name in err[0], err
