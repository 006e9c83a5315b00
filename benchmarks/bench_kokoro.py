"""The whole Kokoro (tokens -> audio) and its decoder alone: compiled with TVM
(port-encoder + port-decoder artifacts) vs PyTorch eager (kokoro.KModel / its Decoder)
vs ONNX Runtime (the legacy torch.onnx.export of KModel and of its decoder, with
disable_complex=True, as kokoro-onnx exports it), each runtime in its own process.

    python benchmarks/bench_kokoro.py                         # 64,256 tokens; 1,2 threads
    python benchmarks/bench_kokoro.py --tokens 64 --threads 1,2,16 --rounds 5 --label xeon16

Model: Kokoro-82M's config, random weights (seeded), duration head set so that every
token lasts exactly ``--frames-per-token`` frames (weight 0, bias logit(k / max_dur)),
so the frame count is k x tokens in every runtime. The tokens are 0 ... 0 around
random ids; ref_s is random. The decoder alone runs on KModel's own decoder inputs
(asr, F0, N, ref_s[:, :128]) for those tokens.

``--dir`` (default ``.bench-kokoro/``, git-ignored) caches what each runtime needs and
can be carried to a machine without TVM: ``weights.pth``, ``inputs_t{T}.npz``, the ONNX
files (exported where torch is) and ``tvm_t{T}/`` (the artifacts, compiled only where
``tvm`` imports; ``port-encoder`` at T tokens, bert at T, f0n at k x T frames;
``port-decoder --seq-len k x T``; run-time thread count). Where ``tvm`` is absent the
compiled worker needs tvm_ffi (the apache-tvm-ffi wheel), ``KOKORO_BENCH_TVM_RUNTIME``
(the wheel's ``libtvm_runtime.so``, carried) and the OpenBLAS the libraries were
linked against (the scipy_openblas32 wheel). A runtime whose pieces are
missing (no ``tvm`` and no artifacts, no ``onnxruntime``, no ``kokoro``) is skipped
with a note in the table and the JSON.

``--prepare DIR`` (here, with TVM; no timing) builds into DIR/stage the weights (Kokoro's
random init made compressible: every parameter +-2^k at its init's scale, the signs of
its first ``--period`` values repeated; the same shapes, scale and work), the inputs and
the artifacts of every ``--tokens``, and packs them with libtvm_runtime.so, the OpenBLAS
the artifacts link (and its libgfortran, libquadmath), and the kokoro, loguru and
apache-tvm-ffi (``--device-python``) wheels into DIR/bundle.tar.gz.00, .01, ... of at
most ``--part-mib`` each (DIR/manifest.json lists them). ``--artifacts DIR`` on the other
machine unpacks the parts to DIR/unpacked, installs the wheels whose modules are missing
into DIR/unpacked/site, exports the ONNX files there with its own torch and runs as
above from DIR/unpacked/stage. KModel needs torch, transformers and huggingface_hub;
kokoro's G2P (misaki) and attrs, which KModel never uses, are stubbed where missing.
The PyTorch worker needs kokoro_lstm built there (Kokoro's config and the noise ops of
the same-noise check); the ONNX Runtime and compiled workers do not.

    python benchmarks/bench_kokoro.py --prepare .bench-kokoro-dev --tokens 64,256
    python3 benchmarks/bench_kokoro.py --artifacts .bench-kokoro-dev --tokens 64,256 \
        --threads 1,2,16 --label h100-host

Workers: one process per runtime and (tokens, threads), its thread count set before
it starts (torch.set_num_threads(n); ORT intra_op_num_threads=n, inter_op 1;
TVM_NUM_THREADS and KOKORO_LSTM_NUM_THREADS = n; OMP/MKL/OpenBLAS variables = n).
The compiled worker loads the libraries with ``tvm_ffi_loader.py`` (tvm_ffi and
libtvm_runtime.so, no ``tvm``) and does the runner's glue (tests/deploy/kokoro_tts.cc)
in NumPy. Idle workers block on a pipe. In each round every worker in turn (order
rotating) sleeps ``--settle-ms`` then times one whole call and one decoder call.
Medians and minima over ``--rounds``; ratios are runtime / PyTorch (< 1: faster).

PyTorch times KModel as kokoro builds it (torch.stft). Check first: every runtime's
frame count and sample count must agree and its audio be finite; the compiled whole
model and decoder run with a seed against PyTorch's KModel(disable_complex=True) (the
STFT as convolutions, as port-decoder compiles it) under
``kokoro_lstm.noise.counter_noise`` with that seed (the same noise): max-abs within
``--atol``. ONNX Runtime draws its own noise: only lengths and finiteness are checked.

Writes benchmarks/results/kokoro_<label>.json.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import statistics
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

from _machine import cpu_name
from _procs import PipeWorker, versions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.abspath(__file__)
BENCH_DIR = os.path.dirname(HERE)
PY = sys.executable
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "TVM_NUM_THREADS", "KOKORO_LSTM_NUM_THREADS")
RUNTIMES = ("torch", "ort", "tvm")
PARTS = ("whole", "decoder")
SEED = 1234  # the noise seed of the checked calls


# ---------------------------------------------------------------------------------------
# Model, inputs, exports (run in subprocesses: the main process imports no runtime)
# ---------------------------------------------------------------------------------------
def _config():
    # the same needs as DEFAULT_CONFIG's import (kokoro_lstm built); the ort and tvm
    # workers never call this, so they still run without kokoro_lstm
    from kokoro_lstm.cli._components import DEFAULT_CONFIG
    from kokoro_lstm.cli._decoder import ISTFTNET

    cfg = json.loads(json.dumps(DEFAULT_CONFIG))
    cfg["istftnet"] = json.loads(json.dumps(ISTFTNET))
    cfg["vocab"] = {chr(0x41 + i): i + 1 for i in range(26)}  # KModel only stores it
    return cfg


#: Modules ``import kokoro`` pulls in that KModel never uses (KPipeline's G2P, an unused
#: import of custom_stft.py): stubbed where they are not installed.
KOKORO_UNUSED = {"misaki": ("en", "espeak"), "attr": ("attr",)}


def _import_kokoro():
    """``import kokoro``; where misaki (KPipeline's G2P) or attrs is not installed, empty
    stand-ins let KModel import; any other missing module is a clear error."""
    import types

    while True:
        try:
            import kokoro

            return kokoro
        except ModuleNotFoundError as e:
            if e.name not in KOKORO_UNUSED or e.name in sys.modules:
                raise SystemExit("kokoro cannot be imported: module %r is missing (KModel "
                                 "needs torch, transformers, huggingface_hub and loguru; "
                                 "--prepare bundles the kokoro and loguru wheels)"
                                 % e.name) from e
            mod = sys.modules[e.name] = types.ModuleType(e.name)
            for child in KOKORO_UNUSED[e.name]:
                sub = types.ModuleType(e.name + "." + child)
                sub.__getattr__ = lambda n: type(n, (), {})  # names used in annotations
                setattr(mod, child, sub)


def _kmodel(weights, disable_complex=False):
    import contextlib
    import io
    import warnings

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kokoro = _import_kokoro()
        m = kokoro.KModel(repo_id="hexgrad/Kokoro-82M", config=_config(), model=weights,
                          disable_complex=disable_complex)
    return m.eval().requires_grad_(False)


def compressible_(module, period):
    """Every float parameter p becomes 2**round(log2(rms(p))) times the signs of its
    random init's first ``period`` values, repeated: the same shapes and scale (so the
    same work), and weight_norm's folded weights repeat too, so the artifacts compress."""
    import torch

    with torch.no_grad():
        for prm in module.parameters():
            flat = prm.view(-1)
            rms = float(flat.double().pow(2).mean().sqrt())
            if rms > 0 and prm.is_floating_point():
                signs = torch.where(flat[:period] < 0, -1.0, 1.0)
                signs = signs.repeat(-(-flat.numel() // period))[:flat.numel()]
                flat.copy_(signs * 2.0 ** round(math.log2(rms)))


def prep_weights(path, seed, fpt, period=0):
    import torch

    empty = path + ".empty.pth"
    torch.save({}, empty)
    torch.manual_seed(seed)
    m = _kmodel(empty)
    os.remove(empty)
    if period:
        compressible_(m, period)
    lin = m.predictor.duration_proj.linear_layer
    p = fpt / _config()["max_dur"]
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.fill_(math.log(p / (1.0 - p)))
    keys = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
    torch.save({k: getattr(m, k).state_dict() for k in keys}, path)


def prep_inputs(weights, tokens, seed, path):
    """ids, ref_s and KModel's decoder inputs for them."""
    import numpy as np
    import torch

    m = _kmodel(weights)
    g = torch.Generator().manual_seed(seed + tokens)
    ids = torch.randint(1, _config()["n_token"], (1, tokens), generator=g)
    ids[0, 0] = ids[0, -1] = 0
    ref_s = torch.randn(1, 256, generator=g) * 0.1
    seen = {}

    def grab(_mod, args):
        seen["args"] = [a.clone() for a in args]

    h = m.decoder.register_forward_pre_hook(grab)
    with torch.inference_mode():
        m.forward_with_tokens(ids, ref_s, 1)
    h.remove()
    asr, F0, N, s = (a.numpy() for a in seen["args"])
    np.savez(path, ids=ids.numpy(), ref_s=ref_s.numpy(), asr=asr, F0=F0, N=N, s=s)


def prep_onnx(weights, inputs, whole_path, decoder_path):
    """KModel (ids, style, speed) -> (waveform, duration) and Decoder(asr, F0, N, s)
    -> audio with the legacy exporter, as kokoro-onnx does (disable_complex=True)."""
    import warnings

    import numpy as np
    import torch

    m = _kmodel(weights, disable_complex=True)  # imports kokoro (_import_kokoro)
    from kokoro.model import KModelForONNX

    z = np.load(inputs)
    ids, ref_s = torch.from_numpy(z["ids"]), torch.from_numpy(z["ref_s"])
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(KModelForONNX(m), (ids, ref_s, torch.tensor(1.0)), whole_path,
                          input_names=["input_ids", "style", "speed"],
                          output_names=["waveform", "duration"], opset_version=17,
                          dynamic_axes={"input_ids": {1: "input_ids_len"},
                                        "waveform": {0: "num_samples"}},
                          do_constant_folding=True, dynamo=False)
        dec = tuple(torch.from_numpy(z[k]) for k in ("asr", "F0", "N", "s"))
        torch.onnx.export(m.decoder, dec, decoder_path, input_names=["asr", "F0", "N", "s"],
                          output_names=["audio"], opset_version=17, do_constant_folding=True,
                          dynamo=False)


def prep_tvm(weights, tokens, frames, out):
    """port-encoder --component all and port-decoder at these static lengths."""
    from kokoro_lstm.cli import port_decoder
    from kokoro_lstm.cli.port_encoder import _Progress, port

    with open(os.devnull, "w") as dn:
        port(["bert", "duration", "f0n", "text_encoder"], ["auto"], seq_len=tokens,
             bert_seq_len=tokens, aligned_len=frames, checkpoint=weights, output_dir=out,
             progress=_Progress(stream=dn))
    rc = port_decoder.main(["--seq-len", str(frames), "--checkpoint", weights,
                            "--output-dir", out])
    if rc != 0:
        raise RuntimeError("port-decoder failed (exit %d)" % rc)


def _sub(*args):
    """A --_prep step in its own process; its output (the exporters' and compilers'
    warnings) is shown only when it fails."""
    r = subprocess.run([PY, HERE, "--_prep", *map(str, args)], cwd=ROOT, env=_env(0),
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("preparing %s failed:\n%s" % (args[0], (r.stdout + r.stderr)[-3000:]))


def _importable(mod, why=None):
    """Whether ``mod`` imports in a fresh process; the last line of its error is appended
    to the list ``why`` where it does not."""
    code = ("from bench_kokoro import _import_kokoro; _import_kokoro()" if mod == "kokoro"
            else "import %s" % mod)
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=_env(0))
    if r.returncode != 0 and why is not None:
        why.append((r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1])
    return r.returncode == 0


def prepare(a, notes, want=RUNTIMES):
    """Fill --dir with what the runtimes in ``want`` need; returns those that can run."""
    os.makedirs(a.dir, exist_ok=True)
    params = {"seed": a.seed, "period": a.period, "frames_per_token": a.frames_per_token}
    ppath = os.path.join(a.dir, "params.json")
    if os.path.exists(ppath):
        with open(ppath) as f:
            had = json.load(f)
        if had != params:
            raise SystemExit("%s holds weights and inputs for %s, not %s: use another --dir "
                             "or remove it" % (a.dir, had, params))
    else:
        with open(ppath, "w") as f:
            json.dump(params, f)
    why = []
    ok = {"torch": _importable("torch", why) and _importable("kokoro", why)}
    if not ok["torch"]:
        notes.append("torch: skipped (%s)" % why[-1])
    weights = os.path.join(a.dir, "weights.pth")
    if not os.path.exists(weights):
        if not ok["torch"]:
            raise SystemExit("no %s and no torch + kokoro to make it" % weights)
        _sub("weights", weights, a.seed, a.frames_per_token, a.period)
    ok["ort"] = "ort" in want and _importable("onnxruntime")
    if not ok["ort"] and "ort" in want:
        notes.append("ort: skipped (onnxruntime cannot be imported)")
    has_tvm = _importable("tvm")
    ok["tvm"] = "tvm" in want
    for T in a.tokens:
        inputs = os.path.join(a.dir, "inputs_t%d.npz" % T)
        if not os.path.exists(inputs):
            _sub("inputs", weights, T, a.seed, inputs)
        whole, dec = (os.path.join(a.dir, "%s_t%d.onnx" % (k, T)) for k in ("kmodel", "decoder"))
        if ok["ort"] and not (os.path.exists(whole) and os.path.exists(dec)):
            if not ok["torch"]:
                ok["ort"] = False
                notes.append("ort: skipped (no ONNX files and no torch + kokoro to export)")
            else:
                try:
                    _sub("onnx", weights, inputs, whole, dec)
                except RuntimeError as e:
                    ok["ort"] = False
                    notes.append("ort: skipped (the ONNX export failed: %s)"
                                 % str(e).strip().splitlines()[-1])
        tdir = os.path.join(a.dir, "tvm_t%d" % T)
        if ok["tvm"] and os.path.exists(os.path.join(tdir, "done")) and not has_tvm:
            if not (_importable("tvm_ffi") and os.environ.get("KOKORO_BENCH_TVM_RUNTIME")):
                ok["tvm"] = False
                notes.append("tvm: skipped (artifacts but no tvm: needs tvm_ffi and "
                             "KOKORO_BENCH_TVM_RUNTIME=path/to/libtvm_runtime.so)")
        if ok["tvm"] and not os.path.exists(os.path.join(tdir, "done")):
            if not has_tvm:
                ok["tvm"] = False
                notes.append("tvm: skipped (no artifacts in %s and no tvm to compile them)"
                             % tdir)
            elif not _importable("kokoro_lstm.cli.port_decoder"):
                ok["tvm"] = False
                notes.append("tvm: skipped (kokoro-lstm port-decoder is missing)")
            else:
                t0 = time.perf_counter()
                _sub("tvm", weights, T, T * a.frames_per_token, tdir)
                with open(os.path.join(tdir, "done"), "w") as f:
                    f.write("%.1f s\n" % (time.perf_counter() - t0))
    return [r for r in RUNTIMES if ok[r] and r in want]


# ---------------------------------------------------------------------------------------
# --prepare / --artifacts: the cache as bundle parts for a machine without TVM
# ---------------------------------------------------------------------------------------
BUNDLE = "bundle.tar.gz"
#: Wheels a machine with torch may lack: kokoro and its logger (from the repo's .whl/ or
#: pip's cache) and apache-tvm-ffi for the device's Python (fetched by pip download).
BUNDLE_WHEELS = ("kokoro", "loguru")
#: Shared libraries the artifacts need that a bare machine may not have, by soname prefix.
BUNDLE_LIBS = ("libopenblas", "libgfortran", "libquadmath", "libscipy_openblas")


class _Parts:
    """A write-only file object that splits what it is given into ``prefix.00``,
    ``prefix.01``, ... of at most ``size`` bytes each."""

    def __init__(self, prefix, size):
        self.prefix, self.size, self.names, self.f, self.left = prefix, size, [], None, 0

    def write(self, b):
        b = memoryview(b).cast("B")
        n_in = len(b)
        while len(b):
            if self.left == 0:
                if self.f:
                    self.f.close()
                self.names.append("%s.%02d" % (self.prefix, len(self.names)))
                self.f, self.left = open(self.names[-1], "wb"), self.size
            n = min(self.left, len(b))
            self.f.write(b[:n])
            self.left -= n
            b = b[n:]
        return n_in

    def close(self):
        if self.f:
            self.f.close()


def _needed_libs(libs):
    """Resolved paths (``ldd``) of the BUNDLE_LIBS the given libraries need, dependencies
    first (the order to preload them)."""
    found = []
    todo = list(libs)
    while todo:
        r = subprocess.run(["ldd", todo.pop()], capture_output=True, text=True, check=True)
        for line in r.stdout.splitlines():
            parts = line.split("=>")
            if len(parts) == 2 and parts[0].strip().startswith(BUNDLE_LIBS):
                path = parts[1].split("(")[0].strip()
                if path not in found:
                    found.insert(0, path)
                    todo.append(path)
    return found


def _wheel(name, dest, py_version):
    """The wheel of installed distribution ``name`` in ``dest`` (from .whl/ of this repo or
    of /work/main, else pip download); returns its file name."""
    import glob
    from importlib.metadata import version

    v = version(name)
    stem = name.replace("-", "_")
    if name == "apache-tvm-ffi":
        tag = "-cp" + py_version.replace(".", "") + "-"
        pats = ["%s-%s-*%s*.whl" % (stem, v, tag)]
    else:
        tag = ""
        pats = ["%s-%s-*.whl" % (stem, v)]
    for d in (dest, os.path.join(ROOT, ".whl"), "/work/main/.whl"):
        hits = [f for pat in pats for f in glob.glob(os.path.join(d, pat))]
        if hits:
            if os.path.dirname(hits[0]) != dest:
                shutil.copy(hits[0], dest)
            return os.path.basename(hits[0])
    cmd = [PY, "-m", "pip", "download", "-q", "--only-binary=:all:", "--no-deps",
           "%s==%s" % (name, v), "-d", dest]
    if tag:
        cmd += ["--python-version", py_version, "--platform", "manylinux_2_28_x86_64"]
    subprocess.run(cmd, check=True)
    return os.path.basename([f for pat in pats for f in glob.glob(os.path.join(dest, pat))][0])


def write_bundle(a, out):
    """``--prepare``: pack --dir's weights, inputs and artifacts for ``a.tokens``, TVM's
    runtime library, the BLAS the artifacts need and the wheels into ``out``/bundle.tar.gz.NN,
    each at most ``a.part_mib`` MiB; returns the manifest (also in the bundle)."""
    import tvm.libinfo

    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        if f.startswith(BUNDLE + "."):
            os.remove(os.path.join(out, f))
    files = ["weights.pth"]  # paths relative to --dir, as the stage keeps them
    libs = []
    for T in a.tokens:
        files.append("inputs_t%d.npz" % T)
        tdir = "tvm_t%d" % T
        for f in sorted(os.listdir(os.path.join(a.dir, tdir))):
            if f.endswith(".so") or f == "done":
                files.append(os.path.join(tdir, f))
                if f.endswith(".so"):
                    libs.append(os.path.join(a.dir, tdir, f))
    runtime = tvm.libinfo.find_libtvm_runtime()
    runtime = runtime if isinstance(runtime, str) else runtime[0]
    preload = _needed_libs(libs)
    with tempfile.TemporaryDirectory(prefix="bench-kokoro-wheels-") as wd:
        wheels = [_wheel(n, wd, a.device_python) for n in BUNDLE_WHEELS + ("apache-tvm-ffi",)]
        man = {"seed": a.seed, "period": a.period, "frames_per_token": a.frames_per_token,
               "tokens": a.tokens, "files": files, "runtime": "libtvm_runtime.so",
               "preload": [os.path.basename(x) for x in preload], "wheels": wheels,
               "raw_bytes": sum(os.path.getsize(os.path.join(a.dir, f)) for f in files),
               "versions": versions(("torch", "apache-tvm", "apache-tvm-ffi", "kokoro")),
               "weights_rule": compressible_.__doc__.split(":")[0].replace("\n    ", " ")}
        mpath = os.path.join(wd, "manifest.json")
        with open(mpath, "w") as f:
            json.dump(man, f, indent=1)
        sink = _Parts(os.path.join(out, BUNDLE), int(a.part_mib * 2 ** 20))
        try:
            with gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=6, mtime=0) as gz, \
                    tarfile.open(fileobj=gz, mode="w|") as tf:
                tf.add(mpath, arcname="manifest.json")
                for f in files:
                    tf.add(os.path.join(a.dir, f), arcname=os.path.join("stage", f))
                tf.add(os.path.realpath(runtime), arcname="libtvm_runtime.so")
                for x in preload:  # the file, under the name the libraries ask for
                    tf.add(os.path.realpath(x), arcname=os.path.join("lib", os.path.basename(x)))
                for w in wheels:
                    tf.add(os.path.join(wd, w), arcname=os.path.join("wheels", w))
        finally:
            sink.close()
    man["parts"] = {os.path.basename(n): os.path.getsize(n) for n in sink.names}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(man, f, indent=1)
    return man


class _Chain:
    """A read-only file object over the bundle parts in order."""

    def __init__(self, names):
        self.names, self.f = list(names), None

    def read(self, n=-1):
        while self.names or self.f:
            if self.f is None:
                self.f = open(self.names.pop(0), "rb")
            b = self.f.read(n)
            if b:
                return b
            self.f.close()
            self.f = None
        return b""


def use_bundle(a):
    """``--artifacts DIR``: unpack DIR/bundle.tar.gz.NN into DIR/unpacked (once per set of
    parts), install the wheels whose modules are missing into DIR/unpacked/site, and point
    --dir, PYTHONPATH, KOKORO_BENCH_TVM_RUNTIME and KOKORO_BENCH_PRELOAD at them."""
    import importlib.util

    names = sorted(os.path.join(a.artifacts, f) for f in os.listdir(a.artifacts)
                   if f.startswith(BUNDLE + "."))
    if not names:
        raise SystemExit("--artifacts %s: no %s.NN parts there (made by --prepare)"
                         % (a.artifacts, BUNDLE))
    up = os.path.join(a.artifacts, "unpacked")
    stamp = json.dumps({os.path.basename(n): os.path.getsize(n) for n in names})
    sfile = os.path.join(up, "parts.json")
    if not (os.path.exists(sfile) and open(sfile).read() == stamp):
        if os.path.exists(up):
            shutil.rmtree(up)
        try:
            with tarfile.open(fileobj=_Chain(names), mode="r|gz") as tf:
                tf.extractall(up, filter="data")
        except (tarfile.TarError, EOFError, OSError) as e:
            raise SystemExit("--artifacts: the bundle parts %s do not unpack (%s): carry "
                             "every part" % ([os.path.basename(n) for n in names], e))
        with open(os.path.join(up, "manifest.json")) as f:
            man = json.load(f)
        site = os.path.join(up, "site")
        missing = {"kokoro": "kokoro", "loguru": "loguru", "apache_tvm_ffi": "tvm_ffi"}
        want = [w for w in man["wheels"]
                if importlib.util.find_spec(missing[w.split("-")[0]]) is None]
        if want:
            subprocess.run([PY, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                            "--no-compile", "--target", site]
                           + [os.path.join(up, "wheels", w) for w in want], check=True)
        with open(sfile, "w") as f:
            f.write(stamp)
    with open(os.path.join(up, "manifest.json")) as f:
        man = json.load(f)
    lacking = [T for T in a.tokens if "inputs_t%d.npz" % T not in man["files"]]
    if lacking:
        raise SystemExit("--artifacts: the bundle has tokens %s, not %s (prepare them)"
                         % (man["tokens"], lacking))
    for k in ("seed", "period", "frames_per_token"):
        setattr(a, k, man[k])
    a.dir = os.path.join(up, "stage")
    site = os.path.join(up, "site")
    if os.path.isdir(site):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [site] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
        sys.path.insert(0, site)
    os.environ["KOKORO_BENCH_TVM_RUNTIME"] = os.path.join(up, man["runtime"])
    os.environ["KOKORO_BENCH_PRELOAD"] = os.pathsep.join(
        os.path.join(up, "lib", x) for x in man["preload"])
    return man


# ---------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------
def _glue_tvm(fns, z, speed=1.0, seed=None):
    """kokoro_tts.cc's glue in NumPy: ids -> audio through the compiled components."""
    import numpy as np

    import tvm_ffi_loader as L

    ids, ref_s = z["ids"], z["ref_s"]
    n = ids.shape[1]
    s = np.ascontiguousarray(ref_s[:, 128:])
    mask = np.zeros((1, n), dtype=bool)
    ln = np.array([n], dtype=np.int64)
    keep = []  # arrays the tensors view

    def t(x):
        x = np.ascontiguousarray(x)
        keep.append(x)
        return L.tensor(x)

    (d_en,) = L.to_numpy(fns["bert"](t(ids), t(np.ones((1, n), np.int64))))
    logits, d = L.to_numpy(fns["duration"](t(d_en), t(s), t(ln), t(mask)))
    dur = (1.0 / (1.0 + np.exp(-logits[0, :n]))).sum(-1, dtype=np.float32) / np.float32(speed)
    pred = np.maximum(1, np.rint(dur)).astype(np.int64)
    tok = np.repeat(np.arange(n), pred)
    F = tok.size
    en = d[0, tok].T[None]
    F0, N = L.to_numpy(fns["f0n"](t(en), t(s), t(np.array([F], np.int64))))
    (t_en,) = L.to_numpy(fns["text_encoder"](t(ids), t(ln), t(mask)))
    asr = t_en[:, :, tok]
    dec_in = [t(asr), t(F0), t(N), t(ref_s[:, :128])]
    if seed is None:
        return L.to_numpy(fns["decoder"](*dec_in))[0], pred
    return L.to_numpy(fns["decoder_seeded"](*dec_in, t(np.array([seed], np.int64))))[0], pred


def worker(runtime, nth, a_dir, tokens, settle_s, dump):
    import numpy as np

    z = dict(np.load(os.path.join(a_dir, "inputs_t%d.npz" % tokens)))
    check = {}
    if runtime == "torch":
        import torch

        torch.set_num_threads(nth)
        m = _kmodel(os.path.join(a_dir, "weights.pth"))
        ids, ref_s = torch.from_numpy(z["ids"]), torch.from_numpy(z["ref_s"])
        dec = [torch.from_numpy(z[k]) for k in ("asr", "F0", "N", "s")]

        def whole():
            with torch.inference_mode():
                return m.forward_with_tokens(ids, ref_s, 1)[0].numpy()

        def decoder():
            with torch.inference_mode():
                return m.decoder(*dec).numpy()

        try:
            from kokoro_lstm.noise import counter_noise
        except ImportError:
            check = {"whole": whole(), "decoder": decoder(), "seeded": False}
        else:
            # the check's model computes the STFT as convolutions, as the compiled
            # decoder does (torch.stft's phase differs where the spectrum is ~0)
            mc = _kmodel(os.path.join(a_dir, "weights.pth"), disable_complex=True)
            with torch.inference_mode(), counter_noise(mc, SEED):
                check = {"whole": mc.forward_with_tokens(ids, ref_s, 1)[0].numpy(),
                         "decoder": mc.decoder(*dec).numpy(), "seeded": True}
            del mc
    elif runtime == "ort":
        import onnxruntime as ort

        o = ort.SessionOptions()
        o.intra_op_num_threads, o.inter_op_num_threads = nth, 1
        sw = ort.InferenceSession(os.path.join(a_dir, "kmodel_t%d.onnx" % tokens), o,
                                  providers=["CPUExecutionProvider"])
        sd = ort.InferenceSession(os.path.join(a_dir, "decoder_t%d.onnx" % tokens), o,
                                  providers=["CPUExecutionProvider"])
        feed_w = {"input_ids": z["ids"], "style": z["ref_s"],
                  "speed": np.array(1.0, np.float32)}
        feed_d = {k: z[k] for k in ("asr", "F0", "N", "s")}

        def whole():
            return sw.run(None, feed_w)[0]

        def decoder():
            return sd.run(None, feed_d)[0]

        check = {"whole": whole(), "decoder": decoder(), "seeded": False}
    else:
        sys.path.insert(0, BENCH_DIR)
        import importlib.util

        import tvm_ffi_loader as L

        rt = os.environ.get("KOKORO_BENCH_TVM_RUNTIME")
        if not rt:  # the wheel's runtime library; tvm itself is not imported
            spec = importlib.util.find_spec("tvm")
            rt = os.path.join(os.path.dirname(spec.origin), "lib", "libtvm_runtime.so")
        import ctypes

        for lib in filter(None, os.environ.get("KOKORO_BENCH_PRELOAD", "").split(os.pathsep)):
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)  # carried BLAS, dependencies first
        try:  # the engine linked into the libraries needs this OpenBLAS's soname
            L.preload_blas()
        except ImportError:
            pass
        tdir = os.path.join(a_dir, "tvm_t%d" % tokens)
        fns = {c: L.load(os.path.join(tdir, "%s_compiled.so" % c), c + "_forward", rt, nth)
               for c in ("bert", "duration", "f0n", "text_encoder")}
        dlib = os.path.join(tdir, "decoder_compiled.so")
        if not os.path.exists(dlib):
            dlib = os.path.join(tdir, "decoder_compiled_seq%d.so" % z["asr"].shape[2])
        fns["decoder"] = L.load(dlib, "decoder_forward", rt, nth)
        fns["decoder_seeded"] = L.load(dlib, "decoder_forward_seeded", rt, nth)
        dec = [L.tensor(np.ascontiguousarray(z[k])) for k in ("asr", "F0", "N", "s")]

        def whole():
            return _glue_tvm(fns, z)[0]

        def decoder():
            return L.to_numpy(fns["decoder"](*dec))[0]

        seed = L.tensor(np.array([SEED], np.int64))
        check = {"whole": _glue_tvm(fns, z, seed=SEED)[0],
                 "decoder": L.to_numpy(fns["decoder_seeded"](*dec, seed))[0], "seeded": True}
    fns_ = {"whole": whole, "decoder": decoder}
    for f in fns_.values():  # warm-up
        f()
    np.savez(dump, whole=np.asarray(check["whole"]).reshape(-1),
             decoder=np.asarray(check["decoder"]).reshape(-1))
    info = {"seeded": check["seeded"], "tvm_imported": "tvm" in sys.modules,
            "kokoro_lstm_imported": "kokoro_lstm" in sys.modules}
    print("ready " + json.dumps(info), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        out = {}
        for part in cmd[1].split(","):
            time.sleep(settle_s)
            t0 = time.perf_counter()
            fns_[part]()
            out[part] = (time.perf_counter() - t0) * 1e3
        print(json.dumps(out), flush=True)


def _env(nth):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, BENCH_DIR] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if nth:
        for v in THREAD_VARS:
            env[v] = str(nth)
    return env


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------
def bench(tokens, nth, runtimes, a, tmp):
    import numpy as np

    workers, dumps = {}, {}
    try:
        for r in runtimes:
            dumps[r] = os.path.join(tmp, "%s_%d_%d.npz" % (r, tokens, nth))
            workers[r] = PipeWorker([PY, HERE, "--_worker", r, str(nth), a.dir, str(tokens),
                                     str(a.settle_ms / 1e3), dumps[r]], _env(nth), ROOT,
                                    "%s (threads %d)" % (r, nth))
        got = {r: dict(np.load(dumps[r])) for r in runtimes}
        check = {}
        for part in PARTS:
            lens = {r: int(got[r][part].size) for r in runtimes}
            if len(set(lens.values())) != 1:
                raise RuntimeError("%s: sample counts differ: %s" % (part, lens))
            for r in runtimes:
                if not np.isfinite(got[r][part]).all():
                    raise RuntimeError("%s: %s audio is not finite" % (part, r))
            check[part] = {"samples": lens[runtimes[0]]}
            if "torch" in got and "tvm" in got and workers["torch"].info["seeded"]:
                e = float(np.max(np.abs(got["tvm"][part] - got["torch"][part])))
                check[part]["tvm_vs_torch_max_abs"] = e
                if e > a.atol:
                    raise RuntimeError("%s: compiled vs PyTorch (same noise) %.3g > %g"
                                       % (part, e, a.atol))
        times = {(r, p): [] for r in runtimes for p in PARTS}
        for i in range(a.rounds):
            order = runtimes[i % len(runtimes):] + runtimes[:i % len(runtimes)]
            for r in order:
                parts = PARTS if i % 2 == 0 else PARTS[::-1]
                for p, ms in workers[r].ask("run " + ",".join(parts)).items():
                    times[(r, p)].append(ms)
    finally:
        for w in workers.values():
            w.close()
    row = {"tokens": tokens, "threads": nth, "frames": tokens * a.frames_per_token,
           "check": check, "workers": {r: w.info for r, w in workers.items()}, "runs": {"%s_%s" % k: v for k, v in times.items()}}
    for (r, p), v in times.items():
        row["%s_%s_ms" % (r, p)] = statistics.median(v)
        row["%s_%s_min_ms" % (r, p)] = min(v)
    for p in PARTS:
        for r in ("ort", "tvm"):
            if r in runtimes and "torch" in runtimes:
                row["%s_%s_ratio" % (r, p)] = row["%s_%s_ms" % (r, p)] / row["torch_%s_ms" % p]
                row["%s_%s_ratio_min" % (r, p)] = (row["%s_%s_min_ms" % (r, p)]
                                                   / row["torch_%s_min_ms" % p])
        if "ort" in runtimes and "tvm" in runtimes:
            row["tvm_ort_%s_ratio" % p] = row["tvm_%s_ms" % p] / row["ort_%s_ms" % p]
    return row


