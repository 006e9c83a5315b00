"""Apache TVM Relax lowering of LSTMs: the kokoro ops and aten ``lstm.input``.

Upstream's built-in converter unrolls the LSTM per time step (the IR grows with T),
returns no h_n/c_n (indexing its result with ``[1]`` silently yields the output
sequence) and refuses ``num_layers > 1``. This package's converters return the full
``(output, h_n, c_n)`` tuple for any layer count, both directions, with per-sequence
lengths honored (the kokoro ``*_packed`` ops: ``pack_padded_sequence -> nn.LSTM ->
pad_packed_sequence`` semantics).

Usage::

    import kokoro_lstm.tvm as kt
    mod = kt.from_exported_program(torch.export.export(model, args), target="llvm")
    ex = tvm.compile(mod, target="llvm")

or, with upstream's importer (note: upstream decomposes ``aten.lstm`` unless you pass
``run_ep_decomposition=False`` or decompose yourself without it; this package's
:func:`from_exported_program` does that for you)::

    mod = tvm.relax.frontend.torch.from_exported_program(
        ep, custom_convert_map=kt.convert_map("auto", target="llvm"))

Methods (``lstm_method`` / ``method``):

``native``
    ``R.call_dps_packed("kokoro_lstm.lstm_forward_v2", ...)`` into the kokoro_lstm C
    engine, a C function registered with tvm-ffi from C. The IR is one call,
    whatever T and the layer count. CPU and cuda targets (on CUDA tensors the engine
    runs its CUDA backend, on TVM's stream). Tensors reach the engine
    zero-copy; packed weights are cached across calls (see
    :mod:`kokoro_lstm.tvm._native`). The lowering attaches the engine to the module
    (:func:`attach_engine`), so TVM's own ``ex.export_library`` (or
    :func:`export_library`) links it: the library runs where TVM's runtime runs,
    without Python, with the BLAS file beside it (:func:`export_library` writes it;
    :func:`copy_blas` after a plain export).
``tir``
    One TIR PrimFunc per layer with a loop over time (the IR does not grow with T):
    the input projection is hoisted out of the time loop as one register-blocked
    matmul, then the recurrence runs in parallel over (direction, sequence),
    vectorized over units; lengths honored. Self-contained (no runtime dependency).
    Written for CPU (llvm/c) targets.
``relax``
    Per-time-step Relax ops, unrolled (the IR grows with T). A baseline.
``topi``
    Per-time-step TOPI computes through ``emit_te``, unrolled. The baseline
    (kokoro-tvm's default).
``auto``
    :func:`select_method`: ``native`` for CPU targets when the extension loads, else
    ``tir`` for CPU targets, else ``relax``.
``mps``
    Accepted as a name only, to fail with a clear error: it needs macOS with Metal.

Dense ops (matmul, linear, conv1d, depthwise conv1d_transpose): :func:`rewrite_dense`
replaces them by the engine's OpenBLAS externs (see :mod:`kokoro_lstm.tvm.dense`);
``kokoro-lstm port-encoder --dense-method native`` (the default) applies it.

Noise: ``kokoro::random_uniform`` / ``random_normal`` (:mod:`kokoro_lstm.noise`) become
calls of the engine's ``kokoro_lstm.random_v1`` (the same numbers as in PyTorch);
:func:`with_fresh_seed` adds a function that draws a fresh seed per call (see
:mod:`kokoro_lstm.tvm._noise`).

TVM is imported lazily: ``import kokoro_lstm.tvm`` imports neither tvm nor torch.
"""
from __future__ import annotations

from . import _native
from .dense import DENSE_METHODS, count_dense_calls, rewrite_dense, select_dense_method
from ._native import FUNC_NAME as NATIVE_FUNC_NAME
from ._schedule import cpu_pipeline, prepare
from ._native import cache_info, clear_cache
from ._noise import with_fresh_seed

__all__ = ["METHODS", "NATIVE_FUNC_NAME", "select_method", "convert_map",
           "from_exported_program", "decomposition_table", "register_native", "ir_size",
           "clear_cache", "cache_info", "export_library", "export_options", "copy_blas",
           "uses_engine",
           "attach_engine",
           "DENSE_METHODS", "select_dense_method", "rewrite_dense", "count_dense_calls",
           "cpu_pipeline", "prepare", "with_fresh_seed"]

