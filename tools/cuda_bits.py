"""SHA-256 of patched nn.LSTM outputs on CUDA over a grid of cases and recurrence
paths: run before and after a change that must keep the bits (a refactor), then
diff the two JSON files.

    python tools/cuda_bits.py out.json            # on a machine with a GPU
    python tools/cuda_bits.py new.json --against old.json
"""
import argparse
import hashlib
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kokoro_lstm.torch_ops as ko  # noqa: E402

# (I, H, layers, bidirectional, proj, B, T, packed); the torch ops patch no proj_size
CASES = [(640, 256, 1, True, 0, 1, 64, False), (640, 256, 1, True, 0, 1, 300, True),
         (512, 256, 1, True, 0, 1, 1, False), (640, 256, 1, True, 0, 16, 256, False),
         (640, 256, 1, True, 0, 64, 256, True), (64, 32, 2, True, 0, 5, 17, True),
         (48, 40, 2, False, 0, 3, 9, False), (16, 128, 1, False, 0, 40, 33, False)]
PATHS = [("cluster", "mbarrier"), ("cluster", "barrier"), ("step", "mbarrier")]


def digest(*ts):
    h = hashlib.sha256()
    for t in ts:
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:24]


def run_case(case):
    I, H, L, bi, proj, B, T, packed = case
    torch.manual_seed(1234)
    m = torch.nn.LSTM(I, H, L, batch_first=True, bidirectional=bi, proj_size=proj).cuda()
    x = torch.randn(B, T, I, device="cuda")
    ko.patch_lstm_modules(m)
    with torch.no_grad():
        if packed:
            lengths = torch.tensor([max(1, T - 7 * b) for b in range(B)])
            p = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                        enforce_sorted=False)
            y, (h, c) = m(p)
            y = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=T)[0]
        else:
            y, (h, c) = m(x)
    torch.cuda.synchronize()
    return digest(y, h, c)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--against")
    a = ap.parse_args()
    res = {}
    for path, exchange in PATHS:
        os.environ["KOKORO_LSTM_CUDA_RECURRENCE"] = path
        os.environ["KOKORO_LSTM_CUDA_EXCHANGE"] = exchange
        for case in CASES:
            res[f"{path}/{exchange}/{case}"] = run_case(case)
    with open(a.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "digests": res}, f, indent=1)
    print(f"{len(res)} digests -> {a.out}")
    if a.against:
        old = json.load(open(a.against))["digests"]
        bad = [k for k in res if old.get(k) != res[k]]
        print(f"against {a.against}: {len(res) - len(bad)} same, {len(bad)} differ")
        for k in bad:
            print("  differs:", k)
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
