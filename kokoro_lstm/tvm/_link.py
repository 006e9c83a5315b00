"""How an exported TVM library links the kokoro_lstm engine and finds its BLAS.

The engine object (``kokoro_lstm/lib/kokoro_lstm_tvm.o``) calls the OpenBLAS it was
compiled against: the scipy-openblas32 wheel (``scipy_``-prefixed symbols) or the
system OpenBLAS. An exported library does not name that BLAS in its ``NEEDED`` list:
it links ``blas_loader.c`` (compiled here at export time), which defines the engine's
four BLAS entry points and finds the library when the exported library is loaded:
already in the process, beside the exported library (the file :func:`copy_blas` and
:func:`kokoro_lstm.tvm.export_library` write there), on the dynamic linker's path, or
where it was installed on the exporting machine. TVM's plain ``export_library`` passes
no linker options (no ``$ORIGIN`` rpath is possible) and an absolute ``NEEDED`` path
ties a library to one machine, so the loader is what makes an artifact relocatable.

Where the BLAS lives is looked up at export time, never taken from the build: a
``pip install`` builds in a temporary environment whose scipy-openblas32 is gone once
the install finishes.

* scipy-openblas32: the installed ``scipy_openblas32`` package's library;
* system: ``pkg-config --libs openblas``, else the library the dynamic linker's cache
  (``ldconfig -p``) knows.

Neither there: :class:`BlasNotFound`, one line naming what to install.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile

__all__ = ["BlasNotFound", "blas_kind", "blas_library", "copy_blas", "engine_object",
           "loader_object", "engine_module", "attach_engine", "carries_engine",
           "ENGINE_FUNCTIONS", "LOADER_FUNCTIONS"]

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
    """Path of the installed scipy-openblas32 wheel's library."""
    try:
        import scipy_openblas32 as so
    except ImportError:
        so = None
    if so is not None:
        path = os.path.join(so.get_lib_dir(),
                            "lib" + so.get_library() + _SHLIB_SUFFIX.get(sys.platform, ".so"))
        if os.path.exists(path):
            return path
    raise BlasNotFound("kokoro_lstm: this build's engine calls the scipy-openblas32 wheel's "
                       "OpenBLAS, which is not installed here: pip install scipy-openblas32")


