"""How many threads kokoro_lstm uses: one rule for every front (NumPy API, torch ops,
TVM native calls).

A call runs with ``effective(requested)`` threads:

1. ``requested``: the call's or the object's ``num_threads`` if given, else
   :func:`set_num_threads`'s value if set, else ``KOKORO_LSTM_NUM_THREADS`` if set, else
   the usable cores -- and, when torch is already imported, at most
   ``torch.get_num_threads()`` (so ``torch.set_num_threads(1)`` limits us too);
2. at most an active ``threadpoolctl.threadpool_limits`` limit (our pool is registered
   with threadpoolctl as user_api "kokoro_lstm");
3. at most :func:`max_threads`: ``KOKORO_LSTM_MAX_THREADS`` if set, else the usable
   cores -- the CPUs in the affinity mask, further bounded by a cgroup CPU quota
   (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, rounded up),
   so a container never runs more threads than its share. Larger requests are
   capped, not refused (results are bitwise identical for any count).

Counts must be integers in 1..2**31-1; anything else (bools, floats, 0, 2**31) is a
ValueError naming the argument; an environment variable that is not such a count is
ignored with a RuntimeWarning naming it. The C engine caps every count that reaches it
the same way (``kl_max_threads``), also in processes without this module.
"""
from __future__ import annotations

import math
import numbers
import os
import sys
import threading
import warnings

__all__ = ["set_num_threads", "get_num_threads", "effective", "check_count", "sync_engine",
           "usable_cores", "cgroup_cpu_limit", "max_threads", "register_threadpoolctl"]

#: The largest count accepted anywhere (the C API takes an int).
INT_MAX = 2**31 - 1
#: The engine's pool never runs more threads than this (src/core/threadpool.c).
POOL_MAX = 512

ENV_NUM_THREADS = "KOKORO_LSTM_NUM_THREADS"
ENV_MAX_THREADS = "KOKORO_LSTM_MAX_THREADS"

_lock = threading.Lock()
_set_value = None   # set_num_threads()
_tpc_limit = None   # threadpoolctl's limit while one is active
_cgroup_cache = {}  # (root, proc_file) -> limit (float or None)


# ---- validation -----------------------------------------------------------------------
def check_count(n, name="num_threads", *, allow_none=True):
    """n as an int in 1..2**31-1 (None passes when allow_none); ValueError naming
    ``name`` otherwise."""
    if n is None and allow_none:
        return None
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ValueError(f"{name} must be a positive integer{' or None' if allow_none else ''}, "
                         f"got {n!r}")
    n = int(n)
    if n < 1:
        raise ValueError(f"{name} must be a positive integer, got {n}")
    if n > INT_MAX:
        raise ValueError(f"{name} must be at most {INT_MAX} (counts above the usable cores "
                         f"are capped to them anyway), got {n}")
    return n


def _env_count(var):
    """The env variable as a count, or None when unset/empty; ValueError naming it."""
    raw = os.environ.get(var, "").strip()
    if not raw:
        return None
    try:
        n = int(raw, 10)
    except ValueError:
        n = None
    if n is None or n < 1 or n > INT_MAX:
        shown = raw if len(raw) <= 40 else raw[:37] + "..."
        raise ValueError(f"{var} must be an integer in 1..{INT_MAX}, got {shown!r}")
    return n


def _env_setting(var):
    """_env_count for the count rules: a value that is not a count is ignored with a
    one-line RuntimeWarning naming it, as the C engine ignores it (a bad variable must
    not break ``import kokoro_lstm`` or every call)."""
    try:
        return _env_count(var)
    except ValueError as e:
        warnings.warn(f"{e}; ignored", RuntimeWarning, stacklevel=3)
        return None


# ---- usable cores --------------------------------------------------------------------
def _read(path):
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _ancestors(root, rel):
    """root/rel, its parents, ..., root (rel from /proc/self/cgroup)."""
    parts = [p for p in (rel or "").split("/") if p and p not in (".", "..")]
    for k in range(len(parts), -1, -1):
        yield os.path.join(root, *parts[:k])


def cgroup_cpu_limit(root="/sys/fs/cgroup", proc_cgroup="/proc/self/cgroup"):
    """The CPU quota of this process's cgroup in CPUs (e.g. 1.5), or None if there is
    none. Reads cgroup v2 ``cpu.max`` ("max 100000" = none) or v1
    ``cpu.cfs_quota_us`` (-1 = none) / ``cpu.cfs_period_us`` under ``root``, in the
    process's cgroup and each ancestor (the smallest quota wins), as listed in
    ``proc_cgroup``; both paths are parameters so tests can use a fake tree."""
    key = (root, proc_cgroup)
    if key in _cgroup_cache:
        return _cgroup_cache[key]
    v2_rel, v1 = None, {}
    text = _read(proc_cgroup) or ""
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, rel = fields
        if controllers == "":
            v2_rel = rel
        else:
            for c in controllers.split(","):
                v1[c] = rel
    limits = []
    # cgroup v2 (unified): root/<rel>/cpu.max
    for d in _ancestors(root, v2_rel or "/"):
        q = _read(os.path.join(d, "cpu.max"))
        if q:
            fields = q.split()
            try:
                if fields[0] != "max":
                    period = float(fields[1]) if len(fields) > 1 else 100000.0
                    if float(fields[0]) > 0 and period > 0:
                        limits.append(float(fields[0]) / period)
            except (ValueError, IndexError):
                pass
    # cgroup v1: root/cpu[,cpuacct]/<rel>/cpu.cfs_quota_us
    for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        base = os.path.join(root, mount)
        if not os.path.isdir(base):
            continue
        for d in _ancestors(base, v1.get("cpu", "/")):
            q, p = _read(os.path.join(d, "cpu.cfs_quota_us")), _read(os.path.join(d, "cpu.cfs_period_us"))
            try:
                quota, period = float(q), float(p)
            except (TypeError, ValueError):
                continue
            if quota > 0 and period > 0:
                limits.append(quota / period)
        break
    limit = min(limits) if limits else None
    _cgroup_cache[key] = limit
    return limit


