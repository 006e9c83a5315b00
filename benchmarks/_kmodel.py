"""Kokoro's whole KModel end to end: PyTorch's nn.LSTM vs patched (issue 11).

"A patched Kokoro model is never slower than unpatched": ``kokoro.KModel`` (the
``kokoro`` package's own model, Kokoro-82M's config, random weights) runs
``forward_with_tokens(input_ids, ref_s, speed=1)`` under ``torch.inference_mode()``,
once as it is (its six ``nn.LSTM``s are PyTorch's) and once after
``kokoro_lstm.torch_ops.patch_lstm_modules(model)`` (the six run the engine's torch
op). Everything else (ALBERT, convolutions, the iSTFTNet decoder) is the same code.

Offline: the config is ``kokoro_lstm.cli._components.DEFAULT_CONFIG`` plus
Kokoro-82M's ``istftnet`` settings (``kokoro_lstm.cli._decoder.ISTFTNET``) and a
placeholder vocabulary (forward_with_tokens never reads it); a prep process builds
``KModel(config=dict, model=<empty .pth>)`` with ``torch.manual_seed(--seed)`` and
saves its state dicts, which every worker then loads with ``KModel(config=dict,
model=<that .pth>)``: the same weights for both variants.

Frames: random weights make the predicted durations arbitrary (about 25 frames per
token), so by default the duration head ``predictor.duration_proj`` is set to weight 0
and bias logit(k / max_dur): every token then lasts exactly k frames
(``--frames-per-token``, default 3, about real speech: a frame is 600 samples,
25 ms at 24 kHz). The frame count is then ``k * tokens`` for both variants whatever
their rounding, and the predictor's LSTM still runs (its output just no longer moves
the durations). ``--frames-per-token 0`` keeps the random head; the frame counts
are then checked equal across every variant and process. Either way they are in
the JSON. The decoder's noise (``torch.rand``/``randn`` in the source module) is
seeded before the checked call.

Processes, per (tokens, threads): one worker for ``unpatched``, one for
``patched`` and one ``in-process`` worker holding both models (where PyTorch's
OpenMP pool and the engine's pool meet). Each calls ``torch.set_num_threads(n)``
(kokoro_lstm follows torch's count: ``kokoro_lstm._threads``); OMP/MKL/OpenBLAS
thread variables are set to n. Idle workers block on a pipe. In each round every
worker in turn (order rotating) sleeps ``--settle-ms`` then times one call; the
in-process worker times both variants, alternating which goes first. Medians and
minima over ``--rounds``; ratio = unpatched / patched (> 1: patched is faster).

After the check, forward hooks add up the time spent inside the six LSTMs in every
call (microseconds of overhead on calls of 0.1 to 10 s): "six LSTMs ms" is its
median in the separate processes (all of them in the JSON). The JSON also has
each timed call's minor page faults: with glibc's default allocator the decoder's
large activations are mmap'd and unmapped every call (~300k faults, ~1.2 GB touched
anew, at 64 tokens), a large and variable share of the time on a VM;
``--keep-heap`` sets MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ in the workers
so that they reuse their heap (less noise, but not the default allocator).

Check first (before any timing): the first call of each model is seeded and its
audio, durations and every LSTM's output (forward hooks) are compared: patched vs
unpatched within the in-process worker and across the two separate processes
(the table's audio max-abs difference; per LSTM in the JSON). The run stops if the
frame counts differ or the audio differs by more than ``--atol`` +
``--rtol`` * max|audio|.

    python benchmarks/bench_encoder.py kmodel                       # 64,128,256 tokens; 1, 2, all cores
    python benchmarks/bench_encoder.py kmodel --tokens 64 --threads 1,2 --rounds 5 --label vm

Writes benchmarks/results/kmodel_<label>.json.

Cost: a call takes seconds (64 tokens: ~3.5 s at 1 thread, ~2 s at 2, ~0.65 s at 16
on a 16-core Xeon; about linear in tokens). Each (tokens, threads) starts three workers
(~8 untimed calls: check and warm-up) and times 4 calls a round, so ~36 calls at 7
rounds: the whole default run is about half an hour on 16 cores. Where one command
may run 10 minutes, split it, one label each: ``--tokens 64``, ``--tokens 128``,
``--tokens 256 --threads 2,16`` and ``--tokens 256 --threads 1 --rounds 5``.

Needs torch, numpy, kokoro_lstm and the ``kokoro`` package (0.9.4) with what
``import kokoro`` and ``KModel(...)`` import: loguru; transformers (for ALBERT only:
AlbertConfig, AlbertModel; a 13.3 MB wheel) with packaging, regex, pyyaml, tqdm,
safetensors, tokenizers; huggingface_hub (kokoro.model imports hf_hub_download) with
httpx2, httpcore2, anyio, idna, h11, truststore; attrs (kokoro.custom_stft). ``misaki``
(kokoro's G2P, imported by ``import kokoro`` through KPipeline, and with it spaCy
and espeak) is not needed for KModel: when it cannot be imported, empty stand-in
modules take its place (``misaki_stubbed`` in the JSON).

On a machine with Python 3.12 + torch (and its own requirements: filelock,
typing-extensions, fsspec, ...) + numpy and no network, these 17 wheels (20 MB,
``pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
manylinux2014_x86_64 ...`` into ``.whl/kmodel/``, which git ignores) are enough:
kokoro 0.9.4, loguru 0.7.3, transformers 5.23.0, huggingface_hub 2.4.0,
tokenizers 0.23.3, safetensors 0.8.0, regex 2026.11.15, pyyaml 6.0.3, tqdm 4.70.1,
packaging 26.3, attrs 26.1.0, httpx2 2.16.2, httpcore2 2.16.2, anyio 4.16.0,
idna 3.20, h11 0.16.0, truststore 0.10.5. Install them, build kokoro_lstm in place,
run::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target /tmp/site .whl/kmodel/*.whl && export PYTHONPATH=/tmp/site
    python3 setup.py -q build_ext --inplace   # no system OpenBLAS: KOKORO_LSTM_BLAS=scipy-openblas32 + its wheel
    python3 benchmarks/bench_encoder.py kmodel --threads 1,2,16 --label xeon16

(the workers import the kokoro_lstm the main process imported, found on sys.path or
else in this checkout, with PYTHONPATH kept.)
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
import tempfile
import time

from _machine import cpu_name
from _procs import PipeWorker, versions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.abspath(__file__)
PY = sys.executable
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
VARIANTS = ("unpatched", "patched")
_KL_PATH = ROOT  # where the workers find kokoro_lstm (main() sets it)


# ---------------------------------------------------------------------------------------
# Model (runs in the prep and worker processes)
# ---------------------------------------------------------------------------------------
def kmodel_config():
    from kokoro_lstm.cli._components import DEFAULT_CONFIG
    from kokoro_lstm.cli._decoder import ISTFTNET

    cfg = json.loads(json.dumps(DEFAULT_CONFIG))
    cfg["istftnet"] = json.loads(json.dumps(ISTFTNET))
    # forward_with_tokens takes token ids; KModel only stores the vocabulary.
    cfg["vocab"] = {chr(0x41 + i): i + 1 for i in range(26)}
    return cfg


def import_kokoro():
    """``kokoro`` with empty stand-ins for ``misaki`` when it is missing (KPipeline's
    G2P: ``import kokoro`` imports it, KModel never uses it)."""
    import types
    import warnings

    stubbed = getattr(sys.modules.get("misaki"), "_bench_kmodel_stub", False)
    try:
        from misaki import en, espeak  # noqa: F401
    except Exception:  # noqa: BLE001 - missing, or one of its many dependencies is
        for k in [k for k in sys.modules if k == "misaki" or k.startswith("misaki.")]:
            del sys.modules[k]
        pkg = types.ModuleType("misaki")
        pkg.__path__ = []
        pkg._bench_kmodel_stub = True
        for sub in ("en", "espeak"):
            m = types.ModuleType("misaki." + sub)
            setattr(pkg, sub, m)
            if sub == "en":
                m.MToken = type("MToken", (), {})  # in KPipeline's annotations
            sys.modules["misaki." + sub] = m
        sys.modules["misaki"] = pkg
        stubbed = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import kokoro
    return kokoro, stubbed


def build_kmodel(cfg, weights):
    import contextlib
    import io
    import warnings

    kokoro, _ = import_kokoro()
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LSTM dropout with 1 layer, weight_norm deprecated
        m = kokoro.KModel(repo_id="hexgrad/Kokoro-82M", config=cfg, model=weights)
    return m.eval()


def prep(cfg_path, out, seed, fpt):
    """Random weights, saved as Kokoro's .pth (one state dict per top-level module)."""
    import torch

    with open(cfg_path) as f:
        cfg = json.load(f)
    empty = out + ".empty.pth"
    torch.save({}, empty)
    torch.manual_seed(seed)
    m = build_kmodel(cfg, empty)
    os.remove(empty)
    stubbed = import_kokoro()[1]
    if fpt > 0:
        lin = m.predictor.duration_proj.linear_layer
        p = fpt / cfg["max_dur"]
        with torch.no_grad():
            lin.weight.zero_()
            lin.bias.fill_(math.log(p / (1.0 - p)))
    keys = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
    torch.save({k: getattr(m, k).state_dict() for k in keys}, out)
    n_lstm = sum(isinstance(x, torch.nn.LSTM) for x in m.modules())
    print(json.dumps({"n_params": sum(p.numel() for p in m.parameters()), "n_lstm": n_lstm,
                      "misaki_stubbed": stubbed}))