#: Every accepted ``lstm_method`` name.
METHODS = ("auto", "native", "tir", "relax", "topi", "mps")
_CPU_KINDS = ("llvm", "c")

_MPS_ERROR = ("lstm_method='mps' needs macOS with Metal (MPSGraph's LSTM), which is not "
              "available on this platform; kokoro_lstm does not implement it. Use "
              "'native' or 'tir' for CPU targets (or 'relax'/'topi').")


def register_native(*, force_import: bool = False) -> bool:
    """Register the ``native`` method's runtime function (see :mod:`._native`)."""
    return _native.register(force_import=force_import)


# Registered at `import kokoro_lstm.tvm`: at once if tvm_ffi is loaded, else as soon
# as it is (a post-import hook; importing tvm_ffi here would import torch).
register_native()


def _require_native(what, kind, kinds, supported, use_elsewhere, use_without):
    """Raises unless the engine can run ``what`` here: a target of ``kinds`` (words such
    as "a CPU target"; ``supported`` says whether ``kind`` is one, else ValueError naming
    ``use_elsewhere``) and the extension loaded (else RuntimeError, ``use_without``)."""
    if not supported:
        raise ValueError(f"{what} runs the kokoro_lstm C engine; target {kind!r} is not "
                         f"{kinds} (use {use_elsewhere})")
    if not _native.available():
        raise RuntimeError(f"{what} needs the kokoro_lstm C extension, which failed to load "
                           f"(use {use_without})")


def _target_info(target):
    """(kind name, is_cpu) for a target given as str, dict, tvm.target.Target or None."""
    if target is None:
        return "llvm", True
    kind = None
    if isinstance(target, str):
        s = target.strip()
        if not s.startswith("{"):
            kind = s.split()[0].split("/")[0] if s else "llvm"
    elif isinstance(target, dict):
        kind = target.get("kind")
    if kind is None:
        import tvm

        t = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
        kind = t.kind.name
        return kind, kind in _CPU_KINDS or "cpu" in list(t.keys)
    return kind, kind in _CPU_KINDS


def select_method(target="llvm", method: str = "auto") -> str:
    """The lowering method to use for ``target``.

    ``method="auto"`` picks ``"native"`` for CPU targets (llvm, c) and cuda when the
    kokoro_lstm C extension loads, else ``"tir"`` for CPU targets, else ``"relax"``. An
    explicit method is validated against the target and returned: ``"native"`` needs a
    CPU or cuda target and the extension; ``"mps"`` always raises ``NotImplementedError`` (it needs
    macOS with Metal); unknown names raise ``ValueError``.
    """
    if method not in METHODS:
        raise ValueError(f"unknown lstm_method {method!r}; expected one of {METHODS}")
    if method == "mps":
        raise NotImplementedError(_MPS_ERROR)
    kind, is_cpu = _target_info(target)
    on_engine = is_cpu or kind == "cuda"  # the engine's CPU or CUDA backend
    if method == "auto":
        if on_engine and _native.available():
            return "native"
        return "tir" if is_cpu else "relax"
    if method == "native":
        _require_native("lstm_method='native'", kind, "a CPU or cuda target", on_engine,
                        "'relax'", "'tir'" if is_cpu else "'relax'")
    if method == "tir" and not is_cpu:
        raise ValueError(f"lstm_method='tir' emits a CPU kernel (parallel/vectorized loops); "
                         f"target {kind!r} is not a CPU target (use 'relax' or 'topi')")
    return method


