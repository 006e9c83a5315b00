"""Generate benchmarks/RESULTS.md, and the tables of README.md and docs/*.md, from the
JSON files in benchmarks/results/.

RESULTS.md holds one section per question and machine, each rendered from the newest
JSON of that question (SOURCES below). In README.md and docs/*.md, each block between
``<!-- report.py: NAME -->`` and ``<!-- end report.py: NAME -->`` is what DOC_BLOCKS[NAME]
renders, so prose never copies a number by hand. Edit this file, not the outputs.

    python benchmarks/report.py [--results DIR] [--out FILE] [--check]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE_IMPLS = ["ours", "torch", "ort", "ref"]
TOL, BF16_TOL = 1e-4, 5e-2  # bench_lstm.py's checks against torch before timing

# (renderer, title, files): the tables RESULTS.md shows, newest JSON of each question.
SOURCES = [
    ("lstm", "LSTM vs peers in one process: the project machine", ["lstm.json"]),
    ("procs", "LSTM vs peers, each runtime in its own process: Zen 4, 2 cores (2026-11-24)",
     ["short_zen4_1124.json", "batch_zen4_1124.json"]),
    ("procs", "LSTM vs peers, each runtime in its own process: 16-core Xeon, run 1 (2026-11-24)",
     ["short_xeon16_r1_1124.json", "batch_xeon16_r1_1124.json"]),
    ("procs", "LSTM vs peers, each runtime in its own process: 16-core Xeon, run 2 (same lease)",
     ["short_xeon16_r2_1124.json", "batch_xeon16_r2_1124.json"]),
    ("encoder", "The ported encoder vs PyTorch eager: Zen 4, 2 cores",
     ["encoder_procs_zen4-2core.json", "encoder_procs_zen4-2core-r2.json"]),
    ("encoder", "The ported encoder vs PyTorch eager: 16-core Xeon (artifacts without Python's tvm)",
     ["encoder_procs_xeon16_panels_lstm.json"]),
    ("kmodel", "Kokoro's KModel end to end, unpatched vs patched: Zen 4, 2 cores",
     ["kmodel_zen4_2core.json"]),
    ("kmodel", "Kokoro's KModel end to end, unpatched vs patched: 16-core Xeon",
     ["kmodel_xeon16_t64.json", "kmodel_xeon16_t128.json", "kmodel_xeon16_t256.json"]),
    ("kokoro", "The whole Kokoro compiled (port-encoder + port-decoder) vs PyTorch and ONNX Runtime: "
     "the 2-core project VM (Xeon)", ["kokoro_xeon2core.json"]),
    ("kokoro", "The whole Kokoro compiled vs PyTorch and ONNX Runtime: 16-core Xeon (lent machine, "
     "artifacts without Python's tvm)",
     ["kokoro_xeon16-t64.json", "kokoro_xeon16-t256.json", "kokoro_xeon16-t256-2-16.json"]),
    ("tvm", "TVM lowerings of one LSTM (Kokoro's shape)", ["tvm.json"]),
    ("cuda", "CUDA: patched nn.LSTM vs cuDNN", ["cuda_h200.json"]),
    ("compile", "CUDA: Kokoro's KModel under torch.compile, patched and not",
     ["compile_h200_t64.json", "compile_h200_t256.json"]),
    ("compile", "CUDA: the patched KModel compiled in a fresh process",
     ["compile_h200_patched_t64.json"]),
    ("tvm-cuda", "CUDA: the whole Kokoro from TVM CUDA artifacts vs PyTorch eager",
     ["kokoro_tvm_cuda_h200.json", "kokoro_tvm_cuda_h200_t256.json"]),
    ("cuda-dense", "CUDA: the engine's convolutions and products (TVM externs) vs PyTorch's",
     ["cuda_dense_h200.json"]),
]


def _ms(v) -> str:
    return "—" if v is None else (f"{v:.3g}" if v < 10 else f"{v:.1f}")


def _ratio(a, b) -> str:
    return "—" if a is None or b is None else f"{a / b:.2f}×"


def _s(n: int) -> str:
    return f"{n} thread{'s' if n > 1 else ''}"


# ---- bench_lstm.py (lstm.json) -------------------------------------------------------------

def limit_line(r: dict) -> str:
    lim, c, n = r["limit"], r["case"], r["threads"]
    ours = r["median_ms"]["ours"]
    serial = f" × {lim['serial_directions']} directions" if lim["serial_directions"] > 1 else ""
    return (f"- **Limit** ({c['name']}, {_s(n)}): sgemm {c['T'] * c['B']}×"
            f"{4 * c['H'] * (2 if c['bidirectional'] else 1)}×{c['I']} {lim['gemm_ms']:.3g} ms + "
            f"{c['T']} steps × W_hh stream ({lim['w_hh_bytes'] // lim.get('threads_per_direction', 1) >> 10} KiB "
            f"per thread) {lim['stream_us']:.3g} µs{serial} "
            f"= {lim['limit_ms']:.3g} ms; ours {ours:.3g} ms = **{ours / lim['limit_ms']:.2f}× the limit**")


def bf16_line(r: dict) -> str:
    m = r["median_ms"]
    return (f"- **bfloat16** ({r['case']['name']}, {_s(r['threads'])}): "
            f"{m['ours_bf16']:.3g} ms vs fp32 {m['ours']:.3g} ms (fp32/bf16 = {m['ours'] / m['ours_bf16']:.2f}×), "
            f"max |err| vs torch fp32 {r['max_abs_err_vs_torch']['ours_bf16']:.2g}")


def lstm_tables(results: list, threads: list) -> list[str]:
    """bench_lstm.py's tables, one per thread count (also printed by bench_lstm.py)."""
    lines = []
    for n in threads:
        rows = [r for r in results if r["threads"] == n]
        lines += [f"#### {_s(n)}", "",
                  "| case | ours ms | torch ms | ORT ms | ref ms | torch/ours | ORT/ours | ours alone ms |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            m = r["median_ms"]
            lines.append("| " + " | ".join(
                [r["case"]["name"]] + [_ms(m.get(k)) for k in TABLE_IMPLS]
                + [_ratio(m.get("torch"), m["ours"]), _ratio(m.get("ort"), m["ours"]),
                   _ms(m.get("ours_alone"))]) + " |")
        lines.append("")
        lines += [limit_line(r) for r in rows if r["limit"] and r["case"]["name"].endswith("(Kokoro)")]
        lines += [bf16_line(r) for r in rows if "ours_bf16" in r["median_ms"]]
        others = [f"{r['case']['name']} {r['limit']['ours_over_limit']:.2f}×"
                  for r in rows if r["limit"] and not r["case"]["name"].endswith("(Kokoro)")]
        if others:
            lines.append(f"- ours/limit at the other B=1 cases: {', '.join(others)}")
        lines.append("")
    return lines


def render_lstm(docs: list, names: list, results_dir: str) -> list[str]:
    doc = docs[0]
    m, bi, a = doc["machine"], doc["machine"]["build_info"], doc["args"]
    no_ref = [r["case"]["name"] for r in doc["results"] if "ref" not in r["median_ms"] and r["threads"] == doc["threads"][0]]
    lines = [
        f"`{doc['command']}`, {doc['date']}" + (" (**--quick smoke run: not meaningful**)" if a["quick"] else "")
        + f"; {m['cpu_model']} ({m['caches_per_cpu0']}), {m['usable_cores']} usable cores; kokoro_lstm "
        f"{m['kokoro_lstm']} (BLAS {bi.get('blas')}, ISA {bi.get('isa_active')}); torch {m['torch']}; "
        f"onnxruntime {m['onnxruntime']}; numpy {m['numpy']}; Python {m['python']}.", "",
        f"Median of {a['repeat']} runs after {a['warmup']} warm-up runs, round-robin between the "
        f"implementations with a {a['settle_ms']:g} ms pause before each call; seq-first float32, "
        "H=256, bidirectional, B=1 and I=640 unless noted. ORT: one LSTM node per layer; ref: the "
        "NumPy float64 reference on one BLAS thread" + (f" (skipped at {', '.join(no_ref)})" if no_ref else "")
        + ". 'ours alone': the same calls with no other runtime in between. Every implementation "
        f"matched torch before timing (≤ {TOL:g}; bfloat16 ≤ {BF16_TOL:g}). Limit = the input "
        "sgemm plus streaming a thread's share of W_hh once per step (kokoro_lstm._core.bench_sgemm, "
        "bench_stream).", "",
    ]
    if os.path.exists(os.path.join(results_dir, "lstm.png")):
        lines += ["![LSTM timings](results/lstm.png)", ""]
    return lines + lstm_tables(doc["results"], doc["threads"])


# ---- bench_lstm.py --procs (short_*.json, batch_*.json) ----------------------------------------

def render_procs(docs: list, names: list, results_dir: str) -> list[str]:
    m = docs[0]["machine"]
    lines = [f"{m['date'][:10]}, {m['cpus']} CPUs; torch {m['torch']}, onnxruntime {m['onnxruntime']}; "
             f"{m['rounds']} rounds at B=1 (batches: {docs[-1]['machine']['rounds']}), {m['settle_s'] * 1e3:g} ms "
             "pause before each call. Median (min) ms; ratio = the faster peer's median / ours. "
             "Files: " + ", ".join(f"`results/{n}`" for n in names) + ".", "",
             "| T | B | threads | kokoro_lstm | PyTorch | ONNX Runtime | ratio |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    rows = [r for d in docs for r in d["results"]]
    for r in sorted(rows, key=lambda r: (r["B"], r["T"], r["threads"])):
        med = {k: statistics.median(v) * 1e3 for k, v in r["times_s"].items()}
        mn = {k: min(v) * 1e3 for k, v in r["times_s"].items()}
        cell = lambda k: f"{_ms(med[k])} ({_ms(mn[k])})"  # noqa: E731
        peer = min(med["torch"], med["ort"])
        lines.append(f"| {r['T']} | {r['B']} | {r['threads']} | {cell('ours')} | {cell('torch')} | "
                     f"{cell('ort')} | {_ratio(peer, med['ours'])} |")
    return lines + [""]


# ---- bench_encoder.py (encoder_procs_*.json) -------------------------------------------------

def render_encoder(docs: list, names: list, results_dir: str) -> list[str]:
    m = docs[0]["machine"]
    lines = [f"{m['cpu']}, {m['cores']} cores; `port-encoder`'s default methods, each runtime in its own "
             "process, every pair validated. Ratio = compiled / PyTorch (< 1: compiled faster), "
             "by medians (by minima). Files: " + ", ".join(f"`results/{n}`" for n in names) + ".", "",
             "| component | tokens | threads | PyTorch ms | compiled ms | ratio (min) | max err |",
             "|---|---:|---:|---:|---:|---|---:|"]
    seen = {}
    for d in docs:  # a later file's row replaces an earlier one's
        for r in d["rows"]:
            seen[(r["length"], r["component"], r["threads"])] = r
    order = {"text_encoder": 0, "duration": 1, "f0n": 2, "bert": 3}
    for key in sorted(seen, key=lambda k: (k[0], order.get(k[1], 9), k[2])):
        r = seen[key]
        t = next(iter(r["trees"].values()))
        lines.append(f"| {r['component']} | {r['length']} | {r['threads']} | {_ms(r['torch_ms'])} | "
                     f"{_ms(t['compiled_ms'])} | {t['ratio']:.2f} ({t['ratio_min']:.2f}) | {t['max_err']:.1e} |")
    return lines + [""]


# ---- bench_encoder.py kmodel (kmodel_*.json) ---------------------------------------------------

def render_kmodel(docs: list, names: list, results_dir: str) -> list[str]:
    d0 = docs[0]
    lines = [f"{d0['machine']['cpu']}, {d0['machine']['cores']} cores, {d0['date'][:10]}; `kokoro.KModel` "
             f"(random weights, {d0['frames_per_token']} frames per token), each variant in its own "
             "process, rounds alternated. Median (min) ms; ratio = unpatched / patched (> 1: patched "
             "faster). The six LSTMs are ~1% of a call, so the end-to-end ratio follows the noise. "
             "Files: " + ", ".join(f"`results/{n}`" for n in names) + ".", "",
             "| tokens | threads | unpatched | patched | ratio (min) | six LSTMs, unpatched / patched ms |",
             "|---:|---:|---:|---:|---|---:|"]
    for d in docs:
        for r in d["rows"]:
            lstm = r.get("lstm_ms", {})
            six = (f"{lstm['sep_unpatched']:.3g} / {lstm['sep_patched']:.3g}"
                   if "sep_unpatched" in lstm else "—")
            lines.append(f"| {r['tokens']} | {r['threads']} | {_ms(r['unpatched_ms'])} ({_ms(r['unpatched_min_ms'])}) | "
                         f"{_ms(r['patched_ms'])} ({_ms(r['patched_min_ms'])}) | {r['ratio']:.2f} "
                         f"({r['ratio_min']:.2f}) | {six} |")
    return lines + [""]


# ---- bench_kokoro.py (kokoro_*.json) -------------------------------------------------------

def render_kokoro(docs: list, names: list, results_dir: str) -> list[str]:
    d0 = docs[0]
    m = d0["machine"]
    lines = [f"{m['cpu']}, {m['cores']} cores, {d0['date'][:10]}; random weights made compressible "
             f"(period {d0['period']}), {d0['frames_per_token']} frames per token; whole = tokens → "
             "audio, decoder = Kokoro's Decoder alone. Each runtime in its own process, rounds "
             "alternated; median (min) ms. torch = KModel eager, ort = ONNX Runtime on the legacy "
             "export (disable_complex=True, as kokoro-onnx), tvm = the port-encoder / port-decoder "
             "artifacts; ratios < 1: tvm faster. Compiled vs PyTorch under the same seed: max-abs "
             "audio difference. Files: " + ", ".join(f"`results/{n}`" for n in names) + ".", "",
             "| tokens | threads | part | torch ms | ort ms | tvm ms | tvm / torch | tvm / ort | audio max-abs |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for d in docs:
        for r in d["rows"]:
            for part in ("whole", "decoder"):
                cell = lambda rt: (f"{_ms(r.get(f'{rt}_{part}_ms'))} ({_ms(r.get(f'{rt}_{part}_min_ms'))})")
                err = r.get("check", {}).get(part, {}).get("tvm_vs_torch_max_abs")
                lines.append(f"| {r['tokens']} | {r['threads']} | {part} | {cell('torch')} | {cell('ort')} | "
                             f"{cell('tvm')} | {_ratio(r.get(f'tvm_{part}_ms'), r.get(f'torch_{part}_ms'))} | "
                             f"{_ratio(r.get(f'tvm_{part}_ms'), r.get(f'ort_{part}_ms'))} | "
                             f"{'—' if err is None else f'{err:.1e}'} |")
    return lines + [""]


# ---- bench_tvm.py (tvm.json) ---------------------------------------------------------------

def render_tvm(docs: list, names: list, results_dir: str) -> list[str]:
    d = docs[0]
    i = d["info"]
    lines = [f"{i['cpus']} CPUs, TVM {i['tvm']}, torch {i['torch']}, {i['kokoro_lstm_threads']} threads, "
             f"target `{i['target']}`; B=1, I=640, H=256, bidirectional. `results/{names[0]}`.", "",
             "| method | T | median ms | min ms | vs the engine called directly | compile s | IR lines |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(d["rows"], key=lambda r: (r["T"], r["median_ms"])):
        comp = "—" if r.get("compile_s") is None else f"{r['compile_s']:.2f}"
        ir = "—" if r.get("ir_lines") is None else str(r["ir_lines"])
        vs = "—" if r.get("vs_direct") is None else f"{r['vs_direct']:.2f}×"
        lines.append(f"| {r['method']} | {r['T']} | {_ms(r['median_ms'])} | {_ms(r['min_ms'])} | {vs} | {comp} | {ir} |")
    return lines + [""]


# ---- bench_cuda.py (cuda_*.json) -----------------------------------------------------------

def cuda_table(d: dict) -> list[str]:
    lines = ["| B | T | cuDNN ms | ours ms | × cuDNN | cuDNN graph ms | ours graph ms | × in graphs | recurrence µs/step |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in d["lstm"]:
        lines.append(f"| {r['B']} | {r['T']} | {r['cudnn_ms']:.3f} | {r['ours_ms']:.3f} | "
                     f"{r['cudnn_over_ours']:.1f} | {r['cudnn_graph_ms']:.3f} | {r['ours_graph_ms']:.3f} | "
                     f"{r['graph_cudnn_over_ours']:.1f} | {r['recurrence_us_per_step']:.2f} |")
    return lines


def render_cuda(docs: list, names: list, results_dir: str) -> list[str]:
    d = docs[0]
    lines = [f"{d['device']}, torch {d['torch']}, cuDNN {d['cudnn']}; I=640, H=256, bidirectional, "
             "batch_first; a patched `nn.LSTM` against `nn.LSTM` in one process, alternated, medians; "
             f"also each captured in a CUDA graph and replayed. `results/{names[0]}`.", ""]
    lines += cuda_table(d)
    if d.get("kmodel"):
        lines += ["", "Kokoro's `KModel` (random weights), unpatched → patched:", ""]
        for k in d["kmodel"]:
            lines.append(f"- {k['tokens']} tokens: {k['unpatched_ms']:.1f} → {k['patched_ms']:.1f} ms "
                         f"({k['speedup']:.2f}×; the six LSTMs {k['six_lstms_ms_unpatched']:.1f} → "
                         f"{k['six_lstms_ms_patched']:.1f} ms)")
    return lines + [""]


# ---- bench_compile.py (compile_*.json) -----------------------------------------------------

def render_compile(docs: list, names: list, results_dir: str) -> list[str]:
    d0 = docs[0]
    lines = [f"{d0['device']}, torch {d0['torch']}; `KModel.forward_with_tokens`, random weights, 4 "
             f"frames per token, wall ms per call (synchronized), alternated, medians and minima of "
             f"{d0['rounds']} rounds; ro = CUDA graphs (reduce-overhead). "
             + ", ".join(f"`results/{n}`" for n in names) + ".", "",
             "| tokens | variant | median ms | min ms | × eager | compile + warm-up s |",
             "|---:|---|---:|---:|---:|---:|"]
    for d in docs:
        for r in d["rows"]:
            lines.append(f"| {d['tokens']} | {r['variant']} | {_ms(r['median_ms'])} | "
                         f"{_ms(r['min_ms'])} | {r['x_eager']:.2f}× | {r['warmup_s']:.1f} |")
    return lines + [""]


def tvm_cuda_table(docs: list) -> list[str]:
    """Per token count: the runner's wall and GPU ms against PyTorch eager's, and the
    runner's GPU ms by op where ncu ran."""
    d = docs[0]
    lines = [f"{d['device']} (torch {d['torch']}), one random Kokoro-82M "
             f"(`{d['script'].split()[0]}`), wall ms per synthesis, medians and minima; GPU ms "
             f"and launches of one synthesis (ncu, torch.profiler); audio against KModel's on "
             f"the CPU:", "",
             "| tokens (frames) | variant | median ms | min ms | × eager | GPU ms | launches |",
             "|---|---|---:|---:|---:|---:|---:|"]
    notes = []
    for d in docs:
        eager = d["rows"][1]["median_ms"]
        for r in d["rows"]:
            gpu = "-" if r["gpu_ms"] is None else f"{r['gpu_ms']:.1f}"
            lines.append(f"| {d['tokens']} ({d['frames']}) | {r['variant']} | {r['median_ms']:.1f} | "
                         f"{r['min_ms']:.1f} | {eager / r['median_ms']:.2f}× | {gpu} | "
                         f"{r['launches'] or '-'} |")
        notes.append(f"{d['tokens']} tokens: audio within {d['audio_max_abs_err_vs_kmodel_cpu']:.1e}")
        if d.get("runner_gpu_by_op"):
            ops = ", ".join(f"{o['op']} {o['ms']:.1f}" for o in d["runner_gpu_by_op"])
            notes.append(f"the runner's GPU ms by op: {ops}")
    return lines + ["", "; ".join(notes) + "."]


def cuda_dense_table(d: dict) -> list[str]:
    """Per Kokoro shape: the engine's CUDA kernel (3xTF32) against PyTorch's defaults
    (cuDNN TF32 convolutions, cuBLAS float32 products) and with TF32 off."""
    lines = [f"{d['device']} (torch {d['torch']}, cuDNN {d['cudnn']}), Kokoro's shapes at 64 "
             f"tokens, ms per call (medians of {d['rounds']} alternated rounds of {d['reps']} "
             f"calls); ours float32 by 3xTF32, error vs float64:", "",
             "| shape | ours ms | TFLOP/s | PyTorch ms | PyTorch, no TF32, ms | max abs err |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in d["rows"]:
        lines.append(f"| {r['case']} | {r['ours']['median_ms']:.3f} | {r['ours_tflops']:.1f} | "
                     f"{r['torch']['median_ms']:.3f} | {r['torch_no_tf32']['median_ms']:.3f} | "
                     f"{r['max_abs_err_vs_float64']:.1e} |")
    t = d["total_ms"]
    return lines + ["", f"Sum: ours {t['ours']:.2f} ms, PyTorch {t['torch']:.2f} ms, without TF32 "
                        f"{t['torch_no_tf32']:.2f} ms."]


def render_cuda_dense(docs: list, names: list, results_dir: str) -> list[str]:
    return cuda_dense_table(docs[0]) + ["", f"`results/{names[0]}`.", ""]


def block_cuda_dense(results_dir: str) -> list[str]:
    return cuda_dense_table(_load(results_dir, "cuda_dense_h200.json"))


def render_tvm_cuda(docs: list, names: list, results_dir: str) -> list[str]:
    return tvm_cuda_table(docs) + ["", ", ".join(f"`results/{n}`" for n in names) + ".", ""]


TVM_CUDA_FILES = ["kokoro_tvm_cuda_h200.json", "kokoro_tvm_cuda_h200_t256.json"]


def block_tvm_cuda(results_dir: str) -> list[str]:
    return tvm_cuda_table([_load(results_dir, n) for n in TVM_CUDA_FILES])


RENDER = {"tvm-cuda": render_tvm_cuda, "cuda-dense": render_cuda_dense, "compile": render_compile, "lstm": render_lstm, "procs": render_procs, "encoder": render_encoder,
          "kmodel": render_kmodel, "kokoro": render_kokoro, "tvm": render_tvm, "cuda": render_cuda}


def render(results_dir: str) -> str:
    lines = ["# Benchmark results", "",
             "Generated by `benchmarks/report.py` from the JSON files in `benchmarks/results/`; "
             "do not edit. Each section is the newest run of one question on one machine; "
             "the scripts are described in `benchmarks/README.md`, older runs are in git's history.", ""]
    for kind, title, names in SOURCES:
        docs = []
        for n in names:
            with open(os.path.join(results_dir, n)) as f:
                docs.append(json.load(f))
        lines += [f"## {title}", ""] + RENDER[kind](docs, names, results_dir)
    return "\n".join(lines).rstrip() + "\n"


def cited() -> list[str]:
    """The result files RESULTS.md cites."""
    return sorted({n for _, _, names in SOURCES for n in names} | {"lstm.png"})


# ---- blocks of README.md and docs/*.md ----------------------------------------------------

def _load(results_dir: str, name: str) -> dict:
    with open(os.path.join(results_dir, name)) as f:
        return json.load(f)


def _minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def block_lstm(results_dir: str) -> list[str]:
    """README's CPU table: Kokoro's shape at T = 16, 256, 1024 and a B = 64 batch."""
    d = _load(results_dir, "lstm.json")
    m = d["machine"]
    cases = {"T=16": "T=16", "T=256 (Kokoro)": "T=256", "T=1024": "T=1024",
             "T=256 B=64": "T=256, B=64"}
    cpu = m["cpu_model"].replace("(R)", "").replace(" Processor", "")
    lines = [f"**CPU: the project's machine**, {m['usable_cores']} cores ({cpu}, "
             f"ISA {m['build_info'].get('isa_active')}; {d['date'][:10]}, `make bench`, one process, "
             "alternated; `benchmarks/results/lstm.json`):", "",
             f"| case | threads | kokoro_lstm | PyTorch {_minor(m['torch'])} | ONNX Runtime "
             f"{_minor(m['onnxruntime'])} | PyTorch / ours | ORT / ours |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for n in d["threads"]:
        for r in d["results"]:
            if r["threads"] == n and r["case"]["name"] in cases:
                t = r["median_ms"]
                lines.append(f"| {cases[r['case']['name']]} | {n} | {t['ours']:.3g} | "
                             f"{t['torch']:.3g} | {t['ort']:.3g} | {_ratio(t['torch'], t['ours'])} | "
                             f"{_ratio(t['ort'], t['ours'])} |")
    return lines


KOKORO_MACHINES = [("2-vCPU Xeon VM", ["kokoro_xeon2core.json"]),
                   ("16-core Xeon (lent)", ["kokoro_xeon16-t64.json", "kokoro_xeon16-t256.json",
                                            "kokoro_xeon16-t256-2-16.json"])]


def block_kokoro(results_dir: str) -> list[str]:
    """README's whole-Kokoro table: compiled time / PyTorch's and / ONNX Runtime's, and
    the largest audio difference."""
    lines = ["| machine | tokens | 1 thread: / torch, / ORT | 2 threads | 16 threads |",
             "|---|---:|---|---|---|"]
    for label, names in KOKORO_MACHINES:
        rows = {}
        for n in names:
            for r in _load(results_dir, n)["rows"]:
                rows[(r["tokens"], r["threads"])] = r
        for tokens in sorted({k[0] for k in rows}):
            cells = []
            for threads in (1, 2, 16):
                r = rows.get((tokens, threads))
                cells.append("—" if r is None else
                             f"{_ratio(r['tvm_whole_ms'], r['torch_whole_ms'])}, "
                             f"{_ratio(r['tvm_whole_ms'], r['ort_whole_ms'])}")
            lines.append(f"| {label} | {tokens} | " + " | ".join(cells) + " |")
    errs = [r["check"]["whole"]["tvm_vs_torch_max_abs"] for _, names in KOKORO_MACHINES
            for n in names for r in _load(results_dir, n)["rows"]]
    return lines + ["", f"The compiled audio is within {max(errs):.1e} of PyTorch's under the same seed."
                     .replace("e-0", "e-")]


def block_cuda(results_dir: str) -> list[str]:
    """README's GPU table: bench_cuda.py's rows."""
    d = _load(results_dir, "cuda_h200.json")
    cudnn = d["cudnn"]
    cudnn = f"{cudnn // 10000}.{cudnn // 100 % 100}" if isinstance(cudnn, int) else cudnn
    return [f"**GPU: {d['device']}**, a patched `nn.LSTM` against `nn.LSTM` (torch {d['torch']}, "
            f"cuDNN {cudnn}; Kokoro's shape, batch_first; one process, alternated, medians; also "
            "each captured in a CUDA graph and replayed; `benchmarks/bench_cuda.py`, "
            "`benchmarks/results/cuda_h200.json`):", ""] + cuda_table(d)


def block_compile(results_dir: str) -> list[str]:
    """README's torch.compile table: KModel on the GPU, median ms and × eager."""
    want = ["eager", "patched", "compiled-ro", "patched-compiled-ro"]
    d0 = _load(results_dir, "compile_h200_t64.json")
    lines = [f"Kokoro's `KModel` on an {d0['device']} (torch {d0['torch']}), median ms (× eager); "
             "`benchmarks/results/compile_h200_t*.json`:", "","| tokens | eager ms | patched | compiled (CUDA graphs) | patched + compiled (CUDA graphs) |",
             "|---:|---:|---:|---:|---:|"]
    for n in ("compile_h200_t64.json", "compile_h200_t256.json"):
        d = _load(results_dir, n)
        rows = {r["variant"]: r for r in d["rows"]}
        cells = [f"{rows['eager']['median_ms']:.1f}"] + [
            f"{rows[v]['median_ms']:.1f} ({rows[v]['x_eager']:.2f}×)" for v in want[1:]]
        lines.append(f"| {d['tokens']} | " + " | ".join(cells) + " |")
    return lines


def _procs_table(results_dir: str, names: list, keep) -> list[str]:
    """bench_lstm.py --procs rows that ``keep(r)``: median (min) ms, ratio = the faster
    peer's median / ours."""
    docs = [_load(results_dir, n) for n in names]
    m = docs[0]["machine"]
    lines = [f"| case | threads | kokoro_lstm | PyTorch {_minor(m['torch'])} | ONNX Runtime "
             f"{_minor(m['onnxruntime'])} | ratio |", "|---|---:|---:|---:|---:|---:|"]
    rows = [r for d in docs for r in d["results"] if keep(r)]
    for r in sorted(rows, key=lambda r: (r["B"], r["T"], r["threads"])):
        med = {k: statistics.median(v) * 1e3 for k, v in r["times_s"].items()}
        cell = {k: f"{med[k]:.3g} ({min(v) * 1e3:.3g})" for k, v in r["times_s"].items()}
        case = f"T={r['T']}" + (f", B={r['B']}" if r["B"] > 1 else "")
        lines.append(f"| {case} | {r['threads']} | {cell['ours']} | {cell['torch']} | {cell['ort']} | "
                     f"{_ratio(min(med['torch'], med['ort']), med['ours'])} |")
    return lines


def block_procs_zen4(results_dir: str) -> list[str]:
    return _procs_table(results_dir, ["short_zen4_1124.json", "batch_zen4_1124.json"], lambda r: True)


def block_procs_xeon16(results_dir: str) -> list[str]:
    return _procs_table(results_dir, ["short_xeon16_r1_1124.json", "batch_xeon16_r1_1124.json"],
                        lambda r: r["threads"] == 16 or (r["B"] == 1 and r["T"] == 256))


def block_encoder(results_dir: str) -> list[str]:
    """performance.md's ported-encoder ratios (compiled / PyTorch, medians) per machine and
    thread count; a later file's row replaces an earlier one's."""
    machines = [("Zen 4", ["encoder_procs_zen4-2core.json", "encoder_procs_zen4-2core-r2.json"]),
                ("Xeon", ["encoder_procs_xeon16_panels_lstm.json"])]
    ratio, cols = {}, []
    for label, names in machines:
        threads = set()
        for n in names:
            for r in _load(results_dir, n)["rows"]:
                ratio[(label, r["component"], r["length"], r["threads"])] = \
                    next(iter(r["trees"].values()))["ratio"]
                threads.add(r["threads"])
        cols += [(label, t) for t in sorted(threads)]
    head = [f"{label}, {t} thread" if i == 0 else f"{label}, {t}"
            for i, (label, t) in enumerate(cols)]
    lines = ["| component | tokens | " + " | ".join(head) + " |",
             "|---|---:|" + "---:|" * len(cols)]
    for length in sorted({k[2] for k in ratio}):
        for comp in ("text_encoder", "duration", "f0n", "bert"):
            cells = [ratio.get((label, comp, length, t)) for label, t in cols]
            lines.append(f"| {comp} | {length} | " + " | ".join(
                "—" if c is None else f"{c:.2f}" for c in cells) + " |")
    return lines


DOC_BLOCKS = {"tvm-cuda": block_tvm_cuda, "cuda-dense": block_cuda_dense, "lstm": block_lstm, "kokoro": block_kokoro, "cuda": block_cuda,
              "compile": block_compile, "procs-zen4": block_procs_zen4,
              "procs-xeon16": block_procs_xeon16, "encoder": block_encoder}
BLOCK = re.compile(r"(<!-- report\.py: ([\w-]+) -->\n)(.*?)(<!-- end report\.py: \2 -->)", re.S)


def fill_blocks(text: str, results_dir: str) -> str:
    """``text`` with every marked block re-rendered; KeyError for an unknown name."""
    def one(m):
        lines = []
        for ln in DOC_BLOCKS[m.group(2)](results_dir):  # prose wrapped as the docs are, tables not
            lines += [ln] if ln.startswith("|") or not ln else textwrap.wrap(ln, 92, break_on_hyphens=False)
        return m.group(1) + "\n".join(lines) + "\n" + m.group(4)

    return BLOCK.sub(one, text)


def doc_files() -> list[str]:
    root = os.path.dirname(HERE)
    docs = os.path.join(root, "docs")
    return [os.path.join(root, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--check", action="store_true", help="exit 1 if an output differs from what would be written")
    args = ap.parse_args(argv)
    outputs = {args.out: render(args.results)}
    for path in doc_files():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if BLOCK.search(text):
            outputs[path] = fill_blocks(text, args.results)
    stale = 0
    for path, text in outputs.items():
        old = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                old = f.read()
        if args.check:
            print(f"{path}: {'up to date' if old == text else 'stale: run benchmarks/report.py'}")
            stale += old != text
        elif old != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"wrote {path} ({text.count(chr(10))} lines)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
