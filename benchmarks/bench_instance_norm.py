"""Instance norm and Kokoro's AdaIN1d: the engine's extern (kokoro_lstm.instance_norm_v1,
called through tvm-ffi as a compiled module calls it) against PyTorch eager
(``F.instance_norm``, and ``(1 + gamma) * F.instance_norm(x) + beta`` as AdaIN1d runs it)
at the decoder's shapes: F frames give 1024 channels at F, 512 at 2F, 256 at 20F and 128
at 120F. Outputs are checked first; the four timed calls alternate, each round in a
reversed order every other time; medians and minima in ms.

    python benchmarks/bench_instance_norm.py --frames 192 --threads 1,2
"""
import argparse
import time

import numpy as np
import torch
import tvm_ffi

import kokoro_lstm.tvm  # noqa: F401  (registers the engine's functions)
from kokoro_lstm.tvm import dense

F = torch.nn.functional


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=192)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=31)
    a = p.parse_args()
    fn = tvm_ffi.get_global_func(dense.INSTANCE_NORM_FUNC)
    eps = dense.f64_bits(1e-5)
    T = tvm_ffi.from_dlpack
    f = a.frames
    for C, L in ((1024, f), (512, 2 * f), (256, 20 * f), (128, 120 * f)):
        g = torch.Generator().manual_seed(C)
        x = torch.randn(1, C, L, generator=g) * 2 + 0.5
        w, b = torch.randn(C, generator=g), torch.randn(C, generator=g)
        gam, beta = torch.randn(1, C, 1, generator=g), torch.randn(1, C, 1, generator=g)
        y = torch.empty_like(x)
        for nth in (int(n) for n in a.threads.split(",")):
            torch.set_num_threads(nth)
            cfg_n = tvm_ffi.Shape(list(dense.InstanceNormConfig(1, 1, 1, 0, 0, eps, nth)))
            cfg_a = tvm_ffi.Shape(list(dense.InstanceNormConfig(1, 1, 1, 1, 1, eps, nth)))

            def ours_norm():
                fn(cfg_n, T(x), T(w), T(b), T(y))
                return y

            def ours_adain():
                fn(cfg_a, T(x), T(w), T(b), T(1 + gam), T(beta), T(y))
                return y

            def torch_norm():
                return F.instance_norm(x, weight=w, bias=b, eps=1e-5)

            def torch_adain():
                return (1 + gam) * F.instance_norm(x, weight=w, bias=b, eps=1e-5) + beta

            calls = {"ours norm": ours_norm, "torch norm": torch_norm,
                     "ours adain": ours_adain, "torch adain": torch_adain}
            err = max((ours_norm() - torch_norm()).abs().max().item(),
                      (ours_adain() - torch_adain()).abs().max().item())
            assert err < 1e-4, err
            times = {k: [] for k in calls}
            for r in range(a.rounds):
                for k in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
                    t0 = time.perf_counter()
                    calls[k]()
                    times[k].append(time.perf_counter() - t0)
            row = "  ".join(f"{k} {np.median(v) * 1e3:.3f}/{min(v) * 1e3:.3f}" for k, v in times.items())
            print(f"C={C:4d} L={L:6d} threads={nth} max|diff| {err:.1e}  (median/min ms) {row}",
                  flush=True)


if __name__ == "__main__":
    main()
