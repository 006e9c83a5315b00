"""Kokoro's encoder compiled to TVM vs PyTorch eager, each runtime in its own process,
rounds alternated; ``kmodel``: Kokoro's whole KModel, patched vs unpatched.

For each component, static length and thread count: ``port-encoder``'s pipeline
(random weights, --validate, default methods) compiles the component once per
source tree given with ``--tree`` (e.g. the code before and after a change), in a
subprocess with that tree on PYTHONPATH. Then one worker process per compiled
library (TVM runtime only: kokoro_lstm is not importable there, the engine comes
from the library) and one PyTorch eager worker (``torch.set_num_threads(n)``) are
started, and rounds alternate between them: in each round every worker in turn
(the order rotates) sleeps 10 ms, then times ``--reps`` calls. Idle workers block
on a pipe, so only one runtime runs at a time. The table gives, per tree,
compiled / PyTorch of the medians and of the minima over every call.

    python benchmarks/bench_encoder.py --tree before=/path/old --tree after=.
    python benchmarks/bench_encoder.py --components bert --lengths 512 --threads 1

Prebuilt artifacts, for a machine with no TVM (a lent 16-core Xeon reached only by
copying files): ``--prepare DIR`` compiles here every component and length at 1 thread
and at the run-time thread count (``num_threads`` 0: the engine reads
KOKORO_LSTM_NUM_THREADS, TVM's loops TVM_NUM_THREADS), with weights that compress
(every parameter +-2^k at its random init's scale, the signs of its init's first
``--period`` values repeated: same shapes and scale, so the same work), and writes
``bundle.tar.gz`` (the libraries, libtvm_runtime.so, ``weights.npz``, ``in_*.npz``),
the apache-tvm-ffi wheel for the device's Python and ``manifest.json``.
``--artifacts DIR`` runs the same alternating comparison from them: PyTorch eager built
from ``weights.npz`` (Kokoro's modules: this package's copies), and the compiled side
through ``tvm_ffi_loader.py`` (tvm_ffi + libtvm_runtime.so only, no ``tvm``); each
pair first checks that both give the same outputs.

    KOKORO_LSTM_BLAS=scipy-openblas32 python setup.py -q build_ext --inplace  # first
    python benchmarks/bench_encoder.py --prepare .enc
    python benchmarks/bench_encoder.py --artifacts .enc --threads 1 2 16 --out DIR

Writes benchmarks/results/encoder_procs_<label>.json (or into ``--out``).

``kmodel`` (benchmarks/_kmodel.py): Kokoro's whole ``kokoro.KModel`` end to end,
PyTorch's ``nn.LSTM`` vs patched with ``kokoro_lstm.torch_ops.patch_lstm_modules``, each
variant in its own process; writes results/kmodel_<label>.json.

    python benchmarks/bench_encoder.py kmodel --tokens 64,128 --threads 1,2 --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

from _machine import cpu_name, isa_flags
from _procs import PipeWorker, versions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
OWN_MODULES = {"KOKORO_LSTM_FORCE_OWN_MODULES": "1"}  # the same modules on both machines
PY = sys.executable
THREAD_VARS = ("OMP_NUM_THREADS", "TVM_NUM_THREADS", "KOKORO_LSTM_NUM_THREADS",
               "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

COMPILE = r"""
import json, os, sys
from kokoro_lstm.cli.port_encoder import _Progress, port
class Q(_Progress):
    def note(self, *a): pass
comp, T, nth, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ckpt, target = (sys.argv[5] or None, sys.argv[6]) if len(sys.argv) > 5 else (None, "llvm")
with open(os.devnull, "w") as dn:
    (r,) = port([comp], ["auto"], seq_len=T, aligned_len=T, bert_seq_len=T, validate=True,
                no_weights=True, checkpoint=ckpt, target=target, output_dir=out,
                num_threads=nth, progress=Q(stream=dn))
print(json.dumps({"library": r["files"]["library"], "function": r["function"],
                  "compile_s": r["compile_s"], "max_err": r["validation"]["max_err"],
                  "passed": r["validation"]["passed"], "dense_calls": r["dense_calls"],
                  "target_tvm": r["target_tvm"], "runtime_ms_here": r["runtime_ms"],
                  "torch_eager_ms_here": r["torch_eager_ms"], "versions": r["versions"]}))
