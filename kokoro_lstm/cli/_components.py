"""The Kokoro encoder components that ``kokoro-lstm port-encoder`` ports.

Each component is a small ``nn.Module`` wrapper (:mod:`._parts`) around Kokoro's own
modules (from the ``kokoro`` package when importable, else :mod:`._kokoro_modules`), with
kokoro-tvm's function names and signatures (batch 1, static shapes)::

    text_encoder_forward(tokens int64 [1,T], lengths int64 [1], mask bool [1,T])
        -> (t_en [1,512,T],)
    duration_forward(d_en [1,512,T], style [1,128], lengths int64 [1], mask bool [1,T])
        -> (duration [1,T,50], d [1,T,640])
    f0n_forward(en [1,640,F], style [1,128], frame_lengths int64 [1])
        -> (F0 [1,2F], N [1,2F])
    f0n_forward(d [1,T,640], frame_token int64 [1,F], style [1,128], frame_lengths int64 [1])
        -> (F0 [1,2F], N [1,2F])          (--f0n-input d)
    bert_forward(input_ids int64 [1,T], attention_mask int64 [1,T]) -> (d_en [1,512,T],)

``mask`` is True at padding (Kokoro's convention: ``arange(T) >= length``).

``--f0n-input d``: f0n takes what Kokoro builds ``en`` from, ``d`` (duration's second
output) and ``frame_token`` (the token each frame copies: Kokoro's
``repeat_interleave(arange(T), durations)``, in 0..T-1; clamped), and computes
``en = d^T @ alignment`` itself (``alignment[t, f] = frame_token[f] == t``, Kokoro's
``pred_aln_trg``), so that shared's input projection can run at token rate (see
:mod:`._cuts`). T is ``--seq-len``, F ``--aligned-len``.

Semantics (``--lstm-semantics``): ``packed`` runs every LSTM on the valid prefix only
(``pack_padded_sequence`` -> LSTM -> ``pad_packed_sequence``, as Kokoro does), with the
lengths a runtime input, so padding to T never changes the valid outputs of
text_encoder, duration and bert. ``padded`` replaces pack/pad by the identity
(kokoro-tvm's old behaviour): every LSTM runs over all T steps, and the reverse
direction reads the padding first -- wrong wherever length < T.

``duration``'s predictor.lstm is packed with the text lengths (ProsodyPredictor.forward;
KModel.forward_with_tokens calls it unpacked, which is the same at length == T).
``f0n``'s ``shared`` LSTM is packed with ``frame_lengths`` (unpacked in Kokoro, where F
is always exact); the AdaIN blocks after it normalize over all F frames, so f0n's
outputs depend on the padded frames whatever the semantics: compile it at the real
frame count for exact results.
"""
from __future__ import annotations

import contextlib
import json
import os
import warnings

__all__ = ["COMPONENTS", "DEFAULT_CONFIG", "UsageError", "kokoro_modules", "load_config",
           "load_checkpoint", "build_component", "padded_packing"]

COMPONENTS = ("bert", "duration", "f0n", "text_encoder")

#: Kokoro-82M's config.json, without the vocabulary and the decoder's settings.
DEFAULT_CONFIG = {
    "dim_in": 64,
    "dropout": 0.2,
    "hidden_dim": 512,
    "max_conv_dim": 512,
    "max_dur": 50,
    "multispeaker": True,
    "n_layer": 3,
    "n_mels": 80,
    "n_token": 178,
    "style_dim": 128,
    "text_encoder_kernel_size": 5,
    "plbert": {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 2048,
        "max_position_embeddings": 512,
        "num_hidden_layers": 12,
        "dropout": 0.1,
    },
}

#: Checkpoint entries each component reads (Kokoro's .pth: one state_dict per entry).
CHECKPOINT_KEYS = {
    "text_encoder": ("text_encoder",),
    "duration": ("predictor",),
    "f0n": ("predictor",),
    "bert": ("bert", "bert_encoder"),
}

# Buffers older transformers saved that current ones rebuild (not parameters).
_IGNORABLE_UNEXPECTED = ("embeddings.position_ids",)


class UsageError(Exception):
    """A bad flag, path or file: the CLI prints one line and exits 2."""


