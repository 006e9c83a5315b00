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

import os
import shlex
import subprocess
import sys

__all__ = ["BlasNotFound", "blas_kind", "blas_link_flags", "engine_object"]

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
