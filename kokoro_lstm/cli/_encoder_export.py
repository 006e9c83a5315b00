"""One encoder component ready to lower: its model, the exported program (and the
algebra-cut one), the validation inputs and PyTorch eager's references and time, shared
by every LSTM method it is lowered with (:mod:`._encoder_build`).
"""
from __future__ import annotations

import contextlib

from ._artifact import _time_ms


def _lstm_op_counts(ep):
    counts = {}
    for n in ep.graph.nodes:
        t = str(n.target)
        if n.op == "call_function" and "lstm" in t:
            counts[t] = counts.get(t, 0) + 1
    return counts


class _Component:
    """One component's model, exported program and PyTorch references (shared by every
    method it is lowered with)."""

    def __init__(self, name, opts, km, ckpt, progress):
        import torch

        import kokoro_lstm.torch_ops as ko

        from . import _components as C

        self.name, self.opts, self.progress = name, opts, progress
        self.cfg = opts["cfg"]
        self.T = {"f0n": opts["aligned_len"], "bert": opts["bert_seq_len"]}.get(name, opts["seq_len"])
        self.times = {}
        packed = opts["semantics"] == "packed"
        self._ctx = (contextlib.nullcontext if packed else C.padded_packing)
        with progress.step(name, "build model", self.times, "build_model_s"):
            self.model = C.build_component(name, self.cfg, km, ckpt, seed=opts["seed"],
                                           f0n_input=opts.get("f0n_input", "en"))
        # f0n from d: d has --seq-len tokens
        n_tok = opts["seq_len"] if name == "f0n" and opts.get("f0n_input") == "d" else None
        m = self.model
        gen = torch.Generator().manual_seed(opts["seed"] + 1)
        T = self.T
        example = C.example_inputs(name, self.cfg, T, T, gen, n_tokens=n_tok)
        with progress.step(name, "export", self.times, "export_s"):
            ko.patch_lstm_modules(m)
            try:
                with (ko.exportable_packing() if packed else C.padded_packing()):
                    self.ep = torch.export.export(m, example)
            finally:
                ko.unpatch_lstm_modules(m)
            self.lstm_ops = _lstm_op_counts(self.ep.run_decompositions())
        # the same component with Kokoro's exact algebra cuts, exported for the native
        # LSTM method (the only one that lowers kokoro::lstm_forward_gated)
        self.ep_cut, self.cuts = None, {}
        if opts.get("algebra_cuts", True):
            from . import _cuts

            cut, self.cuts = _cuts.apply_cuts(name, m, opts["semantics"])
            if cut is not m:
                with progress.step(name, "export (algebra cuts)", self.times, "export_cut_s"):
                    ko.patch_lstm_modules(cut)
                    try:
                        self.ep_cut = torch.export.export(cut, example)
                    finally:
                        ko.unpatch_lstm_modules(cut)
                    self.lstm_ops_cut = _lstm_op_counts(self.ep_cut.run_decompositions())
        # validation / timing inputs: full length, and a shorter random length
        short = int(torch.randint(max(1, T // 4), T, (1,), generator=gen)) if T > 1 else 1
        self.lengths = [T] + ([short] if short < T else [])
        self.inputs = [C.example_inputs(name, self.cfg, T, L, gen, n_tokens=n_tok)
                       for L in self.lengths]
        self.input_names = type(m).input_names
        self.output_names = type(m).output_names
        self.function = type(m).function
        self.C = C
        self._ref = None
        self._torch_ms = None
        with progress.step(name, "time PyTorch eager", self.times, "torch_time_s"):
            self.torch_ms()

    def eager(self, args):
        import torch

        with torch.no_grad(), self._ctx():
            return [t.numpy() for t in self.model(*args)]

    def references(self):
        """PyTorch eager (unpatched) on every input set, and on the unpadded short input."""
        if self._ref is None:
            ref = [self.eager(a) for a in self.inputs]
            unpadded = None
            if len(self.lengths) > 1:
                L = self.lengths[1]
                unpadded = self.eager(self.C.truncate_inputs(self.name, self.inputs[1], L))
            self._ref = (ref, unpadded)
        return self._ref

    def torch_ms(self):
        """PyTorch eager (unpatched) median ms on the full-length input; measured once,
        before any compiled module runs (TVM's spinning worker threads would slow it)."""
        import torch

        if self._torch_ms is None:
            args = self.inputs[0]
            with torch.no_grad(), self._ctx():
                self._torch_ms = _time_ms(lambda: self.model(*args))
        return self._torch_ms
