"""Lifetimes, limits and validation at the engine's edges: weights freed by another
thread during a call, cache ownership across processes and copies, thread caps,
overlapping outputs, long calls and interrupts."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kokoro_lstm as kl

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_python(code, env=None, timeout=300):
    """code in a fresh interpreter that imports this checkout's kokoro_lstm."""
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


# --------------------------------------------------------------------------------------
# the binding holds what it reads while the GIL is released
# --------------------------------------------------------------------------------------
def test_forward_keeps_weights_alive_when_the_list_is_emptied():
    # A thread empties the weights list while the call runs without the GIL and
    # allocates over the freed memory: the call must still see the weights it was
    # given (it used to read freed memory when confirming its cached entry).
    r = run_python("""
        import gc, threading, time
        import numpy as np
        import kokoro_lstm as kl
        H, T, I = 512, 3000, 8
        rng = np.random.default_rng(0)
        def weights():
            k = 1 / np.sqrt(H)
            return [rng.uniform(-k, k, s).astype(np.float32)
                    for s in ((4 * H, I), (4 * H, H), (4 * H,), (4 * H,))]
        x = rng.standard_normal((T, 1, I)).astype(np.float32)
        def call(lst):
            y = np.empty((T, 1, H), np.float32)
            kl._core.forward(x, None, None, None, lst, y, None, None, num_layers=1,
                             bidirectional=False, has_bias=True, num_threads=1)
            return y
        lst = weights()
        want = call(lst)  # packs and caches: the next call hits and then confirms
        junk = []
        def clear():
            time.sleep(0.05)
            lst.clear()
            gc.collect()
            for _ in range(50):
                junk.append(np.full((4 * H, H), 7.0))
        th = threading.Thread(target=clear)
        th.start()
        got = call(lst)
        th.join()
        assert not lst and len(junk) == 50
        print("same" if np.array_equal(got, want) else "differ")
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "same"


# --------------------------------------------------------------------------------------
# ordering by length is O(B log B)
# --------------------------------------------------------------------------------------
def test_ascending_lengths_cost_what_descending_do():
    # The engine orders the batch by decreasing length; an insertion sort made
    # ascending lengths quadratic (B = 200k: seconds against a fraction of one).
    import time
    B, T = 200_000, 2
    m = kl.LSTM(1, 4)
    x = np.random.default_rng(0).standard_normal((T, B, 1)).astype(np.float32)
    up = np.repeat(np.arange(1, T + 1), B // T)
    down = up[::-1].copy()
    times = {}
    for name, lengths in (("down", down), ("up", up), ("down", down), ("up", up)):
        t0 = time.perf_counter()
        y, _ = m(x, lengths=lengths, num_threads=1)
        times[name] = min(times.get(name, 1e9), time.perf_counter() - t0)
    assert times["up"] < 3 * times["down"] + 1.0, times
    # same results as sequences ordered the other way (the order never changes bits)
    perm = np.arange(B)[::-1]
    y_up, (h_up, c_up) = m(x, lengths=up, num_threads=1)
    y_dn, (h_dn, c_dn) = m(x[:, perm], lengths=up[perm], num_threads=1)
    assert np.array_equal(y_up[:, perm], y_dn) and np.array_equal(h_up[:, perm], h_dn)


# --------------------------------------------------------------------------------------
# outputs may not overlap each other or the inputs
# --------------------------------------------------------------------------------------
def _small_call(T=5, B=3, I=4, H=6, seed=0):
    rng = np.random.default_rng(seed)
    w = [rng.uniform(-.4, .4, s).astype(np.float32) for s in ((4 * H, I), (4 * H, H), (4 * H,), (4 * H,))]
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    h0 = rng.standard_normal((1, B, H)).astype(np.float32)
    c0 = rng.standard_normal((1, B, H)).astype(np.float32)
    return x, h0, c0, w


def _fwd(x, h0, c0, w, y, h_n, c_n):
    kl._core.forward(x, None, h0, c0, w, y, h_n, c_n, num_layers=1, bidirectional=False,
                     has_bias=True, num_threads=1)


def test_overlapping_outputs_are_rejected():
    from numpy.lib.stride_tricks import as_strided
    T, B, H = 5, 3, 6
    x, h0, c0, w = _small_call(T, B, H=H)
    y, h_n, c_n = np.empty((T, B, H), np.float32), np.empty((1, B, H), np.float32), np.empty((1, B, H), np.float32)
    _fwd(x, h0, c0, w, y, h_n, c_n)
    want = y.copy(), h_n.copy(), c_n.copy()

    # disjoint parts of one buffer are fine, with the same bits
    buf = np.full(T * B * H + 2 * B * H + 7, np.nan, np.float32)
    y2 = buf[:T * B * H].reshape(T, B, H)
    h2 = buf[T * B * H:T * B * H + B * H].reshape(1, B, H)
    c2 = buf[T * B * H + B * H:T * B * H + 2 * B * H].reshape(1, B, H)
    _fwd(x, h0, c0, w, y2, h2, c2)
    assert all(np.array_equal(a, b) for a, b in zip((y2, h2, c2), want))

    def rejected(y_, h_, c_, match, x_=x, h0_=h0, c0_=c0, w_=w):
        with pytest.raises(ValueError, match=match):
            _fwd(x_, h0_, c0_, w_, y_, h_, c_)

    rejected(y, h_n, h_n, "h_n and c_n overlap")
    rejected(y, y.reshape(-1)[5:5 + B * H].reshape(1, B, H), c_n, "y and h_n overlap")
    rejected(y, h_n, y[1:2], "y and c_n overlap")
    # outputs over inputs
    xs = np.zeros((T, B, H), np.float32)
    xs[..., :4] = x
    rejected(xs, h_n, c_n, "y and x overlap", x_=xs[..., :4])
    rejected(y, h0, c_n, "h_n and h0 overlap")
    rejected(y, h_n, c0, "c_n and c0 overlap")
    wbig = [a.copy() for a in w]
    rejected(y, h_n, wbig[1].reshape(-1)[:B * H].reshape(1, B, H), "c_n and weights\\[1\\] overlap", w_=wbig)
    # y whose rows overlap one another: zero, negative and too small strides
    zb = np.empty(B * H, np.float32)
    rejected(as_strided(zb, (T, B, H), (0, 4 * H, 4), writeable=True), h_n, c_n, "y.*stride")
    rejected(as_strided(zb, (T, B, H), (4 * H, 0, 4), writeable=True), h_n, c_n, "y.*stride")
    rejected(np.empty((T, B, H), np.float32)[::-1], h_n, c_n, "y.*stride")
    rb = np.empty(T * B * H, np.float32)
    rejected(as_strided(rb, (T, B, H), (4 * B * H, 4 * (H - 1), 4), writeable=True), h_n, c_n, "y.*overlap")
    rejected(as_strided(rb, (T, B, H), (4 * B * H // 2, 4 * H, 4), writeable=True), h_n, c_n, "y.*overlap")
    assert np.array_equal(y, want[0])  # nothing written by a rejected call


# --------------------------------------------------------------------------------------
# one cap on every thread count, in C
# --------------------------------------------------------------------------------------
def test_every_count_is_capped_in_the_engine():
    # Counts that reach the C engine without the Python rules (a raw _core call, the
    # environment default, tvm-ffi configs) used to start that many threads.
    r = run_python("""
        import os
        import numpy as np
        from kokoro_lstm import _core
        def threads():
            return len(os.listdir("/proc/self/task"))
        T, B, I, H = 4, 64, 8, 16
        x = np.ones((T, B, I), np.float32)
        w = [np.full((4 * H, I), .01, np.float32), np.full((4 * H, H), .01, np.float32)]
        def call(n):
            y = np.empty((T, B, H), np.float32)
            _core.forward(x, None, None, None, w, y, None, None, num_layers=1,
                          bidirectional=False, has_bias=False, num_threads=n)
            return y
        want = call(1)
        base = threads()
        print(_core.get_num_threads())
        _core.set_num_threads(0)          # back to the environment's default
        print(_core.get_num_threads())
        assert np.array_equal(call(512), want) and np.array_equal(call(0), want)
        print(threads() - base)
    """, env={"KOKORO_LSTM_MAX_THREADS": "3", "KOKORO_LSTM_NUM_THREADS": "64",
              "KOKORO_LSTM_POOL": "own"})
    assert r.returncode == 0, r.stderr[-2000:]
    synced, env_default, extra = map(int, r.stdout.split())
    assert synced == 3 and env_default == 3
    assert extra <= 2  # the pool's workers of a 3-thread call


def test_bad_thread_env_warns_instead_of_failing_import():
    r = run_python("""
        import os
        import kokoro_lstm
        print(kokoro_lstm.get_num_threads())
        del os.environ["KOKORO_LSTM_NUM_THREADS"]
        print(kokoro_lstm.get_num_threads())  # the default it fell back to
    """, env={"KOKORO_LSTM_NUM_THREADS": "abc", "KOKORO_LSTM_MAX_THREADS": "2"})
    assert r.returncode == 0, r.stderr[-2000:]
    got, default = r.stdout.split()
    assert got == default
    lines = [ln for ln in r.stderr.splitlines() if "KOKORO_LSTM_NUM_THREADS" in ln]
    assert len(lines) >= 1 and "RuntimeWarning" in lines[0] and "ignored" in lines[0]


# --------------------------------------------------------------------------------------
# cache ownership: one token per live object, never pickled or copied
# --------------------------------------------------------------------------------------
def test_unpickled_lstm_leaves_no_stale_entry():
    # An LSTM pickled in one process and loaded in another carried its owner token
    # (a per-process counter) and got no finalizer: its trusted cache entry outlived
    # it, and a new LSTM of the same shape whose weights landed at the same addresses
    # (same token from the fresh counter) got the dead one's outputs bit for bit.
    import base64
    import pickle
    a = kl.LSTM(3, 4, bidirectional=True)
    blob = base64.b64encode(pickle.dumps(a)).decode()
    shapes = {k: v.shape for k, v in a.state_dict().items()}
    r = run_python(f"""
        import base64, gc, pickle
        import numpy as np
        import kokoro_lstm as kl
        from kokoro_lstm import reference
        x = np.random.default_rng(1).standard_normal((6, 2, 3)).astype(np.float32)
        rng = np.random.default_rng(2)
        sd = {{k: rng.uniform(-.5, .5, s).astype(np.float32) for k, s in {shapes!r}.items()}}
        b = pickle.loads(base64.b64decode("{blob}"))
        yb = b(x)[0]
        addrs = sorted(w.ctypes.data for w in b._weights)
        del b
        c = kl.LSTM.from_state_dict(sd)  # the first LSTM made here
        # (the case needs c's weights where b's were: say so if the allocator moved)
        print("reused" if sorted(w.ctypes.data for w in c._weights) == addrs else "moved")
        yc = c(x)[0]
        want = kl.LSTM.from_state_dict(sd)(x.astype(np.float64).astype(np.float32))[0]
        print("stale" if np.array_equal(yc, yb) else "fresh")
        print("ok" if np.allclose(yc, want, atol=1e-6) else "wrong")
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[1:] == ["fresh", "ok"], r.stdout


def test_copies_and_unpickled_objects_own_their_entries():
    import copy
    import gc
    import pickle
    x = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)
    kl.clear_cache()
    a = kl.LSTM(3, 4)
    want = a(x)[0]
    copies = [copy.copy(a), copy.deepcopy(a), pickle.loads(pickle.dumps(a))]
    tokens = {a._owner} | {c._owner for c in copies}
    assert len(tokens) == 4 and 0 not in tokens  # a fresh token each
    assert "_owner" not in a.__getstate__()
    assert all(np.array_equal(c(x)[0], want) for c in copies)
    assert kl.cache_info()["entries"] == 4
    # each dies with its entries, whatever the others do
    for n in (3, 2, 1):
        copies.pop()
        gc.collect()
        assert kl.cache_info()["entries"] == n
    assert np.array_equal(a(x)[0], want)


