"""How many threads kokoro_lstm uses. The rule is the C engine's (src/core/threads.c,
docs/threads.md), the same for every front (NumPy API, torch ops, TVM native calls,
exported libraries without Python); this module validates arguments and passes the
engine only overrides:

- ``set_num_threads(n)``: the process default (``kl_set_num_threads``);
- an active ``threadpoolctl.threadpool_limits`` limit (our pool is registered with
  threadpoolctl as user_api "kokoro_lstm");
- when torch is imported, ``torch.get_num_threads()``, which caps the automatic default
  (so ``torch.set_num_threads(1)`` limits us too): passed with each call, and stored in
  the engine for calls made without Python (TVM modules) by :func:`sync_engine`.

Counts must be integers in 1..2**31-1; anything else (bools, floats, 0, 2**31) is a
ValueError naming the argument; an environment variable that is not such a count is
ignored by the engine, and here with a RuntimeWarning naming it (once per value). The
same warning comes for the weight cache's ``KOKORO_LSTM_CACHE_MB`` (src/core/cache.c),
which the engine also ignores when it does not parse.
"""
from __future__ import annotations

import numbers
import os
import sys
import warnings

from . import _core

__all__ = ["set_num_threads", "get_num_threads", "effective", "check_count", "sync_engine",
           "usable_cores", "cgroup_cpu_limit", "max_threads", "set_pool",
           "register_threadpoolctl"]

#: The largest count accepted anywhere (the C API takes an int).
INT_MAX = 2**31 - 1
#: The engine's pool never runs more threads than this (KL_MAX_THREADS).
POOL_MAX = 512

ENV_NUM_THREADS = "KOKORO_LSTM_NUM_THREADS"
ENV_MAX_THREADS = "KOKORO_LSTM_MAX_THREADS"
ENV_CACHE_MB = "KOKORO_LSTM_CACHE_MB"
#: KOKORO_LSTM_CACHE_MB's range (MiB) and the engine's default (cache.c)
CACHE_MB_MAX = 1 << 40
CACHE_MB_DEFAULT = 1024


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


def _shown(raw):
    shown = raw.strip()
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _env_count(var):
    """The env variable as the engine reads it: a count, or None when unset/blank;
    ValueError naming it when it is set to something the engine ignores."""
    raw = os.environ.get(var, "")
    if not raw.strip():
        return None
    n = _core.env_count(var)
    if n == 0:
        raise ValueError(f"{var} must be an integer in 1..{INT_MAX}, got {_shown(raw)!r}")
    return n


def _cache_mb_env():
    """KOKORO_LSTM_CACHE_MB as the engine reads it (cache.c, ``_core.env_cache_mb``): a
    whole number of MiB in 0..2**40, or None when unset/blank; ValueError naming it when
    it is set to something the engine ignores ("64MB", "-5", "abc")."""
    mb = _core.env_cache_mb()
    if mb == -2:
        raise ValueError(f"{ENV_CACHE_MB} must be a whole number of MiB in 0..{CACHE_MB_MAX}, "
                         f"got {_shown(os.environ.get(ENV_CACHE_MB, ''))!r} (the cache keeps "
                         f"the default {CACHE_MB_DEFAULT} MiB)")
    return None if mb < 0 else mb


_ENV_CHECKS = ((ENV_NUM_THREADS, lambda: _env_count(ENV_NUM_THREADS)),
               (ENV_MAX_THREADS, lambda: _env_count(ENV_MAX_THREADS)),
               (ENV_CACHE_MB, _cache_mb_env))  # in _core.env_values()'s order
#: the variables' values last checked: each value is checked (and warned about) once
_env_seen: tuple = (None, None, None)


def _warn_bad_env():
    """A one-line RuntimeWarning for each thread or cache variable the engine ignores,
    once per value (a bad variable must not break ``import kokoro_lstm`` or every call).
    One read of the environment the engine sees; only new values are parsed."""
    global _env_seen
    values = _core.env_values()
    if values == _env_seen:
        return
    old, _env_seen = _env_seen, values
    for (var, check), value, before in zip(_ENV_CHECKS, values, old):
        if value == before:
            continue
        try:
            check()
        except ValueError as e:
            warnings.warn(f"{e}; ignored", RuntimeWarning, stacklevel=4)