# ----------------------------------------------------------------------------------
# Modules, config, checkpoint
# ----------------------------------------------------------------------------------
def kokoro_modules():
    """(module with Kokoro's classes, description). The real ``kokoro.modules`` when
    importable and ``KOKORO_LSTM_FORCE_OWN_MODULES`` is not set, else this package's
    copies."""
    force = os.environ.get("KOKORO_LSTM_FORCE_OWN_MODULES", "").strip().lower()
    if force in ("", "0", "false", "no"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import kokoro.modules as km
            try:
                from importlib.metadata import version

                desc = f"kokoro {version('kokoro')}"
            except Exception:  # noqa: BLE001
                desc = "kokoro"
            return km, desc
        except Exception:  # noqa: BLE001 - any failure: fall back to our copies
            pass
    from . import _kokoro_modules

    return _kokoro_modules, "kokoro_lstm.cli._kokoro_modules"


def load_config(path=None) -> dict:
    """Kokoro-82M's defaults, updated from a config.json when given."""
    cfg = json.loads(json.dumps(DEFAULT_CONFIG))
    if path is None:
        return cfg
    if not os.path.isfile(path):
        raise UsageError(f"config file not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            user = json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read config {path}: {e}") from None
    except RecursionError:  # json's decoder recurses once per nesting level
        raise UsageError(f"cannot read config {path}: nested too deeply (a Kokoro "
                         "config.json is an object of numbers and one 'plbert' object)") from None
    if not isinstance(user, dict):
        raise UsageError(f"config {path} is not a JSON object")
    user_plbert = user.get("plbert")
    if user_plbert is not None and not isinstance(user_plbert, dict):
        raise UsageError(f"config {path}: 'plbert' must be a JSON object (ALBERT's "
                         f"settings), got {user_plbert!r:.60}")
    plbert = dict(cfg["plbert"], **(user_plbert or {}))
    cfg.update(user)
    cfg["plbert"] = plbert
    check_config(cfg, f"config {path}")
    return cfg


#: Bounds of the sizes a config may set: far above Kokoro-82M's (in DEFAULT_CONFIG),
#: low enough that building a component cannot exhaust memory first.
CONFIG_BOUNDS = {
    "hidden_dim": 8192, "style_dim": 8192, "n_layer": 64, "max_dur": 10000,
    "n_token": 1_000_000, "text_encoder_kernel_size": 255,
}
PLBERT_BOUNDS = {
    "hidden_size": 8192, "num_attention_heads": 256, "intermediate_size": 32768,
    "max_position_embeddings": 65536, "num_hidden_layers": 128,
}


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_config(cfg, where="config"):
    """UsageError (one line) for a value the components cannot be built with."""
    def bad(key, v, what):
        raise UsageError(f"{where}: '{key}' must be {what}, got {v!r:.60}")

    for k, hi in CONFIG_BOUNDS.items():
        v = cfg.get(k)
        if not _is_int(v) or not 1 <= v <= hi:
            bad(k, v, f"a positive integer of at most {hi} (Kokoro-82M: {DEFAULT_CONFIG[k]})")
    if cfg["hidden_dim"] % 2:
        bad("hidden_dim", cfg["hidden_dim"], "even (the LSTMs have hidden_dim // 2 units "
            "per direction)")
    if cfg["text_encoder_kernel_size"] % 2 == 0:
        bad("text_encoder_kernel_size", cfg["text_encoder_kernel_size"], "odd (TextEncoder's "
            "convolutions pad (kernel_size - 1) // 2 per side, which keeps the length only for "
            "odd sizes)")
    d = cfg.get("dropout")
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d < 1:
        bad("dropout", d, "a number in [0, 1)")
    pb = cfg["plbert"]
    for k, hi in PLBERT_BOUNDS.items():
        v = pb.get(k)
        if not _is_int(v) or not 1 <= v <= hi:
            bad(f"plbert.{k}", v, f"a positive integer of at most {hi} "
                f"(Kokoro-82M: {DEFAULT_CONFIG['plbert'][k]})")
    if pb["hidden_size"] % pb["num_attention_heads"]:
        bad("plbert.hidden_size", pb["hidden_size"], "a multiple of "
            f"plbert.num_attention_heads ({pb['num_attention_heads']})")
    d = pb.get("dropout", 0.0)
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d < 1:
        bad("plbert.dropout", d, "a number in [0, 1)")


def load_checkpoint(path) -> dict:
    """A Kokoro .pth: {'bert': sd, 'bert_encoder': sd, 'predictor': sd, ...}."""
    import torch

    if not os.path.isfile(path):
        raise UsageError(f"checkpoint file not found: {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001
        raise UsageError(f"cannot read checkpoint {path}: {_load_error(e)}") from None
    if not isinstance(ckpt, dict) or not all(isinstance(v, dict) for v in ckpt.values()):
        raise UsageError(f"checkpoint {path} is not a Kokoro .pth (a dict of per-component "
                         "state dicts: 'bert', 'bert_encoder', 'predictor', 'text_encoder', "
                         "'decoder')")
    # Entry names and state-dict keys are strings in a Kokoro .pth; another key would
    # fail later inside string operations, so it is refused here, named.
    for entry, sd in ckpt.items():
        if not isinstance(entry, str):
            raise UsageError(f"checkpoint {path} is not a Kokoro .pth: entry key {entry!r:.60} "
                             "is not a string (entries are named 'bert', 'predictor', ...)")
        for k in sd:
            if not isinstance(k, str):
                raise UsageError(f"checkpoint {path}: entry '{entry}' has the key {k!r:.60}, "
                                 "not a string (state dict keys are parameter names)")
    return ckpt


def _load_error(e) -> str:
    """torch.load's error as one line, without its advice to retry with
    weights_only=False (which runs arbitrary code from the file)."""
    import re

    text = " ".join(str(e).split())
    if "Weights only load failed" in text:
        m = re.search(r"WeightsUnpickler error: (.*?)(?: Check the documentation| Please use|$)",
                      text)
        detail = m.group(1).strip().rstrip(".") if m else ""
        if detail.startswith("Unsupported global"):
            return (f"it holds Python objects other than tensors ({detail}); a Kokoro .pth "
                    "holds only state dicts, so this file is not one (or is not safe to load)")
        return ("not a PyTorch checkpoint, or a corrupt one"
                + (f" ({detail})" if detail else ""))
    if "failed reading zip archive" in text or "failed finding central directory" in text:
        return "not a PyTorch checkpoint, or a corrupt or truncated one (bad zip archive)"
    first = re.split(r"(?<=\.) ", text, maxsplit=1)[0] if text else type(e).__name__
    return first[:300]


def default_checkpoint():
    """Kokoro-82M's kokoro-v1_0.pth from the Hugging Face cache, or downloaded (what
    kokoro-tvm does without --no-weights). UsageError when unavailable."""
    hint = "pass --checkpoint PATH (a Kokoro .pth) or --no-weights (random weights)"
    try:
        # imported before the log level is set below: huggingface_hub configures its
        # logger when its submodules are first imported
        from huggingface_hub import hf_hub_download, try_to_load_from_cache
    except ImportError:
        raise UsageError(f"no weights given and huggingface_hub is not installed: {hint}") from None
    import logging

    repo, fname = "hexgrad/Kokoro-82M", "kokoro-v1_0.pth"
    log = logging.getLogger("huggingface_hub")
    level = log.level
    log.setLevel(logging.ERROR)  # no retry chatter
    try:
        cached = try_to_load_from_cache(repo, fname)
        if isinstance(cached, str) and os.path.isfile(cached):
            return cached
        return hf_hub_download(repo_id=repo, filename=fname)
    except Exception as e:  # noqa: BLE001 - offline, no such repo, ...
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"no weights given and {repo}/{fname} could not be fetched "
                         f"({msg}): {hint}") from None
    finally:
        log.setLevel(level)


def _strip_prefix(sd):
    return {(k[7:] if k.startswith("module.") else k): v for k, v in sd.items()}


def _load_strict(module, sd, entry):
    """load_state_dict(strict) after dropping a `module.` prefix; UsageError listing
    the missing / unexpected keys."""
    sd = _strip_prefix(sd)
    want = module.state_dict()
    missing = [k for k in want if k not in sd]
    unexpected = [k for k in sd if k not in want and k not in _IGNORABLE_UNEXPECTED]
    bad_shape = [f"{k} {tuple(sd[k].shape)} != {tuple(want[k].shape)}" for k in want
                 if k in sd and hasattr(sd[k], "shape") and tuple(sd[k].shape) != tuple(want[k].shape)]

    def few(keys):
        return ", ".join(keys[:6]) + (f", ... ({len(keys)} in all)" if len(keys) > 6 else "")

    problems = []
    if missing:
        problems.append(f"{len(missing)} missing key(s): {few(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected key(s): {few(unexpected)}")
    if bad_shape:
        problems.append(f"{len(bad_shape)} shape mismatch(es): {few(bad_shape)}")
    if problems:
        raise UsageError(f"checkpoint entry '{entry}' does not match the model: "
                         + "; ".join(problems))
    module.load_state_dict({k: v for k, v in sd.items() if k in want}, strict=True)


def _entry(ckpt, key):
    if key not in ckpt:
        raise UsageError(f"checkpoint has no '{key}' entry (it has: {', '.join(sorted(ckpt))})")
    return ckpt[key]


@contextlib.contextmanager
def padded_packing():
    """``--lstm-semantics padded``: pack_padded_sequence / pad_packed_sequence become
    the identity (kokoro-tvm's old export patch), so every LSTM runs over all T steps."""
    import torch.nn.utils.rnn as rnn

    orig = rnn.pack_padded_sequence, rnn.pad_packed_sequence

    def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):  # noqa: A002
        return input

    def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
        return sequence, None

    rnn.pack_padded_sequence, rnn.pad_packed_sequence = pack_padded_sequence, pad_packed_sequence
    try:
        yield
    finally:
        rnn.pack_padded_sequence, rnn.pad_packed_sequence = orig


