"""The whole Kokoro as TVM CUDA artifacts, built here and run on a GPU machine that has
neither TVM nor network (the lent one): tokens -> audio from tests/deploy/kokoro_tts.cc.

    python tools/gpu_kokoro.py build build-c/gpu-kokoro --tokens 64 [--arch sm_90a]
    python tools/gpu_kokoro.py run build-c/gpu-kokoro --out $OUT      (on the GPU machine)

build: one random KModel (tests/deploy/tts.py, tokens lasting 3-4 frames) whose large
weights are made compressible (tts.compressible_weights) so that the artifacts
xz-compress to a few MB; every encoder component (--seq-len = bert's length = --tokens) and the
decoder at the exact frame count ported with --target cuda; the tokens, the style,
KModel's audio on the CPU under counter_noise(seed), the TVM runtime libraries and
headers, the .pth; libraries and .pth xz-compressed.

run: unpacks, builds the runner with g++, runs it with --device cuda (and --repeat for
the timing), compares the audio with KModel's within --tol, and times PyTorch eager on
the GPU on the same .pth (unpatched, patched), alternated; one JSON in --out.

summary: the runner's and PyTorch's run JSONs as benchmarks/results' file (the GPU ms
by op from the runner's ncu kernels), for benchmarks/report.py's tvm-cuda table.
"""
import argparse
import json
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

SEED = 1234
COMPONENTS = ["bert", "duration", "f0n", "text_encoder"]


def _xz(path):
    with open(path, "rb") as f, lzma.open(path + ".xz", "wb", preset=6) as g:
        shutil.copyfileobj(f, g)
    os.remove(path)


def build(args):
    import torch

    from deploy import tts
    from deploy.artifacts import runtime_libs
    from kokoro_lstm.cli import port_decoder, port_encoder
    from kokoro_lstm.noise import counter_noise

    out = os.path.abspath(args.out)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "art"))
    m = tts.compressible_weights(tts.kmodel(seed=0, frames_per_token=3, jitter=3.0))
    ids, ref_s = tts.inputs(args.tokens, seed=1)
    pred, _ = tts.durations(m, ids, ref_s)
    frames = int(pred.sum())
    ckpt = os.path.join(out, "weights.pth")
    tts.save(m, ckpt)
    target = f"cuda -arch={args.arch}"
    t0 = time.perf_counter()
    port_encoder.port(COMPONENTS, ["auto"], seq_len=args.tokens, bert_seq_len=args.tokens,
                      aligned_len=frames, target=target, checkpoint=ckpt,
                      output_dir=os.path.join(out, "art"))
    enc_s = time.perf_counter() - t0
    port_decoder.port([frames], target=target, checkpoint=ckpt,
                      output_dir=os.path.join(out, "art"))
    dec_s = time.perf_counter() - t0 - enc_s
    with torch.no_grad(), counter_noise(m, SEED):
        audio, dur = m.forward_with_tokens(ids, ref_s, 1.0)
    audio.numpy().astype("<f4").tofile(os.path.join(out, "expected.f32"))
    with open(os.path.join(out, "ids.txt"), "w") as f:
        f.write(",".join(str(int(i)) for i in ids[0]))
    ref_s.numpy().astype("<f4").tofile(os.path.join(out, "ref_s.f32"))
    incs, libs = runtime_libs()
    os.makedirs(os.path.join(out, "lib"))
    for p in libs + [os.path.join(os.path.dirname(libs[1]), "libtvm_runtime_cuda.so")]:
        shutil.copy2(p, os.path.join(out, "lib"))
    for inc in incs:
        shutil.copytree(inc, os.path.join(out, "include"), dirs_exist_ok=True)
    art = os.path.join(out, "art")
    for f in sorted(os.listdir(art)):
        if f.endswith(".so") or f.startswith("libopenblas") or f.startswith("libscipy"):
            _xz(os.path.join(art, f))
    _xz(ckpt)
    meta = {"tokens": args.tokens, "frames": frames, "durations": dur.tolist(), "seed": SEED,
            "arch": args.arch, "compile_s": {"encoder": round(enc_s, 1),
                                            "decoder": round(dec_s, 1)}}
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    print(f"{out}: {args.tokens} tokens, {frames} frames, {size / 1e6:.1f} MB, "
          f"compile {enc_s:.0f} s encoder + {dec_s:.0f} s decoder")


