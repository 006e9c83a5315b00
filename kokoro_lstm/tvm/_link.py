"""How an exported TVM library links the kokoro_lstm engine and its BLAS.

The engine object (``kokoro_lstm/lib/kokoro_lstm_tvm.o``) calls the OpenBLAS it was
compiled against: the scipy-openblas32 wheel (``scipy_``-prefixed symbols) or the
system OpenBLAS. Where that library lives is looked up when a library is exported,
never taken from the build: a ``pip install`` builds in a temporary environment
whose scipy-openblas32 is gone once the install finishes.

* scipy-openblas32: the installed ``scipy_openblas32`` package's library directory,
  linked with an rpath to it (so the artifact loads without ``kokoro_lstm`` or
  ``LD_LIBRARY_PATH`` on this machine);
* system: ``pkg-config --libs openblas``, else the library the dynamic linker's
  cache (``ldconfig -p``) knows.

Neither there: :class:`BlasNotFound`, one line naming what to install.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile

__all__ = ["BlasNotFound", "blas_kind", "blas_link_flags", "engine_object", "engine_module",
           "attach_engine", "carries_engine", "ENGINE_FUNCTIONS"]

_SHLIB_SUFFIX = {"darwin": ".dylib", "win32": ".dll", "cygwin": ".dll"}


class BlasNotFound(RuntimeError):
    """The OpenBLAS the engine was built against is not installed here."""


def blas_kind() -> str:
    """The BLAS this build's engine calls: 'scipy-openblas32' or 'system'."""
    from .. import _build_config

    return _build_config.BLAS


def engine_object() -> str:
    """Path of ``kokoro_lstm/lib/kokoro_lstm_tvm.o``; RuntimeError if it is missing."""
    obj = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib",
                       "kokoro_lstm_tvm.o")
    if not os.path.exists(obj):
        raise RuntimeError(f"kokoro_lstm: the engine object {obj} is missing; rebuild the "
                           "package (pip install . or python setup.py build_ext --inplace)")
    return obj


def _scipy_openblas_library():
    """(directory, library name without lib/suffix, file path) of the installed
    scipy-openblas32 wheel."""
    try:
        import scipy_openblas32 as so
    except ImportError:
        so = None
    if so is not None:
        libdir, name = so.get_lib_dir(), so.get_library()
        path = os.path.join(libdir, "lib" + name + _SHLIB_SUFFIX.get(sys.platform, ".so"))
        if os.path.exists(path):
            return libdir, name, path
    raise BlasNotFound("kokoro_lstm: this build's engine calls the scipy-openblas32 wheel's "
                       "OpenBLAS, which is not installed here: pip install scipy-openblas32")


