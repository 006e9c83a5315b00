"""Exportable packing: ``pack_padded_sequence`` -> patched LSTM -> ``pad_packed_sequence``
as one packed op (:func:`exportable_packing`, :class:`ExportPackedSequence`)."""
from __future__ import annotations

import contextlib
import sys
import threading
import weakref

import torch
import torch.nn.utils.rnn as _rnn_utils
from torch import Tensor

__all__ = ["ExportPackedSequence", "exportable_packing"]

# The real functions, captured before any exportable_packing() patches them. Other
# modules reach them as attributes of this one (packing._orig_*): a module holding
# them as globals would have them replaced by _patch_names.
_orig_pack_padded_sequence = _rnn_utils.pack_padded_sequence
_orig_pad_packed_sequence = _rnn_utils.pad_packed_sequence


class ExportPackedSequence:
    """What ``pack_padded_sequence`` returns under :func:`exportable_packing`: the
    padded tensor and the lengths, unchanged. A patched LSTM (:class:`KokoroLSTM`)
    consumes it with a packed op; ``pad_packed_sequence`` unwraps it.

    ``padded`` is [B, T, *] if ``batch_first`` else [T, B, *]; ``lengths`` is an int64
    tensor [B] in the batch's own order. ``masked``: positions past each length are
    already zero (true for an LSTM's output).
    """
    __slots__ = ("padded", "lengths", "batch_first", "masked")

    def __init__(self, padded, lengths, batch_first, masked=False):
        self.padded = padded
        self.lengths = lengths
        self.batch_first = batch_first
        self.masked = masked

    def __getattr__(self, name):
        raise AttributeError(
            f"'{name}': under kokoro_lstm.torch_ops.exportable_packing(), "
            "pack_padded_sequence returns a stand-in that only a patched LSTM "
            "(patch_lstm_modules) and pad_packed_sequence can consume; it has no "
            f"PackedSequence attribute '{name}'. Was this module patched?")

    def __repr__(self):
        return (f"ExportPackedSequence(padded={tuple(self.padded.shape)}, "
                f"batch_first={self.batch_first})")


def _time_mask(lengths, T, batch_first, ndim):
    """Bool mask, True at valid steps, broadcastable to a padded tensor."""
    steps = torch.arange(T, device=lengths.device)
    valid = steps.unsqueeze(0) < lengths.unsqueeze(1)  # [B, T]
    if not batch_first:
        valid = valid.transpose(0, 1)  # [T, B]
    return valid.reshape(tuple(valid.shape) + (1,) * (ndim - 2))


def _export_pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """pack_padded_sequence under exportable_packing(): keeps padded tensor + lengths.

    enforce_sorted is not checked (the packed ops handle any order, and checking it
    would be data-dependent); lengths must be in 1..T as for PyTorch. A thread not
    inside exportable_packing() gets the real function."""
    if not _packing_here():
        return _orig_pack_padded_sequence(input, lengths, batch_first=batch_first,
                                          enforce_sorted=enforce_sorted)
    if isinstance(lengths, Tensor):
        lengths = lengths.to(dtype=torch.int64)
    else:
        lengths = torch.as_tensor(lengths, dtype=torch.int64)
    if input.dim() < 2:
        raise ValueError("pack_padded_sequence: input must be at least 2-D")
    if lengths.dim() != 1 or lengths.shape[0] != input.shape[0 if batch_first else 1]:
        raise ValueError("pack_padded_sequence: expected one length per batch entry, got "
                         f"lengths of shape {tuple(lengths.shape)} for input "
                         f"{tuple(input.shape)} (batch_first={batch_first})")
    return ExportPackedSequence(input, lengths, bool(batch_first))


def _export_pad_packed_sequence(sequence, batch_first=False, padding_value=0.0,
                                total_length=None):
    """pad_packed_sequence under exportable_packing().

    For a stand-in: returns (padded, lengths) with padded's time dimension equal to the
    padded input's T that went into pack_padded_sequence (not max(lengths), which would
    be data-dependent), or total_length if given. Positions past each length hold
    padding_value, like PyTorch. A real PackedSequence goes to the real function."""
    if not isinstance(sequence, ExportPackedSequence):
        return _orig_pad_packed_sequence(sequence, batch_first, padding_value, total_length)
    out = sequence.padded
    if sequence.batch_first != bool(batch_first):
        out = out.transpose(0, 1)
    tdim = 1 if batch_first else 0
    T = out.shape[tdim]
    lengths = sequence.lengths
    if not sequence.masked or padding_value != 0:
        mask = _time_mask(lengths, T, bool(batch_first), out.dim())
        out = torch.where(mask, out, torch.full((), padding_value, dtype=out.dtype,
                                                device=out.device))
    if total_length is not None:
        if total_length < T:
            if not _is_tracing() and lengths.numel() and int(lengths.max()) > total_length:
                raise ValueError(
                    "Expected total_length to be at least the length of the longest "
                    f"sequence in input, but got total_length={total_length} and max "
                    f"sequence length being {int(lengths.max())}")
            out = out.narrow(tdim, 0, total_length)
        elif total_length > T:
            shape = list(out.shape)
            shape[tdim] = total_length - T
            out = torch.cat([out, out.new_full(shape, padding_value)], dim=tdim)
    return out, lengths


