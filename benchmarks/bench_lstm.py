"""The LSTM against its peers: kokoro_lstm vs torch.nn.LSTM vs ONNX Runtime's LSTM op
(vs the NumPy float64 reference), H=256, bidirectional, seq-first float32.

In one process (default): T in {16, 64, 256, 1024} at B=1, I=640 (T=256 is Kokoro's
shape); T=256 with B in {8, 64}, with I=512, with 3 layers; kokoro_lstm's bfloat16 at
Kokoro's shape; 1, 2 and all usable cores. Every implementation is checked against torch
first (1e-4 max-abs; bfloat16 5e-2), then timed round-robin with a pause before each call;
medians. Also the machine's limit at B=1 (the input sgemm plus streaming W_hh once per
step, from kokoro_lstm._core.bench_sgemm / bench_stream) and our time as a multiple of it.
Writes lstm.json and lstm.png to --out.

--procs: each runtime in its own worker process (this script with --worker), rounds
alternated between them, a --settle-ms pause before each timed call, every T of
--lengths with every B of --batches (short calls: --batches 1 --lengths 32,256).
Writes lstm_procs.json to --out.

benchmarks/report.py turns the JSON into RESULTS.md.

    python benchmarks/bench_lstm.py [--quick] [--threads 1,2] [--repeat 15] [--out DIR]
    python benchmarks/bench_lstm.py --procs [--batches 16,64] [--lengths 256] [--threads 1,2] [--rounds 15]
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import threadpoolctl
import torch
from onnx import TensorProto, helper, numpy_helper

from _machine import cpu_name
from report import TABLE_IMPLS, lstm_tables

import kokoro_lstm
from kokoro_lstm import _core, reference

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-4  # max-abs vs torch for fp32 implementations (ORT, ours, reference)
BF16_TOL = 5e-2


# ---- cases ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    T: int
    B: int = 1
    I: int = 640
    H: int = 256
    layers: int = 1
    bidirectional: bool = True

    @property
    def D(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def is_kokoro(self) -> bool:
        return (self.T, self.B, self.I, self.H, self.layers, self.D) == (256, 1, 640, 256, 1, 2)


CASES = [
    Case("T=16", 16),
    Case("T=64", 64),
    Case("T=256 (Kokoro)", 256),
    Case("T=1024", 1024),
    Case("T=256 B=8", 256, B=8),
    Case("T=256 B=64", 256, B=64),
    Case("T=256 I=512", 256, I=512),
    Case("T=256 3 layers", 256, layers=3),
]


def make_module(case: Case) -> torch.nn.LSTM:
    torch.manual_seed(0)
    return torch.nn.LSTM(case.I, case.H, num_layers=case.layers,
                         bidirectional=case.bidirectional).eval()


def make_input(case: Case) -> np.ndarray:
    rng = np.random.default_rng(1)
    return rng.standard_normal((case.T, case.B, case.I), dtype=np.float32)


# ---- ONNX Runtime model ----------------------------------------------------------------

def _iofc(a: np.ndarray) -> np.ndarray:
    """PyTorch gate blocks (i, f, g, o) along axis 0 -> ONNX's (i, o, f, c)."""
    i, f, g, o = np.split(a, 4, axis=0)
    return np.concatenate([i, o, f, g], axis=0)


