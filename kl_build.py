"""The one build description of kokoro_lstm's C code.

Everything that compiles C in this project reads this file: setup.py (the
kokoro_lstm._core extension and lib/kokoro_lstm_tvm.o) and, through the command
line below, the Makefile's C programs (the core test, its sanitizer, portable and
aarch64 builds, the kernel benchmark, the clang check). Only the standard library
is used, so any python3 can run it.

What it describes:
  sources        ENGINE_SOURCES (core, kernels, dense ops, tvm-ffi glue), the binding
                 (src/python/module.c), the programs (the C test tests/c/*.c,
                 benchmarks/c/bench_kernels.c) and tests/c/refblas for BLAS `ref`
  flags          COMMON_FLAGS for every file, VARIANT_FLAGS (o2, asan, portable),
                 ISA_FLAGS by file suffix; a file of the other architecture's kernels
                 is not built at all. Nothing is built with -march=native.
  -Werror        only when KOKORO_LSTM_WERROR=1 (the Makefile exports it, so every
                 developer and CI build has it); a pip install from the sdist meets
                 compilers we never ran, where a new warning must not fail the install
  BLAS           find_blas(): KOKORO_LSTM_BLAS = auto | system | scipy-openblas32, and
                 `ref` (tests/c/refblas) for the C programs only
  incremental    an object is rebuilt when its source or a header it includes is newer
                 (the compiler's -MMD dependency file), or when its command changed
                 (a `.cmd` file beside it keeps the last one: flags, BLAS, compiler)

Command line (the Makefile's targets call it):
  python kl_build.py ctest [--variant o2|asan|portable] [--cc CC] [--blas B] [--out DIR] [--run]
  python kl_build.py bench-kernels [--run] [ROUNDS]
  python kl_build.py check --cc clang ...     compile every file of the C test, no link
  python kl_build.py ext --variant asan --out build-c/asan-ext   the package with its extension
                 built as that variant (run with PYTHONPATH=build-c/asan-ext)
  python kl_build.py sources [--arch x86|arm] the source lists, one per line
The program is built in --out (default build-c/<blas>/<variant>, with the target
architecture in front when it is not this machine's) and its path printed last.
"""
import argparse
import glob
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.abspath(__file__))

# ---- sources (relative to ROOT) ----------------------------------------------------------
INCLUDE_DIRS = ["src/include", "src/core", "src/kernels", "src/ops", "src/third_party", "src/tvm",
                "src/cuda", "src/cuda/gen"]
# the CUDA kernels, embedded in the engine as one source text in this order (compiled at
# run time by NVRTC): the parameters shared with the host C first, one kernel family a file
CUDA_SOURCES = ["src/cuda/params.cuh", "src/cuda/common.cuh", "src/cuda/gemm.cu", "src/cuda/step.cu",
                "src/cuda/ptx.cuh", "src/cuda/cluster.cu"]
# the ops program: the noise and convolution kernels, which take none of the LSTM's -D
# options, so one module per device serves every call (src/cuda/ops.c)
CUDA_OPS_SOURCES = ["src/cuda/random.cu", "src/cuda/conv_params.cuh", "src/cuda/conv.cu"]
CUDA_EMBED = "src/cuda/gen/kl_cuda_src.h"
BINDING_SOURCES = ["src/python/module.c", "src/python/noise.c", "src/python/glue.c"]
# registers the tvm-ffi functions when an exported TVM library is loaded: in
# lib/kokoro_lstm_tvm.o only
AUTOREG_SOURCE = "src/tvm/kl_tvm_autoreg.c"
# the C test: one program, one file per concern (tests/c/tests.h)
CTEST_SOURCES = "tests/c/*.c"
PROGRAMS = {"ctest": ("test_core", CTEST_SOURCES),
            "bench-kernels": ("bench_kernels", "benchmarks/c/bench_kernels.c")}
REFBLAS = {"sources": ["tests/c/refblas/refblas.c"], "include_dirs": ["tests/c/refblas"]}

# ---- flags -------------------------------------------------------------------------------
COMMON_FLAGS = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-fno-math-errno",
                "-ffp-contract=off", "-pthread", "-fvisibility=hidden"]