def _unpack(d):
    for root, _, files in os.walk(d):
        for f in files:
            if f.endswith(".xz") and not os.path.exists(os.path.join(root, f[:-3])):
                with lzma.open(os.path.join(root, f)) as src, \
                        open(os.path.join(root, f[:-3]), "wb") as dst:
                    shutil.copyfileobj(src, dst)


def _nvidia_dir(name):
    """A CUDA toolkit's or the system's folder holding ``name``, else the NVIDIA wheels'."""
    import glob

    from kokoro_lstm.tvm._cuda import nvidia_lib_dir

    for pat in ("/usr/local/cuda*/lib64", "/usr/local/cuda*/targets/*/lib",
                "/usr/lib/x86_64-linux-gnu"):
        for d in sorted(glob.glob(pat)):
            if os.path.exists(os.path.join(d, name)):
                return d
    return nvidia_lib_dir(name)


def _torch_eager(d, meta, rounds):
    """PyTorch eager on the GPU on the same weights: median/min ms of forward_with_tokens,
    unpatched and patched (alternated), and the patched audio's gap to the runner's."""
    import numpy as np
    import torch

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from _kmodel import import_kokoro  # misaki stubbed where it is missing
    from deploy import tts
    import kokoro_lstm.torch_ops as ko

    import_kokoro()
    ids = torch.tensor([[int(t) for t in open(os.path.join(d, "ids.txt")).read().split(",")]])
    ref_s = torch.from_numpy(np.fromfile(os.path.join(d, "ref_s.f32"), "<f4")).reshape(1, 256)
    models = {}
    for name in ("eager", "patched"):
        m = tts.kmodel(os.path.join(d, "weights.pth")).cuda()
        if name == "patched":
            ko.patch_lstm_modules(m)
        models[name] = m
    ids, ref_s = ids.cuda(), ref_s.cuda()
    times = {k: [] for k in models}
    with torch.inference_mode():
        for _ in range(2):
            for m in models.values():
                m.forward_with_tokens(ids, ref_s, 1.0)
        for _ in range(rounds):
            for k, m in models.items():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                m.forward_with_tokens(ids, ref_s, 1.0)
                torch.cuda.synchronize()
                times[k].append((time.perf_counter() - t0) * 1e3)
    result = {k: {"median_ms": float(np.median(v)), "min_ms": float(np.min(v)),
                  "runs": len(v)} for k, v in times.items()}
    result["eager_kernels"] = _torch_kernels(models["eager"], ids, ref_s)
    return result


def _torch_kernels(m, ids, ref_s, top=30):
    """PyTorch's GPU kernels in one call of ``m`` (torch.profiler): [name, count, total ms]
    by total time, and the call's kernel total."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        m.forward_with_tokens(ids, ref_s, 1.0)
        torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            r = rows.setdefault(e.name, [0, 0.0])
            r[0] += 1
            r[1] += e.device_time / 1e3
    ranked = sorted(rows.items(), key=lambda kv: -kv[1][1])
    return {"total_ms": round(sum(v[1] for v in rows.values()), 3),
            "launches": sum(v[0] for v in rows.values()),
            "top": [[k[:90], v[0], round(v[1], 3)] for k, v in ranked[:top]]}


def _ncu_kernels(call, env, out, top=200):
    """The runner's GPU kernels (ncu, one synthesis): [name, count, total ms] by total time."""
    import csv
    import io

    if not shutil.which("ncu"):
        return {"error": "no ncu on PATH"}
    cmd = ["ncu", "--clock-control", "none", "--csv", "--metrics", "gpu__time_duration.sum"]
    r = subprocess.run(cmd + call, env=env, capture_output=True, text=True, timeout=400)
    with open(os.path.join(out, "ncu.csv"), "w") as f:
        f.write(r.stdout)
    rows = {}
    text = r.stdout[r.stdout.find('"ID"'):] if '"ID"' in r.stdout else ""
    for row in csv.DictReader(io.StringIO(text)):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0}.get(row["Metric Unit"], 1e-6)
        name = row["Kernel Name"].split("(")[0]
        v = rows.setdefault(name, [0, 0.0])
        v[0] += 1
        v[1] += float(row["Metric Value"].replace(",", "")) * scale
    ranked = sorted(rows.items(), key=lambda kv: -kv[1][1])
    return {"rc": r.returncode, "total_ms": round(sum(v[1] for v in rows.values()), 3),
            "launches": sum(v[0] for v in rows.values()),
            "top": [[k[:90], v[0], round(v[1], 3)] for k, v in ranked[:top]],
            "stderr": r.stderr[-1500:]}