def convert_map(method: str = "auto", target="llvm", *, _bound_names=None) -> dict:
    """``custom_convert_map`` for ``tvm.relax.frontend.torch.from_exported_program``.

    Keys: ``lstm_forward.default``, ``lstm_forward_bidirectional.default``,
    ``lstm_forward_packed.default``, ``lstm_forward_packed_bidirectional.default``,
    ``lstm_forward_gated.default`` (native only; layer 0's gate input given or augmented
    by the caller), ``random_uniform.default`` and ``random_normal.default`` (counter-based
    noise, :mod:`kokoro_lstm.noise`: ``call_dps_packed("kokoro_lstm.random_v1")``) (the
    ``kokoro::`` ops of :mod:`kokoro_lstm.torch_ops`) and ``lstm.input`` (aten;
    present only when the program was not decomposed: pass
    ``run_ep_decomposition=False`` or decompose with :func:`decomposition_table`).
    Each LSTM converter ``fn(node, importer)`` returns the Relax tuple
    ``(output, h_n, c_n)``.
    """
    from . import _convert

    return _convert.build_convert_map(select_method(target, method), _bound_names)


def decomposition_table():
    """``torch.export.default_decompositions()`` without ``aten.lstm.input``, so that
    ``ep.run_decompositions(decomposition_table())`` keeps each LSTM as one node."""
    import torch

    table = torch.export.default_decompositions()
    for op in (torch.ops.aten.lstm.input, torch.ops.aten.lstm.data):
        if op in table:
            del table[op]
    return table


def _bound_placeholders(ep, keep_params_as_input: bool):
    """Names of the placeholders that upstream binds as constants."""
    from torch.export.graph_signature import InputKind

    kinds = {InputKind.BUFFER, InputKind.CONSTANT_TENSOR}
    if not keep_params_as_input:
        kinds.add(InputKind.PARAMETER)
    return frozenset(s.arg.name for s in ep.graph_signature.input_specs if s.kind in kinds)


def from_exported_program(ep, *, lstm_method: str = "auto", target="llvm",
                          keep_params_as_input: bool = False, run_ep_decomposition: bool = True,
                          custom_convert_map=None, **kwargs):
    """``tvm.relax.frontend.torch.from_exported_program`` with this package's LSTM
    converters.

    Decomposes the program (if ``run_ep_decomposition``) with every default
    decomposition except ``aten.lstm``, then imports it with
    ``convert_map(lstm_method, target)`` (entries of ``custom_convert_map`` win).
    ``target`` only selects the method (see :func:`select_method`); compile with
    ``tvm.compile(mod, target=...)`` as usual. Other keyword arguments go to upstream's
    importer (``unwrap_unit_return_tuple``, ``no_bind_return_tuple``).
    """
    from tvm.relax.frontend.torch import from_exported_program as _upstream

    method = select_method(target, lstm_method)
    if run_ep_decomposition:
        ep = ep.run_decompositions(decomposition_table())
    cmap = convert_map(method, target,
                       _bound_names=_bound_placeholders(ep, keep_params_as_input))
    cmap.update(custom_convert_map or {})
    mod = _upstream(ep, keep_params_as_input=keep_params_as_input, custom_convert_map=cmap,
                    run_ep_decomposition=False, **kwargs)
    return _maybe_attach(mod) if method == "native" else mod


def _maybe_attach(mod):
    """``attach_engine(mod)`` on Linux, ``mod`` as it is elsewhere; on Linux a failure
    (no compiler, no BLAS) warns and leaves ``mod`` as it is too
    (:func:`export_library` still links the engine, or says what is missing)."""
    import sys
    import warnings

    if not sys.platform.startswith("linux"):  # no GNU ld: export_library links the engine
        return mod
    try:
        return attach_engine(mod)
    except Exception as e:  # noqa: BLE001 - a missing linker or BLAS: not fatal here
        warnings.warn(f"kokoro_lstm: the engine is not attached to the module, so a plain "
                      f"export_library will lack it (use kokoro_lstm.tvm.export_library): {e}",
                      RuntimeWarning, stacklevel=3)
        return mod


