"""Build of the kokoro_lstm._core extension.

BLAS is OpenBLAS, chosen by KOKORO_LSTM_BLAS:
  auto (default)     the system OpenBLAS through pkg-config (Debian: libopenblas-dev),
                     else the scipy-openblas32 wheel
  system             pkg-config's openblas, or fail
  scipy-openblas32   the wheel (symbols prefixed scipy_; preloaded at import)
ISA kernels get their own flags by file name (*-avx2fma.c, *-avx2f16c.c, *-avx512f.c,
*-avx512bf16.c, *-amx.c on x86-64; *-neon.c, *-neonbf16.c on aarch64/arm64); the other
architecture's kernel files are left out. Nothing is built with -march=native.

Besides the extension, the build writes kokoro_lstm/lib/kokoro_lstm_tvm.o: the
engine (core, kernels, tvm-ffi glue) as one relocatable object with hidden
symbols, which kokoro_lstm.tvm.export_library links into exported TVM
libraries so that they run without Python (src/tvm/kl_tvm_autoreg.c registers
the functions when the library is loaded).
"""
import glob
import os
import shlex
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
ISA_FLAGS = {
    "-avx2fma.c": ["-mavx2", "-mfma"],
    "-avx512f.c": ["-mavx512f", "-mfma"],
    "-avx512bf16.c": ["-mavx512f", "-mavx512bf16", "-mfma"],
    "-amx.c": ["-mavx512f", "-mavx512bf16", "-mamx-tile", "-mamx-bf16"],
    "-avx2f16c.c": ["-mavx2", "-mfma", "-mf16c"],
    "-neon.c": [],
    "-neonbf16.c": ["-march=armv8.2-a+bf16"],
}
ARCH_KERNELS = {"x86": ("-avx2fma.c", "-avx512f.c", "-avx512bf16.c", "-avx2f16c.c", "-amx.c"), "arm": ("-neon.c", "-neonbf16.c")}


def _target_arch():
    """x86 or arm (the target: sysconfig honours cross builds' _PYTHON_HOST_PLATFORM), else None."""
    plat = sysconfig.get_platform().lower()
    if plat.endswith(("x86_64", "amd64")):
        return "x86"
    if plat.endswith(("aarch64", "arm64")):
        return "arm"
    return None
WARN = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-O2", "-fno-math-errno",
        "-ffp-contract=off", "-pthread", "-fvisibility=hidden"]
INCLUDE = ["src/include", "src/core", "src/kernels", "src/ops", "src/third_party", "src/tvm"]
ARCH = _target_arch()
# the engine: core, this architecture's kernels, dense ops, tvm-ffi glue
ENGINE_SOURCES = [s for s in sorted(glob.glob("src/core/*.c") + glob.glob("src/kernels/*/*.c")
                                    + glob.glob("src/ops/*.c"))
                  if not any(s.endswith(suffix) for a, sfx in ARCH_KERNELS.items() if a != ARCH
                             for suffix in sfx)] + ["src/tvm/kl_tvm_ffi.c", "src/tvm/kl_tvm_dense.c"]