def onnx_lstm_model(module: torch.nn.LSTM) -> onnx.ModelProto:
    """One ONNX LSTM node per layer; Y [T, D, B, H] -> Transpose -> [T, B, D, H]
    -> Reshape -> [T, B, D*H] feeds the next layer. Outputs y, h_n [L*D, B, H], c_n."""
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in module.state_dict().items()}
    L, H, D = module.num_layers, module.hidden_size, 2 if module.bidirectional else 1
    suffixes = ("", "_reverse")[:D]
    has_bias = module.bias
    inits = [numpy_helper.from_array(np.array([0, 0, -1], dtype=np.int64), "shape_TB_")]
    nodes, hs, cs = [], [], []
    cur = "x"
    for l in range(L):
        W = np.stack([_iofc(sd[f"weight_ih_l{l}{s}"]) for s in suffixes])  # [D, 4H, I]
        R = np.stack([_iofc(sd[f"weight_hh_l{l}{s}"]) for s in suffixes])  # [D, 4H, H]
        inits += [numpy_helper.from_array(W, f"W{l}"), numpy_helper.from_array(R, f"R{l}")]
        inputs = [cur, f"W{l}", f"R{l}"]
        if has_bias:
            Bb = np.stack([np.concatenate([_iofc(sd[f"bias_ih_l{l}{s}"]), _iofc(sd[f"bias_hh_l{l}{s}"])])
                           for s in suffixes])  # [D, 8H]
            inits.append(numpy_helper.from_array(Bb, f"B{l}"))
            inputs.append(f"B{l}")
        nodes.append(helper.make_node(
            "LSTM", inputs, [f"Y{l}", f"Yh{l}", f"Yc{l}"], hidden_size=H,
            direction="bidirectional" if D == 2 else "forward"))
        nodes.append(helper.make_node("Transpose", [f"Y{l}"], [f"Yt{l}"], perm=[0, 2, 1, 3]))
        out = "y" if l == L - 1 else f"x{l + 1}"
        nodes.append(helper.make_node("Reshape", [f"Yt{l}", "shape_TB_"], [out]))
        hs.append(f"Yh{l}")
        cs.append(f"Yc{l}")
        cur = out
    nodes.append(helper.make_node("Concat", hs, ["h_n"], axis=0))
    nodes.append(helper.make_node("Concat", cs, ["c_n"], axis=0))
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "lstm",
        [helper.make_tensor_value_info("x", f32, ["T", "B", module.input_size])],
        [helper.make_tensor_value_info("y", f32, ["T", "B", D * H]),
         helper.make_tensor_value_info("h_n", f32, [L * D, "B", H]),
         helper.make_tensor_value_info("c_n", f32, [L * D, "B", H])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


# ---- implementations (registry) --------------------------------------------------------
# build(case, module, x, threads) -> run; run() returns (out, h_n, c_n) as arrays or tensors.

@dataclass
class Impl:
    key: str
    label: str
    build: Callable
    tol: float = TOL
    applies: Callable[[Case], bool] = lambda case: True
    skip_note: str = ""


IMPLS: list[Impl] = []


def implementation(key, label, **kw):
    def register(build):
        IMPLS.append(Impl(key, label, build, **kw))
        return build
    return register


def _ours(dtype):
    def build(case, module, x, n):
        m = kokoro_lstm.LSTM.from_torch(module, dtype=dtype, num_threads=n)

        def run():
            out, (h, c) = m(x)
            return out, h, c
        return run
    return build


implementation("ours", "kokoro_lstm")(_ours("float32"))


@implementation("torch", "torch")
def _build_torch(case, module, x, n):
    xt = torch.from_numpy(x)

    def run():
        out, (h, c) = module(xt)
        return out, h, c
    return run


@implementation("ort", "ORT")
def _build_ort(case, module, x, n):
    so = ort.SessionOptions()
    so.intra_op_num_threads = n
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(onnx_lstm_model(module).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    feed = {"x": x}
    return lambda: sess.run(None, feed)


@implementation("ref", "NumPy ref", applies=lambda c: c.T < 1024 and c.B < 64,
                skip_note="NumPy reference skipped at T=1024 and B=64 (too slow)")
def _build_ref(case, module, x, n):
    params = {k: v.detach().numpy().astype(np.float64) for k, v in module.state_dict().items()}
    x64 = x.astype(np.float64)

    def run():
        # NumPy's OpenBLAS threads busy-wait for tens of ms after a threaded
        # matmul and would steal the cores of whatever is timed next: the
        # reference (an oracle, timed for scale only) runs on one BLAS thread.
        with threadpoolctl.threadpool_limits(1, user_api="blas"):
            out, (h, c) = reference.lstm(x64, params, num_layers=case.layers,
                                         bidirectional=case.bidirectional)
        return out, h, c
    return run


implementation("ours_bf16", "kokoro_lstm bf16", tol=BF16_TOL, applies=lambda c: c.is_kokoro)(
    _ours("bfloat16"))


def _np(a) -> np.ndarray:
    return a.numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def max_abs_err(got, want) -> float:
    return max(float(np.max(np.abs(_np(g).astype(np.float64) - _np(w).astype(np.float64))))
               for g, w in zip(got, want))


# ---- timing ----------------------------------------------------------------------------

def time_round_robin(runs: dict, warmup: int, repeat: int, settle_s: float = 0.0) -> dict:
    """{key: run} -> {key: [seconds]}: each repetition runs every implementation once,
    starting from a different one each time and, every other cycle of starts, in the
    reverse order, so load changes hit them alike and none always follows the same
    neighbour. settle_s: an untimed sleep before each timed call, so that worker
    threads still spin-waiting from the previous implementation (ORT, OpenMP) have
    parked and do not steal cores."""
    keys = list(runs)
    for _ in range(warmup):
        for k in keys:
            runs[k]()
    times = {k: [] for k in keys}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeat):
            s = r % len(keys)
            order = keys[s:] + keys[:s]
            if (r // len(keys)) % 2:
                order.reverse()
            for k in order:
                if settle_s:
                    time.sleep(settle_s)
                t0 = time.perf_counter()
                runs[k]()
                times[k].append(time.perf_counter() - t0)
    finally:
        if gc_was_enabled:
            gc.enable()
    return times


def machine_limit(case: Case, n: int, reps: int) -> dict | None:
    """Lower bound at B=1: the input-projection GEMMs plus streaming W_hh once per step."""
    if case.B != 1:
        return None
    gemm = sum(_core.bench_sgemm(case.T * case.B, 4 * case.H * case.D,
                                 case.I if l == 0 else case.D * case.H, n, reps)
               for l in range(case.layers))
    # Directions run in parallel when n >= D; each direction's threads split
    # W_hh by hidden units (B < 16), so each streams its 1/p share per step.
    w_hh_bytes = 4 * case.H * case.H * 4
    p = max(1, n // case.D)
    stream = _core.bench_stream(w_hh_bytes // p, max(reps, 20))
    serial = case.D if n < case.D else 1
    rec = case.layers * case.T * stream * serial
    return {"gemm_ms": gemm * 1e3, "stream_us": stream * 1e6, "w_hh_bytes": w_hh_bytes,
            "threads_per_direction": p,
            "serial_directions": serial, "recurrent_ms": rec * 1e3, "limit_ms": (gemm + rec) * 1e3,
            "stat": "best of reps"}


def bench_case(case: Case, n: int, warmup: int, repeat: int, settle_s: float) -> dict:
    module = make_module(case)
    x = make_input(case)
    impls = [im for im in IMPLS if im.applies(case)]
    runs = {im.key: im.build(case, module, x, n) for im in impls}
    want = runs["torch"]()
    errors = {}
    for im in impls:
        if im.key == "torch":
            continue
        errors[im.key] = err = max_abs_err(runs[im.key](), want)
        if err > im.tol:
            raise SystemExit(f"{im.label} differs from torch by {err:.3g} (> {im.tol:g}) at "
                             f"{case.name}, {n} thread(s): aborting")
    times = time_round_robin(runs, warmup, repeat, settle_s)
    # The same calls with no other runtime in between: other pools' threads that
    # keep spinning after their run (ONNX Runtime's do, pinned) take cores from
    # whatever is timed next, which the round-robin medians include.
    times["ours_alone"] = time_round_robin({"ours": runs["ours"]}, 1, repeat, settle_s)["ours"]
    res = {"case": asdict(case) | {"name": case.name}, "threads": n, "max_abs_err_vs_torch": errors,
           "times_ms": {k: [t * 1e3 for t in v] for k, v in times.items()},
           "median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()},
           "min_ms": {k: min(v) * 1e3 for k, v in times.items()}}
    res["limit"] = lim = machine_limit(case, n, max(repeat, 5))
    if lim:
        lim["ours_over_limit"] = res["median_ms"]["ours"] / lim["limit_ms"]
    return res


# ---- machine ---------------------------------------------------------------------------

def _caches() -> str:
    base = "/sys/devices/system/cpu/cpu0/cache"
    parts = []
    try:
        for d in sorted(os.listdir(base)):
            if not d.startswith("index"):
                continue
            rd = lambda f: open(os.path.join(base, d, f)).read().strip()  # noqa: E731
            kind = rd("type")
            if kind == "Instruction":
                continue
            parts.append(f"L{rd('level')}{'d' if kind == 'Data' else ''} {rd('size')}")
    except OSError:
        pass
    return ", ".join(parts)


def machine_info() -> dict:
    return {
        "cpu_model": cpu_name("unknown"),
        "caches_per_cpu0": _caches(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "logical_cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "kokoro_lstm": kokoro_lstm.__version__,
        "build_info": kokoro_lstm.build_info(),
        "torch": torch.__version__,
        "onnxruntime": ort.__version__,
        "onnx": onnx.__version__,
        "numpy": np.__version__,
    }


# ---- reporting -------------------------------------------------------------------------

def plot(results: list, threads: list, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = TABLE_IMPLS + ["ours_bf16"]
    labels = {im.key: im.label for im in IMPLS}
    colors = {"ours": "#1f77b4", "ours_bf16": "#9ecae1", "torch": "#d62728", "ort": "#2ca02c",
              "ref": "#7f7f7f"}
    fig, axes = plt.subplots(len(threads), 1, figsize=(11, 3.8 * len(threads)), squeeze=False)
    width = 0.8 / len(keys)
    for ax, n in zip(axes[:, 0], threads):
        rows = [r for r in results if r["threads"] == n]
        xs = np.arange(len(rows))
        for j, k in enumerate(keys):
            vals = [r["median_ms"].get(k, np.nan) for r in rows]
            ax.bar(xs + (j - (len(keys) - 1) / 2) * width, vals, width, label=labels[k], color=colors[k])
        lims = [r["limit"]["limit_ms"] if r["limit"] else np.nan for r in rows]
        ax.scatter(xs, lims, marker="_", s=900, color="black", zorder=3, label="machine limit")
        ax.set_yscale("log")
        ax.set_xticks(xs, [r["case"]["name"] for r in rows], fontsize=9)
        ax.set_ylabel("median ms (log)")
        ax.set_title(f"{n} thread{'s' if n > 1 else ''}")
        ax.grid(axis="y", which="both", alpha=0.3)
    fig.suptitle("LSTM forward, H=256, bidirectional (B=1, I=640 unless noted); median ms, lower is better")
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, ncol=len(names), fontsize=9, loc="upper center", bbox_to_anchor=(0.5, 0.955),
               frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- each runtime in its own process (--procs) -------------------------------------------

PROC_RUNTIMES = ["ours", "torch", "ort"]


def procs_worker(runtime: str, T: int, B: int, n: int) -> None:
    """A --procs worker: reads 'check PATH' (writes the output as .npy), 'time SETTLE'
    (one timed call after a pause; prints seconds) or 'quit' from stdin."""
    torch.set_num_threads(n)
    case = Case(f"T={T} B={B}", T, B=B)
    module = make_module(case)
    x = make_input(case)
    build = {"ours": _ours("float32"), "torch": _build_torch, "ort": _build_ort}[runtime]
    with torch.inference_mode():
        run = build(case, module, x, n)
        for _ in range(2):
            run()
        print("ready", flush=True)
        for line in sys.stdin:
            cmd = line.split()
            if not cmd or cmd[0] == "quit":
                break
            if cmd[0] == "check":
                np.save(cmd[1], _np(run()[0]))
                print("ok", flush=True)
            elif cmd[0] == "time":
                time.sleep(float(cmd[1]))
                t0 = time.perf_counter()
                run()
                print(time.perf_counter() - t0, flush=True)


def bench_procs(T: int, B: int, n: int, rounds: int, settle: float, tmp: str) -> dict:
    """One worker per runtime; outputs checked against torch, then rounds alternated,
    each starting from another worker so that a neighbour's load hits them alike."""
    env = dict(os.environ, OMP_NUM_THREADS=str(n))
    procs = {r: subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", r, "--T", str(T),
                                  "--B", str(B), "--n", str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=env) for r in PROC_RUNTIMES}

    def ask(r, cmd):
        procs[r].stdin.write(cmd + "\n")
        procs[r].stdin.flush()
        return procs[r].stdout.readline().strip()

    try:
        for r in PROC_RUNTIMES:
            assert procs[r].stdout.readline().strip() == "ready", r
        outs = {}
        for r in PROC_RUNTIMES:
            path = os.path.join(tmp, f"bench_lstm_{os.getpid()}_{r}.npy")
            assert ask(r, f"check {path}") == "ok"
            outs[r] = np.load(path)
            os.remove(path)
        err = {r: float(np.max(np.abs(outs[r] - outs["torch"]))) for r in PROC_RUNTIMES}
        if max(err.values()) > TOL:
            raise SystemExit(f"T={T} B={B} n={n}: outputs differ from torch: {err}")
        times = {r: [] for r in PROC_RUNTIMES}
        for i in range(rounds):
            s = i % len(PROC_RUNTIMES)
            for r in PROC_RUNTIMES[s:] + PROC_RUNTIMES[:s]:
                times[r].append(float(ask(r, f"time {settle}")))
    finally:
        for p in procs.values():
            try:
                p.stdin.write("quit\n")
                p.stdin.flush()
            except OSError:
                pass
            p.wait()
    res = {"T": T, "B": B, "threads": n, "max_abs_vs_torch": err, "times_s": times, "ms": {}}
    for r in PROC_RUNTIMES:
        t = times[r]
        res["ms"][r] = {"median": statistics.median(t) * 1e3, "min": min(t) * 1e3,
                        "spread": max(t) / min(t) - 1.0}
    return res


def main_procs(args) -> None:
    import tempfile
    results = []
    shapes = [(t, b) for t in map(int, args.lengths.split(",")) for b in map(int, args.batches.split(","))]
    with tempfile.TemporaryDirectory() as tmp:
        for T, B in shapes:
            for n in parse_threads(args.threads or "1,2"):
                r = bench_procs(T, B, n, args.rounds, args.settle_ms / 1e3, tmp)
                results.append(r)
                ms = r["ms"]
                peer = min(ms["torch"]["median"], ms["ort"]["median"])
                print(f"T={T:4d} B={B:3d} threads={n}: " + "  ".join(
                    f"{k} {v['median']:7.1f} ms (min {v['min']:7.1f}, spread {v['spread'] * 100:3.0f}%)"
                    for k, v in ms.items()) + f"  faster peer / ours = {peer / ms['ours']['median']:.2f}x",
                    flush=True)
    info = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "load_before": os.getloadavg(), "torch": torch.__version__,
            "onnxruntime": ort.__version__, "numpy": np.__version__,
            "kokoro_lstm": kokoro_lstm.__version__, "rounds": args.rounds,
            "settle_s": args.settle_ms / 1e3, "case": {"I": 640, "H": 256, "bidirectional": True}}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "lstm_procs.json")
    with open(path, "w") as f:
        json.dump({"machine": info, "results": results}, f, indent=1)
    print(f"wrote {path}")


# ---- main ------------------------------------------------------------------------------

def parse_threads(s: str | None) -> list[int]:
    if s:
        ts = [int(t) for t in s.split(",") if t.strip()]
    else:
        ts = [1, 2, len(os.sched_getaffinity(0))]
    if any(t < 1 for t in ts):
        raise argparse.ArgumentTypeError("thread counts must be >= 1")
    return sorted(set(ts))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 repetitions, 1 warm-up")
    ap.add_argument("--threads", default=None,
                    help="comma-separated thread counts (default 1,2,all cores; --procs: 1,2)")
    ap.add_argument("--repeat", type=int, default=None, help="timed repetitions (default 15; >= 10 unless --quick)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up runs per implementation (default 3)")
    ap.add_argument("--settle-ms", type=float, default=None,
                    help="untimed sleep before each timed call, so that other pools' spinning threads "
                         "park (ONNX Runtime's spin for ~40 ms after a run); default 60, --procs 50")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="directory for the JSON (and lstm.png)")
    ap.add_argument("--procs", action="store_true", help="each runtime in its own process")
    ap.add_argument("--batches", default="16,64", help="--procs: batch sizes")
    ap.add_argument("--lengths", default="256", help="--procs: sequence lengths (every T with every B)")
    ap.add_argument("--rounds", type=int, default=15, help="--procs: timed rounds")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--T", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--B", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        procs_worker(args.worker, args.T, args.B, args.n)
        return
    if args.settle_ms is None:
        args.settle_ms = 50.0 if args.procs else 60.0
    if args.procs:
        main_procs(args)
        return
    args.repeat = args.repeat or (3 if args.quick else 15)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    if args.repeat < 10 and not args.quick:
        ap.error("--repeat must be >= 10 (use --quick for a smoke run)")
    threads = parse_threads(args.threads)

    os.makedirs(args.out, exist_ok=True)
    doc = {"benchmark": "bench_lstm", "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "command": " ".join(["python", os.path.relpath(__file__, os.getcwd())] + sys.argv[1:]),
           "args": vars(args), "threads": threads, "machine": machine_info(), "results": []}
    print(f"# {doc['machine']['cpu_model']}, {doc['machine']['usable_cores']} cores, threads {threads}, "
          f"repeat {args.repeat}, warmup {args.warmup}", flush=True)
    with torch.inference_mode():
        for n in threads:
            torch.set_num_threads(n)
            for case in CASES:
                t0 = time.perf_counter()
                r = bench_case(case, n, args.warmup, args.repeat, args.settle_ms / 1e3)
                doc["results"].append(r)
                med = "  ".join(f"{k} {v:.3g}" for k, v in r["median_ms"].items())
                print(f"  [{n}t] {case.name:<16} {med} ms  ({time.perf_counter() - t0:.1f} s)",
                      file=sys.stderr, flush=True)
            print("\n".join(lstm_tables(doc["results"], [n])), flush=True)

    json_path = os.path.join(args.out, "lstm.json")
    png_path = os.path.join(args.out, "lstm.png")
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
    plot(doc["results"], threads, png_path)
    print(f"wrote {json_path}, {png_path}; benchmarks/report.py renders RESULTS.md from them")


if __name__ == "__main__":
    main()