# ---- usable cores --------------------------------------------------------------------
def cgroup_cpu_limit(root="/sys/fs/cgroup", proc_cgroup="/proc/self/cgroup"):
    """The CPU quota of this process's cgroup in CPUs (e.g. 1.5), or None if there is
    none: cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` under
    ``root``, in the cgroup ``proc_cgroup`` lists and each ancestor (the smallest wins);
    both paths are parameters so tests can use a fake tree."""
    limit = _core.cgroup_cpu_limit(str(root), str(proc_cgroup))
    return limit if limit > 0 else None


def usable_cores(cgroup_root=None, proc_cgroup=None) -> int:
    """CPUs in the affinity mask, at most the cgroup CPU quota rounded up (>= 1); the
    process's quota, or the one under these paths when given."""
    if cgroup_root is None and proc_cgroup is None:
        return _core.usable_cpus()
    return _core.usable_cpus(str(cgroup_root or "/sys/fs/cgroup"),
                             str(proc_cgroup or "/proc/self/cgroup"))


def max_threads() -> int:
    """The cap on every count: ``KOKORO_LSTM_MAX_THREADS`` if set, else
    :func:`usable_cores`; never above 512, the pool's maximum."""
    _warn_bad_env()
    return _core.max_threads()


def _set_cgroup_paths(root=None, proc_cgroup=None):
    """Test hook: the engine reads the process's cgroup quota under these paths (None,
    None: the real ones)."""
    _core.set_cgroup_paths(None if root is None else str(root),
                           None if proc_cgroup is None else str(proc_cgroup))


# ---- the count -----------------------------------------------------------------------
def set_num_threads(n) -> None:
    """Threads for every kokoro_lstm call that gives no ``num_threads`` of its own:
    a positive int, or None to go back to the default (``KOKORO_LSTM_NUM_THREADS`` if
    set, else the usable cores, at most ``torch.get_num_threads()`` when torch is
    imported). Counts above the usable cores (affinity mask and cgroup CPU quota) or
    an active threadpoolctl limit are capped to them."""
    n = check_count(n, "num_threads")
    _core.set_num_threads(n or 0)
    sync_engine()


def _host_threads():
    """torch.get_num_threads() when torch is imported, else 0."""
    torch = sys.modules.get("torch")
    get = getattr(torch, "get_num_threads", None)
    if get is None:
        return 0
    try:
        return max(1, min(INT_MAX, int(get())))
    except Exception:  # noqa: BLE001 - a half-imported torch
        return 0


def effective(requested=None, name="num_threads") -> int:
    """The count a call runs with (the engine's rule); ``requested`` is the call's
    ``num_threads`` (validated, ValueError naming ``name``) or None."""
    n = check_count(requested, name)
    _warn_bad_env()
    return _core.resolve_threads(n or 0, _host_threads())


def get_num_threads() -> int:
    """The thread count the next call without its own ``num_threads`` will use."""
    return effective(None)


def set_pool(pool=None, pin=None) -> None:
    """Which threads run parallel work: ``pool="auto"`` (another runtime's threads when
    the process has them: TVM's pool for TVM's calls, libgomp's team when loaded) or
    ``"own"`` (the engine's workers); ``pin`` True/False: members pinned to one CPU each
    during a job. None: the environment's default (``KOKORO_LSTM_POOL``,
    ``KOKORO_LSTM_PIN``). Results are the same bit for bit either way."""
    if pool not in (None, "auto", "own"):
        raise ValueError(f"pool must be 'auto', 'own' or None, got {pool!r}")
    if pin not in (None, True, False):
        raise ValueError(f"pin must be True, False or None, got {pin!r}")
    _core.set_pool_params(-1 if pool is None else int(pool == "auto"),
                          -1 if pin is None else int(pin))


# ---- threadpoolctl -------------------------------------------------------------------
def _tpc_set(n):
    """threadpoolctl's set_num_threads: a limit, cleared when it no longer limits
    (threadpool_limits restores the count it saw on entry)."""
    _core.set_thread_limit(0)
    n = max(1, min(INT_MAX, int(n)))
    if n < get_num_threads():
        _core.set_thread_limit(n)


def sync_engine() -> None:
    """Store torch's thread count in the engine for the calls made without Python
    (TVM modules' ``native`` calls in this process)."""
    _core.set_host_threads(_host_threads())


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