def _system_openblas_flags():
    try:
        libs = subprocess.run(["pkg-config", "--libs", "openblas"], check=True,
                              capture_output=True, text=True).stdout
        flags = shlex.split(libs)
        if any(f.startswith("-l") for f in flags):
            return flags + [f"-Wl,-rpath,{f[2:]}" for f in flags if f.startswith("-L")]
    except (OSError, subprocess.CalledProcessError):
        pass
    try:  # no pkg-config file: the runtime library the dynamic linker's cache has
        cache = subprocess.run(["ldconfig", "-p"], check=True, capture_output=True,
                               text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        cache = ""
    found = {}
    for line in cache.splitlines():
        name, _, path = line.strip().partition(" => ")
        name = name.split(" ", 1)[0]
        if name in ("libopenblas.so", "libopenblas.so.0") and os.path.exists(path):
            found.setdefault(name, path)
    for name in ("libopenblas.so", "libopenblas.so.0"):
        if name in found:
            return [found[name]]
    raise BlasNotFound("kokoro_lstm: this build's engine calls the system OpenBLAS, which is "
                       "not installed here: apt-get install libopenblas-dev (or make "
                       "`pkg-config openblas` find it)")


def blas_link_flags() -> list:
    """Linker flags for the engine's BLAS as installed now (see the module docstring);
    :class:`BlasNotFound` if it is not."""
    if blas_kind() == "scipy-openblas32":
        libdir, name, _ = _scipy_openblas_library()
        return [f"-L{libdir}", f"-l{name}", f"-Wl,-rpath,{libdir}"]
    return _system_openblas_flags()


# ---- the engine as a module of the compiled program ---------------------------------------
# Every global function the engine object registers when a library carrying it is loaded.
ENGINE_FUNCTIONS = ("kokoro_lstm.lstm_forward_v2", "kokoro_lstm.matmul_v1",
                    "kokoro_lstm.conv1d_v1", "kokoro_lstm.conv1d_transpose_dw_v1",
                    "kokoro_lstm.softmax_v1", "kokoro_lstm.attention_v1",
                    "kokoro_lstm.random_v1", "kokoro_lstm.fresh_seed_v1")

_engine_module = None


def _cache_dir():
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for base in (os.path.join(root, "kokoro_lstm"),
                 os.path.join(tempfile.gettempdir(), f"kokoro_lstm-{os.getuid()}")):
        try:
            os.makedirs(base, exist_ok=True)
            if os.access(base, os.W_OK):
                return base
        except OSError:
            pass
    raise RuntimeError("kokoro_lstm: no writable cache directory (set XDG_CACHE_HOME)")


def _symbols(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.split()}


def _scipy_openblas_stub():
    """A link-time stand-in for the scipy-openblas32 library whose SONAME is the
    library's absolute path: a library linked against it needs that file by path, so
    it loads without an rpath (TVM's plain export passes no linker options). It
    defines only the symbols the engine object takes from the library."""
    from tvm.support import cc as _cc

    _, _, real = _scipy_openblas_library()
    wanted = sorted(_symbols(["nm", "-u", engine_object()])
                    & _symbols(["nm", "-D", "--defined-only", real]))
    key = hashlib.sha1("\n".join([real, str(os.path.getmtime(real))] + wanted).encode())
    stub = os.path.join(_cache_dir(), f"blas-stub-{key.hexdigest()[:16]}.so")
    if os.path.exists(stub):
        return stub
    with tempfile.TemporaryDirectory() as tmp:
        src, script = os.path.join(tmp, "empty.c"), os.path.join(tmp, "symbols.ld")
        open(src, "w").close()
        with open(script, "w") as f:
            f.writelines(f"{s} = 0;\n" for s in wanted)
        out = os.path.join(tmp, "stub.so")
        cc = _cc.get_cc()
        if not cc:
            raise RuntimeError("kokoro_lstm: no C compiler (set CC), which TVM's "
                               "export_library needs too")
        subprocess.run(shlex.split(cc) + ["-shared", "-nostdlib", "-o", out,
                                          f"-Wl,-soname,{real}", "-x", "c", src, "-x",
                                          "none", script],
                       check=True, capture_output=True)
        os.replace(out, stub)  # atomic: a concurrent export sees the whole file or none
    return stub


def _quote(path):
    if '"' in path:
        raise RuntimeError(f"kokoro_lstm: cannot link a path with a double quote: {path!r}")
    return f'"{path}"'


def linker_script() -> str:
    """A GNU ld script that links the engine object and its BLAS (see
    :func:`engine_module`)."""
    lines = ["/* kokoro_lstm: the engine (lib/kokoro_lstm_tvm.o) and its OpenBLAS */",
             f"INPUT({_quote(engine_object())})"]
    if blas_kind() == "scipy-openblas32":
        lines.append(f"INPUT({_quote(_scipy_openblas_stub())})")
    else:
        for flag in _system_openblas_flags():
            if flag.startswith("-L"):
                lines.append(f"SEARCH_DIR({_quote(flag[2:])})")
            elif flag.startswith("-l"):
                lines.append(f"INPUT({flag})")
            elif not flag.startswith("-"):
                lines.append(f"INPUT({_quote(flag)})")
    lines.append("INPUT(-lpthread -lm -ldl)")
    return "\n".join(lines) + "\n"


def engine_module():
    """The engine as a TVM ``static_library`` module (one per process): imported by a
    compiled program, TVM's own ``export_library`` links it into the library. Its
    content is a GNU ld script (TVM hands it to the linker as an object file; ld reads
    a file it does not recognise as an object as a script) naming the engine object,
    the BLAS and the system libraries, since a static library module cannot carry
    linker options. Linux (GNU ld) only."""
    global _engine_module
    if _engine_module is None:
        if not sys.platform.startswith("linux"):
            raise RuntimeError("kokoro_lstm: the engine module needs GNU ld (Linux); "
                               "export with kokoro_lstm.tvm.export_library")
        import tvm

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "kokoro_lstm_engine.o")
            with open(path, "w") as f:
                f.write(linker_script())
            _engine_module = tvm.runtime.load_static_library(path, list(ENGINE_FUNCTIONS))
    return _engine_module


def carries_engine(mod) -> bool:
    """Whether a runtime module's import tree (or an IRModule's ``external_mods``)
    holds :func:`engine_module`."""
    if hasattr(mod, "attrs") and not hasattr(mod, "imports"):  # an IRModule
        attrs = dict(mod.attrs) if mod.attrs else {}
        mods = list(attrs.get("external_mods", []))
    else:
        mods = mod._collect_from_import_tree(lambda m: m.kind == "static_library")
    return any(m.kind == "static_library" and m.implements_function(ENGINE_FUNCTIONS[0])
               for m in mods)


def attach_engine(mod):
    """``mod`` (an IRModule) with :func:`engine_module` in its ``external_mods``, so
    that ``tvm.compile`` imports it into the program and the program's plain
    ``export_library`` links the engine. Returns ``mod`` unchanged if it is there."""
    if carries_engine(mod):
        return mod
    attrs = dict(mod.attrs) if mod.attrs else {}
    return mod.with_attr("external_mods", list(attrs.get("external_mods", []))
                         + [engine_module()])
