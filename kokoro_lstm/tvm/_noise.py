"""Counter-based noise in compiled Relax modules (see :mod:`kokoro_lstm.noise`).

* :func:`convert_map`: converters for ``torch.ops.kokoro.random_uniform`` /
  ``random_normal`` (merged into :func:`kokoro_lstm.tvm.convert_map`), each
  ``call_dps_packed("kokoro_lstm.random_v1", [config, seed], float32 shape)`` into the
  engine (src/tvm/kl_tvm_random.c): the same numbers as the op in PyTorch, bit for bit.
  The draw is a pure function of (seed, stream, shape), so the compiler may merge or
  move such calls freely.
* :func:`with_fresh_seed`: adds a function without the seed argument that draws a new
  seed per call from ``kokoro_lstm.fresh_seed_v1`` (never the same twice in a process)
  and calls the seeded one: fresh noise per call, a seed still reproduces one.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["RANDOM_FUNC", "FRESH_SEED_FUNC", "ABI_VERSION", "RandomConfig", "convert_map",
           "with_fresh_seed", "random_calls"]

ABI_VERSION = 1
RANDOM_FUNC = "kokoro_lstm.random_v1"
FRESH_SEED_FUNC = "kokoro_lstm.fresh_seed_v1"
#: torch op name -> dist (KL_RANDOM_UNIFORM / KL_RANDOM_NORMAL in src/ops/random.h)
_OPS = {"random_uniform": 0, "random_normal": 1}


class RandomConfig(NamedTuple):
    """``random_v1(cfg, seed, y)``: the C side's KL_RANDOM_CFG_* order."""
    abi: int = ABI_VERSION
    dist: int = 0         # 0 uniform [0, 1), 1 standard normal
    stream: int = 0
    num_threads: int = 0  # 0: the process default at run time


def _convert(node, importer):
    from tvm import relax

    name = node.target._schema.name.split("::")[-1]
    seed, shape, stream = importer.retrieve_args(node)[:3]
    shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    seed_ty = getattr(seed, "ty", None)
    if not isinstance(seed_ty, relax.TensorType) or seed_ty.dtype != "int64":
        raise TypeError(f"kokoro_lstm.tvm: kokoro::{name}: the seed must be an int64 tensor, "
                        f"got {seed_ty}")
    cfg = RandomConfig(dist=_OPS[name], stream=int(stream))
    return importer.block_builder.emit(relax.call_dps_packed(
        RANDOM_FUNC, [relax.ShapeExpr(list(cfg)), seed], relax.TensorType(shape, "float32")))


def convert_map() -> dict:
    """``custom_convert_map`` entries for the two noise ops."""
    return {f"{name}.default": _convert for name in _OPS}


def random_calls(mod) -> list:
    """``[RandomConfig]`` of every ``random_v1`` call in ``mod``'s Relax functions."""
    from tvm import relax

    found = []

    def visit(e):
        if (isinstance(e, relax.Call) and len(e.args) == 2
                and isinstance(e.args[0], relax.ExternFunc)
                and e.args[0].global_symbol == RANDOM_FUNC):
            found.append(RandomConfig(*[int(v) for v in e.args[1].fields[0].values]))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def _global_vars_used(func):
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(
        func.body, lambda e: found.append(e) if isinstance(e, relax.GlobalVar) else None)
    return found


def with_fresh_seed(mod, seeded="decoder_forward_seeded", name="decoder_forward"):
    """``mod`` with a Relax function ``name`` added: the parameters of ``seeded`` without
    its seed (the last user input, an int64 tensor of shape [1]), drawing a fresh seed
    per call (``kokoro_lstm.fresh_seed_v1``, an impure call the compiler keeps) and
    returning ``seeded(..., seed)``. ``seeded`` stays as it is, so a seed reproduces a call."""
    import tvm
    from tvm import relax

    from . import _maybe_attach

    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"expected a tvm.IRModule, got {type(mod).__name__}")
    names = [gv.name_hint for gv in mod.get_global_vars()]
    if seeded not in names:
        raise ValueError(f"with_fresh_seed: the module has no function {seeded!r} "
                         f"(it has {sorted(names)})")
    if name in names:
        raise ValueError(f"with_fresh_seed: the module has a function {name!r} already")
    gv = mod.get_global_var(seeded)
    func = mod[gv]
    if not isinstance(func, relax.Function):
        raise TypeError(f"with_fresh_seed: {seeded!r} is not a Relax function")
    attrs = dict(func.attrs) if func.attrs else {}
    n_in = int(attrs["num_input"]) if "num_input" in attrs else len(func.params)
    if n_in < 1:
        raise ValueError(f"with_fresh_seed: {seeded!r} has no inputs")
    k = n_in - 1
    ty = func.params[k].ty
    if (not isinstance(ty, relax.TensorType) or ty.dtype != "int64" or ty.shape is None
            or [int(d) for d in ty.shape.values] != [1]):
        raise ValueError(f"with_fresh_seed: the last input of {seeded!r} must be the seed, an "
                         f"int64 tensor of shape [1]; got {ty}")
    for g, f in mod.functions.items():
        if not g.same_as(gv) and isinstance(f, relax.Function) and any(
                isinstance(x, relax.GlobalVar) and x.same_as(gv)
                for x in _global_vars_used(f)):
            raise ValueError(f"with_fresh_seed: {g.name_hint!r} calls {seeded!r}; only a "
                             f"function that no other calls can be wrapped")
    # a new GlobalVar: the importer leaves the old one typed as before its weights were
    # bound, and calls are typed from it
    from tvm.relax.expr import _update_type

    gv = relax.GlobalVar(seeded)
    _update_type(gv, func.ty)
    mod = tvm.IRModule({gv if g.name_hint == seeded else g: f for g, f in mod.functions.items()},
                       attrs=mod.attrs)
    params = [relax.Var(p.name, p.ty) for i, p in enumerate(func.params) if i != k]
    new_attrs = {"num_input": n_in - 1} if "num_input" in attrs else None
    bb = relax.BlockBuilder(mod)
    with bb.function(name, params, attrs=new_attrs):
        seed = bb.emit(relax.op.builtin.alloc_tensor(relax.ShapeExpr([1]), "int64", 0))
        bb.emit(relax.Call(relax.ExternFunc(FRESH_SEED_FUNC), [seed]))
        args = params[:k] + [seed] + params[k:]
        out = bb.emit(relax.Call(gv, args))
        bb.emit_func_output(out)
    return _maybe_attach(bb.get())