def _affinity_cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def usable_cores(cgroup_root="/sys/fs/cgroup", proc_cgroup="/proc/self/cgroup") -> int:
    """CPUs in the affinity mask, at most the cgroup CPU quota rounded up (>= 1)."""
    n = _affinity_cores()
    limit = cgroup_cpu_limit(cgroup_root, proc_cgroup)
    if limit is not None:
        n = min(n, max(1, math.ceil(limit - 1e-9)))
    return max(1, n)


def max_threads() -> int:
    """The cap on every count: ``KOKORO_LSTM_MAX_THREADS`` if set (for tests that want
    more threads than cores), else :func:`usable_cores`; never above 512, the pool's
    maximum."""
    env = _env_setting(ENV_MAX_THREADS)
    return min(POOL_MAX, env if env is not None else usable_cores())


# ---- the count -----------------------------------------------------------------------
def set_num_threads(n) -> None:
    """Threads for every kokoro_lstm call that gives no ``num_threads`` of its own:
    a positive int, or None to go back to the default (``KOKORO_LSTM_NUM_THREADS`` if
    set, else the usable cores, at most ``torch.get_num_threads()`` when torch is
    imported). Counts above the usable cores (affinity mask and cgroup CPU quota) or
    an active threadpoolctl limit are capped to them."""
    global _set_value
    n = check_count(n, "num_threads")
    with _lock:
        _set_value = n
    sync_engine()


def _requested_default():
    if _set_value is not None:
        return _set_value
    env = _env_setting(ENV_NUM_THREADS)
    if env is not None:
        return env
    n = usable_cores()
    torch = sys.modules.get("torch")
    get = getattr(torch, "get_num_threads", None)
    if get is not None:
        try:
            n = min(n, max(1, int(get())))
        except Exception:  # noqa: BLE001 - a half-imported torch
            pass
    return n


def effective(requested=None, name="num_threads") -> int:
    """The count a call runs with (see the module docstring); ``requested`` is the
    call's ``num_threads`` (validated, ValueError naming ``name``) or None."""
    n = check_count(requested, name)
    if n is None:
        n = _requested_default()
    limit = _tpc_limit
    if limit is not None:
        n = min(n, limit)
    return max(1, min(n, max_threads()))


def get_num_threads() -> int:
    """The thread count the next call without its own ``num_threads`` will use."""
    return effective(None)


# ---- threadpoolctl -------------------------------------------------------------------
def _tpc_set(n):
    """threadpoolctl's set_num_threads: a limit, cleared when it no longer limits
    (threadpool_limits restores the count it saw on entry)."""
    global _tpc_limit
    with _lock:
        _tpc_limit = None
    n = max(1, int(n))
    if n < get_num_threads():
        with _lock:
            _tpc_limit = n
    sync_engine()


def sync_engine() -> None:
    """Give the engine's own default (used by calls that pass no count: TVM modules'
    ``native`` calls in this process) the count of this module's rule."""
    from . import _core

    _core.set_num_threads(get_num_threads())


_registered = False


def register_threadpoolctl() -> bool:
    """Register our pool with threadpoolctl (>= 3.5 has ``register``), so that
    ``threadpool_info()`` lists it (user_api and internal_api "kokoro_lstm") and
    ``threadpool_limits(n)`` / ``threadpool_limits(n, user_api="kokoro_lstm")`` limit
    it. Found through the extension module's file name (``_core*``) and the one
    symbol it exports besides ``PyInit__core``. Returns whether it is registered; never raises."""
    global _registered
    if _registered:
        return True
    try:
        import threadpoolctl
    except ImportError:
        return False
    register = getattr(threadpoolctl, "register", None)
    base = getattr(threadpoolctl, "LibController", None)
    if register is None or base is None:
        return False

    class KokoroLSTMController(base):
        user_api = "kokoro_lstm"
        internal_api = "kokoro_lstm"
        filename_prefixes = ("_core",)
        check_symbols = ("kokoro_lstm_get_num_threads",)

        def get_num_threads(self):
            return get_num_threads()

        def set_num_threads(self, num_threads):
            _tpc_set(num_threads)

        def get_version(self):
            try:
                import kokoro_lstm

                return kokoro_lstm.__version__
            except Exception:  # noqa: BLE001
                return None

    try:
        register(KokoroLSTMController)
    except Exception:  # noqa: BLE001 - never break `import kokoro_lstm`
        return False
    _registered = True
    return True