def run(args):
    import numpy as np

    from deploy.artifacts import TTS_SOURCE, runner_command

    d = os.path.abspath(args.dir)
    os.makedirs(args.out, exist_ok=True)
    _unpack(d)
    meta = json.load(open(os.path.join(d, "meta.json")))
    if args.skip_runner:
        result = {"meta": meta, "torch": _torch_eager(d, meta, args.rounds)}
        with open(os.path.join(args.out, "gpu_kokoro.json"), "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps(result["torch"], indent=1))
        return
    lib = os.path.join(d, "lib")
    exe = os.path.join(args.out, "kokoro_tts")
    cmd = runner_command(["g++"], exe, [os.path.join(d, "include")],
                         [os.path.join(lib, "libtvm_ffi.so"), os.path.join(lib, "libtvm_runtime.so")],
                         source=TTS_SOURCE)
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    dirs = [lib, os.path.join(d, "art"), _nvidia_dir("libcudart.so.13")]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(x for x in dirs if x)
    nvrtc = _nvidia_dir("libnvrtc.so.13")
    if nvrtc:
        env["KOKORO_LSTM_NVRTC"] = os.path.join(nvrtc, "libnvrtc.so.13")
    wav = os.path.join(args.out, "gpu.wav")
    call = [exe, os.path.join(d, "art"), "--tokens", "@" + os.path.join(d, "ids.txt"),
            "--style", os.path.join(d, "ref_s.f32"), "-o", wav, "--seed", str(meta["seed"]),
            "--float", "--device", "cuda", "--repeat", str(args.repeat)]
    r = subprocess.run(call, env=env, capture_output=True, text=True, timeout=500)
    result = {"meta": meta, "runner_rc": r.returncode, "runner_stdout": r.stdout[-4000:],
              "runner_stderr": r.stderr[-4000:]}
    if r.returncode == 0:
        b = open(wav, "rb").read()
        got = np.frombuffer(b[b.find(b"data") + 8:], "<f4")
        want = np.fromfile(os.path.join(d, "expected.f32"), "<f4")
        result["audio_samples"] = [int(got.size), int(want.size)]
        if got.size == want.size:
            result["audio_max_abs_err"] = float(np.max(np.abs(got - want)))
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if lines:
            result["runner_timing"] = json.loads(lines[-1])
    if r.returncode == 0:  # decoder_forward: a fresh seed per call, drawn on the GPU
        fresh = [x for x in call if x not in ("--seed", str(meta["seed"]))]
        fresh[fresh.index("--repeat") + 1] = "3"
        rf = subprocess.run(fresh, env=env, capture_output=True, text=True, timeout=300)
        result["fresh_rc"] = rf.returncode
        if rf.returncode == 0:
            b = open(wav, "rb").read()
            other = np.frombuffer(b[b.find(b"data") + 8:], "<f4")
            result["fresh_differs_from_seeded"] = bool(not np.array_equal(other, got))
            result["fresh_finite"] = bool(np.isfinite(other).all())
        else:
            result["fresh_stderr"] = rf.stderr[-2000:]
    if r.returncode == 0 and args.ncu:
        one = call[:call.index("--repeat")] + ["--repeat", "1"]
        result["runner_kernels"] = _ncu_kernels(one, env, args.out)
    if args.rounds:
        try:
            result["torch"] = _torch_eager(d, meta, args.rounds)
        except Exception as e:  # noqa: BLE001 - report and keep the runner's numbers
            result["torch_error"] = f"{type(e).__name__}: {e}"
    with open(os.path.join(args.out, "gpu_kokoro.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if not k.startswith("runner_std")},
                     indent=1)[:3000])
    print(r.stderr[-2000:])


#: the runner's kernels by op (the first pattern a kernel name contains), in the table's order
OPS = (("the engine's convolutions and products", ("kl_conv",)), ("TVM's matmul", ("matmul",)),
       ("instance_norm + AdaIN + Snake", ("instance_norm",)),
       ("TVM's conv1d_transpose (depthwise)", ("conv1d_transpose",)),
       ("the engine's LSTM", ("kl_lstm", "kl_gemm")))


def _by_op(kernels):
    """[{op, launches, ms}] of the runner's ncu kernels grouped by :data:`OPS`, the rest last."""
    rows = {name: [0, 0.0] for name, _ in OPS + (("the rest", ()),)}
    for name, n, ms in kernels["top"]:
        op = next((o for o, pats in OPS if any(p in name for p in pats)), "the rest")
        rows[op][0] += n
        rows[op][1] += ms
    rest = kernels["total_ms"] - sum(v[1] for v in rows.values())
    rows["the rest"][1] += max(0.0, rest)  # kernels past ncu's top list
    return [{"op": k, "launches": v[0], "ms": round(v[1], 3)} for k, v in rows.items() if v[0]]


def summary(args):
    runner = json.load(open(args.runner))
    torch_run = json.load(open(args.torch))["torch"]
    meta, timing = runner["meta"], runner["runner_timing"]
    kernels = runner.get("runner_kernels")  # run --ncu
    calls = sorted(timing["calls_ms"][1:])  # after the first (NVRTC, graph capture)
    eager_k = torch_run["eager_kernels"]
    out = {
        "question": "the whole Kokoro from TVM CUDA artifacts (kokoro_tts --device cuda) vs "
                    "PyTorch eager, same weights",
        "device": args.device, "driver": args.driver, "torch": args.torch_version,
        "date": args.date, "commit": args.commit,
        "script": f"tools/gpu_kokoro.py (build here: --tokens {meta['tokens']} --arch "
                  f"{meta['arch']}; run on the GPU machine)",
        "tokens": meta["tokens"], "frames": meta["frames"],
        "compile_s_2core_vm": meta["compile_s"],
        "audio_max_abs_err_vs_kmodel_cpu": runner["audio_max_abs_err"],
        "fresh_noise_differs": runner.get("fresh_differs_from_seeded"),
        "rows": [
            {"variant": "TVM CUDA artifacts (kokoro_tts --device cuda)",
             "median_ms": round(statistics.median(calls), 3),
             "min_ms": round(calls[0], 3), "runs": len(calls),
             "gpu_ms": kernels and kernels["total_ms"], "launches": kernels and kernels["launches"]},
            {"variant": "PyTorch eager", "median_ms": round(torch_run["eager"]["median_ms"], 3),
             "min_ms": round(torch_run["eager"]["min_ms"], 3), "runs": torch_run["eager"]["runs"],
             "gpu_ms": eager_k["total_ms"], "launches": eager_k["launches"]},
            {"variant": "PyTorch eager, LSTMs patched",
             "median_ms": round(torch_run["patched"]["median_ms"], 3),
             "min_ms": round(torch_run["patched"]["min_ms"], 3),
             "runs": torch_run["patched"]["runs"], "gpu_ms": None, "launches": None}],
        "runner_stage_ms": timing["stage_ms"],
        "runner_first_call_ms": timing["calls_ms"][0],
        "runner_gpu_by_op": _by_op(kernels) if kernels else None,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out["rows"], indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("out")
    b.add_argument("--tokens", type=int, default=64)
    b.add_argument("--arch", default="sm_90a")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--out", default="build-c/gpu")
    r.add_argument("--repeat", type=int, default=10)
    r.add_argument("--rounds", type=int, default=10)
    r.add_argument("--ncu", action="store_true", help="the runner's kernels by ncu")
    r.add_argument("--skip-runner", action="store_true", help="PyTorch eager only")
    m = sub.add_parser("summary")
    m.add_argument("runner", help="run's gpu_kokoro.json (with --ncu: the GPU ms by op)")
    m.add_argument("torch", help="run --skip-runner's gpu_kokoro.json")
    m.add_argument("--out", required=True)
    for k in ("device", "driver", "torch-version", "date", "commit"):
        m.add_argument("--" + k, required=True)
    args = ap.parse_args()
    {"build": build, "run": run, "summary": summary}[args.cmd](args)


if __name__ == "__main__":
    main()