VARIANT_FLAGS = {
    "o2": ["-O2"],
    "asan": ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
             "-fno-omit-frame-pointer", "-g", "-O1"],
    # the code paths of non-Linux systems (condvar barrier, no affinity, no getauxval)
    "portable": ["-O2", "-DKL_FORCE_PORTABLE"],
}
# per-ISA flags by file name (the ISA names of src/kernels/README.md: file and function
# suffix, list isa, KL_ARCH_* bit); each suffix belongs to one architecture
ISA_FLAGS = {
    "x86": {"-avx2fma.c": ["-mavx2", "-mfma"],
            "-avx512f.c": ["-mavx512f", "-mfma"],
            "-avx512bf16.c": ["-mavx512f", "-mavx512bf16", "-mfma"],
            "-avx2f16c.c": ["-mavx2", "-mfma", "-mf16c"],
            "-avx512amx.c": ["-mavx512f", "-mavx512bf16", "-mamx-tile", "-mamx-bf16"]},
    "arm": {"-neon.c": [],  # NEON is baseline on AArch64
            "-neonbf16.c": ["-march=armv8.2-a+bf16"]},
}
EXT_LINK_FLAGS = ["-pthread", "-ldl"]
PROGRAM_LINK_FLAGS = ["-lm", "-ldl"]


def werror():
    """["-Werror"] when KOKORO_LSTM_WERROR=1 (make sets it), else []."""
    return ["-Werror"] if os.environ.get("KOKORO_LSTM_WERROR", "0") == "1" else []


def arch_of(name):
    """x86 or arm from a platform tag or a target triple, else None."""
    name = name.lower()
    if name.startswith(("x86_64", "amd64")) or name.endswith(("x86_64", "amd64")):
        return "x86"
    if name.startswith(("aarch64", "arm64")) or name.endswith(("aarch64", "arm64")):
        return "arm"
    return None


def engine_sources(arch):
    """Core, this architecture's kernels (scalar ones everywhere), dense ops, tvm-ffi glue."""
    other = tuple(s for a, flags in ISA_FLAGS.items() if a != arch for s in flags)
    found = sorted(os.path.relpath(p, ROOT) for pattern in ("src/core/*.c", "src/kernels/*/*.c",
                                                              "src/ops/*.c", "src/cuda/*.c")
                   for p in glob.glob(os.path.join(ROOT, pattern)))
    sources = [s for s in found if not s.endswith(other)] + ["src/tvm/kl_tvm_ffi.c",
                                                             "src/tvm/kl_tvm_dense.c",
                                                             "src/tvm/kl_tvm_random.c",
                                                             "src/tvm/kl_tvm_norm.c"]
    if not any(s.endswith("-scalar.c") for s in sources):
        raise SystemExit("kernel sources missing")
    return sources


def _c_bytes(name, sources):
    """sources (paths under ROOT) as one NUL-ended C byte array called name."""
    data = b"".join(open(os.path.join(ROOT, p), "rb").read() for p in sources) + b"\0"
    rows = [", ".join(str(b) for b in data[i:i + 24]) for i in range(0, len(data), 24)]
    return f"static const unsigned char {name}[] = {{\n" + ",\n".join(rows) + "};\n"


def generate():
    """Writes CUDA_EMBED: CUDA_SOURCES as one C byte array (NUL ended), read as the string
    kl_cuda_source, and CUDA_OPS_SOURCES as kl_cuda_ops_source_bytes. Rewritten only
    when its text changes, so that builds stay incremental."""
    out = ("/* Generated by kl_build.py from CUDA_SOURCES and CUDA_OPS_SOURCES (src/cuda): "
           "do not edit. */\n" + _c_bytes("kl_cuda_source_bytes", CUDA_SOURCES)
           + "#define kl_cuda_source ((const char*)kl_cuda_source_bytes)\n"
           + _c_bytes("kl_cuda_ops_source_bytes", CUDA_OPS_SOURCES))
    path = os.path.join(ROOT, CUDA_EMBED)
    try:
        with open(path) as f:
            if f.read() == out:
                return
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(out)


def isa_flags(source, arch):
    return [f for suffix, flags in ISA_FLAGS.get(arch, {}).items() if source.endswith(suffix)
            for f in flags]


# ---- BLAS --------------------------------------------------------------------------------
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
                runtime_library_dirs=libdirs, define_macros=[], link_args=[], sources=[],
                blas="system")