def attach_engine(mod):
    """``mod`` (a Relax IRModule) carrying the kokoro_lstm engine: ``tvm.compile``
    imports it into the program as a static-library module, so that TVM's own
    ``ex.export_library(path)`` links the engine (and its BLAS loader) into the library,
    which then runs where kokoro_lstm is not installed, given the BLAS file beside it
    (:func:`copy_blas`) or on the machine that exported it. :func:`from_exported_program`
    (``native``) and :func:`rewrite_dense` call it; call it yourself on modules you
    lower with upstream's importer and :func:`convert_map`. Linux (GNU ld) only.

    Creating a VM from such a program in-process (``relax.VirtualMachine(ex, dev)``)
    links it first (TVM's ``Executable.jit``): that needs the C compiler that
    ``export_library`` needs."""
    from ._link import attach_engine as _attach

    return _attach(mod)


def ir_size(mod) -> dict:
    """Size of a module's printed TVMScript: {"lines": ..., "chars": ...}."""
    text = mod.script(show_meta=False) if hasattr(mod, "script") else str(mod)
    return {"lines": text.count("\n") + 1, "chars": len(text)}


def uses_engine(ex) -> bool:
    """Whether a compiled module (``tvm.compile`` result) calls the kokoro_lstm engine."""
    try:
        text = ex.as_text()
    except Exception:  # noqa: BLE001 - not a VM executable: assume it may
        return True
    return "kokoro_lstm." in text


def export_options() -> dict:
    """Keyword arguments for ``ex.export_library(path, **export_options())`` that link
    the engine into the exported library, so that it runs without Python:

    * ``addons``: ``kokoro_lstm/lib/kokoro_lstm_tvm.o``, the engine (core, kernels,
      tvm-ffi glue) as one relocatable object with hidden symbols, whose constructor
      registers its functions when the library is loaded; and its BLAS loader
      (:func:`~kokoro_lstm.tvm._link.loader_object`), which finds the OpenBLAS the engine
      was built against when the library is loaded (in the process, beside the library,
      on the dynamic linker's path, or where it is installed now), so that the library
      names no BLAS in its ``NEEDED`` list; a one-line
      :class:`~kokoro_lstm.tvm._link.BlasNotFound` names what to install when it is
      missing here;
    * ``options``: ``-lpthread -ldl -lm``.

    The BLAS file itself is not written: :func:`export_library` copies it beside the
    library (:func:`copy_blas`).
    """
    import sys

    from ._link import engine_object, loader_object

    # TVM puts options before the objects, so with --as-needed (a distribution default)
    # the linker would drop the libraries the engine object needs: keep them.
    keep = ["-Wl,--no-as-needed"] if sys.platform.startswith("linux") else []
    return {"addons": [engine_object(), loader_object()],
            "options": keep + ["-lpthread", "-ldl", "-lm"]}


def copy_blas(folder) -> str:
    """Writes the OpenBLAS the engine calls into ``folder`` (under its soname:
    ``libscipy_openblas.so`` or ``libopenblas.so.0``), where a library exported into that
    folder finds it when loaded on another machine; returns the file's path. Needed
    after TVM's plain ``ex.export_library``; :func:`export_library` does it."""
    from ._link import copy_blas as _copy

    return _copy(folder)


def export_library(ex, path, *, copy_blas: bool = True, **kwargs):
    """``ex.export_library(path, **kwargs)``, linking the engine into the library when
    the module calls it (see :func:`export_options`) and does not carry it already
    (:func:`attach_engine`: then this is plain ``ex.export_library``), and, when it calls
    the engine and ``copy_blas`` is true, writing the engine's OpenBLAS beside the library
    (:func:`copy_blas`). The folder then runs where TVM's runtime (``libtvm_runtime`` +
    ``libtvm_ffi``) runs, copied anywhere: the library's ``NEEDED`` list names no path
    and no BLAS (docs/deployment.md)."""
    import os

    from ._link import carries_engine
    from ._link import copy_blas as _copy_blas

    engine = uses_engine(ex)
    if engine and not carries_engine(getattr(ex, "mod", ex)):
        opts = export_options()
        kwargs["addons"] = list(kwargs.get("addons") or []) + opts["addons"]
        extra = kwargs.get("options") or []
        kwargs["options"] = (list(extra) if isinstance(extra, (list, tuple)) else [extra]) + opts["options"]
    result = ex.export_library(str(path), **kwargs)
    if engine and copy_blas:
        _copy_blas(os.path.dirname(os.path.abspath(str(path))))
    return result
