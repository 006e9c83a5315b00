"""kokoro_lstm on CUDA vs cuDNN (through PyTorch), and Kokoro's KModel end to end.

LSTM cases: Kokoro's shape (I=640, H=256, bidirectional, batch_first), B=1 at
T = 1 (the fixed cost of a call), 64, 256, 1024, 2048 and B = 16, 64 at T = 256
(``--cases`` picks some). In one process, alternated
every round (the order flips each round): cuDNN (nn.LSTM under no_grad, PyTorch's
defaults, so TF32 allowed), ours (``_core.forward`` on the same CUDA tensors, the
current stream, automatic recurrence path), ours with the step path forced, and
ours without the input projection (``x_gates``: the recurrence alone). Each
variant times ``reps`` back-to-back calls between two CUDA events; per call =
elapsed / reps; medians and minima over ``--rounds``.

KModel: ``kokoro.KModel`` (Kokoro-82M's config, random weights, duration head set
to ``--frames-per-token`` frames per token, as benchmarks/_kmodel.py does) on
the GPU, unpatched vs a deep copy patched with ``patch_lstm_modules``, alternated;
wall time of ``forward_with_tokens`` with a synchronize after it; the outputs are
checked equal in length and close in value first.

    python benchmarks/bench_cuda.py --out benchmarks/results/cuda_h200.json
"""
import argparse
import copy
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from kokoro_lstm import _core  # noqa: E402

CASES = [(1, 1), (1, 64), (1, 256), (1, 1024), (1, 2048), (16, 256), (64, 256)]