def _system_openblas_library():
    """Path of the system OpenBLAS: pkg-config's library, else ``ldconfig -p``'s."""
    try:
        libs = subprocess.run(["pkg-config", "--libs", "openblas"], check=True,
                              capture_output=True, text=True).stdout
        flags = shlex.split(libs)
        dirs = [f[2:] for f in flags if f.startswith("-L")]
        for name in (f[2:] for f in flags if f.startswith("-l")):
            for d in dirs:
                path = os.path.join(d, f"lib{name}.so")
                if os.path.exists(path):
                    return os.path.realpath(path)
    except (OSError, subprocess.CalledProcessError):
        pass
    try:  # no pkg-config file (or no -L in it): the library the dynamic linker's cache has
        cache = subprocess.run(["ldconfig", "-p"], check=True, capture_output=True,
                               text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        cache = ""
    found = {}
    for line in cache.splitlines():
        name, _, path = line.strip().partition(" => ")
        name = name.split(" ", 1)[0]
        if name in ("libopenblas.so.0", "libopenblas.so") and os.path.exists(path):
            found.setdefault(name, path)
    for name in ("libopenblas.so.0", "libopenblas.so"):
        if name in found:
            return os.path.realpath(found[name])
    raise BlasNotFound("kokoro_lstm: this build's engine calls the system OpenBLAS, which is "
                       "not installed here: apt-get install libopenblas-dev (or make "
                       "`pkg-config openblas` find it)")


def _soname(path):
    """The SONAME of a shared library (``readelf -d``), else its file name."""
    try:
        out = subprocess.run(["readelf", "-d", path], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        out = ""
    for line in out.splitlines():
        if "(SONAME)" in line and "[" in line:
            return line[line.index("[") + 1:line.rindex("]")]
    return os.path.basename(path)


def blas_library() -> tuple:
    """``(soname, path)`` of the BLAS the engine calls, as installed now: the file an
    exported library looks for beside itself under the name ``soname``.
    :class:`BlasNotFound` if it is not installed."""
    path = (_scipy_openblas_library() if blas_kind() == "scipy-openblas32"
            else _system_openblas_library())
    return _soname(path), path


def copy_blas(folder) -> str:
    """Writes the engine's BLAS into ``folder`` under its soname (a hard link where the
    file system allows, else a copy), where an exported library in that folder finds
    it; returns the path. A file already there with the same size and content date is
    kept."""
    import shutil

    soname, src = blas_library()
    dst = os.path.join(os.fspath(folder), soname)
    st = os.stat(src)
    try:
        dt = os.stat(dst)
        if dt.st_size == st.st_size and int(dt.st_mtime) == int(st.st_mtime):
            return dst
    except FileNotFoundError:
        pass
    tmp = f"{dst}.tmp{os.getpid()}"
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copy2(src, tmp)
        os.replace(tmp, dst)  # atomic: a concurrent export or load sees one whole file
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return dst


# ---- the engine as a module of the compiled program ---------------------------------------
# Every global function the engine object registers when a library carrying it is loaded.
ENGINE_FUNCTIONS = ("kokoro_lstm.lstm_forward_v2", "kokoro_lstm.matmul_v1",
                    "kokoro_lstm.conv1d_v1", "kokoro_lstm.conv1d_transpose_dw_v1",
                    "kokoro_lstm.softmax_v1", "kokoro_lstm.attention_v1",
                    "kokoro_lstm.random_v1", "kokoro_lstm.fresh_seed_v1",
                    "kokoro_lstm.instance_norm_v1")

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


# The BLAS entry points blas_loader.c defines, without the scipy_ prefix.
LOADER_FUNCTIONS = ("cblas_sgemm", "cblas_dgemm", "openblas_get_num_threads",
                    "openblas_set_num_threads")


def _c_string(text):
    """``text`` as a C string literal (octal escapes for anything but printable ASCII)."""
    out = []
    for b in text.encode():
        ch = chr(b)
        out.append(ch if 32 <= b < 127 and ch not in '"\\?' else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def loader_source() -> str:
    """Path of ``blas_loader.c`` (shipped with the package)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "blas_loader.c")


def loader_command(cc, out, soname, installed, prefix, extra=()):
    """The compiler command that builds ``blas_loader.c`` into the object ``out``."""
    return (shlex.split(cc) + ["-x", "c", "-std=c11", "-O2", "-fPIC", "-fvisibility=hidden",
                               f"-DKL_BLAS_PREFIX={prefix}",
                               f"-DKL_BLAS_SONAME={_c_string(soname)}",
                               f"-DKL_BLAS_INSTALLED={_c_string(installed)}", *extra,
                               "-c", loader_source(), "-o", out])


def loader_object() -> str:
    """``blas_loader.c`` compiled for the BLAS the engine calls, as installed now
    (cached under ~/.cache/kokoro_lstm). RuntimeError if the engine object calls a BLAS
    function the loader does not define."""
    from tvm.support import cc as _cc

    soname, path = blas_library()
    prefix = "scipy_" if blas_kind() == "scipy-openblas32" else ""
    engine = engine_object()
    cc = _cc.get_cc()
    if not cc:
        raise RuntimeError("kokoro_lstm: no C compiler (set CC), which TVM's "
                           "export_library needs too")
    with open(loader_source(), "rb") as f:
        source = f.read()
    key = hashlib.sha1(b"\n".join([source, soname.encode(), path.encode(), prefix.encode(),
                                   cc.encode(), engine.encode(),
                                   str(os.path.getmtime(engine)).encode()]))
    obj = os.path.join(_cache_dir(), f"blas-loader-{key.hexdigest()[:16]}.o")
    if os.path.exists(obj):
        return obj
    needed = _symbols(["nm", "-u", engine]) & _symbols(["nm", "-D", "--defined-only", path])
    missing = needed - {prefix + f for f in LOADER_FUNCTIONS}
    if missing:
        raise RuntimeError("kokoro_lstm: the engine calls BLAS functions that "
                           f"kokoro_lstm/tvm/blas_loader.c does not define: {sorted(missing)}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "loader.o")
        r = subprocess.run(loader_command(cc, out, soname, path, prefix), capture_output=True,
                           text=True)
        if r.returncode:
            raise RuntimeError(f"kokoro_lstm: compiling {loader_source()} failed: "
                               f"{r.stderr.strip()}")
        os.replace(out, obj)  # atomic: a concurrent export sees the whole file or none
    return obj


def _quote(path):
    if '"' in path:
        raise RuntimeError(f"kokoro_lstm: cannot link a path with a double quote: {path!r}")
    return f'"{path}"'


def linker_script() -> str:
    """A GNU ld script that links the engine object and its BLAS loader (see
    :func:`engine_module`)."""
    lines = ["/* kokoro_lstm: the engine (lib/kokoro_lstm_tvm.o) and its BLAS loader */",
             f"INPUT({_quote(engine_object())})", f"INPUT({_quote(loader_object())})",
             "INPUT(-lpthread -lm -ldl)"]
    return "\n".join(lines) + "\n"


def engine_module():
    """The engine as a TVM ``static_library`` module (one per process): imported by a
    compiled program, TVM's own ``export_library`` links it into the library. Its
    content is a GNU ld script (TVM hands it to the linker as an object file; ld reads
    a file it does not recognise as an object as a script) naming the engine object,
    its BLAS loader (:func:`loader_object`) and the system libraries, since a static
    library module cannot carry linker options. Linux (GNU ld) only."""
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
