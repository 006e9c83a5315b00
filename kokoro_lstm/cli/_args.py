"""The flags of the ``kokoro-lstm`` porting commands and their checks: one-line usage
errors (exit 2), targets, thread counts, seeds, output folders, the flags both
commands take (:func:`add_common_arguments`) and the packages they need. Importing it
imports neither torch nor TVM.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from ._command import _quiet
from ._components import UsageError

DEFAULT_TOL = 1e-4


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


_LIST_ATTRS = ("mattr", "keys", "libs", "cl-opt")

TARGET_HELP = ('TVM target: llvm, an llvm variant such as "llvm -mcpu=znver4", or cuda '
               '("cuda -arch=sm_90a"; without -arch the GPU\'s here; compiled with nvcc into '
               "cubin, no GPU needed), or a JSON object; metal-macos / metal-ios need macOS "
               "with Metal")
DENSE_HELP = ("lowering of the convolutions and products: native (the default; the "
              "kokoro_lstm engine's externs, linked into the library: on CPUs every dense op "
              "on OpenBLAS and its own kernels, on cuda the convolutions on its CUDA kernels "
              "and the rest dlight's) or tvm (TVM's own: on CPUs self-contained untuned "
              "loops, 20-90x slower; on cuda dlight's schedules)")


def parse_target(target) -> dict:
    """An llvm or cuda target as TVM's dict form. Accepts "llvm", "cuda", the old string form
    ("llvm -mcpu=znver4 -mattr=+avx2,+fma -num-cores=4", which TVM >= 0.22 no longer
    parses itself; "cuda -arch=sm_90a") and JSON ('{"kind": "llvm", "mcpu": "znver4"}'); UsageError for
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
    if kind not in ("llvm", "cuda"):
        raise UsageError(f"unsupported target kind '{kind or target}': use llvm (or a variant "
                         "such as \"llvm -mcpu=znver4\") or cuda (\"cuda -arch=sm_90a\")")
    return spec


def _check_cuda(spec, target):
    """A cuda target's spec with its architecture: nvcc must be here (its kernels are
    compiled now, into cubin), and the architecture given or read from the GPU here."""
    from ..tvm import _cuda

    try:
        _cuda.require_nvcc()
    except RuntimeError as e:
        raise UsageError(str(e)) from None
    # CUDA's static shared-memory limit per block on every architecture: the value dlight
    # assumes anyway, named so that it does not warn once per kernel
    spec = dict(spec, max_shared_memory_per_block=spec.get("max_shared_memory_per_block", 49152))
    if spec.get("arch"):
        return spec
    arch = _cuda.local_arch()
    if arch is None:
        raise UsageError(f"--target {target!r}: no GPU here to read the architecture from; "
                         "name it, e.g. --target \"cuda -arch=sm_90a\" (H100/H200)")
    return dict(spec, arch=arch)


def _check_target(target):
    """(target dict, its canonical JSON) or UsageError."""
    spec = parse_target(target)
    if spec.get("kind") == "cuda":
        spec = _check_cuda(spec, target)
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
