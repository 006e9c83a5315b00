"""What the ``kokoro-lstm`` porting commands share: one-line usage errors, targets,
thread counts, progress lines, timing, comparison with PyTorch, the exit-status
convention (:func:`run_guarded`, :func:`run_reports`), the flags both porting
commands take (:func:`add_common_arguments`). Importing it imports neither torch nor TVM.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings

from ._components import UsageError

DEFAULT_TOL = 1e-4

# TVM's C++ log lines repeated hundreds of times per build (harmless here).
_NOISE = ("Warning: Fast mode segfaults when there are out-of-bounds indices",
          "Warning: Detected pow(x, y) where y >= 3")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2), as for every other usage error, and
    every flag's default in its help."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" where a flag has a default and its help does not name
    one already (store_true flags and None defaults get none)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("default" in text or any(action.default is v for v in (None, False, argparse.SUPPRESS))
                or isinstance(action, (argparse._StoreTrueAction, argparse._VersionAction))):
            return text
        return super()._get_help_string(action)


#: --seed is stored in an int64 tensor (the decoder's seed input) and seeds PyTorch
SEED_MIN, SEED_MAX = -(1 << 63), (1 << 63) - 1


def check_seed(seed):
    """--seed in the int64 range; UsageError otherwise."""
    if not SEED_MIN <= seed <= SEED_MAX:
        raise UsageError(f"--seed must be in {SEED_MIN}..{SEED_MAX} (int64), got {seed}")
    return seed


def check_writable_dir(path, flag):
    """UsageError unless ``path`` is (or can be created as) a directory this process can
    write a file into; creates it. Checked before any build so that a bad output path
    costs no compile: a file is created and removed there (``os.access`` says yes to
    root on read-only mounts and in /proc)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot create the directory: "
                         f"{e.strerror or e}") from None
    if not os.path.isdir(path):
        raise UsageError(f"{flag} {path} exists and is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".kokoro-lstm-probe-", dir=path)
    except OSError as e:
        raise UsageError(f"{flag} {path} is not writable: {e.strerror or e}") from None
    os.close(fd)
    os.remove(probe)
    return path


class Staging:
    """Output files written under temporary names in their own directory and renamed
    into place by :meth:`commit`; :meth:`discard` (or leaving the ``with`` block by an
    exception, Ctrl-C included) removes whatever was written, so a failed or
    interrupted step never leaves a half-written artifact under a final name."""

    def __init__(self):
        self._pending = []  # (temporary path, final path)
        self._blas = set()  # folders that get the engine's BLAS file on commit

    def path(self, final):
        """A temporary path beside ``final`` with the same extension (TVM's
        export_library picks the format from it)."""
        d, base = os.path.split(os.path.abspath(final))
        stem, ext = os.path.splitext(base)
        tmp = os.path.join(d, f".{stem}.partial-{os.getpid()}-{len(self._pending)}{ext}")
        self._pending.append((tmp, final))
        return tmp

    def export_library(self, ex, final_tmp):
        """``kokoro_lstm.tvm.export_library`` to a :meth:`path`; the BLAS file its folder
        needs is written by :meth:`commit`, with the rest (so Ctrl-C leaves none)."""
        import kokoro_lstm.tvm as kt

        kt.export_library(ex, final_tmp, copy_blas=False)
        if kt.uses_engine(ex):
            self._blas.add(os.path.dirname(os.path.abspath(final_tmp)))

    def commit(self):
        from kokoro_lstm.tvm import copy_blas

        for tmp, final in self._pending:
            os.replace(tmp, final)
        for folder in sorted(self._blas):
            copy_blas(folder)
        self._pending, self._blas = [], set()

    def discard(self):
        for tmp, _ in self._pending:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        self._pending, self._blas = [], set()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.discard()
        return False


def _json_safe(obj):
    """``obj`` with every non-finite float (NaN, +-inf) as None: JSON has no NaN."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def write_report(path, report):
    """The report as strict JSON (``null`` for NaN and infinities)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_json_safe(report), f, indent=2, default=str, allow_nan=False)
        f.write("\n")

_LIST_ATTRS = ("mattr", "keys", "libs", "cl-opt")