def _scipy_openblas(program):
    try:
        import scipy_openblas32 as so
    except ImportError:
        return None
    libdir = so.get_lib_dir()
    if program:  # a program in build-c/: the absolute path to the wheel's library
        rpath, link_args = [libdir], []
    else:
        # No absolute RUNPATH into the (often temporary) build environment: the
        # installed wheel finds the library in the scipy_openblas32 package next to
        # kokoro_lstm (relative rpath), and kokoro_lstm/__init__.py preloads it
        # (in-place builds). auditwheel/delocate exclude it from the wheel.
        origin = "@loader_path" if sys.platform == "darwin" else "$ORIGIN"
        rpath, link_args = [], [f"-Wl,-rpath,{origin}/../scipy_openblas32/lib"]
    return dict(include_dirs=[so.get_include_dir()], library_dirs=[libdir],
                libraries=[so.get_library()], runtime_library_dirs=rpath, link_args=link_args,
                define_macros=[("KL_BLAS_SCIPY", "1")], sources=[], blas="scipy-openblas32")


def find_blas(choice=None, program=False):
    """The BLAS to build with, as a dict (include_dirs, library_dirs, libraries,
    runtime_library_dirs, define_macros, link_args, sources, blas). choice defaults to
    KOKORO_LSTM_BLAS; `ref` (the naive tests/c/refblas) is for the C programs only."""
    choice = choice or os.environ.get("KOKORO_LSTM_BLAS") or "auto"
    allowed = ("auto", "system", "scipy-openblas32") + (("ref",) if program else ())
    if choice not in allowed:
        sys.exit(f"KOKORO_LSTM_BLAS must be {', '.join(allowed[:-1])} or {allowed[-1]}, "
                 f"not {choice!r}")
    if choice == "ref":
        return dict(include_dirs=list(REFBLAS["include_dirs"]), library_dirs=[], libraries=[],
                    runtime_library_dirs=[], define_macros=[("KL_BLAS_REF", "1")], link_args=[],
                    sources=list(REFBLAS["sources"]), blas="ref")
    found = None
    if choice in ("auto", "system"):
        found = _pkg_config_openblas()
    if found is None and choice in ("auto", "scipy-openblas32"):
        found = _scipy_openblas(program)
    if found is None:
        sys.exit("kokoro_lstm needs OpenBLAS: install libopenblas-dev (pkg-config openblas) "
                 "or the scipy-openblas32 wheel (KOKORO_LSTM_BLAS=" + choice + ")")
    return found


def blas_link_flags(blas):
    return ([f"-L{d}" for d in blas["library_dirs"]] + [f"-l{n}" for n in blas["libraries"]]
            + [f"-Wl,-rpath,{d}" for d in blas["runtime_library_dirs"]] + blas["link_args"])


# ---- incremental builds ------------------------------------------------------------------
def _cmd_file(target, stamp_dir=None):
    if stamp_dir is None:
        return target + ".cmd"
    digest = hashlib.sha1(os.path.abspath(target).encode()).hexdigest()[:16]
    return os.path.join(stamp_dir, f"{os.path.basename(target)}-{digest}.cmd")


def _depfile_inputs(obj):
    """The files the compiler's -MMD dependency file lists for obj, or None."""
    try:
        with open(os.path.splitext(obj)[0] + ".d") as f:
            text = f.read().replace("\\\n", " ")
    except OSError:
        return None
    _, _, deps = text.partition(": ")
    return deps.split()


def up_to_date(target, inputs, command, stamp_dir=None):
    """True when target exists, is newer than every input, and was made by this command
    (kept in a .cmd file beside it, or in stamp_dir). inputs=None: read them from the
    dependency file that -MMD wrote beside target."""
    if inputs is None:
        inputs = _depfile_inputs(target)
        if inputs is None:
            return False
    try:
        made = os.path.getmtime(target)
        with open(_cmd_file(target, stamp_dir)) as f:
            if json.load(f) != json.loads(json.dumps(command)):
                return False
        return all(os.path.getmtime(os.path.join(ROOT, p)) <= made for p in inputs)
    except (OSError, ValueError):
        return False


def record(target, command, stamp_dir=None):
    path = _cmd_file(target, stamp_dir)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(command, f)


