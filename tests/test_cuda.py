"""The CUDA backend: kl_lstm_forward on CUDA tensors, and the counter-based noise
kernel (src/cuda/random.cu).

Everywhere (CI included): the kernels (the noise kernel's program too) compile with
NVRTC for sm_80 and sm_90a; the noise entries' errors before a driver is needed.
On a machine with a GPU (`make test-gpu`, run on the lent H100; the log is
committed under tests/gpu/): every semantics case against the float64 oracle and
the CPU engine, both recurrence paths, lengths, NaN, bad input, two streams at
once, CUDA graph capture, and the torch ops / patched nn.LSTM on CUDA; the noise
draws bit for bit the CPU's, on a side stream and replayed from a CUDA graph.
"""
import os
import threading

import numpy as np
import pytest

import kokoro_lstm
from kokoro_lstm import _core, reference
from kokoro_lstm.tvm._cuda import nvidia_lib_dir
from conftest import REQUIRE, require
from _fake_dlpack import fake_cuda


def _nvrtc_path():
    """The libnvrtc the engine loads: the user's KOKORO_LSTM_NVRTC, else the wheel's."""
    return os.environ.get("KOKORO_LSTM_NVRTC") or kokoro_lstm._NVRTC_PATH


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_kernels_compile(arch):
    """Every LSTM module the engine builds, then the noise kernel's program (random.cu,
    with its own options: no contraction, no flush to zero)."""
    if not _nvrtc_path() and not REQUIRE:
        pytest.skip("NVRTC not installed (pip install nvidia-cuda-nvrtc)")
    _core.cuda_compile_check(arch)


def test_compile_error_is_reported():
    if not _nvrtc_path() and not REQUIRE:
        pytest.skip("NVRTC not installed")
    with pytest.raises(RuntimeError, match="gpu-architecture"):
        _core.cuda_compile_check("sm_5")