def _pkg_config_openblas():
    try:
        cflags = subprocess.run(["pkg-config", "--cflags", "openblas"], check=True,
                                capture_output=True, text=True).stdout
        libs = subprocess.run(["pkg-config", "--libs", "openblas"], check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    inc = [f[2:] for f in shlex.split(cflags) if f.startswith("-I")]
    libdirs = [f[2:] for f in shlex.split(libs) if f.startswith("-L")]
    names = [f[2:] for f in shlex.split(libs) if f.startswith("-l")]
    return dict(include_dirs=inc, library_dirs=libdirs, libraries=names,
                runtime_library_dirs=libdirs, define_macros=[], blas="system")


def _scipy_openblas():
    try:
        import scipy_openblas32 as so
    except ImportError:
        return None
    # No absolute RUNPATH into the (often temporary) build environment: the
    # installed wheel finds the library in the scipy_openblas32 package next to
    # kokoro_lstm (relative rpath), and kokoro_lstm/__init__.py preloads it
    # (in-place builds). auditwheel/delocate exclude it from the wheel.
    origin = "@loader_path" if sys.platform == "darwin" else "$ORIGIN"
    return dict(include_dirs=[so.get_include_dir()], library_dirs=[so.get_lib_dir()],
                libraries=[so.get_library()], runtime_library_dirs=[],
                link_args=[f"-Wl,-rpath,{origin}/../scipy_openblas32/lib"],
                define_macros=[("KL_BLAS_SCIPY", "1")], blas="scipy-openblas32")


def find_blas():
    choice = os.environ.get("KOKORO_LSTM_BLAS", "auto")
    if choice not in ("auto", "system", "scipy-openblas32"):
        sys.exit(f"KOKORO_LSTM_BLAS must be auto, system or scipy-openblas32, not {choice!r}")
    found = None
    if choice in ("auto", "system"):
        found = _pkg_config_openblas()
    if found is None and choice in ("auto", "scipy-openblas32"):
        found = _scipy_openblas()
    if found is None:
        sys.exit("kokoro_lstm needs OpenBLAS: install libopenblas-dev (pkg-config openblas) "
                 "or the scipy-openblas32 wheel (KOKORO_LSTM_BLAS=" + choice + ")")
    return found


class BuildExt(build_ext):
    """Adds NumPy's headers and per-ISA flags; records which BLAS was used."""

    def build_extensions(self):
        import numpy as np

        # Rebuild every time: setuptools only compares timestamps, so an
        # object built against the other BLAS (KOKORO_LSTM_BLAS) would be reused.
        self.force = True
        for ext in self.extensions:
            ext.include_dirs.append(np.get_include())
        original = self.compiler._compile

        def _compile(obj, src, ext, cc_args, extra_postargs, pp_opts):
            flags = [f for suffix, fl in ISA_FLAGS.items() if src.endswith(suffix) for f in fl]
            return original(obj, src, ext, cc_args, list(extra_postargs) + flags, pp_opts)

        self.compiler._compile = _compile
        try:
            super().build_extensions()
            self._build_engine_object()
        finally:
            self.compiler._compile = original
        self._write_build_config()

    def _build_engine_object(self):
        """The engine as one relocatable object for exported TVM libraries: the
        extension's own objects (built above, hidden visibility) plus the
        registration constructor, partially linked with `cc -r`."""
        ext = self.extensions[0]
        engine = [s for s in ext.sources if s in ENGINE_SOURCES]
        objs = self.compiler.object_filenames(engine, output_dir=self.build_temp)
        objs += self.compiler.compile(["src/tvm/kl_tvm_autoreg.c"], output_dir=self.build_temp,
                                      include_dirs=ext.include_dirs, macros=ext.define_macros,
                                      extra_postargs=WARN + ["-fPIC"])
        out_dirs = {os.path.join(ROOT, "kokoro_lstm", "lib"),
                    os.path.join(self.build_lib, "kokoro_lstm", "lib")}
        for d in out_dirs:
            os.makedirs(d, exist_ok=True)
            subprocess.run([self.compiler.compiler_so[0], "-r", "-nostdlib", "-o",
                            os.path.join(d, "kokoro_lstm_tvm.o")] + objs, check=True)

    def _write_build_config(self):
        libs = ([f"-L{d}" for d in BLAS["library_dirs"]] + [f"-l{n}" for n in BLAS["libraries"]]
                + [f"-Wl,-rpath,{d}" for d in BLAS["runtime_library_dirs"]])
        text = (f'"""Written by setup.py at build time."""\nBLAS = {BLAS["blas"]!r}\n'
                f"# link flags of the engine object (lib/kokoro_lstm_tvm.o) for BLAS\n"
                f"BLAS_LINK = {libs!r}\n")
        for base in {os.path.join(ROOT, "kokoro_lstm"), os.path.join(self.build_lib, "kokoro_lstm")}:
            if os.path.isdir(base):
                with open(os.path.join(base, "_build_config.py"), "w") as f:
                    f.write(text)


BLAS = find_blas()
sources = ENGINE_SOURCES + ["src/python/module.c"]
if not any(s.endswith("-scalar.c") for s in sources):
    raise SystemExit("kernel sources missing")

ext = Extension(
    "kokoro_lstm._core",
    sources=sources,
    include_dirs=INCLUDE + BLAS["include_dirs"],
    library_dirs=BLAS["library_dirs"],
    libraries=BLAS["libraries"],
    runtime_library_dirs=BLAS["runtime_library_dirs"],
    define_macros=BLAS["define_macros"],
    extra_compile_args=WARN,
    extra_link_args=["-pthread", "-ldl"] + BLAS.get("link_args", []),
    depends=[h for d in INCLUDE for h in glob.glob(f"{d}/**/*.h", recursive=True)],
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt})