def _short(path):
    """path relative to ROOT when inside it (the commands run in ROOT)."""
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith(os.pardir) else rel


def object_path(out_dir, source):
    return os.path.join(out_dir, os.path.splitext(source)[0] + ".o")


def default_jobs():
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else (os.cpu_count() or 1))


# ---- the C programs ----------------------------------------------------------------------
def target_arch(cc):
    """The architecture the compiler cc (an argv list) builds for: `cc -dumpmachine`."""
    try:
        machine = subprocess.run(cc + ["-dumpmachine"], check=True, capture_output=True,
                                 text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"kl_build: cannot run {' '.join(cc)} -dumpmachine: {e}")
    return arch_of(machine)


def program_sources(program):
    """The own sources of program (a PROGRAMS key), from its glob pattern, sorted."""
    pattern = PROGRAMS[program][1]
    found = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))
    if not found:
        raise SystemExit(f"kl_build: no sources match {pattern}")
    return found


def _link(command, target, objs, verbose):
    """Runs the link command unless target is up to date with objs and was made by
    it; prints the command (verbose) and records it. Returns target."""
    if not up_to_date(target, objs, command):
        if verbose:
            print(" ".join(shlex.quote(a) for a in command), flush=True)
        subprocess.run(command, cwd=ROOT, check=True)
        record(target, command)
    return target


def build_program(program, cc, variant, blas, out_dir, extra_cflags=(), link=True, jobs=None,
                  verbose=True):
    """Builds program (a PROGRAMS key) into out_dir, compiling only what changed;
    link=False compiles every file and stops (a compile check). Returns its path."""
    arch = target_arch(cc)
    generate()
    name = PROGRAMS[program][0]
    sources = engine_sources(arch) + program_sources(program) + blas["sources"]
    out_dir = os.path.join(ROOT, out_dir)  # (an absolute out_dir stays as it is)
    cflags = (COMMON_FLAGS + werror() + VARIANT_FLAGS[variant] + list(extra_cflags)
              + [f"-I{d}" for d in INCLUDE_DIRS + blas["include_dirs"]]
              + [f"-D{k}={v}" for k, v in blas["define_macros"]])
    objs = _compile_all(cc, cflags, sources, out_dir, arch, jobs, verbose)
    if not link:
        return None
    exe = os.path.join(out_dir, name)
    command = (cc + COMMON_FLAGS + werror() + VARIANT_FLAGS[variant] + list(extra_cflags)
               + ["-o", _short(exe)] + [_short(o) for o in objs] + blas_link_flags(blas)
               + PROGRAM_LINK_FLAGS)
    return _link(command, exe, objs, verbose)


def build_extension(cc, variant, blas, out_dir, extra_cflags=(), jobs=None, verbose=True):
    """The kokoro_lstm package with its _core extension compiled as `variant` (asan: the
    Python tests under AddressSanitizer + UBSan), in out_dir/kokoro_lstm: the package's
    Python files copied there, the extension built beside them (incrementally). Run it
    with PYTHONPATH=out_dir, and for asan LD_PRELOAD of the compiler's libasan (Python
    itself is not instrumented). Needs the NumPy of the Python running this."""
    import shutil
    import sysconfig

    import numpy

    arch = target_arch(cc)
    generate()
    out_dir = os.path.join(ROOT, out_dir)
    pkg = os.path.join(out_dir, "kokoro_lstm")
    for src in glob.glob(os.path.join(ROOT, "kokoro_lstm", "**", "*.py"), recursive=True):
        dst = os.path.join(pkg, os.path.relpath(src, os.path.join(ROOT, "kokoro_lstm")))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst) or os.path.getmtime(dst) < os.path.getmtime(src):
            shutil.copy2(src, dst)
    with open(os.path.join(pkg, "_build_config.py"), "w") as f:
        f.write(f'"""Written by kl_build.py ({variant} extension)."""\nBLAS = {blas["blas"]!r}\n')
    sources = engine_sources(arch) + BINDING_SOURCES + blas["sources"]
    flags = (COMMON_FLAGS + werror() + VARIANT_FLAGS[variant] + ["-fPIC"] + list(extra_cflags))
    cflags = (flags + [f"-I{d}" for d in INCLUDE_DIRS + blas["include_dirs"]]
              + [f"-I{sysconfig.get_paths()['include']}", f"-I{numpy.get_include()}"]
              + [f"-D{k}={v}" for k, v in blas["define_macros"]])
    objs = _compile_all(cc, cflags, sources, os.path.join(out_dir, "obj"), arch, jobs, verbose)
    so = os.path.join(pkg, "_core" + sysconfig.get_config_var("EXT_SUFFIX"))
    command = (cc + flags + ["-shared", "-o", _short(so)] + [_short(o) for o in objs]
               + blas_link_flags(blas) + EXT_LINK_FLAGS + ["-lm"])
    return _link(command, so, objs, verbose)


