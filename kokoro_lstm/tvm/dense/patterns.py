"""The ``relax.dpl`` patterns of the rules (.rules.RULES): each builder returns (pattern,
{name: sub-pattern}), the names the rule's check reads."""
from __future__ import annotations

from .configs import ATTENTION_FUNC

def pat_op(name, *args):
    """A call of Relax operator ``name`` on ``args``; further arguments (a reshape's
    shape, ...) match anything."""
    from tvm.relax.dpl import is_op

    return is_op(name)(*args, varg_default_wildcard=True)


def pat_either(name, a, b):
    """``name(a, b)`` or ``name(b, a)``."""
    return pat_op(name, a, b) | pat_op(name, b, a)


def pat_views(p):
    """``p`` through up to two reshapes / broadcast_tos (the longest chain first); the
    checks see whether they are row-major views of it (:meth:`Scope.peel`)."""
    one = pat_op("relax.reshape", p) | pat_op("relax.broadcast_to", p)
    two = (pat_op("relax.reshape", pat_op("relax.broadcast_to", p))
           | pat_op("relax.reshape", pat_op("relax.reshape", p)))
    return two | one | p


def pat_scaled(p):
    """``p``, or ``p`` times a constant."""
    from tvm.relax.dpl import is_const

    return pat_op("relax.multiply", p, is_const()) | p


def sdpa_pattern():
    """torch.export's SDPA decomposition, rooted at ``matmul(P, v)``: scores
    ``q @ k^T`` (each scaled, k transposed, through views) [``+ mask``], softmax,
    [the fully-masked-row fix ``where(no score > -inf, 0, P)``]."""
    from tvm.relax.dpl import is_const, wildcard

    q = pat_views(pat_scaled(pat_views(wildcard())))
    k = (pat_views(pat_scaled(pat_views(pat_op("relax.permute_dims", pat_views(wildcard())))))
         | pat_views(pat_op("relax.permute_dims", pat_views(pat_scaled(pat_views(wildcard()))))))
    ann = {"scores": pat_op("relax.matmul", q, k), "mask": wildcard(),
           "ninf": is_const(), "zero": is_const()}
    s4 = pat_views(ann["scores"])
    ann["masked"] = pat_op("relax.add", s4, ann["mask"])
    ann["masked_r"] = pat_op("relax.add", ann["mask"], s4)
    s2 = ann["masked"] | ann["masked_r"] | s4
    ann["softmax"] = p = pat_op("relax.nn.softmax", s2)
    ann["max"] = pat_op("relax.max", pat_op("relax.astype", pat_op("relax.logical_not", pat_op(
        "relax.equal", s2, ann["ninf"]))))
    empty = pat_op("relax.logical_not", pat_op("relax.astype", ann["max"]))
    ann["fix"] = pat_op("relax.where", empty, pat_op("relax.full_like", wildcard(), ann["zero"]), p)
    return pat_op("relax.matmul", pat_views(ann["fix"] | p), pat_views(wildcard())), ann


def sdpa_out_pattern():
    """Up to three permute_dims over views of an attention call."""
    from tvm.relax.dpl import ExternFuncPattern, wildcard

    att = pat_views(pat_op("relax.call_dps_packed", ExternFuncPattern(ATTENTION_FUNC), wildcard()))
    chain = pat_op("relax.permute_dims", att)
    for _ in range(2):
        chain = pat_op("relax.permute_dims", chain | att)
    return chain, {}


def gelu_pattern():
    """ALBERT's gelu_new as exported: ``(x * 0.5) * (tanh((x + x**3 * 0.044715) *
    0.7978846) + 1)``, the operands of each multiply and add in either order."""
    from tvm.relax.dpl import is_const, wildcard

    x = wildcard()
    ann = {c: is_const() for c in ("c_half", "c_one", "c_sqrt", "c_cubic", "c_three")}
    ann["pow"] = pat_op("relax.power", x, ann["c_three"])
    ann["cube"] = pat_either("relax.multiply", ann["pow"], ann["c_cubic"])
    ann["inner"] = pat_either("relax.add", x, ann["cube"])
    ann["arg"] = pat_either("relax.multiply", ann["inner"], ann["c_sqrt"])
    ann["tanh"] = pat_op("relax.tanh", ann["arg"])
    ann["plus1"] = pat_either("relax.add", ann["tanh"], ann["c_one"])
    ann["half"] = pat_either("relax.multiply", x, ann["c_half"])
    return pat_either("relax.multiply", ann["half"], ann["plus1"]), ann


def bias_pattern():
    """A matmul, conv1d or conv1d_transpose with an add after it."""
    from tvm.relax.dpl import wildcard

    prod = (pat_op("relax.matmul", wildcard(), wildcard())
            | pat_op("relax.nn.conv1d", wildcard(), wildcard())
            | pat_op("relax.nn.conv1d_transpose", wildcard(), wildcard()))
    return pat_either("relax.add", prod, wildcard()), {}


def lstm_pattern():
    from tvm.relax.dpl import ExternFuncPattern, wildcard

    from .. import _native

    return pat_op("relax.call_dps_packed", ExternFuncPattern(_native.FUNC_NAME), wildcard()), {}


def single(name, nargs=2):
    """A call of operator ``name`` on anything."""
    def make():
        from tvm.relax.dpl import wildcard

        return pat_op(name, *[wildcard() for _ in range(nargs)]), {}
    return make


def instance_norm_pattern():
    """A Relax instance_norm."""
    from tvm.relax.dpl import wildcard

    return pat_op("relax.nn.instance_norm", wildcard(), wildcard(), wildcard()), {}


def adain_pattern():
    """``scale * instance_norm(x) + shift``, each product and sum in either order."""
    from tvm.relax.dpl import wildcard

    ann = {"norm": pat_op("relax.nn.instance_norm", wildcard(), wildcard(), wildcard())}
    ann["mul"] = pat_either("relax.multiply", ann["norm"], wildcard())
    return pat_either("relax.add", ann["mul"], wildcard()), ann


def snake_pattern():
    """Kokoro's Snake, ``x + c * sin(a * x) ** 2`` (the square as a power or a product),
    each product and the sum in either order (``c`` is ``1 / a`` as exported; the check
    needs only one value of each per channel)."""
    from tvm.relax.dpl import is_const, wildcard

    x = wildcard()
    ann = {"x": x, "at": pat_either("relax.multiply", wildcard(), x)}
    ann["sin"] = pat_op("relax.sin", ann["at"])
    ann["sq"] = pat_op("relax.multiply", ann["sin"], ann["sin"]) | pat_op("relax.power", ann["sin"],
                                                                    is_const())
    ann["csq"] = pat_either("relax.multiply", wildcard(), ann["sq"])
    return pat_either("relax.add", x, ann["csq"]), ann