# --------------------------------------------------------------------------------------
# the weight cache is bounded in bytes
# --------------------------------------------------------------------------------------
def test_cache_bytes_are_bounded():
    # Entries keyed on addresses outlive the weights they were packed from (nothing
    # tells the engine that an array was freed): up to 64 of them, of any size, stayed
    # until clear_cache(). The bytes are capped (KOKORO_LSTM_CACHE_MB), unused entries
    # going least recently used first; the newest entry always stays.
    r = run_python("""
        import gc
        import numpy as np
        import kokoro_lstm as kl
        H, I = 128, 8
        x = np.ones((3, 2, I), np.float32)
        rng = np.random.default_rng(0)
        def weights():
            return [rng.uniform(-.1, .1, s).astype(np.float32) for s in ((4 * H, I), (4 * H, H))]
        keep = weights()
        want = kl.lstm_forward(x, *keep)[0]
        one = kl.cache_info()["bytes"]
        held = [weights() for _ in range(12)]  # 12 more keys (no address reused), packed once
        for w in held:
            kl.lstm_forward(x, *w)
        del held, w  # then freed: their entries stay, within the cap
        gc.collect()
        info = kl.cache_info()
        print(one, info["bytes"], info["entries"])
        assert np.array_equal(kl.lstm_forward(x, *keep)[0], want)
        big = [np.zeros((4 * 1024, 8), np.float32), np.zeros((4 * 1024, 1024), np.float32)]
        kl.lstm_forward(x[..., :8], *big)  # alone over the cap: kept while newest
        kl.lstm_forward(x[..., :8], *big)
        info = kl.cache_info()
        print(info["entries"], info["hits"] >= 1)
    """, env={"KOKORO_LSTM_CACHE_MB": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    one, total, entries = map(int, lines[0].split())
    assert 0 < one and total <= (1 << 20) and entries == (1 << 20) // one, lines
    assert lines[1] == "1 True", lines


# --------------------------------------------------------------------------------------
# Ctrl-C stops a long call
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("layers,bidirectional,nth,api,hog", [
    (1, False, 1, "class", False), (1, True, 2, "class", False), (2, False, 2, "class", False),
    (1, True, 2, "class", True), (1, False, 2, "function", True)])
def test_keyboard_interrupt_stops_a_long_call(layers, bidirectional, nth, api, hog):
    # SIGINT used to be raised only when the call returned: the binding now runs
    # Python's signal handlers during the call (between layers, between input-projection
    # tiles and every 64 steps, at most every 50 ms) and the engine stops at a tile or a
    # step. The signal comes 0.2 s in, during the input projection (it used to wait for
    # all of it: 2.2 s on a loaded 2-core machine). "class": W_ih in the engine's own
    # panels (a trusted entry); "function": the BLAS GEMM. hog: the interrupted call runs
    # beside one busy process per CPU, as on a loaded machine.
    r = run_python(f"""
        import os, signal, subprocess, sys, threading, time
        import numpy as np
        import kokoro_lstm as kl
        # Python's own SIGINT handling, whatever the parent left (an ignored or blocked
        # SIGINT is inherited by a child process).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGINT}})
        x = np.ones((150000, 1, 8), np.float32)
        if {api!r} == "class":
            m = kl.LSTM(8, 256, num_layers={layers}, bidirectional={bidirectional})
            call = lambda: m(x, num_threads={nth})[0]
        else:
            rng = np.random.default_rng(0)
            w = [rng.uniform(-.06, .06, s).astype(np.float32) for s in ((1024, 8), (1024, 256))]
            call = lambda: kl.lstm_forward(x, *w, num_threads={nth})[0]
        t0 = time.perf_counter()
        want = call()
        full = time.perf_counter() - t0
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(len(os.sched_getaffinity(0)) if {hog} else 0)]
        try:
            time.sleep(0.5 if hogs else 0)  # the hogs are running
            sent = []
            def send():
                sent.append(time.perf_counter())
                os.kill(os.getpid(), signal.SIGINT)
            threading.Timer(0.2, send).start()
            t0 = time.perf_counter()
            try:
                call()
                print("returned", full, time.perf_counter() - t0, 0)
            except KeyboardInterrupt:
                t1 = time.perf_counter()
                print("interrupted", full, t1 - t0, t1 - sent[0])
        finally:
            for h in hogs:
                h.kill()
                h.wait()
        assert np.array_equal(call(), want)  # the next call is whole
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    what, full, took, lat = r.stdout.split()
    assert what == "interrupted" and float(took) < min(1.0, float(full) / 2), r.stdout
    assert float(lat) < 0.5, r.stdout  # 0.1 s typical; 0.5 s leaves a loaded machine's scheduling