"""

# --prepare: random weights made compressible, saved for both sides, and every input
WEIGHTS = r"""
import json, math, sys
import numpy as np, torch
from kokoro_lstm.cli import _components as C
out, period, pth = sys.argv[1], int(sys.argv[2]), sys.argv[5]
comps, lengths = sys.argv[3].split(","), [int(x) for x in sys.argv[4].split(",")]
km, modules = C.kokoro_modules()
cfg = C.load_config(None)
entries = {}
needed = set(comps) | ({"duration", "f0n"} if {"duration", "f0n"} & set(comps) else set())
for comp in sorted(needed):  # duration and f0n each hold half of the predictor entry
    m = C.build_component(comp, cfg, km, seed=0)
    with torch.no_grad():
        for p in m.parameters():
            flat = p.view(-1)
            rms = float(flat.double().pow(2).mean().sqrt())
            if rms > 0:  # +-2^k (k: the init's rms), the signs of its first `period` values
                signs = torch.where(flat[:period] < 0, -1.0, 1.0)
                signs = signs.repeat(-(-flat.numel() // period))[:flat.numel()]
                flat.copy_(signs * 2.0 ** round(math.log2(rms)))
    parts = ({"text_encoder": m.text_encoder} if comp == "text_encoder" else
             {"bert": m.bert, "bert_encoder": m.bert_encoder} if comp == "bert" else
             {"predictor": m})
    for entry, mod in parts.items():
        entries.setdefault(entry, {}).update(mod.state_dict())
torch.save(entries, pth)  # port-encoder's --checkpoint (a Kokoro .pth's layout)
np.savez(out + "/weights.npz", **{f"{e}::{k}": v.numpy() for e, sd in entries.items()
                                  for k, v in sd.items()})
for T in lengths:
    for comp in comps:
        inputs = C.example_inputs(comp, cfg, T, T, torch.Generator().manual_seed(1))
        np.savez(f"{out}/in_{comp}{T}.npz", *[a.numpy() for a in inputs])
print(json.dumps({"modules": modules, "entries": {e: len(sd) for e, sd in entries.items()}}))
"""

WORKER = r"""
import json, sys, time
kind, nth = sys.argv[1], int(sys.argv[2])
import numpy as np
if kind == "torch":
    import torch
    torch.set_num_threads(nth)
    from kokoro_lstm.cli import _components as C
    comp, T, npz = sys.argv[3], int(sys.argv[4]), sys.argv[5]
    km, _ = C.kokoro_modules()
    cfg = C.load_config(None)
    if len(sys.argv) > 6:  # --artifacts: the saved weights and inputs
        ckpt = {}
        with np.load(sys.argv[6]) as w:
            for key in w.files:
                entry, name = key.split("::", 1)
                ckpt.setdefault(entry, {})[name] = torch.from_numpy(w[key])
        model = C.build_component(comp, cfg, km, ckpt=ckpt)
        with np.load(npz) as z:
            inputs = tuple(torch.from_numpy(z[f"arr_{i}"]) for i in range(len(z.files)))
    else:
        model = C.build_component(comp, cfg, km, seed=0)
        inputs = C.example_inputs(comp, cfg, T, T, torch.Generator().manual_seed(1))
        np.savez(npz, *[a.numpy() for a in inputs])
    def call():
        with torch.no_grad():
            return model(*inputs)
    def outputs():
        return [t.numpy() for t in call()]
elif kind == "tvm":
    assert "kokoro_lstm" not in sys.modules
    import tvm
    from tvm import relax
    lib, func, npz, loader_dir = sys.argv[3:7]
    sys.path.insert(0, loader_dir)
    import tvm_ffi_loader as L
    try:  # a build with KOKORO_LSTM_BLAS=scipy-openblas32: the library needs its soname
        L.preload_blas()
    except ImportError:
        pass
    if nth > 1:
        tvm.get_global_func("runtime.config_threadpool")(0, nth)
    vm = relax.VirtualMachine(tvm.runtime.load_module(lib), tvm.cpu())
    f = vm[func]
    z = np.load(npz)
    args = [tvm.runtime.tensor(z[f"arr_{i}"]) for i in range(len(z.files))]
    def call():
        return f(*args)
    def outputs():
        r = call()
        try:
            return [t.numpy() for t in r]
        except TypeError:
            return [r.numpy()]
else:  # "ffi": no tvm, no kokoro_lstm: tvm_ffi + libtvm_runtime.so (tvm_ffi_loader.py)
    lib, func, npz, loader_dir, runtime = sys.argv[3:8]
    sys.path.insert(0, loader_dir)
    import tvm_ffi_loader as L
    L.preload_blas()
    f = L.load(lib, func, runtime, threads=nth if nth > 1 else None)
    with np.load(npz) as z:
        arrays = [z[f"arr_{i}"] for i in range(len(z.files))]
    args = [L.tensor(a) for a in arrays]
    assert "kokoro_lstm" not in sys.modules and "tvm" not in sys.modules
    def call():
        return f(*args)
    def outputs():
        return L.to_numpy(call())
call(); call()
info = {}
if kind == "torch":
    info = {"torch": torch.__version__, "threads": torch.get_num_threads(), "modules": km.__name__}
elif kind == "ffi":
    import tvm_ffi
    info = {"tvm_ffi": tvm_ffi.__version__, "blas": L._loaded.get("blas"),
            "tvm_imported": "tvm" in sys.modules, "kokoro_lstm_imported": "kokoro_lstm" in sys.modules}
with open("/proc/self/maps") as maps:  # the shared libraries the call used
    info["libs"] = sorted({l.split()[-1] for l in maps if ".so" in l and any(
        k in l for k in ("blas", "tvm", "gomp", "iomp", "_core", "compiled", "/libs/"))})
print("ready " + json.dumps(info), flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd or cmd[0] == "quit":
        break
    if cmd[0] == "out":  # write one call's outputs
        np.savez(cmd[1], *outputs())
        print("[]", flush=True)
        continue
    ts = []
    for _ in range(int(cmd[1])):
        time.sleep(0.01)
        t0 = time.perf_counter()
        call()
        ts.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps(ts), flush=True)
"""


def _env(nth, pythonpath):
    env = dict(os.environ)
    for v in THREAD_VARS:
        if nth:  # 0: the machine's defaults
            env[v] = str(nth)
    env["PYTHONPATH"] = pythonpath
    return env


class Worker(PipeWorker):
    def __init__(self, argv, env, cwd, python=PY):
        super().__init__([python, "-c", WORKER] + argv, env, cwd, str(argv[:2]))

    def run(self, reps):
        return self.ask(f"run {reps}")

    def outputs(self, path):
        """One call's outputs (written by the worker to ``path``, an .npz)."""
        import numpy as np

        self.ask(f"out {path}")
        with np.load(path) as z:
            return [z[f"arr_{i}"] for i in range(len(z.files))]


def _alternate(workers, rounds, reps):
    """Per worker, the ms of every timed call: ``rounds`` rounds, each worker in turn
    (the order rotating) timing ``reps`` calls; closes the workers."""
    times = {k: [] for k in workers}
    order = list(workers)
    try:
        for i in range(rounds):
            rot = order[i % len(order):] + order[:i % len(order)]
            for k in rot:
                times[k] += workers[k].run(reps)
    finally:
        for w in workers.values():
            w.close()
    return times


def bench(comp, T, nth, trees, rounds, reps, tmp):
    import numpy as np

    built = {}
    for name, path in trees:
        out = os.path.join(tmp, f"{name}_{comp}{T}_{nth}")
        r = subprocess.run([PY, "-c", COMPILE, comp, str(T), str(nth), out], cwd=path,
                           env=_env(nth, path), capture_output=True, text=True, check=True)
        built[name] = json.loads(r.stdout.strip().splitlines()[-1])
    npz = os.path.join(tmp, f"in_{comp}{T}.npz")
    workers = {"torch": Worker(["torch", str(nth), comp, str(T), npz], _env(nth, ROOT), ROOT)}
    empty = tempfile.mkdtemp(dir=tmp)  # no kokoro_lstm importable from here
    for name, _ in trees:
        workers[name] = Worker(["tvm", str(nth), built[name]["library"], built[name]["function"],
                                npz, BENCH_DIR], _env(nth, ""), empty)
    times = _alternate(workers, rounds, reps)
    med = {k: float(np.median(v)) for k, v in times.items()}
    mn = {k: float(min(v)) for k, v in times.items()}
    row = {"component": comp, "length": T, "threads": nth, "torch_ms": med["torch"],
           "torch_min_ms": mn["torch"], "loadavg_1min": os.getloadavg()[0], "trees": {}}
    for name, _ in trees:
        row["trees"][name] = {"compiled_ms": med[name], "compiled_min_ms": mn[name],
                              "ratio": med[name] / med["torch"], "ratio_min": mn[name] / mn["torch"],
                              **{k: built[name][k] for k in ("compile_s", "max_err", "passed",
                                                              "dense_calls")},
                              "runs": times[name]}
    row["torch_runs"] = times["torch"]
    return row


def _lib_name(name, T, nth):
    return f"{name}{T}_t{nth}.so"


def prepare(out, comps, lengths, period=4093, target="llvm", py_version="3.12", log=print):
    """``--prepare``: compile every component and length at 1 thread and at the run-time
    thread count (0), with compressible weights; writes into ``out`` manifest.json,
    bundle.tar.gz (libraries, libtvm_runtime.so, weights.npz, inputs) and the
    apache-tvm-ffi wheel for ``py_version``. Returns the manifest."""
    from importlib.metadata import version

    t_start = time.time()
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="enc-prepare-") as tmp:
        stage = os.path.join(tmp, "bundle")
        os.makedirs(os.path.join(stage, "libs"))
        pth = os.path.join(tmp, "weights.pth")
        env = dict(_env(0, ROOT), **OWN_MODULES)
        r = subprocess.run([PY, "-c", WEIGHTS, stage, str(period), ",".join(comps),
                            ",".join(map(str, lengths)), pth], cwd=ROOT, env=env,
                           capture_output=True, text=True, check=True)
        weights_info = json.loads(r.stdout.strip().splitlines()[-1])
        log(f"weights: {weights_info}")
        libs = []
        for T in lengths:
            for comp in comps:
                for nth in (1, 0):
                    d = os.path.join(tmp, f"{comp}{T}_{nth}")
                    t0 = time.time()
                    r = subprocess.run([PY, "-c", COMPILE, comp, str(T), str(nth), d, pth, target],
                                       cwd=ROOT, env=dict(_env(nth, ROOT), **OWN_MODULES),
                                       capture_output=True, text=True)
                    if r.returncode:
                        raise RuntimeError(f"compile {comp} T={T} threads={nth} failed:\n"
                                           + r.stderr[-3000:])
                    rep = json.loads(r.stdout.strip().splitlines()[-1])
                    name = _lib_name(comp, T, nth)
                    shutil.move(rep.pop("library"), os.path.join(stage, "libs", name))
                    libs.append(dict(component=comp, length=T, threads=nth, file=name, **rep))
                    log(f"compiled {name}: {rep['compile_s']:.1f} s ({time.time() - t0:.0f} s "
                        f"with validation), max err {rep['max_err']:.1e}, passed {rep['passed']}")
                    shutil.rmtree(d)
        r = subprocess.run([PY, "-c", "import tvm.libinfo as l; print(l.find_libtvm_runtime())"],
                           capture_output=True, text=True, check=True)
        shutil.copy(r.stdout.strip().splitlines()[-1], os.path.join(stage, "libtvm_runtime.so"))
        bundle = os.path.join(out, "bundle.tar.gz")
        with tarfile.open(bundle, "w:gz", compresslevel=9) as tf:
            for f in sorted(os.listdir(stage)):
                tf.add(os.path.join(stage, f), arcname=f)
        raw = {f: os.path.getsize(os.path.join(stage, f)) for f in os.listdir(stage)
               if f != "libs"}
        raw["libs"] = sum(os.path.getsize(os.path.join(stage, "libs", f))
                          for f in os.listdir(os.path.join(stage, "libs")))
    ffi = version("apache-tvm-ffi")
    wheels = [f for f in os.listdir(out) if f.startswith("apache_tvm_ffi-") and f.endswith(".whl")]
    tag = "cp" + py_version.replace(".", "")
    if not any(f"-{ffi}-{tag}-" in f for f in wheels):
        for f in wheels:
            os.remove(os.path.join(out, f))
        subprocess.run([PY, "-m", "pip", "download", "-q", "--only-binary=:all:", "--no-deps",
                        "--python-version", py_version, "--platform", "manylinux_2_28_x86_64",
                        f"apache-tvm-ffi=={ffi}", "-d", out], check=True)
    wheel = next(f for f in os.listdir(out) if f.startswith("apache_tvm_ffi-") and tag in f)
    manifest = {"period": period, "target": target, "weights": weights_info,
                "weights_rule": "every float parameter p: 2**round(log2(rms(p))) * sign, the "
                                "signs of its seeded random init's first `period` values, "
                                "repeated (weight_norm folds to the same; compresses)",
                "tvm_ffi_wheel": wheel, "libs": libs, "raw_bytes": raw,
                "bundle_bytes": os.path.getsize(bundle), "cpu": cpu_name(),
                "prepare_s": round(time.time() - t_start, 1)}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def bench_artifacts(comp, T, nth, man, art, rounds, reps, tmp, ffi_python=PY):
    """The alternating comparison for one prebuilt library (``--artifacts``)."""
    import numpy as np

    lib = next(x for x in man["libs"] if x["component"] == comp and x["length"] == T
               and x["threads"] == (1 if nth == 1 else 0))
    npz = os.path.join(art, f"in_{comp}{T}.npz")
    empty = tempfile.mkdtemp(dir=tmp)  # no kokoro_lstm importable from here
    workers = {"torch": Worker(["torch", str(nth), comp, str(T), npz,
                                os.path.join(art, "weights.npz")],
                               dict(_env(nth, ROOT), **OWN_MODULES), ROOT)}
    try:
        workers["compiled"] = Worker(["ffi", str(nth), os.path.join(art, "libs", lib["file"]),
                                      lib["function"], npz, BENCH_DIR,
                                      os.path.join(art, "libtvm_runtime.so")],
                                     _env(nth, ""), empty, python=ffi_python)
        want = workers["torch"].outputs(os.path.join(tmp, "out_torch.npz"))
        got = workers["compiled"].outputs(os.path.join(tmp, "out_compiled.npz"))
    except BaseException:
        for w in workers.values():
            w.close()
        raise
    errs = [float(np.abs(g.astype(np.float64) - w).max()) / max(1.0, float(np.abs(w).max()))
            if g.shape == w.shape else float("inf") for g, w in zip(got, want)]
    times = _alternate(workers, rounds, reps)
    med = {k: float(np.median(v)) for k, v in times.items()}
    mn = {k: float(min(v)) for k, v in times.items()}
    return {"component": comp, "length": T, "threads": nth, "torch_ms": med["torch"],
            "torch_min_ms": mn["torch"], "loadavg_1min": os.getloadavg()[0],
            "trees": {"compiled": {
                "compiled_ms": med["compiled"], "compiled_min_ms": mn["compiled"],
                "ratio": med["compiled"] / med["torch"], "ratio_min": mn["compiled"] / mn["torch"],
                "library": lib["file"], "library_threads": lib["threads"],
                "max_err": max(errs) if errs else float("inf"), "outputs_err": errs,
                "compile_max_err": lib["max_err"], "passed": lib["passed"],
                "compile_s": lib["compile_s"], "dense_calls": lib["dense_calls"],
                "worker": workers["compiled"].info, "runs": times["compiled"]}},
            "torch_worker": workers["torch"].info, "torch_runs": times["torch"]}


def _versions(python):
    return versions(("torch", "numpy", "transformers", "apache-tvm-ffi", "scipy-openblas32"), python)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["kmodel"]:
        import _kmodel
        return _kmodel.main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", default=[],
                   help="NAME=PATH of a source tree (built in place); default: this one")
    p.add_argument("--components", nargs="+", default=["text_encoder", "duration", "f0n", "bert"])
    p.add_argument("--lengths", nargs="+", type=int, default=[64, 512])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--label", default=platform.node() or "host")
    p.add_argument("--prepare", metavar="DIR",
                   help="compile every component and length into DIR (carry it to a machine "
                        "with no TVM) and exit")
    p.add_argument("--period", type=int, default=4093, help="--prepare: weights' sign period")
    p.add_argument("--target", default="llvm", help="--prepare: TVM target")
    p.add_argument("--device-python", default="3.12",
                   help="--prepare: the Python version of the apache-tvm-ffi wheel to fetch")
    p.add_argument("--artifacts", metavar="DIR", help="run from what --prepare wrote")
    p.add_argument("--ffi-python", default=PY,
                   help="--artifacts: the interpreter of the compiled side's worker (it needs "
                        "numpy, tvm_ffi and scipy_openblas32, and must not import tvm)")
    p.add_argument("--out", metavar="DIR", help="where the JSON goes (default benchmarks/results)")
    a = p.parse_args(argv)
    if a.prepare:
        man = prepare(a.prepare, a.components, a.lengths, a.period, a.target, a.device_python)
        print(json.dumps({k: man[k] for k in ("raw_bytes", "bundle_bytes", "tvm_ffi_wheel",
                                              "prepare_s")}))
        return
    trees = [tuple(t.split("=", 1)) for t in a.tree] or [("this", ROOT)]
    trees = [(n, os.path.abspath(pth)) for n, pth in trees]
    rows = []
    t_start = time.time()
    outdir = a.out or os.path.join(ROOT, "benchmarks", "results")
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, f"encoder_procs_{a.label}.json")
    out = {"machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "label": a.label,
                       "isa": isa_flags()},
           "trees": dict(trees), "rounds": a.rounds, "reps": a.reps, "rows": rows}
    with tempfile.TemporaryDirectory(prefix="bench-procs-") as tmp:
        if a.artifacts:
            with open(os.path.join(a.artifacts, "manifest.json")) as f:
                man = json.load(f)
            art = os.path.join(tmp, "bundle")
            with tarfile.open(os.path.join(a.artifacts, "bundle.tar.gz")) as tf:
                tf.extractall(art, filter="data")
            trees = [("compiled", os.path.abspath(a.artifacts))]
            have = {(x["component"], x["length"]) for x in man["libs"]}
            out["trees"] = dict(trees)
            out["versions"] = {"torch_side": _versions(PY),
                               "compiled_side": _versions(a.ffi_python)}
            out["artifacts"] = {k: man[k] for k in man if k != "libs"}
        for T in a.lengths:
            for comp in a.components:
                if a.artifacts and (comp, T) not in have:
                    print(f"{comp} T={T}: not in {a.artifacts}, skipped", flush=True)
                    continue
                for nth in a.threads:
                    if a.artifacts:
                        row = bench_artifacts(comp, T, nth, man, art, a.rounds, a.reps, tmp,
                                              a.ffi_python)
                    else:
                        row = bench(comp, T, nth, trees, a.rounds, a.reps, tmp)
                    rows.append(row)
                    txt = "  ".join(f"{n} {r['compiled_ms']:8.1f} ms ratio {r['ratio']:.2f} "
                                    f"(min {r['ratio_min']:.2f}) err {r['max_err']:.1e}"
                                    for n, r in row["trees"].items())
                    print(f"{comp:13s} T={T:4d} thr={nth}: torch {row['torch_ms']:8.1f} ms  {txt}"
                          f"  load {row['loadavg_1min']:.1f}  [{time.time() - t_start:.0f} s]",
                          flush=True)
                    out["elapsed_s"] = round(time.time() - t_start, 1)
                    with open(path, "w") as f:  # after every row: a run cut short keeps them
                        json.dump(out, f, indent=1)
    names = [n for n, _ in trees]
    print("\n| component | T | threads | PyTorch ms | " +
          " | ".join(f"{n} ms | {n} ratio (min)" for n in names) + " | load |")
    print("|---|---:|---:|---:|" + "---:|---:|" * len(names) + "---:|")
    for r in rows:
        cells = " | ".join(f"{r['trees'][n]['compiled_ms']:.1f} | {r['trees'][n]['ratio']:.2f} "
                           f"({r['trees'][n]['ratio_min']:.2f})" for n in names)
        print(f"| {r['component']} | {r['length']} | {r['threads']} | {r['torch_ms']:.1f} | "
              f"{cells} | {r['loadavg_1min']:.1f} |")
    print(f"\nwritten {path}")


if __name__ == "__main__":
    main()