def _timed(fn, reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / reps


def _graph(fn):
    """fn captured in a CUDA graph (after a warm call on a side stream); returns replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def lstm_case(B, T, rounds, I=640, H=256):
    from kokoro_lstm import torch_ops as ko
    torch.manual_seed(0)
    m = torch.nn.LSTM(I, H, batch_first=True, bidirectional=True).cuda().eval()
    mp = ko.patch_lstm_modules(copy.deepcopy(m))
    x = torch.randn(B, T, I, device="cuda")
    ws = [p.detach() for p in m._flat_weights]
    y = torch.empty(B, T, 2 * H, device="cuda")
    h_n, c_n = torch.empty(2, B, H, device="cuda"), torch.empty(2, B, H, device="cuda")
    gates = torch.randn(B, T, 2 * 4 * H, device="cuda") * 0.5

    def env(fn, **kw):  # fn with KOKORO_LSTM_* variables set for the call
        def run():
            for k, v in kw.items():
                os.environ["KOKORO_LSTM_CUDA_" + k.upper()] = v
            try:
                fn()
            finally:
                for k in kw:
                    del os.environ["KOKORO_LSTM_CUDA_" + k.upper()]
        return run

    def cudnn():
        with torch.no_grad():
            m(x)

    def ours():
        with torch.no_grad():
            mp(x)

    def recurrence():
        _core.forward(gates, None, None, None, ws, y, h_n, c_n, num_layers=1, bidirectional=True,
                      has_bias=True, batch_first=True, x_gates=True,
                      stream=torch.cuda.current_stream().cuda_stream)

    with torch.no_grad():
        want = m(x)[0]
        got = mp(x)[0]
        torch.backends.cudnn.allow_tf32 = False
        exact = m(x)[0]
        torch.backends.cudnn.allow_tf32 = True
    variants = {"cudnn": cudnn, "ours": ours,
                "ours_step": env(ours, recurrence="step"),
                "ours_recurrence": recurrence}
    for f in list(variants.values()):  # warm: modules compiled, buffers allocated
        f()
    variants["cudnn_graph"] = _graph(cudnn)
    variants["ours_graph"] = _graph(ours)
    torch.cuda.synchronize()
    reps = 10 if T <= 256 else 2
    times = {k: [] for k in variants}
    names = list(variants)
    for r in range(rounds):
        for k in (names if r % 2 == 0 else names[::-1]):
            times[k].append(_timed(variants[k], reps))
    row = {"B": B, "T": T, "I": I, "H": H, "bidirectional": True, "reps": reps,
           "max_abs_vs_cudnn": (got - want).abs().max().item(),
           "max_abs_vs_cudnn_no_tf32": (got - exact).abs().max().item()}
    for k, v in times.items():
        row[f"{k}_ms"] = statistics.median(v)
        row[f"{k}_min_ms"] = min(v)
    row["cudnn_over_ours"] = row["cudnn_ms"] / row["ours_ms"]
    row["graph_cudnn_over_ours"] = row["cudnn_graph_ms"] / row["ours_graph_ms"]
    row["ours_us_per_step"] = 1000 * row["ours_ms"] / T
    row["recurrence_us_per_step"] = 1000 * row["ours_recurrence_ms"] / T
    return row


def host_overhead(n=300):
    """Microseconds of host time per call when the GPU work is tiny (T = B = 1): the
    binding, DLPack and validation, for _core.forward and for the patched nn.LSTM."""
    from kokoro_lstm import torch_ops as ko
    m = torch.nn.LSTM(640, 256, batch_first=True, bidirectional=True).cuda().eval()
    x = torch.randn(1, 1, 640, device="cuda")
    ws = [p.detach() for p in m._flat_weights]
    y, h, c = (torch.empty(1, 1, 512, device="cuda"), torch.empty(2, 1, 256, device="cuda"),
               torch.empty(2, 1, 256, device="cuda"))
    st = torch.cuda.current_stream().cuda_stream
    call = lambda: _core.forward(x, None, None, None, ws, y, h, c, num_layers=1,  # noqa: E731
                                 bidirectional=True, has_bias=True, batch_first=True, stream=st)
    res = {}
    for name, fn in (("forward_us", call), ("cudnn_us", lambda: m(x))):
        with torch.no_grad():
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            res[name] = 1e6 * (time.perf_counter() - t0) / n
            torch.cuda.synchronize()
    ko.patch_lstm_modules(m)
    with torch.no_grad():
        for _ in range(20):
            m(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            m(x)
        res["patched_module_us"] = 1e6 * (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    return res


def kmodel_case(tokens, fpt, rounds):
    import _kmodel as bk

    cfg = bk.kmodel_config()
    path = "/tmp/kl_kmodel_empty.pth"
    torch.save({}, path)

    def build():  # the same weights every time (weight_norm modules cannot be deep-copied)
        torch.manual_seed(0)
        m = bk.build_kmodel(cfg, path)
        lin = m.predictor.duration_proj.linear_layer
        p = fpt / cfg["max_dur"]
        with torch.no_grad():
            lin.weight.zero_()
            lin.bias.fill_(math.log(p / (1.0 - p)))
        return m.cuda().eval()
    from kokoro_lstm import torch_ops as ko
    m, mp = build(), ko.patch_lstm_modules(build())
    ids, ref_s = bk.make_inputs(tokens, 0, cfg["n_token"])
    ids, ref_s = ids.cuda(), ref_s.cuda()

    def call(model):
        with torch.inference_mode():
            torch.manual_seed(1)
            out = model.forward_with_tokens(ids, ref_s, 1.0)
        torch.cuda.synchronize()
        return out

    a, da = call(m)
    b, db = call(mp)
    assert torch.equal(da, db), "durations differ"
    audio_diff = (a - b).abs().max().item()
    lstm_ms = {"unpatched": [], "patched": []}
    spent = []

    def pre(mod, args):
        torch.cuda.synchronize()
        mod._t0 = time.perf_counter()

    def post(mod, args, out):
        torch.cuda.synchronize()
        spent.append(time.perf_counter() - mod._t0)
    hooks = [mm.register_forward_pre_hook(pre) for mm in list(m.modules()) + list(mp.modules())
             if isinstance(mm, (torch.nn.LSTM, ko.KokoroLSTM))]
    hooks += [mm.register_forward_hook(post) for mm in list(m.modules()) + list(mp.modules())
              if isinstance(mm, (torch.nn.LSTM, ko.KokoroLSTM))]
    for name, model in (("unpatched", m), ("patched", mp)):
        spent.clear()
        call(model)
        lstm_ms[name] = 1000 * sum(spent)
    for h in hooks:
        h.remove()
    for _ in range(2):
        call(m), call(mp)
    times = {"unpatched": [], "patched": []}
    for r in range(rounds):
        for name, model in ((("unpatched", m), ("patched", mp)) if r % 2 == 0 else
                            (("patched", mp), ("unpatched", m))):
            t0 = time.perf_counter()
            call(model)
            times[name].append(1000 * (time.perf_counter() - t0))
    row = {"tokens": tokens, "frames": int(da.sum().item()), "frames_per_token": fpt,
           "audio_max_abs_diff": audio_diff, "audio_max_abs": a.abs().max().item(),
           "six_lstms_ms_unpatched": lstm_ms["unpatched"], "six_lstms_ms_patched": lstm_ms["patched"]}
    for k, v in times.items():
        row[f"{k}_ms"] = statistics.median(v)
        row[f"{k}_min_ms"] = min(v)
    row["speedup"] = row["unpatched_ms"] / row["patched_ms"]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tokens", default="64,256")
    ap.add_argument("--frames-per-token", type=int, default=4)
    ap.add_argument("--no-kmodel", action="store_true")
    ap.add_argument("--cases", default=",".join(f"{b}:{t}" for b, t in CASES),
                    help="LSTM cases as B:T,B:T,... (default: all)")
    a = ap.parse_args(argv)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "python": platform.python_version(),
           "lstm": [], "kmodel": []}
    res["host_overhead"] = host_overhead()
    print("host time per call (us):", {k: round(v, 1) for k, v in res["host_overhead"].items()},
          flush=True)
    for B, T in (tuple(int(v) for v in c.split(":")) for c in a.cases.split(",") if c):
        row = lstm_case(B, T, a.rounds)
        res["lstm"].append(row)
        print(f"B={B:3d} T={T:5d}  cuDNN {row['cudnn_ms']:8.3f} ms  ours {row['ours_ms']:7.3f} ms "
              f"({row['cudnn_over_ours']:5.1f}x)  graphs: cuDNN {row['cudnn_graph_ms']:.3f} ours "
              f"{row['ours_graph_ms']:.3f} ({row['graph_cudnn_over_ours']:.1f}x); recurrence "
              f"{row['recurrence_us_per_step']:.2f} us/step; "
              f"step path {row['ours_step_ms']:.3f} ms; err {row['max_abs_vs_cudnn_no_tf32']:.1e}",
              flush=True)
    if not a.no_kmodel:
        for tokens in (int(t) for t in a.tokens.split(",")):
            row = kmodel_case(tokens, a.frames_per_token, a.rounds)
            res["kmodel"].append(row)
            print(f"KModel {tokens} tokens ({row['frames']} frames): unpatched "
                  f"{row['unpatched_ms']:.1f} ms, patched {row['patched_ms']:.1f} ms "
                  f"({row['speedup']:.2f}x); six LSTMs {row['six_lstms_ms_unpatched']:.1f} -> "
                  f"{row['six_lstms_ms_patched']:.1f} ms; audio diff {row['audio_max_abs_diff']:.1e}",
                  flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