# ----------------------------------------------------------------------------------
# The components
# ----------------------------------------------------------------------------------
def build_component(name, cfg, km, ckpt=None, seed=0, f0n_input="en"):
    """The component's nn.Module (eval, no grad), random init (seeded) or loaded
    strictly from ``ckpt`` (a Kokoro .pth dict). ``f0n_input``: "en" (kokoro-tvm's
    signature) or "d" (d and frame_token, see the module docstring)."""
    import torch

    from ._parts import PARTS as classes

    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight_norm deprecation, LSTM dropout with 1 layer
        if name == "text_encoder":
            te = km.TextEncoder(channels=cfg["hidden_dim"],
                                kernel_size=cfg["text_encoder_kernel_size"],
                                depth=cfg["n_layer"], n_symbols=cfg["n_token"])
            if ckpt is not None:
                _load_strict(te, _entry(ckpt, "text_encoder"), "text_encoder")
            model = classes[name](te)
        elif name in ("duration", "f0n"):
            pred = km.ProsodyPredictor(style_dim=cfg["style_dim"], d_hid=cfg["hidden_dim"],
                                       nlayers=cfg["n_layer"], max_dur=cfg["max_dur"],
                                       dropout=cfg["dropout"])
            if ckpt is not None:
                _load_strict(pred, _entry(ckpt, "predictor"), "predictor")
            model = classes["f0n_d" if name == "f0n" and f0n_input == "d" else name](pred)
        elif name == "bert":
            try:
                from transformers import AlbertConfig
            except ImportError as e:
                raise UsageError(f"component 'bert' needs transformers, which is not "
                                 f"installed ({e}): pip install transformers (the [bert] extra: "
                                 f"pip install '.[bert]' in a clone of kokoro_lstm)") from None
            bert = km.CustomAlbert(AlbertConfig(vocab_size=cfg["n_token"], **cfg["plbert"]))
            enc = torch.nn.Linear(bert.config.hidden_size, cfg["hidden_dim"])
            if ckpt is not None:
                _load_strict(bert, _entry(ckpt, "bert"), "bert")
                _load_strict(enc, _entry(ckpt, "bert_encoder"), "bert_encoder")
            model = classes[name](bert, enc)
        else:
            raise UsageError(f"unknown component {name!r}")
    model.eval().requires_grad_(False)
    return model