def table(rows, runtimes):
    def cell(r, k):
        return ("%.1f (%.1f)" % (r[k + "_ms"], r[k + "_min_ms"])) if k + "_ms" in r else "-"

    def ratio(r, k):
        return ("%.2f (%.2f)" % (r[k], r[k + "_min"])) if k in r else "-"

    head = ["tokens", "threads", "part"] + ["%s ms (min)" % x for x in runtimes]
    head += ["ort / torch", "tvm / torch", "tvm / ort"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in rows:
        for p in PARTS:
            cells = [str(r["tokens"]), str(r["threads"]), p]
            cells += [cell(r, "%s_%s" % (x, p)) for x in runtimes]
            cells += [ratio(r, "ort_%s_ratio" % p), ratio(r, "tvm_%s_ratio" % p),
                      "%.2f" % r["tvm_ort_%s_ratio" % p] if "tvm_ort_%s_ratio" % p in r else "-"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ints(s):
    return [int(x) for x in s.replace(" ", "").split(",") if x]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--_prep":
        w = argv[1:]
        if w[0] == "weights":
            return prep_weights(w[1], int(w[2]), int(w[3]), int(w[4]))
        if w[0] == "inputs":
            return prep_inputs(w[1], int(w[2]), int(w[3]), w[4])
        if w[0] == "onnx":
            return prep_onnx(*w[1:5])
        return prep_tvm(w[1], int(w[2]), int(w[3]), w[4])
    if argv and argv[0] == "--_worker":
        w = argv[1:]
        return worker(w[0], int(w[1]), w[2], int(w[3]), float(w[4]), w[5])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=_ints, default=[64, 256],
                   help="token counts, the two 0s included (default 64,256)")
    p.add_argument("--threads", type=_ints, default=[1, 2], help="thread counts (default 1,2)")
    p.add_argument("--runtimes", default=",".join(RUNTIMES),
                   help="which of torch, ort, tvm to run (default all that are available)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--settle-ms", type=float, default=10.0)
    p.add_argument("--frames-per-token", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and inputs")
    p.add_argument("--atol", type=float, default=1e-4,
                   help="compiled vs PyTorch audio bound under the same noise")
    p.add_argument("--dir", help="cache of weights, inputs, ONNX files and TVM artifacts "
                                 "(default .bench-kokoro, with --prepare DIR/stage)")
    p.add_argument("--label", default=platform.node() or "host")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    p.add_argument("--prepare", metavar="DIR",
                   help="build here (with TVM) the weights, inputs and artifacts of --tokens "
                        "into DIR/stage and pack them with what a machine without TVM needs "
                        "into DIR/bundle.tar.gz.NN; no timing")
    p.add_argument("--artifacts", metavar="DIR",
                   help="run from the bundle parts --prepare wrote to DIR (unpacked to "
                        "DIR/unpacked; ONNX files exported there where torch is)")
    p.add_argument("--period", type=int,
                   help="sign period of the compressible weights (default 4093 with "
                        "--prepare, else 0: plain random weights)")
    p.add_argument("--part-mib", type=float, default=60.0,
                   help="--prepare: largest bundle part (MiB)")
    p.add_argument("--device-python", default="3.12",
                   help="--prepare: Python version of the apache-tvm-ffi wheel to bundle")
    a = p.parse_args(argv)
    if a.prepare and a.artifacts:
        p.error("--prepare and --artifacts exclude each other")
    if a.period is None:
        a.period = 4093 if a.prepare else 0
    if a.dir is None:
        a.dir = os.path.join(a.prepare, "stage") if a.prepare else os.path.join(
            ROOT, ".bench-kokoro")
    if not 1 <= a.frames_per_token < 50:
        p.error("--frames-per-token must be in 1..49")
    if any(t < 3 or t > 510 for t in a.tokens):
        p.error("--tokens must be in 3..510 (ALBERT's 512 positions)")
    if any(n < 1 for n in a.threads) or a.rounds < 1:
        p.error("--threads and --rounds must be positive")
    want = [r for r in a.runtimes.split(",") if r]
    if not want or any(r not in RUNTIMES for r in want):
        p.error("--runtimes: a comma-separated subset of " + ",".join(RUNTIMES))
    if a.artifacts:
        man = use_bundle(a)
        print("bundle: tokens %s, weights period %d, %s" % (man["tokens"], man["period"],
                                                             a.dir), flush=True)
    notes = []
    if a.prepare:
        got = prepare(a, notes, ("torch", "tvm"))
        if "tvm" not in got:
            raise SystemExit("--prepare: no TVM artifacts: " + "; ".join(notes))
        man = write_bundle(a, a.prepare)
        for name, size in man["parts"].items():
            print("%s  %.1f MiB" % (os.path.join(a.prepare, name), size / 2 ** 20))
        print("raw %.1f MiB; manifest %s" % (man["raw_bytes"] / 2 ** 20,
                                             os.path.join(a.prepare, "manifest.json")))
        return
    runtimes = prepare(a, notes, want)
    for n in notes:
        print("note: " + n, flush=True)
    if not runtimes:
        raise SystemExit("no runtime to run")
    import tempfile

    rows = []
    out = {"machine": {"cpu": cpu_name(), "cores": os.cpu_count(),
                       "platform": platform.platform(), "label": a.label,
                       "versions": versions(("torch", "onnxruntime", "apache-tvm",
                                             "apache-tvm-ffi", "kokoro", "numpy"))},
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": argv, "runtimes": runtimes,
           "notes": notes, "tokens": a.tokens, "threads": a.threads, "rounds": a.rounds,
           "frames_per_token": a.frames_per_token, "seed": a.seed, "period": a.period,
           "bundle": man if a.artifacts else None, "rows": rows}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "kokoro_%s.json" % a.label)
    with tempfile.TemporaryDirectory(prefix="bench-kokoro-") as tmp:
        for T in a.tokens:
            for nth in a.threads:
                row = bench(T, nth, runtimes, a, tmp)
                rows.append(row)
                print("\n".join(table([row], runtimes).splitlines()[-2:]), flush=True)
                with open(path, "w") as f:  # after every row: a run cut short keeps them
                    json.dump(out, f, indent=1)
    print()
    print(table(rows, runtimes))
    print("\nwritten %s" % path)


if __name__ == "__main__":
    main()