def parse_target(target) -> dict:
    """An llvm target as TVM's dict form. Accepts "llvm", the old string form
    ("llvm -mcpu=znver4 -mattr=+avx2,+fma -num-cores=4", which TVM >= 0.22 no longer
    parses itself) and JSON ('{"kind": "llvm", "mcpu": "znver4"}'); UsageError for
    anything else (metal-macos / metal-ios: macOS only)."""
    import shlex

    s = (target or "").strip()
    if s.startswith("{"):
        try:
            spec = json.loads(s)
        except ValueError as e:
            raise UsageError(f"invalid target {target!r}: {e}") from None
        if not isinstance(spec, dict):
            raise UsageError(f"invalid target {target!r}: not a JSON object")
        kind = str(spec.get("kind", ""))
    else:
        try:
            tokens = shlex.split(s)
        except ValueError as e:
            raise UsageError(f"invalid target {target!r}: {e}") from None
        kind = tokens[0] if tokens else ""
        spec = {"kind": kind}
        i = 1
        while i < len(tokens):
            tok = tokens[i]
            if not tok.startswith("-") or tok.strip("-") == "":
                raise UsageError(f"invalid target {target!r}: expected -key=value, got {tok!r}")
            key, eq, value = tok.lstrip("-").partition("=")
            if not eq:
                if i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                    value = tokens[i + 1]
                    i += 1
                else:
                    value = "true"
            i += 1
            if key in _LIST_ATTRS:
                spec[key] = [v for v in value.split(",") if v]
            elif value.isdigit():
                spec[key] = int(value)
            elif value.lower() in ("true", "false"):
                spec[key] = value.lower() == "true"
            else:
                spec[key] = value
    if kind in ("metal-macos", "metal-ios", "metal"):
        where = "this platform" if sys.platform != "darwin" else "kokoro-lstm"
        raise UsageError(f"target '{kind}' needs macOS with Metal, which {where} does not "
                         "support; use --target llvm (kokoro-tvm for Metal)")
    if kind != "llvm":
        raise UsageError(f"unsupported target kind '{kind or target}': use llvm or an llvm "
                         "variant such as \"llvm -mcpu=znver4\"")
    return spec


def _check_target(target):
    """(target dict, its canonical JSON) or UsageError."""
    spec = parse_target(target)
    try:
        import tvm

        with _quiet(False):
            canonical = str(tvm.target.Target(spec))
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise UsageError(f"invalid target {target!r}: {msg}") from None
    return spec, canonical


def check_num_threads(n):
    """--num-threads: None or 1..the engine's pool size (512); UsageError otherwise.
    The count also sizes TVM's and PyTorch's pools, which would try to start that many
    threads, so it is refused above the engine's own cap rather than capped."""
    from .. import _threads as thread_rules

    try:
        thread_rules.check_count(n, "--num-threads")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if n is not None and n > thread_rules.POOL_MAX:
        raise UsageError(f"--num-threads must be at most {thread_rules.POOL_MAX} (the "
                         f"kokoro_lstm engine's most threads), got {n}")
    return n




def check_thread_env():
    """UsageError for a bad KOKORO_LSTM_NUM_THREADS / KOKORO_LSTM_MAX_THREADS."""
    from .. import _threads as thread_rules

    for var in (thread_rules.ENV_NUM_THREADS, thread_rules.ENV_MAX_THREADS):
        try:
            thread_rules._env_count(var)
        except ValueError as e:
            raise UsageError(str(e)) from None


def add_common_arguments(p, *, checkpoint, tolerance, seed):
    """Adds the flags every porting command takes the same way: --no-weights,
    --checkpoint, --config, --num-threads, --tolerance and --seed. The command's own
    words go into three help texts: what its checkpoint holds, what --tolerance bounds
    and what --seed seeds. Returns ``p``."""
    p.add_argument("--no-weights", action="store_true", help="random weights (no checkpoint)")
    p.add_argument("--checkpoint", metavar="PATH", help=f"a local Kokoro .pth ({checkpoint})")
    p.add_argument("--config", metavar="PATH",
                   help="Kokoro config.json (default: Kokoro-82M's, built in)")
    p.add_argument("--num-threads", type=int, metavar="N",
                   help="threads for TVM, the kokoro_lstm engine and PyTorch, at most 512 "
                        "(default: the usable cores)")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOL,
                   help=f"--validate's bound on {tolerance} (default {DEFAULT_TOL:g})")
    p.add_argument("--seed", type=int, default=0, help=f"seed of {seed} (int64)")
    return p


class _Interrupt:
    """Ctrl-C seen by this process while a porting command runs. TVM swallows a
    KeyboardInterrupt raised inside some of its callbacks (relax's FoldConstant runs
    the Python-registered ``tir.build`` under ``catch (const tvm::Error&)`` and goes on
    without the fold), so the SIGINT handler also sets this flag, and every step
    checks it when it ends (:func:`check_interrupt`)."""

    seen = False


def _on_sigint(signum, frame):
    _Interrupt.seen = True
    raise KeyboardInterrupt


def check_interrupt():
    """KeyboardInterrupt if Ctrl-C arrived since the command started, even if the
    exception it raised was swallowed on the way."""
    if _Interrupt.seen:
        raise KeyboardInterrupt


