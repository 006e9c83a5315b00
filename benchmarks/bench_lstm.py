"""kokoro_lstm vs torch.nn.LSTM vs ONNX Runtime's LSTM op vs the NumPy reference.

Cases (all seq-first [T, B, I] float32 input, H=256, bidirectional):
T in {16, 64, 256, 1024} at B=1, I=640 (T=256 is Kokoro's shape); T=256 with
B in {8, 64}; T=256 with I=512; T=256 with 3 stacked layers. Also kokoro_lstm's
dtype="bfloat16" at the Kokoro shape. Thread counts {1, 2, all usable cores}.

Every implementation is checked against torch before it is timed (ORT and ours
to 1e-4 max-abs, else the run aborts). Timed runs alternate round-robin between
the implementations (the starting one rotates each repetition) after warm-up;
the median is reported. The NumPy float64 reference is slow and is skipped at
T=1024 and B=64.

The machine's limit at B=1 (single- and multi-layer) is
    sum over layers of sgemm(M=T*B, N=4H*D, K=I_layer) at n threads
    + layers * T * (time to stream W_hh, 4H*H*4 bytes, once from cache) * (D if n == 1 else 1)
from kokoro_lstm._core.bench_sgemm / bench_stream (best of --repeat).

Writes benchmarks/results/lstm.json (raw timings + machine), benchmarks/results/lstm.png
and benchmarks/RESULTS.md (sections after the marker line are kept).

    python benchmarks/bench_lstm.py [--quick] [--threads 1,2] [--repeat 15] [--out DIR]
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
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

import kokoro_lstm
from kokoro_lstm import _core, reference

HERE = os.path.dirname(os.path.abspath(__file__))
MARKER = "<!-- extra sections below are kept by bench_lstm.py -->"
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

TABLE_IMPLS = ["ours", "torch", "ort", "ref"]


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

def _ms(v) -> str:
    return "—" if v is None else (f"{v:.3g}" if v < 10 else f"{v:.1f}")


def _ratio(a, b) -> str:
    return "—" if a is None or b is None else f"{a / b:.2f}×"


def markdown_tables(results: list, threads: list) -> list[str]:
    lines = []
    for n in threads:
        rows = [r for r in results if r["threads"] == n]
        lines += [f"### {n} thread{'s' if n > 1 else ''}", "",
                  "| case | ours ms | torch ms | ORT ms | ref ms | torch/ours | ORT/ours | ours alone ms |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            m = r["median_ms"]
            lines.append("| " + " | ".join(
                [r["case"]["name"]] + [_ms(m.get(k)) for k in TABLE_IMPLS]
                + [_ratio(m.get("torch"), m["ours"]), _ratio(m.get("ort"), m["ours"]),
                   _ms(m.get("ours_alone"))]) + " |")
        lines.append("")
        for r in rows:
            lim = r["limit"]
            if lim and r["case"]["name"].endswith("(Kokoro)"):
                lines.append(limit_line(r))
        for r in rows:
            if "ours_bf16" in r["median_ms"]:
                lines.append(bf16_line(r))
        others = [f"{r['case']['name']} {r['limit']['ours_over_limit']:.2f}×"
                  for r in rows if r["limit"] and not r["case"]["name"].endswith("(Kokoro)")]
        if others:
            lines.append(f"- ours/limit at the other B=1 cases: {', '.join(others)}")
        lines.append("")
    return lines


def limit_line(r: dict) -> str:
    lim, c, n = r["limit"], r["case"], r["threads"]
    ours = r["median_ms"]["ours"]
    serial = f" × {lim['serial_directions']} directions" if lim["serial_directions"] > 1 else ""
    return (f"- **Limit** ({c['name']}, {n} thread{'s' if n > 1 else ''}): sgemm {c['T'] * c['B']}×"
            f"{4 * c['H'] * (2 if c['bidirectional'] else 1)}×{c['I']} {lim['gemm_ms']:.3g} ms + "
            f"{c['T']} steps × W_hh stream ({lim['w_hh_bytes'] // lim.get('threads_per_direction', 1) >> 10} KiB "
            f"per thread) {lim['stream_us']:.3g} µs{serial} "
            f"= {lim['limit_ms']:.3g} ms; ours {ours:.3g} ms = **{ours / lim['limit_ms']:.2f}× the limit**")


def bf16_line(r: dict) -> str:
    m, n = r["median_ms"], r["threads"]
    return (f"- **bfloat16** ({r['case']['name']}, {n} thread{'s' if n > 1 else ''}): "
            f"{m['ours_bf16']:.3g} ms vs fp32 {m['ours']:.3g} ms (fp32/bf16 = {m['ours'] / m['ours_bf16']:.2f}×), "
            f"max |err| vs torch fp32 {r['max_abs_err_vs_torch']['ours_bf16']:.2g}")


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


def write_results_md(path: str, doc: dict, png_path: str) -> None:
    kept = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        if MARKER in text:
            kept = text.split(MARKER, 1)[1]
    m = doc["machine"]
    bi = m["build_info"]
    skips = [im.skip_note for im in IMPLS if im.skip_note]
    lines = [
        "# Benchmark results", "",
        "Generated by `benchmarks/bench_lstm.py`; everything above the marker line is rewritten on each run.", "",
        "## LSTM forward: kokoro_lstm vs torch.nn.LSTM vs ONNX Runtime vs NumPy reference", "",
        f"- Date: {doc['date']}",
        f"- Command: `{doc['command']}`" + (" (**--quick smoke run: numbers are not meaningful**)"
                                            if doc["args"]["quick"] else ""),
        f"- Machine: {m['cpu_model']} ({m['caches_per_cpu0']}), {m['usable_cores']} usable cores, {m['platform']}",
        f"- kokoro_lstm {m['kokoro_lstm']} (BLAS {bi.get('blas')}, ISA {bi.get('isa_active')}, "
        f"avx512_bf16 {bi.get('avx512_bf16')}); torch {m['torch']}; onnxruntime {m['onnxruntime']}; "
        f"numpy {m['numpy']}; Python {m['python']}",
        f"- Median of {doc['args']['repeat']} runs after {doc['args']['warmup']} warm-up runs, "
        "alternating round-robin between implementations (starting one rotated each repetition, every other cycle reversed; "
        f"{doc['args']['settle_ms']:g} ms untimed pause before each call); seq-first float32 input, H=256, bidirectional, "
        "B=1 and I=640 unless noted. torch under inference_mode with torch.set_num_threads(n); "
        "ORT: one LSTM node per layer, intra_op_num_threads=n, inter_op_num_threads=1; "
        "the NumPy reference is float64 on one BLAS thread (NumPy's spinning BLAS threads would disturb the next timed run). "
        "'ours alone': the same kokoro_lstm calls timed again with no other runtime in between "
        "(ONNX Runtime's pool keeps spinning, pinned, after a run and takes cores from what runs next).",
        f"- Every implementation matched torch before timing (max-abs ≤ {TOL:g}; bfloat16 ≤ {BF16_TOL:g}). "
        + " ".join(s + "." for s in skips),
        "- Limit = sgemm(M=T·B, N=8H, K=I) at n threads (kokoro_lstm._core.bench_sgemm) + "
        "T × time to stream a thread's share of W_hh (1 MiB per direction, split over the "
        "n/2 threads of a direction) once from cache (bench_stream), × 2 at 1 thread "
        "(directions serial); summed over layers for 3 layers.",
        "", f"![LSTM timings]({os.path.relpath(png_path, os.path.dirname(os.path.abspath(path)))})", "",
    ]
    lines += markdown_tables(doc["results"], doc["threads"])
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n" + MARKER + kept)


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
    ap.add_argument("--threads", default=None, help="comma-separated thread counts (default 1,2,all cores)")
    ap.add_argument("--repeat", type=int, default=None, help="timed repetitions (default 15; >= 10 unless --quick)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up runs per implementation (default 3)")
    ap.add_argument("--settle-ms", type=float, default=60.0,
                    help="untimed sleep before each timed call (lets other pools' spinning threads park; "
                         "ONNX Runtime's spin for ~40 ms after a run)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="directory for lstm.json and lstm.png")
    ap.add_argument("--results-md", default=os.path.join(HERE, "RESULTS.md"),
                    help="markdown summary to (re)write; '' to skip")
    args = ap.parse_args(argv)
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
            print("\n".join(markdown_tables(doc["results"], [n])), flush=True)

    json_path = os.path.join(args.out, "lstm.json")
    png_path = os.path.join(args.out, "lstm.png")
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
    plot(doc["results"], threads, png_path)
    if args.results_md:
        write_results_md(args.results_md, doc, png_path)
    print(f"wrote {json_path}, {png_path}" + (f", {args.results_md}" if args.results_md else ""))


if __name__ == "__main__":
    main()