def example_inputs(name, cfg, T, length, gen, n_tokens=None):
    """Inputs of component ``name`` at static length T with ``length`` valid steps
    (random values everywhere, padding included; ``gen`` a torch.Generator).
    ``n_tokens``: f0n with ``--f0n-input d``, the static token count of d (frame_token:
    a random non-decreasing map of the T frames onto them)."""
    import torch

    ln = torch.tensor([length], dtype=torch.int64)
    valid = torch.arange(T)[None, :] < length
    if name == "text_encoder":
        return (torch.randint(0, cfg["n_token"], (1, T), generator=gen), ln, ~valid)
    if name == "duration":
        return (torch.randn(1, cfg["hidden_dim"], T, generator=gen),
                torch.randn(1, cfg["style_dim"], generator=gen), ln, ~valid)
    if name == "f0n" and n_tokens:
        ft = torch.sort(torch.randint(0, n_tokens, (1, T), generator=gen)).values
        return (torch.randn(1, n_tokens, cfg["hidden_dim"] + cfg["style_dim"], generator=gen),
                ft, torch.randn(1, cfg["style_dim"], generator=gen), ln)
    if name == "f0n":
        return (torch.randn(1, cfg["hidden_dim"] + cfg["style_dim"], T, generator=gen),
                torch.randn(1, cfg["style_dim"], generator=gen), ln)
    if name == "bert":
        return (torch.randint(0, cfg["n_token"], (1, T), generator=gen), valid.to(torch.int64))
    raise UsageError(f"unknown component {name!r}")


def truncate_inputs(name, inputs, length):
    """The same inputs without the padding (static length = ``length``)."""
    if name == "text_encoder":
        tok, ln, mask = inputs
        return (tok[:, :length], ln, mask[:, :length])
    if name == "duration":
        d_en, style, ln, mask = inputs
        return (d_en[..., :length], style, ln, mask[:, :length])
    if name == "f0n" and len(inputs) == 4:
        d, ft, style, ln = inputs
        return (d, ft[:, :length], style, ln)
    if name == "f0n":
        en, style, ln = inputs
        return (en[..., :length], style, ln)
    if name == "bert":
        ids, am = inputs
        return (ids[:, :length], am[:, :length])
    raise UsageError(f"unknown component {name!r}")


def valid_region(name, output_index, array, length):
    """The part of an output that belongs to the first ``length`` steps (None where
    the output has no such part: f0n, whose AdaIN norms see every frame)."""
    if name in ("text_encoder", "bert"):
        return array[..., :length]
    if name == "duration":
        return array[:, :length]
    return None
