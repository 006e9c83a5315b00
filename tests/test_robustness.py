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
