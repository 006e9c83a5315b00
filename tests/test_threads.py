"""The thread rule (src/core/threads.c, docs/threads.md): its outputs pinned for the
overrides Python passes (the call's count, set_num_threads, threadpoolctl's limit,
torch's count), the environment's caps, the cgroup quota and short calls; and the same
count for a call made without Python (the engine's own default, what TVM modules and
exported libraries use) as for a Python call."""
import os

import numpy as np
import pytest

import kokoro_lstm
from kokoro_lstm import _core, _threads



def cpus():
    """This thread's CPUs now (a TVM pool started by an earlier test may pin it)."""
    return len(os.sched_getaffinity(0))


CPUS = -1  # in a case's want: min(cpus(), cap)


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for var in ("KOKORO_LSTM_NUM_THREADS", "KOKORO_LSTM_MAX_THREADS"):
        monkeypatch.delenv(var, raising=False)
    yield
    kokoro_lstm.set_num_threads(None)
    _core.set_thread_limit(0)
    _threads._set_cgroup_paths()
    _threads.sync_engine()


@pytest.mark.parametrize("env,set_n,limit,requested,host,want", [
    # (KOKORO_LSTM_NUM_THREADS, KOKORO_LSTM_MAX_THREADS), set_num_threads, limit, call, torch
    ((None, "6"), None, 0, None, 0, (CPUS, 6)),             # the usable CPUs
    ((None, "6"), None, 0, None, 1, 1),                     # torch's count caps the default
    (("64", "3"), None, 0, None, 0, 3),                     # env default capped by the env cap
    (("5", "6"), None, 0, None, 1, 5),                      # torch does not cap the env default
    (("5", "6"), 4, 0, None, 1, 4),                         # set_num_threads beats the env
    ((None, "6"), 500, 0, None, 0, 6),                      # ... and is capped
    ((None, "6"), 2, 0, 5, 1, 5),                           # the call's own count wins
    ((None, "6"), None, 0, 100, 0, 6),                      # ... capped
    ((None, "6"), None, 2, 5, 0, 2),                        # the limit caps a call's count
    ((None, "6"), 5, 3, None, 0, 3),                        # ... and the default
    (("abc", "6"), None, 0, None, 0, (CPUS, 6)),            # an invalid count is ignored
    (("3", "0"), None, 0, None, 0, (CPUS, 3)),              # an invalid cap too
])
def test_rule_outputs(monkeypatch, env, set_n, limit, requested, host, want):
    for var, value in zip(("KOKORO_LSTM_NUM_THREADS", "KOKORO_LSTM_MAX_THREADS"), env):
        if value is not None:
            monkeypatch.setenv(var, value)
    if set_n is not None:
        _core.set_num_threads(set_n)
    _core.set_thread_limit(limit)
    _core.set_host_threads(host)
    if isinstance(want, tuple):
        want = min(cpus(), want[1])
    assert _core.resolve_threads(requested or 0, host) == want
    # what a call made without Python runs with (kl_get_num_threads / num_threads in a config)
    assert _core.get_num_threads() == _core.resolve_threads(0, host)


def test_python_passes_only_overrides(monkeypatch):
    """Python's counts are the engine's: the same answers, every override in C."""
    monkeypatch.setenv("KOKORO_LSTM_MAX_THREADS", "6")
    kokoro_lstm.set_num_threads(4)
    assert kokoro_lstm.get_num_threads() == _core.get_num_threads() == 4
    _threads._tpc_set(2)  # threadpoolctl's limit
    assert _core.thread_limit() == 2
    assert _threads.effective(5) == _core.resolve_threads(5, 0) == 2
    assert kokoro_lstm.get_num_threads() == _core.get_num_threads() == 2
    _threads._tpc_set(4)  # threadpool_limits' exit: no longer a limit
    assert _core.thread_limit() == 0 and _core.get_num_threads() == 4


def test_cgroup_quota_through_the_hook(tmp_path):
    def tree(name, proc, files):
        root = tmp_path / name
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        root.mkdir(exist_ok=True)
        (tmp_path / (name + ".proc")).write_text(proc)
        return str(root), str(tmp_path / (name + ".proc"))

    n = cpus()
    cases = [
        (tree("v2", "0::/\n", {"cpu.max": "150000 100000\n"}), min(n, 2)),
        (tree("v2n", "0::/a/b\n", {"a/b/cpu.max": "max 100000", "a/cpu.max": "50000 100000",
                                   "cpu.max": "400000 100000"}), 1),
        (tree("v1", "3:cpu,cpuacct:/x\n0::/\n", {"cpu,cpuacct/x/cpu.cfs_quota_us": "100000\n",
                                                   "cpu,cpuacct/x/cpu.cfs_period_us": "100000\n"}), 1),
        (tree("none", "0::/\n", {"cpu.max": "max 100000\n"}), n),
    ]
    for paths, want in cases:
        _threads._set_cgroup_paths(*paths)
        assert _core.usable_cpus() == want == _threads.usable_cores(*paths)
        assert kokoro_lstm.get_num_threads() == _core.get_num_threads() == min(want, 512)
        assert _threads.max_threads() == want


def test_env_counts_are_parsed_by_the_engine(monkeypatch):
    for value, want in [("3", 3), (" 3 ", 3), ("3\n", 3), ("+3", 3), ("0", 0), ("-2", 0),
                        ("3_0", 0), ("1.5", 0), ("2147483648", 0), ("", 0)]:
        monkeypatch.setenv("KOKORO_LSTM_NUM_THREADS", value)
        assert _core.env_count("KOKORO_LSTM_NUM_THREADS") == want, value


def test_cache_mb_is_parsed_by_the_engine(monkeypatch):
    """_core.env_cache_mb is cache.c's own parse: MiB, -1 unset or blank, -2 ignored."""
    monkeypatch.delenv("KOKORO_LSTM_CACHE_MB", raising=False)
    assert _core.env_cache_mb() == -1
    for value, want in [("64", 64), (" 7", 7), ("+3", 3), ("0", 0), ("", -1), ("  ", -1),
                        (str(2**40), 2**40), (str(2**40 + 1), -2), ("64MB", -2), ("-5", -2),
                        ("1.5", -2), ("7 ", -2), ("9" * 5000, -2)]:
        monkeypatch.setenv("KOKORO_LSTM_CACHE_MB", value)
        assert _core.env_cache_mb() == want, value


@pytest.mark.parametrize("bidirectional,T,B,want", [
    (True, 8, 1, 16),     # a short call of a small batch: the recurrence's 2 x 8 threads
    (True, 127, 1, 16),   # fewer than 128 rows
    (True, 128, 1, 20),   # 128 rows: every thread
    (True, 4, 16, 20),    # a batch of one chunk: every thread
    (False, 8, 1, 8),     # one direction: 8
])
def test_short_calls(monkeypatch, bidirectional, T, B, want):
    """The count a short call runs with (the pool records each job's count)."""
    monkeypatch.setenv("KOKORO_LSTM_MAX_THREADS", "64")
    m = kokoro_lstm.LSTM(8, 32, bidirectional=bidirectional, num_threads=20)
    x = np.ones((T, B, 8), np.float32)
    y = m(x)[0]
    assert _core.pool_info()["last_threads"] == want
    assert np.array_equal(m(x, num_threads=1)[0], y)
