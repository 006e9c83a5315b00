"""Build the C++ runner's CUDA cases here (TVM, pip's nvcc, no GPU needed) into one
folder that a GPU machine without TVM or Python packages runs (tools/gpu_check.sh):

    python tools/gpu_deploy.py build-c/gpu-deploy [--arch sm_90a]

TVM's CUDA runtime is loaded while compiling so that the kernels are saved compiled
(cubin), not as source a Python process would have to compile at load time.
The folder holds, per case, the exported library (TVM kernels for target cuda + the
kokoro_lstm engine), its inputs and expected outputs (the plain nn.LSTM on the CPU)
and manifest.txt; the TVM runtime libraries and tvm-ffi headers the runner is built
with; and the artifacts' BLAS under its soname (xz-compressed; the GPU suite unpacks it
into lib/, which the runner's LD_LIBRARY_PATH names).
"""
import argparse
import lzma
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import tvm  # noqa: E402

import kokoro_lstm.tvm as kt  # noqa: E402
from kokoro_lstm.tvm._link import blas_library  # noqa: E402
from deploy.artifacts import CASES, KOKORO_CASE, case, compile_cuda, cuda_module_format  # noqa: E402
from deploy.artifacts import runtime_libs, write_manifest  # noqa: E402

SYSTEM_LIBS = ("linux-vdso", "libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so",
               "ld-linux", "libgcc_s.so", "libstdc++.so")


def _needed_libs(so):
    """{file name: path} of the shared libraries ``so`` loads that a bare Linux machine
    may lack: ldd's ``name => path`` lines and its lines for NEEDED entries that are
    paths. SystemExit naming a library ldd cannot find."""
    out = subprocess.run(["ldd", so], capture_output=True, text=True, check=True).stdout
    libs = {}
    for line in out.splitlines():
        name, arrow, rest = line.strip().partition("=>")
        path = (rest if arrow else name).split()
        if arrow and (not path or path[0] == "not"):
            raise SystemExit(f"{so} needs {name.strip()}, which is not found here")
        if not path or not path[0].startswith("/"):  # linux-vdso: no file
            continue
        name = os.path.basename(name.strip() if arrow else path[0])
        if not name.startswith(SYSTEM_LIBS):
            libs[name] = path[0]
    return libs


def shipped_libs(so, ex):
    """{file name: path} of what ``so`` needs besides TVM's runtime: what it loads
    (:func:`_needed_libs`) and, when it calls the engine, the engine's BLAS under its
    soname (the engine's loader finds it on LD_LIBRARY_PATH or beside the library; it
    is no NEEDED entry, so ldd does not show it)."""
    libs = _needed_libs(so)
    if kt.uses_engine(ex):
        soname, path = blas_library()
        libs[soname] = path
    return libs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--cases", nargs="+", default=CASES + [KOKORO_CASE],
                    choices=CASES + [KOKORO_CASE])
    args = ap.parse_args()
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    lib_dir = os.path.join(args.out, "lib")
    os.makedirs(lib_dir)
    blas = {}
    for name in args.cases:
        d = os.path.join(args.out, "cases", name)
        os.makedirs(d)
        ep, inputs, expected = case(name)
        ex = compile_cuda(ep, args.arch)
        if not kt.uses_engine(ex):
            raise SystemExit(f"{name}: the native lowering does not call the engine")
        so = os.path.join(d, "lib.so")
        kt.export_library(ex, so, copy_blas=False)  # shipped once, in lib/
        fmt = cuda_module_format(so)
        if fmt not in (None, "cubin", "fatbin", "ptx"):
            raise SystemExit(f"{name}: the CUDA module is saved as {fmt!r}, not compiled")
        write_manifest(d, inputs, expected)
        blas.update(shipped_libs(so, ex))
        print(f"{name}: {os.path.getsize(so) / 1e6:.1f} MB, CUDA module {fmt}")
    incs, libs = runtime_libs()
    cuda_rt = os.path.join(os.path.dirname(libs[1]), "libtvm_runtime_cuda.so")
    for p in libs + [cuda_rt]:
        shutil.copy2(p, lib_dir)
    for name, path in sorted(blas.items()):
        with open(path, "rb") as f, lzma.open(os.path.join(lib_dir, name + ".xz"), "wb") as g:
            shutil.copyfileobj(f, g)
    for inc in incs:
        shutil.copytree(inc, os.path.join(args.out, "include"), dirs_exist_ok=True)
    print(f"{args.out}: TVM {tvm.__version__}, target cuda {args.arch}, "
          f"BLAS {', '.join(sorted(blas)) or 'none'}")


if __name__ == "__main__":
    main()
