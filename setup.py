"""Build of the kokoro_lstm._core extension.

What is built, with which flags and against which BLAS, is described once in
kl_build.py (the C programs of the Makefile use the same description); this file
applies it through setuptools' public build_ext API. BLAS is OpenBLAS, chosen by
KOKORO_LSTM_BLAS:
  auto (default)     the system OpenBLAS through pkg-config (Debian: libopenblas-dev),
                     else the scipy-openblas32 wheel
  system             pkg-config's openblas, or fail
  scipy-openblas32   the wheel (symbols prefixed scipy_; preloaded at import)
The target architecture comes from sysconfig (which honours cross builds'
_PYTHON_HOST_PLATFORM): its kernel files get their ISA flags, the other
architecture's are left out. KOKORO_LSTM_WERROR=1 adds -Werror (make sets it).

Rebuilds are incremental: an object is compiled again only when its source or a
header it includes changed (the compiler's -MMD file), or its command did (flags,
BLAS, compiler: kl_build keeps the last command beside each object).

Besides the extension, the build writes kokoro_lstm/lib/kokoro_lstm_tvm.o: the
engine (core, kernels, tvm-ffi glue) as one relocatable object with hidden
symbols, which kokoro_lstm.tvm.export_library links into exported TVM
libraries so that they run without Python (src/tvm/kl_tvm_autoreg.c registers
the functions when the library is loaded).
"""
import os
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)  # PEP 517 backends do not put the project on sys.path
import kl_build  # noqa: E402

ARCH = kl_build.arch_of(sysconfig.get_platform())
ENGINE_SOURCES = kl_build.engine_sources(ARCH)
BLAS = kl_build.find_blas()


class BuildExt(build_ext):
    """Compiles each file with its ISA's flags, only what changed; links with the
    public API; records which BLAS was used."""

    def build_extension(self, ext):
        import numpy as np

        kl_build.generate()
        self._include_dirs = ext.include_dirs + [np.get_include()]
        sources = ext.sources + [kl_build.AUTOREG_SOURCE]  # autoreg: the engine object only
        by_source = dict(zip(sources, self._compile(sources, ext)))
        ext_path = self.get_ext_fullpath(ext.name)
        ext_objs = [by_source[s] for s in ext.sources]
        link = dict(libraries=self.get_libraries(ext), library_dirs=ext.library_dirs,
                    runtime_library_dirs=ext.runtime_library_dirs,
                    extra_postargs=ext.extra_link_args)
        command = [self.compiler.linker_so, ext_objs, link]
        if not kl_build.up_to_date(ext_path, ext_objs, command, self._stamps()):
            os.makedirs(os.path.dirname(ext_path) or ".", exist_ok=True)
            self.compiler.link_shared_object(
                ext_objs, ext_path, export_symbols=self.get_export_symbols(ext),
                debug=self.debug, build_temp=self.build_temp,
                target_lang=self.compiler.detect_language(ext.sources), **link)
            kl_build.record(ext_path, command, self._stamps())
        self._build_engine_object([by_source[s] for s in ENGINE_SOURCES + [kl_build.AUTOREG_SOURCE]])
        self._write_build_config()

    def _stamps(self):
        return os.path.join(self.build_temp, "kl-stamps")

    def _compile(self, sources, ext):
        """Objects of sources in build_temp, compiling those out of date (in parallel:
        build_ext -j N, else one job per CPU)."""
        flags = kl_build.COMMON_FLAGS + kl_build.werror() + kl_build.VARIANT_FLAGS["o2"]

        def compile_one(src):
            obj = self.compiler.object_filenames([src], output_dir=self.build_temp)[0]
            postargs = flags + kl_build.isa_flags(src, ARCH) + ["-MMD"]
            command = [self.compiler.compiler_so, ext.define_macros, self._include_dirs, postargs]
            if not kl_build.up_to_date(obj, None, command):
                os.makedirs(os.path.dirname(obj), exist_ok=True)
                self.compiler.compile([src], output_dir=self.build_temp, macros=ext.define_macros,
                                      include_dirs=self._include_dirs, debug=self.debug,
                                      extra_postargs=postargs)
                kl_build.record(obj, command)
            return obj

        jobs = self.parallel if isinstance(self.parallel, int) and self.parallel > 1 else None
        with ThreadPoolExecutor(jobs or kl_build.default_jobs()) as pool:
            return list(pool.map(compile_one, sources))

    def _build_engine_object(self, objs):
        """The engine as one relocatable object for exported TVM libraries: the
        extension's own objects (built above, hidden visibility) plus the
        registration constructor, partially linked with `cc -r`."""
        out_dirs = {os.path.join(ROOT, "kokoro_lstm", "lib"),
                    os.path.join(self.build_lib, "kokoro_lstm", "lib")}
        for d in sorted(out_dirs):
            os.makedirs(d, exist_ok=True)
            out = os.path.join(d, "kokoro_lstm_tvm.o")
            command = [self.compiler.compiler_so[0], "-r", "-nostdlib", "-o", out] + objs
            if not kl_build.up_to_date(out, objs, command, self._stamps()):
                self.spawn(command)
                kl_build.record(out, command, self._stamps())

    def _write_build_config(self):
        # Only which BLAS, never where it was: a pip install builds in a temporary
        # environment; kokoro_lstm.tvm._link finds the library when exporting.
        text = (f'"""Written by setup.py at build time."""\nBLAS = {BLAS["blas"]!r}\n')
        for base in {os.path.join(ROOT, "kokoro_lstm"), os.path.join(self.build_lib, "kokoro_lstm")}:
            if os.path.isdir(base):
                with open(os.path.join(base, "_build_config.py"), "w") as f:
                    f.write(text)


ext = Extension(
    "kokoro_lstm._core",
    sources=ENGINE_SOURCES + kl_build.BINDING_SOURCES,
    include_dirs=kl_build.INCLUDE_DIRS + BLAS["include_dirs"],
    library_dirs=BLAS["library_dirs"],
    libraries=BLAS["libraries"],
    runtime_library_dirs=BLAS["runtime_library_dirs"],
    define_macros=BLAS["define_macros"],
    extra_link_args=kl_build.EXT_LINK_FLAGS + BLAS["link_args"],
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt})