def make_inputs(tokens, seed, n_token):
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(1, n_token, (1, tokens), generator=g)
    ids[0, 0] = 0
    ids[0, -1] = 0  # Kokoro's KModel.forward wraps the phonemes in 0 ... 0
    ref_s = torch.randn(1, 256, generator=g) * 0.1
    return ids, ref_s


# ---------------------------------------------------------------------------------------
# Worker
# ---------------------------------------------------------------------------------------
def worker(mode, nth, cfg_path, weights, tokens, seed, settle_s, dump):
    import resource

    import numpy as np
    import torch

    torch.set_num_threads(nth)
    import kokoro_lstm
    from kokoro_lstm import torch_ops

    with open(cfg_path) as f:
        cfg = json.load(f)
    names = VARIANTS if mode == "both" else (mode,)
    models = {}
    for name in names:
        m = build_kmodel(cfg, weights)
        if name == "patched":
            torch_ops.patch_lstm_modules(m)
            n = sum(isinstance(x, torch_ops.KokoroLSTM) for x in m.modules())
            if n != 6:
                raise RuntimeError("expected 6 patched LSTMs, got %d" % n)
        models[name] = m
    ids, ref_s = make_inputs(tokens, seed, cfg["n_token"])

    def call(name):
        with torch.inference_mode():
            return models[name].forward_with_tokens(ids, ref_s, 1)

    # Checked first call: seeded noise, every LSTM's output captured.
    info = {"torch_threads": torch.get_num_threads(),
            "kokoro_lstm_threads": kokoro_lstm.get_num_threads(), "variants": {}}
    PS = torch.nn.utils.rnn.PackedSequence
    for name in names:
        caught, hooks = {}, []
        for mname, mod in models[name].named_modules():
            if isinstance(mod, (torch.nn.LSTM, torch_ops.KokoroLSTM)):
                def hook(mod, args, out, mname=mname):
                    y = out[0]
                    caught[mname] = (y.data if isinstance(y, PS) else y).detach().clone().numpy()
                hooks.append(mod.register_forward_hook(hook))
        torch.manual_seed(seed + 2)
        audio, dur = call(name)
        for h in hooks:
            h.remove()
        audio = audio.detach().float().numpy()
        dur = dur.detach().numpy().astype(np.int64)
        path = "%s_%s.npz" % (dump, name)
        np.savez(path, audio=audio, dur=dur, **{"lstm:" + k: v for k, v in caught.items()})
        info["variants"][name] = {"frames": int(dur.sum()), "samples": int(audio.size),
                                  "finite": bool(np.isfinite(audio).all()), "npz": path,
                                  "lstms": len(caught)}
    # From here on, hooks add up the time spent inside the six LSTMs of each call
    # (a few microseconds per LSTM, against calls of hundreds of ms).
    spent, t_in = {name: [0.0] for name in names}, {}
    for name in names:
        for mod in models[name].modules():
            if isinstance(mod, (torch.nn.LSTM, torch_ops.KokoroLSTM)):
                def pre(mod, args):
                    t_in[id(mod)] = time.perf_counter()

                def post(mod, args, out, acc=spent[name]):
                    acc[0] += time.perf_counter() - t_in[id(mod)]
                mod.register_forward_pre_hook(pre)
                mod.register_forward_hook(post)
    for name in names:  # warm-up
        call(name)
    print("ready " + json.dumps(info), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        ts = {}
        for name in cmd[1].split(","):
            time.sleep(settle_s)
            spent[name][0] = 0.0
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            call(name)
            t1 = time.perf_counter()
            ts[name] = [(t1 - t0) * 1e3, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0,
                        spent[name][0] * 1e3]
        print(json.dumps(ts), flush=True)


# ---------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------
#: --keep-heap: glibc keeps freed memory (no mmap for large blocks, no trim), so calls
#: after the first stop page-faulting their activations in anew.
KEEP_HEAP = {"MALLOC_MMAP_THRESHOLD_": str(1 << 35), "MALLOC_TRIM_THRESHOLD_": str(1 << 36)}


def _env(nth, keep_heap=False):
    env = dict(os.environ)
    if keep_heap:
        env.update(KEEP_HEAP)
    for v in THREAD_VARS:
        env[v] = str(nth)
    env.pop("KOKORO_LSTM_NUM_THREADS", None)  # follow torch.set_num_threads
    pp = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = _KL_PATH + (os.pathsep + pp if pp else "")
    return env


class Worker(PipeWorker):
    def __init__(self, mode, nth, args, a, tmp):
        dump = os.path.join(tmp, "out_%s_%d_%d" % (mode, args["tokens"], nth))
        argv = [PY, HERE, "--_worker", mode, str(nth), args["cfg"], args["weights"],
                str(args["tokens"]), str(a.seed), str(a.settle_ms / 1e3), dump]
        self.mode = mode
        super().__init__(argv, _env(nth, a.keep_heap), ROOT, "%s (threads %d)" % (mode, nth))

    def run(self, names):
        return self.ask("run %s" % ",".join(names))


def _diffs(a_path, b_path):
    import numpy as np

    a, b = np.load(a_path), np.load(b_path)
    out = {"audio_max_abs": float(np.max(np.abs(a["audio"] - b["audio"]))),
           "audio_max": float(np.max(np.abs(a["audio"]))),
           "durations_equal": bool(np.array_equal(a["dur"], b["dur"])), "lstm_max_abs": {}}
    for k in a.files:
        if k.startswith("lstm:"):
            out["lstm_max_abs"][k[5:]] = float(np.max(np.abs(a[k] - b[k])))
    return out


def bench(tokens, nth, a, files, tmp):
    import numpy as np

    args = dict(files, tokens=tokens)
    load0 = os.getloadavg()[0]
    workers = {}
    try:
        for mode in ("unpatched", "patched", "both"):
            workers[mode] = Worker(mode, nth, args, a, tmp)
        # --- check -------------------------------------------------------------------
        vi = {(mode, v): w.info["variants"][v] for mode, w in workers.items()
              for v in w.info["variants"]}
        frames = {"%s/%s" % k: v["frames"] for k, v in vi.items()}
        if len(set(frames.values())) != 1:
            raise RuntimeError("frame counts differ between variants: %s" % frames)
        if a.frames_per_token > 0 and frames["both/unpatched"] != a.frames_per_token * tokens:
            raise RuntimeError("expected %d frames, got %s" % (a.frames_per_token * tokens, frames))
        if not all(v["finite"] for v in vi.values()):
            raise RuntimeError("non-finite audio: %s" % {"%s/%s" % k: v["finite"] for k, v in vi.items()})
        check = {"in_process": _diffs(vi[("both", "unpatched")]["npz"], vi[("both", "patched")]["npz"]),
                 "separate": _diffs(vi[("unpatched", "unpatched")]["npz"], vi[("patched", "patched")]["npz"]),
                 "unpatched_procs": _diffs(vi[("unpatched", "unpatched")]["npz"],
                                           vi[("both", "unpatched")]["npz"])}
        for k in ("in_process", "separate"):
            c = check[k]
            tol = a.atol + a.rtol * c["audio_max"]
            c["tolerance"] = tol
            c["passed"] = bool(c["audio_max_abs"] <= tol and c["durations_equal"])
            if not c["passed"]:
                raise RuntimeError("patched output differs from unpatched (%s): audio max-abs %.3g "
                                   "> %.3g or durations differ" % (k, c["audio_max_abs"], tol))
        # --- timing ------------------------------------------------------------------
        times = {("sep", v): [] for v in VARIANTS}
        times.update({("in", v): [] for v in VARIANTS})
        faults = {k: [] for k in times}
        lstm = {k: [] for k in times}
        order = ["unpatched", "patched", "both"]
        for i in range(a.rounds):
            r = i % len(order)
            for mode in order[r:] + order[:r]:
                if mode == "both":
                    names = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))
                    for k, (t, f, tl) in workers[mode].run(names).items():
                        times[("in", k)].append(t)
                        faults[("in", k)].append(f)
                        lstm[("in", k)].append(tl)
                else:
                    t, f, tl = workers[mode].run([mode])[mode]
                    times[("sep", mode)].append(t)
                    faults[("sep", mode)].append(f)
                    lstm[("sep", mode)].append(tl)
    finally:
        for w in workers.values():
            w.close()
        for mode_v in os.listdir(tmp):
            if mode_v.startswith("out_") and mode_v.endswith(".npz"):
                os.remove(os.path.join(tmp, mode_v))
    med = {k: float(np.median(v)) for k, v in times.items()}
    mn = {k: float(min(v)) for k, v in times.items()}
    w0 = workers["both"].info
    return {
        "tokens": tokens, "threads": nth, "frames": frames["both/unpatched"],
        "samples": vi[("both", "unpatched")]["samples"],
        "torch_threads": w0["torch_threads"], "kokoro_lstm_threads": w0["kokoro_lstm_threads"],
        "unpatched_ms": med[("sep", "unpatched")], "patched_ms": med[("sep", "patched")],
        "unpatched_min_ms": mn[("sep", "unpatched")], "patched_min_ms": mn[("sep", "patched")],
        "ratio": med[("sep", "unpatched")] / med[("sep", "patched")],
        "ratio_min": mn[("sep", "unpatched")] / mn[("sep", "patched")],
        "inproc_unpatched_ms": med[("in", "unpatched")], "inproc_patched_ms": med[("in", "patched")],
        "inproc_unpatched_min_ms": mn[("in", "unpatched")], "inproc_patched_min_ms": mn[("in", "patched")],
        "inproc_ratio": med[("in", "unpatched")] / med[("in", "patched")],
        "inproc_ratio_min": mn[("in", "unpatched")] / mn[("in", "patched")],
        "lstm_ms": {"%s_%s" % k: float(np.median(v)) for k, v in lstm.items()},
        "check": check, "loadavg_1min": [load0, os.getloadavg()[0]],
        "runs": {"%s_%s" % k: v for k, v in times.items()},
        "minor_faults": {"%s_%s" % k: v for k, v in faults.items()},
        "lstm_runs": {"%s_%s" % k: v for k, v in lstm.items()},
    }