def _is_tracing():
    if torch.compiler.is_compiling():
        return True
    try:
        from torch._guards import detect_fake_mode
        return detect_fake_mode() is not None
    except Exception:  # pragma: no cover
        return False


_packing_lock = threading.RLock()
_packing_depth = 0
_packing_restore: list = []
# A module global is one object for every thread, so the globals stay patched while
# any thread is inside exportable_packing(); the stand-in pack_padded_sequence looks
# at this thread's own depth and gives every other thread the real function.
_packing_local = threading.local()


def _packing_here() -> bool:
    """True when the calling thread is inside exportable_packing()."""
    return getattr(_packing_local, "depth", 0) > 0


# module name -> (weakref to the module, names of its globals that held a real
# function). Scanning a module's globals costs ~10 us and there may be thousands of
# modules, so each module is scanned once.
_scanned: dict = {}


def _patch_names():
    """Replace the two functions wherever a module holds them as a global: the
    torch.nn.utils.rnn module itself (nn.utils.rnn.X lookups) and any module that did
    `from torch.nn.utils.rnn import pack_padded_sequence` (under any name)."""
    repl = {id(_orig_pack_padded_sequence): _export_pack_padded_sequence,
            id(_orig_pad_packed_sequence): _export_pad_packed_sequence}
    restore = []
    own = globals()  # keeps the real functions in _orig_*
    for modname, mod in list(sys.modules.items()):
        hit = _scanned.get(modname)
        if hit is not None and hit[0]() is mod:
            names = hit[1]
        else:
            d = getattr(mod, "__dict__", None)
            names = ()
            if isinstance(d, dict) and d is not own:
                try:
                    names = tuple(k for k, v in list(d.items())
                                  if v is _orig_pack_padded_sequence
                                  or v is _orig_pad_packed_sequence)
                except Exception:  # pragma: no cover - exotic module dicts
                    names = ()
            try:
                _scanned[modname] = (weakref.ref(mod), names)
            except TypeError:  # pragma: no cover - not weak-referenceable: rescan
                pass
        if not names:
            continue
        d = mod.__dict__
        for k in names:
            v = d.get(k)
            if id(v) in repl and (v is _orig_pack_padded_sequence
                                  or v is _orig_pad_packed_sequence):
                d[k] = repl[id(v)]
                restore.append((d, k, v))
    return restore


def _prime_dynamo():
    """TorchDynamo (strict export) skips torch.nn.utils.rnn.pack_padded_sequence by
    name, resolving its names to objects once, lazily. Resolve them now, while they
    are the real functions, so that the replacements are traced (inlined) instead."""
    try:
        from torch._dynamo import trace_rules
        trace_rules.get_torch_obj_rule_map()
    except Exception:  # pragma: no cover - private API; only strict export needs it
        pass


@contextlib.contextmanager
def exportable_packing():
    """Make ``pack_padded_sequence`` -> patched LSTM -> ``pad_packed_sequence`` exportable.

    Inside the context, ``torch.nn.utils.rnn.pack_padded_sequence`` (also as
    ``nn.utils.rnn.pack_padded_sequence`` and any module-level
    ``from torch.nn.utils.rnn import pack_padded_sequence``) returns an
    :class:`ExportPackedSequence` stand-in carrying the padded tensor and the lengths
    tensor; a patched LSTM (see :func:`patch_lstm_modules`) runs the packed op on it
    (lengths become a real input of the exported program, so one static-shape program
    serves every length), and ``pad_packed_sequence`` unwraps it.

    Difference from eager PyTorch: without ``total_length``, ``pad_packed_sequence``
    pads to the T of the padded tensor given to ``pack_padded_sequence`` instead of
    max(lengths) (data-dependent under export). The values are the same; only the
    trailing all-padding steps are kept. Modules that copy the result into a
    full-length buffer (Kokoro's TextEncoder, DurationEncoder, ProsodyPredictor) or
    pass total_length behave exactly as in eager PyTorch. ``enforce_sorted`` is not
    checked (any order gives correct results).

    The original functions are restored on exit. Works in eager mode too. Only the
    thread that entered the context gets the stand-in: other threads meanwhile run
    ``pack_padded_sequence`` as usual.
    """
    global _packing_depth, _packing_restore
    with _packing_lock:
        if _packing_depth == 0:
            _prime_dynamo()
            _packing_restore = _patch_names()
        _packing_depth += 1
    _packing_local.depth = getattr(_packing_local, "depth", 0) + 1
    try:
        yield
    finally:
        _packing_local.depth -= 1
        with _packing_lock:
            _packing_depth -= 1
            if _packing_depth == 0:
                for d, k, v in reversed(_packing_restore):
                    d[k] = v
                _packing_restore = []