def _compile_all(cc, cflags, sources, out_dir, arch, jobs, verbose):
    """Objects of sources in out_dir, compiling those out of date, in parallel."""

    def compile_one(src):
        obj = object_path(out_dir, src)
        command = cc + cflags + isa_flags(src, arch) + ["-MMD", "-c", src, "-o", _short(obj)]
        if up_to_date(obj, None, command):
            return obj, False
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        if verbose:
            print(" ".join(shlex.quote(a) for a in command), flush=True)
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        if result.returncode:
            raise SystemExit(f"kl_build: compiling {src} failed")
        record(obj, command)
        return obj, True

    with ThreadPoolExecutor(jobs or default_jobs()) as pool:
        return [obj for obj, _ in pool.map(compile_one, sources)]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="kl_build.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    for what, help_text in (("ctest", "the C core test (tests/c)"),
                            ("bench-kernels", "the kernel micro-benchmark"),
                            ("check", "compile every file of the C test, no link"),
                            ("ext", "the kokoro_lstm package with its extension built as "
                                    "--variant, in --out (default build-c/<variant>-ext)")):
        p = sub.add_parser(what, help=help_text)
        p.add_argument("--variant", choices=sorted(VARIANT_FLAGS), default="o2")
        p.add_argument("--cc", default=os.environ.get("CC") or "gcc",
                       help="the compiler, with arguments (default $CC, else gcc)")
        p.add_argument("--blas", default=None,
                       help="auto, system, scipy-openblas32 or ref (default $KOKORO_LSTM_BLAS, "
                            "else auto)")
        p.add_argument("--out", default=None, help="object and program directory")
        p.add_argument("--cflags", default="", help="extra compiler flags")
        p.add_argument("-j", "--jobs", type=int, default=None)
        p.add_argument("-q", "--quiet", action="store_true", help="do not print the commands")
        if what not in ("check", "ext"):
            p.add_argument("--run", action="store_true", help="run the program after building it")
            p.add_argument("args", nargs="*", help="the program's arguments (with --run)")
    p = sub.add_parser("sources", help="the source lists")
    p.add_argument("--arch", choices=sorted(ISA_FLAGS), default=arch_of(platform.machine()))
    args = parser.parse_args(argv)

    if args.what == "sources":
        for label, files in (("engine", engine_sources(args.arch)), ("binding", BINDING_SOURCES),
                             ("autoreg", [AUTOREG_SOURCE]),
                             *((k, program_sources(k)) for k in PROGRAMS),
                             ("refblas", REFBLAS["sources"])):
            for f in files:
                print(label, f)
        return 0
    cc = shlex.split(args.cc)
    blas = find_blas(args.blas, program=True)
    out = args.out
    if args.what == "ext":
        so = build_extension(cc, args.variant, blas, out or os.path.join("build-c", f"{args.variant}-ext"),
                             shlex.split(args.cflags), jobs=args.jobs, verbose=not args.quiet)
        print(_short(so), flush=True)
        return 0
    if out is None:
        arch = target_arch(cc)
        prefix = "" if arch == arch_of(platform.machine()) else f"{arch}-"
        out = os.path.join("build-c", prefix + blas["blas"], args.variant)
    program = "ctest" if args.what == "check" else args.what
    exe = build_program(program, cc, args.variant, blas, out, shlex.split(args.cflags),
                        link=args.what != "check", jobs=args.jobs, verbose=not args.quiet)
    if args.what == "check":
        print(f"kl_build check: every file compiled ({args.cc}, {args.variant})")
        return 0
    print(_short(exe), flush=True)
    if args.run:
        return subprocess.run([exe] + args.args).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