@contextlib.contextmanager
def _sigint_flag():
    """Our SIGINT handler while the command runs (main thread only; Python's default
    handler otherwise left alone)."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    _Interrupt.seen = False
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _Interrupt.seen = False


def run_guarded(prog, verbose, body):
    """``(body(), 0)``, or ``(None, status)`` with one line on stderr: 2 for a
    UsageError (bad flags, paths, files), 130 for Ctrl-C, 1 for a failed step (the
    end of its traceback first; all of it with ``verbose``)."""
    try:
        with _sigint_flag():
            try:
                result = body()
            except Exception:
                if _Interrupt.seen:  # a Ctrl-C that came back through TVM as another error
                    raise KeyboardInterrupt from None
                raise
            check_interrupt()
        return result, 0
    except UsageError as e:
        sys.stderr.write(f"{prog}: error: {e}\n")
        return None, 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return None, 130
    except Exception as e:  # noqa: BLE001 - a failed step: say which, exit 1
        if verbose:
            traceback.print_exc()
        else:
            tb = traceback.format_exc().rstrip().splitlines()
            sys.stderr.write("\n".join(tb[-12:]) + "\n")
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        sys.stderr.write(f"{prog}: error: {type(e).__name__}: {first}\n")
        return None, 1


def run_reports(prog, verbose, body, format_table, footer=None):
    """A porting command's run(): the reports of ``body()`` under :func:`run_guarded`,
    printed as ``format_table(reports)`` (then ``footer``) on stdout. The exit status is
    run_guarded's when body failed, else 1 if a report's validation did not pass, else 0."""
    reports, rc = run_guarded(prog, verbose, body)
    if rc:
        return rc
    print(format_table(reports))
    if footer:
        print(footer)
    failed = [r for r in reports if r["validation"] and not r["validation"]["passed"]]
    return 1 if failed else 0


def port_main(module, prog, build_parser, run, argv=None):
    """``python -m <module> [flags]``: ``run(build_parser(...).parse_args(argv))``. The
    usage lines name ``python -m <module>`` when the process runs that module's file
    (argv None and sys.argv[0] is it), else ``prog``."""
    script = module.rpartition(".")[2] + ".py"
    name = (f"python -m {module}" if argv is None and os.path.basename(sys.argv[0]) == script
            else prog)
    return run(build_parser(prog=name).parse_args(argv))


@contextlib.contextmanager
def _quiet(verbose):
    """Silence Python warnings and capture fd 2 (TVM's C++ log); replay what is not
    known noise afterwards. Nothing is hidden with verbose=True."""
    if verbose:
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):  # no real fd 2
            yield
            return
        with tempfile.TemporaryFile(mode="w+b") as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                yield
            finally:
                try:
                    sys.stderr.flush()
                except Exception:  # noqa: BLE001
                    pass
                os.dup2(saved, 2)
                os.close(saved)
                tmp.seek(0)
                text = tmp.read().decode("utf-8", "replace")
                lines = [ln for ln in text.splitlines()
                         if ln.strip() and not any(n in ln for n in _NOISE)]
                if lines:
                    sys.stderr.write("\n".join(lines) + "\n")
                    sys.stderr.flush()


class _Progress:
    """One stderr line per long step: "[component] step ... 2.1 s"."""

    def __init__(self, verbose=False, stream=None):
        self.verbose = verbose
        self.stream = stream

    def _out(self):
        return self.stream or sys.stderr

    def note(self, tag, text):
        self._out().write(f"[{tag}] {text}\n")
        self._out().flush()

    @contextlib.contextmanager
    def step(self, tag, name, times=None, key=None):
        out = self._out()
        out.write(f"[{tag}] {name} ...")
        out.flush()
        t0 = time.perf_counter()
        ok = False
        try:
            with _quiet(self.verbose):
                yield
            check_interrupt()
            ok = True
        finally:
            dt = time.perf_counter() - t0
            out.write(f" {dt:.1f} s\n" if ok else f" failed after {dt:.1f} s\n")
            out.flush()
            if times is not None:
                times[key or name] = round(dt, 3)




def _rename_main(mod, name):
    import tvm

    funcs = {}
    for gv, func in mod.functions.items():
        if gv.name_hint == "main":
            funcs[tvm.ir.GlobalVar(name)] = func.with_attr("global_symbol", name)
        else:
            funcs[gv] = func
    return tvm.IRModule(funcs, attrs=mod.attrs)




def _to_tvm(arrays):
    import tvm

    return [tvm.runtime.tensor(a) for a in arrays]


def _as_list(res):
    try:
        return [r.numpy() for r in res]
    except TypeError:
        return [res.numpy()]


def _time_ms(fn, min_runs=3, max_runs=30, budget_s=0.5, warm_s=None):
    """Median wall time of fn() in ms, after one warm-up call (``warm_s``: fn was just
    called, taking that long; no warm-up then). A single timed call when one call
    exceeds the budget."""
    if warm_s is None:
        t0 = time.perf_counter()
        fn()
        warm_s = time.perf_counter() - t0
    if warm_s > budget_s:
        t0 = time.perf_counter()
        fn()
        return round((time.perf_counter() - t0) * 1e3, 4)
    times = []
    t_end = time.perf_counter() + budget_s
    while len(times) < min_runs or (len(times) < max_runs and time.perf_counter() < t_end):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return round(times[len(times) // 2], 4)


def _compare(got, want):
    """(max abs error, scaled error, NaN mismatches) of an output against PyTorch's.

    NaN-aware: a position where one side is NaN and the other is not is a mismatch,
    counted (and failing validation) rather than dropped by max(); NaN on both sides,
    and equal infinities, agree here (validation still fails on them:
    :func:`_nan_both`). The errors are over the other positions, scaled by
    max(1, max|want|) over want's finite values. Different shapes: (inf, inf, 0)."""
    import numpy as np

    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return float("inf"), float("inf"), 0
    g_nan, w_nan = np.isnan(got), np.isnan(want)
    nan_mismatch = int(np.count_nonzero(g_nan != w_nan))
    with np.errstate(invalid="ignore"):
        diff = np.where((got == want) | g_nan | w_nan, 0.0, np.abs(got - want))
    if not diff.size:
        return 0.0, 0.0, nan_mismatch
    e = float(diff.max())
    finite = np.abs(want[np.isfinite(want)])
    return e, e / max(1.0, float(finite.max()) if finite.size else 1.0), nan_mismatch




def _nan_both(got, want):
    """Positions where both sides are NaN: nothing was compared there, so validation
    fails on any (an all-NaN PyTorch output and library output agree everywhere and
    would otherwise pass with error 0)."""
    import numpy as np

    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return 0
    return int(np.count_nonzero(np.isnan(got) & np.isnan(want)))


def _runtime_needs(ex):
    """What the exported library needs where it runs."""
    import kokoro_lstm.tvm as kt

    if not kt.uses_engine(ex):
        return {"summary": "TVM runtime only (libtvm_runtime + libtvm_ffi)",
                "engine_linked": False, "blas": None}
    from kokoro_lstm import _build_config

    return {"summary": "TVM runtime (libtvm_runtime + libtvm_ffi) and OpenBLAS; the kokoro_lstm "
                       "engine is linked into the library (no Python, no kokoro_lstm install)",
            "engine_linked": True, "blas": _build_config.BLAS,
            "threads": "engine calls: the count compiled in (--num-threads), else "
                       "KOKORO_LSTM_NUM_THREADS or the usable cores; TVM's own loops: "
                       "TVM_NUM_THREADS"}


def _versions():
    import torch
    import tvm

    import kokoro_lstm

    return {"kokoro_lstm": kokoro_lstm.__version__, "torch": torch.__version__,
            "tvm": getattr(tvm, "__version__", "?")}




# module -> (what to call it, the extra that installs it)
_DEPS = (("torch", "PyTorch", "torch"), ("tvm", "apache-tvm", "tvm"))


def _require_deps():
    """UsageError naming the package and the extra when torch or TVM cannot be
    imported (instead of "invalid target 'llvm': No module named 'tvm'")."""
    import importlib

    for mod, dist, extra in _DEPS:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise UsageError(f"{dist} is not installed (in a clone of kokoro_lstm: pip "
                             f"install '.[{extra}]', or '.[cli]' for everything the CLI "
                             f"uses): {e}") from None
        except Exception as e:  # noqa: BLE001 - e.g. a broken shared library
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UsageError(f"{dist} is installed but cannot be imported: {first}") from None


_THREAD_VARS = ("TVM_NUM_THREADS", "KOKORO_LSTM_NUM_THREADS")


@contextlib.contextmanager
def _threads(n):
    """--num-threads for TVM's thread pool, the kokoro_lstm engine and PyTorch; the
    previous settings come back afterwards."""
    if not n:
        yield
        return
    saved_env = {v: os.environ.get(v) for v in _THREAD_VARS}
    for v in _THREAD_VARS:
        os.environ[v] = str(n)
    import torch

    saved_torch = torch.get_num_threads()
    torch.set_num_threads(n)
    config = None
    try:
        import tvm

        config = tvm.get_global_func("runtime.config_threadpool", allow_missing=True)
        if config is not None:
            config(0, n)
    except Exception:  # noqa: BLE001 - best effort: the env var applies to new pools
        config = None
    try:
        yield
    finally:
        for v, val in saved_env.items():
            if val is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = val
        torch.set_num_threads(saved_torch)
        if config is not None:
            try:
                config(0, int(saved_env["TVM_NUM_THREADS"] or 0))
            except Exception:  # noqa: BLE001
                pass