def test_import_writes_no_environment():
    """Importing kokoro_lstm leaves os.environ alone: the wheel's NVRTC path goes to
    the engine (kl_cuda_set_nvrtc_path), which then compiles without the variable."""
    import subprocess
    import sys

    code = ("import os; before = dict(os.environ); import kokoro_lstm; "
            "assert dict(os.environ) == before, 'import wrote os.environ'; "
            "kokoro_lstm._NVRTC_PATH and kokoro_lstm._core.cuda_compile_check('sm_80')")
    env = {k: v for k, v in os.environ.items() if k != "KOKORO_LSTM_NVRTC"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def _fake_call(x_dev=2, w_dev=2):
    I, H, T, B = 3, 4, 5, 2
    ws = [fake_cuda(s, w_dev) for s in ((4 * H, I), (4 * H, H), (4 * H,), (4 * H,))]
    _core.forward(fake_cuda((T, B, I), x_dev), None, None, None, ws, fake_cuda((T, B, H), x_dev),
                  None, None, num_layers=1, bidirectional=False, has_bias=True)


def test_cuda_errors_without_a_gpu():
    """On any machine: a CUDA call with CPU weights names the device mismatch; a
    CUDA call where no driver is loaded says what is missing, and CPU calls work."""
    with pytest.raises(ValueError, match=r"weights\[0\].*is on cpu:0 but x is on cuda:0"):
        _fake_call(w_dev=1)
    with pytest.raises(ValueError, match=r"x is on device type 8"):
        _fake_call(x_dev=8)
    with pytest.raises(ValueError, match="float64 runs on the CPU only"):
        _core.forward(fake_cuda((5, 2, 3)), None, None, None, [], fake_cuda((5, 2, 4)), None, None,
                      num_layers=1, bidirectional=False, has_bias=True, dtype="float64")
    if os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia"):
        pytest.skip("a GPU driver is present: the no-driver message cannot be seen here")
    with pytest.raises(RuntimeError, match="libcuda.so.1"):
        _fake_call()
    y = kokoro_lstm.LSTM(3, 4)(np.ones((5, 2, 3), np.float32))[0]  # the CPU is unaffected
    assert np.isfinite(y).all()


def _no_driver_here():
    return not (os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia"))


def test_random_cuda_errors_without_a_gpu():
    """random_fill_cuda refuses bad arguments before it needs a driver, and says what
    is missing where there is none."""
    y = 0x10000000  # never written: every call below fails first
    for args, match in (((2, y, 0, 8, y, 0, 0), "dist"), ((0, y, 0, -1, y, 0, 0), "n <= 2"),
                        ((0, y, 0, 8, 0, 0, 0), "output in device memory"),
                        ((0, y, 0, 8, y, -1, 0), "device_id"), ((0, 0, 0, 8, y, 0, 0), "seed")):
        with pytest.raises(ValueError, match=match):
            _core.random_fill_cuda(*args)
    with pytest.raises(ValueError, match="stream must be >= 0"):
        _core.random_fill_cuda(0, y, -1, 8, y, 0, 0)
    _core.random_fill_cuda(0, 0, 0, 0, 0, 0, 0)  # nothing to draw: nothing touched
    if not _no_driver_here():
        pytest.skip("a GPU driver is present: the no-driver message cannot be seen here")
    with pytest.raises(RuntimeError, match="libcuda.so.1"):
        _core.random_fill_cuda(1, y, 0, 8, y + 64, 0, 0)


torch = pytest.importorskip("torch") if not REQUIRE else __import__("torch")


def test_tvm_random_on_cuda_tensors_errors():
    """random_v1 takes y on the CPU or a CUDA device with the seed beside it, and
    fresh_seed_v1 a seed on the CPU or a CUDA device: clear errors otherwise."""
    tvm_ffi = require("tvm_ffi")
    require("tvm")
    import kokoro_lstm.tvm  # noqa: F401  (registers the engine's functions)
    from kokoro_lstm.tvm import _noise

    rnd = tvm_ffi.get_global_func(_noise.RANDOM_FUNC)
    cfg = tvm_ffi.Shape(list(_noise.RandomConfig(dist=1, stream=3)))
    cpu_seed, cpu_y = tvm_ffi.from_dlpack(torch.tensor([3])), tvm_ffi.from_dlpack(torch.zeros(5))

    def cuda(shape, code=2, bits=32, device_type=2):
        return tvm_ffi.from_dlpack(fake_cuda(shape, device_type, code, bits))
    with pytest.raises(ValueError, match=r"seed must be on y's device cuda:0, got device type 1"):
        rnd(cfg, cpu_seed, cuda((10,)))
    with pytest.raises(ValueError, match="seed must be a CPU tensor like y, got device type 2"):
        rnd(cfg, cuda((1,), 0, 64), cpu_y)
    with pytest.raises(ValueError, match="y must be on the CPU or a CUDA device, got device type 8"):
        rnd(cfg, cuda((1,), 0, 64, 8), cuda((10,), device_type=8))
    with pytest.raises(ValueError, match="one element"):
        rnd(cfg, cuda((2,), 0, 64), cuda((10,)))
    fresh = tvm_ffi.get_global_func(_noise.FRESH_SEED_FUNC)
    with pytest.raises(ValueError, match="seed must be a CPU or CUDA tensor, got device type 8"):
        fresh(cuda((1,), 0, 64, 8))
    if _no_driver_here():
        with pytest.raises(RuntimeError, match="libcuda.so.1"):
            rnd(cfg, cuda((1,), 0, 64), cuda((10,)))
        with pytest.raises(RuntimeError, match="libcuda.so.1"):
            fresh(cuda((1,), 0, 64))
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
PATHS = ["cluster", "cluster-barrier", "step"]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """The recurrence path the test runs on (the cluster path with each exchange)."""
    monkeypatch.setenv("KOKORO_LSTM_CUDA_RECURRENCE", request.param.split("-")[0])
    monkeypatch.setenv("KOKORO_LSTM_CUDA_EXCHANGE",
                       "barrier" if request.param.endswith("barrier") else "mbarrier")
    return request.param


def _weights(rng, I, H, L, D, proj, bias=True):
    R = proj or H
    ws = []
    for layer in range(L):
        for _ in range(D):
            inp = I if layer == 0 else D * R
            k = 1 / np.sqrt(H)
            ws += [rng.uniform(-k, k, (4 * H, inp)), rng.uniform(-k, k, (4 * H, R))]
            if bias:
                ws += [rng.uniform(-k, k, 4 * H), rng.uniform(-k, k, 4 * H)]
            if proj:
                ws.append(rng.uniform(-k, k, (proj, H)))
    return ws


def _ref(x, ws, L, D, H, proj, bias, h0, c0, lengths, batch_first):
    """The float64 oracle over seq-first x."""
    per = 2 + 2 * bias + (proj > 0)
    params = {}
    for g in range(L * D):
        w = ws[g * per:(g + 1) * per]
        sfx = f"_l{g // D}" + ("_reverse" if g % D else "")
        params["weight_ih" + sfx], params["weight_hh" + sfx] = w[0], w[1]
        if bias:
            params["bias_ih" + sfx], params["bias_hh" + sfx] = w[2], w[3]
        if proj:
            params["weight_hr" + sfx] = w[-1]
    xs = np.swapaxes(x, 0, 1) if batch_first else x
    hx = None if h0 is None else (h0, c0)
    y, (h_n, c_n) = reference.lstm(xs, params, num_layers=L, bidirectional=D == 2, hx=hx,
                                   lengths=lengths, proj_size=proj)
    return (np.swapaxes(y, 0, 1) if batch_first else y), h_n, c_n


def _run_cuda(x, ws, L, D, H, proj, bias, h0, c0, lengths, batch_first, dtype="float32",
              stream=None, out=None):
    dev = "cuda"
    t = lambda a: None if a is None else torch.as_tensor(np.asarray(a, np.float32), device=dev)
    xt = t(x)
    R = proj or H
    T, B = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    y = torch.full((B, T, D * R) if batch_first else (T, B, D * R), float("nan"), device=dev)
    h_n = torch.full((L * D, B, R), float("nan"), device=dev)
    c_n = torch.full((L * D, B, H), float("nan"), device=dev)
    s = stream if stream is not None else torch.cuda.current_stream()
    _core.forward(xt, None if lengths is None else np.asarray(lengths, np.int64), t(h0), t(c0),
                  [t(w) for w in ws], y, h_n, c_n, num_layers=L, bidirectional=D == 2,
                  has_bias=bias, proj_size=proj, batch_first=batch_first, dtype=dtype,
                  stream=s.cuda_stream)
    return y, h_n, c_n


def _case(rng, I, H, L, D, proj, B, T, bias=True, states=True, lengths=False, batch_first=False):
    R = proj or H
    x = rng.standard_normal((B, T, I) if batch_first else (T, B, I))
    ws = _weights(rng, I, H, L, D, proj, bias)
    h0 = rng.standard_normal((L * D, B, R)) * 0.5 if states else None
    c0 = rng.standard_normal((L * D, B, H)) * 0.5 if states else None
    ln = rng.integers(1, T + 1, B) if lengths else None
    if lengths:
        ln[0] = T
    return x, ws, h0, c0, ln


CASES = [  # I, H, L, D, proj, B, T, bias, states, lengths, batch_first
    (640, 256, 1, 2, 0, 1, 64, True, False, False, True),    # Kokoro's shape
    (512, 256, 1, 2, 0, 3, 40, True, True, True, True),
    (6, 4, 1, 1, 0, 1, 5, True, False, False, False),
    (7, 20, 2, 2, 0, 5, 9, True, True, True, False),
    (9, 64, 3, 1, 0, 17, 12, False, True, False, True),
    (5, 128, 1, 2, 0, 33, 7, True, True, True, False),
    (10, 24, 2, 2, 12, 4, 8, True, True, True, False),       # proj_size: step path
    (3, 3, 1, 1, 0, 2, 6, True, True, False, False),         # H % 4 != 0: step path
    (64, 256, 1, 2, 0, 3, 400, True, False, True, True),     # 128x128 GEMM tiles
    (33, 256, 2, 2, 0, 5, 300, True, True, False, False),    # layer 0: 64x64 (lda 33), layer 1: 128
    (40, 64, 1, 2, 0, 70, 20, True, True, True, False),      # many rows per cluster
]


@gpu
def test_bad_exchange_is_a_value_error(monkeypatch):
    monkeypatch.setenv("KOKORO_LSTM_CUDA_RECURRENCE", "cluster")
    monkeypatch.setenv("KOKORO_LSTM_CUDA_EXCHANGE", "bogus")
    rng = np.random.default_rng(7)
    x, ws, h0, c0, ln = _case(rng, 8, 64, 1, 1, 0, 1, 5, True, False, False, False)
    with pytest.raises(ValueError, match="KOKORO_LSTM_CUDA_EXCHANGE must be barrier or mbarrier"):
        _run_cuda(x, ws, 1, 1, 64, 0, True, h0, c0, ln, False)


@gpu
@pytest.mark.parametrize("case", CASES)
def test_semantics_against_float64(case, path):
    I, H, L, D, proj, B, T, bias, states, lengths, bfirst = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    x, ws, h0, c0, ln = _case(rng, I, H, L, D, proj, B, T, bias, states, lengths, bfirst)
    if path.startswith("cluster") and (proj or H % 4):
        with pytest.raises(ValueError, match="cluster"):
            _run_cuda(x, ws, L, D, H, proj, bias, h0, c0, ln, bfirst)
        return
    y, h_n, c_n = _run_cuda(x, ws, L, D, H, proj, bias, h0, c0, ln, bfirst)
    torch.cuda.synchronize()
    ry, rh, rc = _ref(x, ws, L, D, H, proj, bias, h0, c0, ln, bfirst)
    for got, want, name in ((y, ry, "y"), (h_n, rh, "h_n"), (c_n, rc, "c_n")):
        got = got.cpu().numpy()
        assert not np.isnan(got).any(), f"{name}: unwritten elements"
        err = np.abs(got - want).max()
        assert err <= 2e-6, f"{name}: max abs error {err:.3g} from float64"
    # the CPU engine agrees, and the GPU gives the same bits every run
    cy = np.empty(ry.shape, np.float32)
    ch, cc = np.empty(rh.shape, np.float32), np.empty(rc.shape, np.float32)
    f32 = lambda a: None if a is None else np.ascontiguousarray(a, np.float32)
    _core.forward(f32(x), ln, f32(h0), f32(c0), [f32(w) for w in ws], cy, ch, cc, num_layers=L,
                  bidirectional=D == 2, has_bias=bias, proj_size=proj, batch_first=bfirst)
    assert np.abs(cy - y.cpu().numpy()).max() <= 2e-6
    y2, _, _ = _run_cuda(x, ws, L, D, H, proj, bias, h0, c0, ln, bfirst)
    assert torch.equal(y, y2)


def _rounded(w, dtype):
    """float32 w rounded to bfloat16 / float16 (to nearest, ties to even) and back."""
    w = np.ascontiguousarray(w, np.float32)
    if dtype == "float16":
        return w.astype(np.float16).astype(np.float64)
    u = w.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


@gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_precision_weights(dtype, path):
    """The recurrent weights (W_hh) are rounded to dtype; all else is float32."""
    rng = np.random.default_rng(7)
    x, ws, h0, c0, ln = _case(rng, 33, 64, 1, 2, 0, 3, 20, lengths=True)
    y, h_n, c_n = _run_cuda(x, ws, 1, 2, 64, 0, True, h0, c0, ln, False, dtype=dtype)
    wr = [_rounded(w, dtype) if i % 4 == 1 else np.float32(w).astype(np.float64)
          for i, w in enumerate(ws)]
    ry, rh, rc = _ref(x, wr, 1, 2, 64, 0, True, h0, c0, ln, False)
    for got, want in ((y, ry), (h_n, rh), (c_n, rc)):
        assert np.abs(got.cpu().numpy() - want).max() <= 2e-6
    yf, _, _ = _run_cuda(x, ws, 1, 2, 64, 0, True, h0, c0, ln, False)
    assert np.abs(yf.cpu().numpy() - y.cpu().numpy()).max() > 1e-5  # the rounding happened


@gpu
def test_nan_in_nan_out(path):
    rng = np.random.default_rng(3)
    x, ws, h0, c0, _ = _case(rng, 8, 32, 1, 2, 0, 3, 6)
    x[2, 1, 0] = np.nan
    y, h_n, _ = _run_cuda(x, ws, 1, 2, 32, 0, True, h0, c0, None, False)
    y = y.cpu().numpy()
    assert np.isnan(y[2:, 1, :32]).all() and np.isnan(y[:3, 1, 32:]).all()
    assert not np.isnan(y[:, [0, 2]]).any()  # other rows untouched


@gpu
def test_bad_input_is_a_clear_error():
    rng = np.random.default_rng(1)
    x, ws, _, _, _ = _case(rng, 4, 8, 1, 1, 0, 2, 3, states=False)
    xt = torch.tensor(x, dtype=torch.float32, device="cuda")
    y = torch.empty((3, 2, 8), device="cuda")
    w_cpu = [np.ascontiguousarray(w, np.float32) for w in ws]
    with pytest.raises(ValueError, match="one device"):
        _core.forward(xt, None, None, None, w_cpu, y, None, None, num_layers=1,
                      bidirectional=False, has_bias=True)
    w_gpu = [torch.tensor(w, dtype=torch.float32, device="cuda") for w in ws]
    with pytest.raises(ValueError, match="lengths must have dtype int64"):
        _core.forward(xt, torch.tensor([3, 2], dtype=torch.int32, device="cuda"), None, None,
                      w_gpu, y, None, None, num_layers=1, bidirectional=False, has_bias=True)
    with pytest.raises(ValueError, match="outside 1..3"):
        _core.forward(xt, torch.tensor([3, 4], device="cuda"), None, None, w_gpu, y, None, None,
                      num_layers=1, bidirectional=False, has_bias=True)
    with pytest.raises(ValueError, match="float64 runs on the CPU"):
        _core.forward(xt.double(), None, None, None, [w.double() for w in w_gpu], y.double(),
                      None, None, num_layers=1, bidirectional=False, has_bias=True,
                      dtype="float64")
    with pytest.raises(ValueError, match="stride"):
        _core.forward(xt, None, None, None, w_gpu, torch.empty((3, 2, 16), device="cuda")[..., ::2],
                      None, None, num_layers=1, bidirectional=False, has_bias=True)


@gpu
def test_lengths_on_the_gpu(path):
    """lengths may be on x's GPU (as in a TVM module compiled for cuda): read on the
    call's stream, the same bits as host lengths; while the stream is captured into a
    CUDA graph the kernels read them at every replay (new lengths, new results)."""
    rng = np.random.default_rng(5)
    x, ws, h0, c0, ln = _case(rng, 12, 32, 1, 2, 0, 4, 9, lengths=True)
    want = _run_cuda(x, ws, 1, 2, 32, 0, True, h0, c0, ln, False)
    t = lambda a: torch.as_tensor(np.asarray(a, np.float32), device="cuda")  # noqa: E731
    spread = torch.zeros(8, dtype=torch.int64, device="cuda")
    spread[::2] = torch.as_tensor(ln, device="cuda")
    for lengths in (torch.as_tensor(ln, device="cuda"), spread[::2]):
        y, h_n, c_n = (torch.full_like(a, float("nan")) for a in want)
        _core.forward(t(x), lengths, t(h0), t(c0), [t(w) for w in ws], y, h_n, c_n,
                      num_layers=1, bidirectional=True, has_bias=True,
                      stream=torch.cuda.current_stream().cuda_stream)
        for a, b in zip((y, h_n, c_n), want):
            assert torch.equal(a, b)
    len_dev = torch.as_tensor(ln, device="cuda")
    args = (t(x), len_dev, t(h0), t(c0), [t(w) for w in ws], y, h_n, c_n)
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        _core.forward(*args, num_layers=1, bidirectional=True, has_bias=True,
                      stream=s.cuda_stream)
    for new in (ln, [9, 1, 5, 9][:len(ln)], [1] * len(ln)):
        want = _run_cuda(x, ws, 1, 2, 32, 0, True, h0, c0, np.asarray(new), False)
        len_dev.copy_(torch.as_tensor(np.asarray(new), device="cuda"))
        for a in (y, h_n, c_n):
            a.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        for a, b in zip((y, h_n, c_n), want):
            assert torch.equal(a, b), new


@gpu
def test_two_streams_at_once(path):
    rng = np.random.default_rng(11)
    cases = [_case(rng, 32, 64, 1, 2, 0, 2, 300) for _ in range(2)]
    want = []
    for x, ws, h0, c0, _ in cases:
        want.append(_run_cuda(x, ws, 1, 2, 64, 0, True, h0, c0, None, False)[0].cpu())
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    got = [None, None]

    def work(i):
        with torch.cuda.stream(streams[i]):
            x, ws, h0, c0, _ = cases[i]
            for _ in range(3):
                got[i] = _run_cuda(x, ws, 1, 2, 64, 0, True, h0, c0, None, False,
                                   stream=streams[i])[0]
    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    torch.cuda.synchronize()
    for i in range(2):
        assert torch.equal(got[i].cpu(), want[i])


@gpu
def test_graph_capture_and_replay(path):
    rng = np.random.default_rng(5)
    x, ws, h0, c0, ln = _case(rng, 40, 64, 2, 2, 0, 3, 30, lengths=True)
    dev = "cuda"
    xs = torch.tensor(x, dtype=torch.float32, device=dev)
    wt = [torch.tensor(w, dtype=torch.float32, device=dev) for w in ws]
    h0t = torch.tensor(h0, dtype=torch.float32, device=dev)
    c0t = torch.tensor(c0, dtype=torch.float32, device=dev)
    y = torch.empty((30, 3, 128), device=dev)
    h_n, c_n = torch.empty((4, 3, 64), device=dev), torch.empty((4, 3, 64), device=dev)
    s = torch.cuda.Stream()

    def call():
        _core.forward(xs, ln, h0t, c0t, wt, y, h_n, c_n, num_layers=2, bidirectional=True,
                      has_bias=True, stream=torch.cuda.current_stream().cuda_stream)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()  # warm: module compiled, work buffers allocated
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        call()
    for _ in range(2):
        x2 = rng.standard_normal(x.shape)
        xs.copy_(torch.tensor(x2, dtype=torch.float32))
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ry, _, _ = _ref(x2, ws, 2, 2, 64, 0, True, h0, c0, ln, False)
        assert np.abs(y.cpu().numpy() - ry).max() <= 2e-6


@gpu
def test_torch_ops_and_patched_module_on_cuda(path):
    from kokoro_lstm import torch_ops as ko
    torch.manual_seed(0)
    m = torch.nn.LSTM(48, 32, num_layers=2, bidirectional=True, batch_first=True).cuda().eval()
    x = torch.randn(3, 50, 48, device="cuda")
    lengths = torch.tensor([50, 17, 33])
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.no_grad():
        want, (wh, wc) = m(x)
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                         enforce_sorted=False)
        want_p, (wph, _) = m(packed)
        want_p, _ = torch.nn.utils.rnn.pad_packed_sequence(want_p, batch_first=True)
        ko.patch_lstm_modules(m)
        got, (gh, gc) = m(x)
        got_p, (gph, _) = m(packed)
        got_p, _ = torch.nn.utils.rnn.pad_packed_sequence(got_p, batch_first=True)
    assert got.is_cuda and gh.is_cuda
    for a, b in ((got, want), (gh, wh), (gc, wc), (got_p, want_p), (gph, wph)):
        assert (a - b).abs().max().item() <= 1e-5


class _Foreign:
    """A CUDA array of a library the engine does not know (as a JAX array is to it):
    only DLPack, an array namespace, shape and indexing."""

    def __init__(self, t):
        self.t = t
        self.shape, self.ndim = tuple(t.shape), t.ndim

    def __dlpack__(self, **kw):
        return self.t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

    def __getitem__(self, i):
        return _Foreign(self.t[i])

    def __array_namespace__(self):
        return _ForeignNamespace


class _ForeignNamespace:
    @staticmethod
    def from_dlpack(a):
        return _Foreign(torch.from_dlpack(a))


@gpu
@pytest.mark.parametrize("lib", ["torch", "cupy", "foreign"])
def test_numpy_api_takes_cuda_arrays(lib):
    """kokoro_lstm.LSTM and lstm_forward on a CUDA array run on its GPU and return
    that library's arrays, equal to the CPU call's results within 2e-6 (another
    library's arrays through DLPack and their array namespace)."""
    if lib == "cupy":
        cp = pytest.importorskip("cupy")
        to_dev, to_host = cp.asarray, cp.asnumpy
    elif lib == "foreign":
        to_dev = lambda a: _Foreign(torch.as_tensor(a, device="cuda"))  # noqa: E731
        to_host = lambda f: f.t.cpu().numpy()  # noqa: E731
    else:
        to_dev, to_host = (lambda a: torch.as_tensor(a, device="cuda")), (lambda t: t.cpu().numpy())
    rng = np.random.default_rng(2)
    m = kokoro_lstm.LSTM(12, 32, num_layers=2, bidirectional=True, batch_first=True)
    x = rng.standard_normal((3, 9, 12)).astype(np.float32)
    h0 = rng.standard_normal((4, 3, 32)).astype(np.float32)
    c0 = rng.standard_normal((4, 3, 32)).astype(np.float32)
    ln = np.array([9, 4, 6])
    want, (wh, wc) = m(x, (h0, c0), lengths=ln)
    got, (gh, gc) = m(to_dev(x), (h0, to_dev(c0)), lengths=to_dev(ln))
    assert type(got) is type(to_dev(x)) and type(gh) is type(got)
    for a, b in ((got, want), (gh, wh), (gc, wc)):
        assert np.abs(to_host(a) - b).max() <= 2e-6
    got1 = m(to_dev(x[0]))[0]  # unbatched [T, I]
    assert np.abs(to_host(got1) - m(x[0])[0]).max() <= 2e-6
    w = [rng.uniform(-0.2, 0.2, s).astype(np.float32) for s in ((128, 12), (128, 32), (128,), (128,))]
    xs = rng.standard_normal((7, 2, 12)).astype(np.float32)
    want = kokoro_lstm.lstm_forward(xs, *w, reverse=True)
    got = kokoro_lstm.lstm_forward(to_dev(xs), *[to_dev(a) for a in w], reverse=True)
    for a, b in zip(got, want):
        assert np.abs(to_host(a) - b).max() <= 2e-6
    with pytest.raises(ValueError, match="float64 runs on the CPU"):
        kokoro_lstm.LSTM(4, 8, dtype="float64")(to_dev(np.ones((3, 1, 4), np.float32)))


# ---- the C++ runner on the GPU: TVM artifacts for target cuda, no Python -------------------
DEPLOY_DIR = os.environ.get("KOKORO_LSTM_GPU_DEPLOY",
                            os.path.join(os.path.dirname(__file__), "..", "build-c", "gpu-deploy"))


@pytest.fixture(scope="module")
def gpu_runner(tmp_path_factory):
    """The runner built against the TVM runtime of tools/gpu_deploy.py's folder (built on
    a machine with TVM, carried here), and the environment it runs in: no PYTHON*
    variables, the folder's libraries, the CUDA runtime TVM's CUDA module needs."""
    import shutil
    import subprocess
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from deploy.artifacts import runner_command

    if not os.path.isdir(os.path.join(DEPLOY_DIR, "cases")):
        pytest.skip(f"no {DEPLOY_DIR}: build it with `python tools/gpu_deploy.py` on a machine "
                    "with TVM and carry it here")
    lib = os.path.abspath(os.path.join(DEPLOY_DIR, "lib"))
    import lzma
    for f in os.listdir(lib):
        if f.endswith(".xz") and not os.path.exists(os.path.join(lib, f[:-3])):
            with lzma.open(os.path.join(lib, f)) as src, open(os.path.join(lib, f[:-3]), "wb") as d:
                shutil.copyfileobj(src, d)
    exe = tmp_path_factory.mktemp("gpu-deploy") / "run_artifact"
    cmd = runner_command(["g++"], exe, [os.path.join(DEPLOY_DIR, "include")],
                         [os.path.join(lib, "libtvm_ffi.so"), os.path.join(lib, "libtvm_runtime.so")])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"building the runner failed:\n{' '.join(cmd)}\n{r.stderr}"
    cudart = nvidia_lib_dir("libcudart.so.13")
    assert cudart, "no libcudart.so.13 (nvidia-cuda-runtime) for TVM's CUDA runtime"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["LD_LIBRARY_PATH"] = os.pathsep.join([lib, cudart])
    env["KOKORO_LSTM_NVRTC"] = _nvrtc_path() or ""
    assert env["KOKORO_LSTM_NVRTC"], "the engine in the artifacts needs NVRTC"
    return str(exe), env


def _run_case(gpu_runner, name, manifest=None, tol=1e-5):
    import subprocess

    exe, env = gpu_runner
    d = os.path.join(DEPLOY_DIR, "cases", name)
    return subprocess.run([exe, os.path.join(d, "lib.so"), "main",
                           manifest or os.path.join(d, "manifest.txt"), repr(tol), "cuda"],
                          env=env, capture_output=True, text=True, timeout=120)


@gpu
@pytest.mark.parametrize("name", ["uni-1layer", "bi-2layers", "packed-lengths", "h0-c0",
                                  "kokoro-bi"])
def test_cpp_runner_runs_tvm_cuda_artifacts(gpu_runner, name):
    """A TVM module compiled for target cuda with `native` LSTMs, exported with the engine,
    runs on the GPU from tests/deploy/run_artifact.cc: outputs equal nn.LSTM's (CPU)."""
    r = _run_case(gpu_runner, name)
    out = f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert r.returncode == 0 and "PASS" in r.stdout and "main on cuda" in r.stdout, out
    print(r.stdout)


@gpu
def test_cpp_runner_cuda_detects_mismatch(gpu_runner, tmp_path):
    """The check is not vacuous: a perturbed expected output fails (exit 1)."""
    import shutil

    src = os.path.join(DEPLOY_DIR, "cases", "bi-2layers")
    for f in os.listdir(src):
        if f != "lib.so":
            shutil.copy(os.path.join(src, f), tmp_path)
    want = np.fromfile(tmp_path / "out0.bin", np.float32)
    want[5] += 1e-3
    want.tofile(tmp_path / "out0.bin")
    r = _run_case(gpu_runner, "bi-2layers", manifest=str(tmp_path / "manifest.txt"))
    assert r.returncode == 1 and "output 0: float32" in r.stdout and "FAIL" in r.stdout, r.stdout


@gpu
def test_activations_within_5e7(path):
    """The kernels' sigmoid and tanh (__expf based) against float64 over gate inputs in
    [-30, 30], NaN and infinities: one step from zero state with W_hh = 0, so
    c = sigmoid(i) tanh(g) and h = sigmoid(o) tanh(c)."""
    H, B = 8, 2048
    rng = np.random.default_rng(9)
    g = rng.uniform(-30, 30, (B, 1, 4 * H))
    g[:64] = rng.uniform(-3, 3, (64, 1, 4 * H))
    g[0, 0, :4] = [np.inf, -np.inf, np.nan, 0.0]
    gt = torch.tensor(g, dtype=torch.float32, device="cuda")
    ws = [torch.zeros(4 * H, 3, device="cuda"), torch.zeros(4 * H, H, device="cuda")]
    y = torch.empty(B, 1, H, device="cuda")
    h_n, c_n = torch.empty(1, B, H, device="cuda"), torch.empty(1, B, H, device="cuda")
    _core.forward(gt, None, None, None, ws, y, h_n, c_n, num_layers=1, bidirectional=False,
                  has_bias=False, batch_first=True, x_gates=True,
                  stream=torch.cuda.current_stream().cuda_stream)
    g64 = gt.double().cpu().numpy()[:, 0]
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    with np.errstate(over="ignore", invalid="ignore"):
        c = sig(g64[:, :H]) * np.tanh(g64[:, 2 * H:3 * H])
        h = sig(g64[:, 3 * H:]) * np.tanh(c)
    for got, want in ((c_n[0], c), (h_n[0], h), (y[:, 0], h)):
        got = got.double().cpu().numpy()
        assert np.array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        assert np.abs(got[ok] - want[ok]).max() <= 5e-7


@gpu
def test_gate_bias_on_cuda(path):
    """A per-call gate bias [D, B, 4H] on layer 0 (the gated op of port-encoder's style
    fold) is b_ih for that row and direction: each row against the float64 oracle with
    the bias folded into its b_ih, packed lengths and states included."""
    rng = np.random.default_rng(21)
    L, D, H, B = 2, 2, 32, 3
    x, ws, h0, c0, ln = _case(rng, 24, H, L, D, 0, B, 11, lengths=True)
    gb = rng.standard_normal((D, B, 4 * H)) * 0.5
    t = lambda a: torch.as_tensor(np.asarray(a, np.float32), device="cuda")  # noqa: E731
    y = torch.full((11, B, D * H), float("nan"), device="cuda")
    h_n, c_n = (torch.full((L * D, B, H), float("nan"), device="cuda") for _ in range(2))
    _core.forward(t(x), np.asarray(ln, np.int64), t(h0), t(c0), [t(w) for w in ws], y, h_n, c_n,
                  num_layers=L, bidirectional=True, has_bias=True, gate_bias=t(gb),
                  stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    for b in range(B):
        wb = [np.array(w) for w in ws]
        for d in range(D):
            wb[d * 4 + 2] = wb[d * 4 + 2] + gb[d, b]  # layer 0's b_ih, direction d
        ry, rh, rc = _ref(x[:, b:b + 1], wb, L, D, H, 0, True, h0[:, b:b + 1], c0[:, b:b + 1],
                          ln[b:b + 1], False)
        assert np.abs(y[:, b:b + 1].double().cpu().numpy() - ry).max() <= 2e-6
        assert np.abs(h_n[:, b:b + 1].double().cpu().numpy() - rh).max() <= 2e-6
        assert np.abs(c_n[:, b:b + 1].double().cpu().numpy() - rc).max() <= 2e-6


# -- counter-based noise on the GPU (src/cuda/random.cu) --------------------------------
RANDOM_SIZES = [1, 3, 4, 5, 1000, (1 << 20) + 3]


def _bits(t):
    """A float32 tensor's bits (on the CPU): equal bits, not equal values (-0.0, NaN)."""
    return t.detach().cpu().contiguous().view(torch.int32)


@gpu
@pytest.mark.parametrize("seed", [0, -1, 2 ** 63 - 1, -2 ** 63, 0x243F6A8885A308D3])
@pytest.mark.parametrize("stream", [0, 7])
@pytest.mark.parametrize("dist", ["uniform", "normal"])
def test_random_cuda_is_the_cpu_draw(dist, stream, seed):
    """kokoro::random_* with a CUDA seed draw on the device, bit for bit the CPU's."""
    from kokoro_lstm import torch_ops as ko

    op = ko.random_uniform if dist == "uniform" else ko.random_normal
    seed_t = torch.tensor([seed], dtype=torch.int64, device="cuda")
    for n in RANDOM_SIZES:
        got = op(seed_t, [n], stream)
        want = op(seed_t.cpu(), [n], stream)
        assert got.is_cuda and got.dtype == torch.float32 and got.shape == (n,)
        assert torch.equal(_bits(got), _bits(want)), (n, int((_bits(got) != _bits(want)).sum()))
        assert torch.isfinite(got).all()
    got = op(seed_t, [3, 5, 7], stream)  # any shape: the draw in row-major order
    assert torch.equal(_bits(got), _bits(op(seed_t.cpu(), [105], stream).view(3, 5, 7)))


@gpu
def test_random_cuda_writes_only_its_elements():
    """random_fill_cuda on a slice of a buffer: every element of the slice written, none
    outside it (sentinels on both sides), at an offset that is not 16-byte aligned."""
    from kokoro_lstm import noise

    for n in (1, 2, 3, 4, 5, 4097):
        buf = torch.full((n + 64,), float("nan"), device="cuda")
        seed = torch.tensor([11], device="cuda")
        _core.random_fill_cuda(1, seed.data_ptr(), 4, n, buf[33:].data_ptr(), buf.device.index,
                               torch.cuda.current_stream().cuda_stream)
        got = buf.cpu()
        assert torch.isnan(got[:33]).all() and torch.isnan(got[33 + n:]).all()
        assert torch.equal(_bits(got[33:33 + n]), _bits(torch.from_numpy(noise.normal(n, 11, 4))))


@gpu
def test_random_cuda_runs_on_the_current_stream():
    """The draw is queued on torch's current stream: it reads the seed written just before
    on that stream, behind a long kernel, with no host synchronization between."""
    from kokoro_lstm import torch_ops as ko

    seed = torch.tensor([0], device="cuda")
    ko.random_normal(seed, [8], 1)  # warm: the kernel built
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)
        seed.fill_(12345)
        got = ko.random_normal(seed, [100_003], 1)
    side.synchronize()
    assert torch.equal(_bits(got), _bits(ko.random_normal(torch.tensor([12345]), [100_003], 1)))


@gpu
def test_random_cuda_graph_capture_and_replay():
    """Captured once after a warm-up (as TVM's Relax CUDA graphs do), a replay draws with
    the value the seed tensor holds then."""
    from kokoro_lstm import torch_ops as ko

    seed = torch.tensor([1], device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ko.random_uniform(seed, [10], 0)  # warm
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        u = ko.random_uniform(seed, [777], 0)
        z = ko.random_normal(seed, [4, 1001], 2)
    for v in (5, -7, 2 ** 63 - 1, 0):
        seed.fill_(v)
        u.fill_(float("nan"))
        z.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        cpu = torch.tensor([v])
        assert torch.equal(_bits(u), _bits(ko.random_uniform(cpu, [777], 0)))
        assert torch.equal(_bits(z), _bits(ko.random_normal(cpu, [4, 1001], 2)))
