"""Running a ``kokoro-lstm`` porting command: the exit-status convention
(:func:`run_guarded`, :func:`run_reports`), Ctrl-C through TVM, one progress line per
step, TVM's C++ log filtered, and --num-threads applied to every pool for the
command's duration. Importing it imports neither torch nor TVM.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings

from .._environ import scoped
from ._components import UsageError

# TVM's C++ log lines repeated hundreds of times per build (harmless here).
_NOISE = ("Warning: Fast mode segfaults when there are out-of-bounds indices",
          "Warning: Detected pow(x, y) where y >= 3")


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
    failed = [r for r in reports if r["validation"] and r["validation"]["passed"] is False]
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


_THREAD_VARS = ("TVM_NUM_THREADS", "KOKORO_LSTM_NUM_THREADS")


@contextlib.contextmanager
def _threads(n):
    """--num-threads for TVM's thread pool, the kokoro_lstm engine and PyTorch; the
    previous settings come back afterwards."""
    if not n:
        yield
        return
    import torch

    with scoped({v: str(n) for v in _THREAD_VARS}) as saved_env:
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
            torch.set_num_threads(saved_torch)
            if config is not None:
                try:
                    config(0, int(saved_env["TVM_NUM_THREADS"] or 0))
                except Exception:  # noqa: BLE001
                    pass
