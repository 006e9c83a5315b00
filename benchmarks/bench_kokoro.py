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
import json
import math
import os
import platform
import statistics
import subprocess
import sys
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

#: Kokoro-82M's config.json "istftnet" entry (the decoder's settings).
ISTFTNET = {
    "upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6], "gen_istft_hop_size": 5,
    "gen_istft_n_fft": 20, "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "resblock_kernel_sizes": [3, 7, 11], "upsample_initial_channel": 512,
}


# ---------------------------------------------------------------------------------------
# Model, inputs, exports (run in subprocesses: the main process imports no runtime)
# ---------------------------------------------------------------------------------------
def _config():
    from kokoro_lstm.cli._components import DEFAULT_CONFIG

    cfg = json.loads(json.dumps(DEFAULT_CONFIG))
    cfg["istftnet"] = json.loads(json.dumps(ISTFTNET))
    cfg["vocab"] = {chr(0x41 + i): i + 1 for i in range(26)}  # KModel only stores it
    return cfg


def _kmodel(weights, disable_complex=False):
    import contextlib
    import io
    import warnings

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import kokoro

        m = kokoro.KModel(repo_id="hexgrad/Kokoro-82M", config=_config(), model=weights,
                          disable_complex=disable_complex)
    return m.eval().requires_grad_(False)


def prep_weights(path, seed, fpt):
    import torch

    empty = path + ".empty.pth"
    torch.save({}, empty)
    torch.manual_seed(seed)
    m = _kmodel(empty)
    os.remove(empty)
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

    from kokoro.model import KModelForONNX

    m = _kmodel(weights, disable_complex=True)
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


def _importable(mod):
    r = subprocess.run([PY, "-c", "import %s" % mod], capture_output=True, env=_env(0))
    return r.returncode == 0


def prepare(a, notes):
    """Fill --dir with what each runtime needs; returns the runtimes that can run."""
    os.makedirs(a.dir, exist_ok=True)
    ok = {"torch": _importable("kokoro") and _importable("torch")}
    if not ok["torch"]:
        notes.append("torch: skipped (torch or kokoro cannot be imported)")
    weights = os.path.join(a.dir, "weights.pth")
    if not os.path.exists(weights):
        if not ok["torch"]:
            raise SystemExit("no %s and no torch + kokoro to make it" % weights)
        _sub("weights", weights, a.seed, a.frames_per_token)
    ok["ort"] = _importable("onnxruntime")
    if not ok["ort"]:
        notes.append("ort: skipped (onnxruntime cannot be imported)")
    has_tvm = _importable("tvm")
    ok["tvm"] = True
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
                _sub("onnx", weights, inputs, whole, dec)
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
    return [r for r in RUNTIMES if ok[r]]


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
    print("ready " + json.dumps({"seeded": check["seeded"]}), flush=True)
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
           "check": check, "runs": {"%s_%s" % k: v for k, v in times.items()}}
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
            return prep_weights(w[1], int(w[2]), int(w[3]))
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
    p.add_argument("--dir", default=os.path.join(ROOT, ".bench-kokoro"),
                   help="cache of weights, inputs, ONNX files and TVM artifacts")
    p.add_argument("--label", default=platform.node() or "host")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    a = p.parse_args(argv)
    if not 1 <= a.frames_per_token < 50:
        p.error("--frames-per-token must be in 1..49")
    if any(t < 3 or t > 510 for t in a.tokens):
        p.error("--tokens must be in 3..510 (ALBERT's 512 positions)")
    if any(n < 1 for n in a.threads) or a.rounds < 1:
        p.error("--threads and --rounds must be positive")
    want = [r for r in a.runtimes.split(",") if r]
    if not want or any(r not in RUNTIMES for r in want):
        p.error("--runtimes: a comma-separated subset of " + ",".join(RUNTIMES))
    notes = []
    runtimes = [r for r in prepare(a, notes) if r in want]
    for n in notes:
        print("note: " + n, flush=True)
    if not runtimes:
        raise SystemExit("no runtime to run")
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-kokoro-") as tmp:
        for T in a.tokens:
            for nth in a.threads:
                row = bench(T, nth, runtimes, a, tmp)
                rows.append(row)
                print("\n".join(table([row], runtimes).splitlines()[-2:]), flush=True)
    out = {"machine": {"cpu": cpu_name(), "cores": os.cpu_count(),
                       "platform": platform.platform(), "label": a.label,
                       "versions": versions(("torch", "onnxruntime", "apache-tvm",
                                             "apache-tvm-ffi", "kokoro", "numpy"))},
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": argv, "runtimes": runtimes,
           "notes": notes, "tokens": a.tokens, "threads": a.threads, "rounds": a.rounds,
           "frames_per_token": a.frames_per_token, "seed": a.seed, "rows": rows}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "kokoro_%s.json" % a.label)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print()
    print(table(rows, runtimes))
    print("\nwritten %s" % path)


if __name__ == "__main__":
    main()