def _ints(s):
    return [int(x) for x in s.replace(" ", "").split(",") if x]


def _versions():
    import kokoro_lstm

    out = versions(("torch", "numpy", "kokoro", "transformers", "huggingface_hub", "misaki"))
    out["kokoro_lstm"] = kokoro_lstm.__version__
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--_worker":
        w = argv[1:]
        if w[0] == "prep":
            return prep(w[1], w[2], int(w[3]), int(w[4]))
        return worker(w[0], int(w[1]), w[2], w[3], int(w[4]), int(w[5]), float(w[6]), w[7])
    global _KL_PATH
    try:
        import kokoro_lstm
    except ImportError:  # run from a checkout with the extension built in place
        sys.path.insert(0, ROOT)
        import kokoro_lstm
    # the workers import the kokoro_lstm this process found
    _KL_PATH = os.path.dirname(os.path.dirname(os.path.abspath(kokoro_lstm.__file__)))
    usable = kokoro_lstm._threads.usable_cores()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=_ints, default=[64, 128, 256],
                   help="token counts (comma-separated; ids include the leading/trailing 0)")
    p.add_argument("--threads", type=_ints, default=sorted({1, 2, usable}),
                   help="thread counts (default 1,2 and the usable cores: %(default)s)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--settle-ms", type=float, default=10.0)
    p.add_argument("--frames-per-token", type=int, default=3,
                   help="fix every token's duration to this many frames (0: random head)")
    p.add_argument("--keep-heap", action="store_true",
                   help="workers run with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ set high: "
                        "no page faults per call (less noise; not the default allocator)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--rtol", type=float, default=1e-3, help="times max|audio|")
    p.add_argument("--label", default=platform.node() or "host")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    a = p.parse_args(argv)
    if a.frames_per_token < 0 or a.frames_per_token >= 50:
        p.error("--frames-per-token must be in 0..49")
    if any(t < 3 or t > 510 for t in a.tokens):
        p.error("--tokens must be in 3..510 (ALBERT's 512 positions)")

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-kmodel-") as tmp:
        cfg_path = os.path.join(tmp, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(kmodel_config(), f)
        weights = os.path.join(tmp, "kmodel_random.pth")
        t0 = time.perf_counter()
        r = subprocess.run([PY, HERE, "--_worker", "prep", cfg_path, weights, str(a.seed),
                            str(a.frames_per_token)], env=_env(1), cwd=ROOT, check=True,
                           stdout=subprocess.PIPE, text=True)
        model_info = json.loads(r.stdout.strip().splitlines()[-1])
        print("random KModel: %d parameters, %d LSTMs, weights %.1f MB (%.1f s)"
              % (model_info["n_params"], model_info["n_lstm"], os.path.getsize(weights) / 1e6,
                 time.perf_counter() - t0), flush=True)
        files = {"cfg": cfg_path, "weights": weights}
        for T in a.tokens:
            for nth in a.threads:
                row = bench(T, nth, a, files, tmp)
                rows.append(row)
                c = row["check"]
                print("tokens %4d thr %2d frames %5d: unpatched %8.1f ms patched %8.1f ms "
                      "ratio %.3f (min %.3f) | in-process %.3f (min %.3f) | audio diff %.2g/%.2g "
                      "faults/call %dk/%dk load %.1f" % (
                          T, nth, row["frames"], row["unpatched_ms"], row["patched_ms"],
                          row["ratio"], row["ratio_min"], row["inproc_ratio"],
                          row["inproc_ratio_min"], c["in_process"]["audio_max_abs"],
                          c["separate"]["audio_max_abs"],
                          statistics.median(row["minor_faults"]["sep_unpatched"]) / 1e3,
                          statistics.median(row["minor_faults"]["sep_patched"]) / 1e3, row["loadavg_1min"][1]),
                      flush=True)
    out = {"machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "usable_cores": usable,
                       "platform": platform.platform(), "label": a.label,
                       "kokoro_lstm": kokoro_lstm.build_info(), "versions": _versions()},
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv[1:],
           "tokens": a.tokens, "threads": a.threads, "rounds": a.rounds,
           "settle_ms": a.settle_ms, "keep_heap": a.keep_heap, "frames_per_token": a.frames_per_token, "seed": a.seed,
           "model": model_info, "rows": rows}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "kmodel_%s.json" % a.label)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print()
    print(table(rows))
    print("\nwritten %s" % path)


def table(rows):
    lines = ["| tokens | threads | frames | unpatched ms | patched ms | ratio | ratio (min) "
             "| in-process unpatched / patched ms | in-process ratio (min) | six LSTMs ms, unpatched / patched "
             "| audio max-abs diff | load |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %d | %d | %d | %.1f (%.1f) | %.1f (%.1f) | %.3f | %.3f | %.1f / %.1f | %.3f (%.3f) "
                     "| %.1f / %.1f | %.1e | %.1f |" % (
                         r["tokens"], r["threads"], r["frames"], r["unpatched_ms"],
                         r["unpatched_min_ms"], r["patched_ms"], r["patched_min_ms"], r["ratio"],
                         r["ratio_min"], r["inproc_unpatched_ms"], r["inproc_patched_ms"],
                         r["inproc_ratio"], r["inproc_ratio_min"],
                         r["lstm_ms"]["sep_unpatched"], r["lstm_ms"]["sep_patched"],
                         max(r["check"]["in_process"]["audio_max_abs"],
                             r["check"]["separate"]["audio_max_abs"]),
                         max(r["loadavg_1min"])))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
