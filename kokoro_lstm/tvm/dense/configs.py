"""The engine's dense externs: their names and configs (each a NamedTuple whose fields are
the C side's ``KL_*_CFG_*`` indices in src/tvm/kl_tvm_dense.h, in the same order), the
``--dense-method`` names. Plain Python: importing it imports neither tvm nor torch."""
from __future__ import annotations

from typing import NamedTuple

ABI_VERSION = 1
MATMUL_FUNC = "kokoro_lstm.matmul_v1"
CONV1D_FUNC = "kokoro_lstm.conv1d_v1"
CONV1D_TRANSPOSE_DW_FUNC = "kokoro_lstm.conv1d_transpose_dw_v1"
CONV1D_TRANSPOSE_FUNC = "kokoro_lstm.conv1d_transpose_v1"
SOFTMAX_FUNC = "kokoro_lstm.softmax_v1"
ATTENTION_FUNC = "kokoro_lstm.attention_v1"
#: Width of the panels of a packed B (KL_DENSE_PANEL in src/ops/dense.h).
PANEL = 32
#: ``--dense-method`` values: native (the engine's externs) or tvm (TVM's own lowering).
DENSE_METHODS = ("native", "tvm")
#: matmul_v1's ``act``: GELU, tanh form, on the result (KL_ACT_GELU_TANH).
ACT_GELU_TANH = 1


# -- the externs' configs: one schema each, the C side's KL_*_CFG_* order -----------------
class MatmulConfig(NamedTuple):
    """``matmul_v1(cfg, A, B, [bias], C)``; ``act`` and ``b_panels`` may be absent (0)."""
    abi: int = ABI_VERSION
    trans_b: int = 0      # B is [.., N, K]
    has_bias: int = 0
    num_threads: int = 0  # 0: the process default at run time
    act: int = 0          # 0, or ACT_GELU_TANH
    b_panels: int = 0     # 1: B is op(B) packed by pack_panels, shared by the batch


class Conv1dConfig(NamedTuple):
    """``conv1d_v1(cfg, x, w, [bias], y)``; ``w_panels`` may be absent (0)."""
    abi: int = ABI_VERSION
    stride: int = 1
    pad_l: int = 0
    pad_r: int = 0
    dilation: int = 1
    has_bias: int = 0
    num_threads: int = 0
    w_panels: int = 0     # 1: w packed by pack_conv_panels (stride or dilation 1)


class Conv1dTransposeDwConfig(NamedTuple):
    """``conv1d_transpose_dw_v1(cfg, x, w, [bias], y)``."""
    abi: int = ABI_VERSION
    stride: int = 1
    pad_l: int = 0
    dilation: int = 1
    has_bias: int = 0
    num_threads: int = 0


class Conv1dTransposeConfig(NamedTuple):
    """``conv1d_transpose_v1(cfg, x, w, [bias], y)``, groups 1."""
    abi: int = ABI_VERSION
    stride: int = 1
    pad_l: int = 0
    dilation: int = 1     # a divisor of stride
    ksize: int = 1
    has_bias: int = 0
    num_threads: int = 0
    w_panels: int = 0     # 1: w packed by pack_conv_transpose_panels


class SoftmaxConfig(NamedTuple):
    """``softmax_v1(cfg, x, y)``, over the last axis."""
    abi: int = ABI_VERSION
    num_threads: int = 0


class AttentionConfig(NamedTuple):
    """``attention_v1(cfg, q, k, v, [mask], o)``; layouts 0 [B, H, rows, D], 1 [B, rows, H, D]."""
    abi: int = ABI_VERSION
    q_layout: int = 0
    k_layout: int = 0
    v_layout: int = 0
    o_layout: int = 0
    has_mask: int = 0
    scale_bits: int = 0   # the float32 scale's bits (f32_bits)
    num_threads: int = 0


# -- instance norm (src/ops/norm.c; the rules in .norm) -----------------------------------
INSTANCE_NORM_FUNC = "kokoro_lstm.instance_norm_v1"


class InstanceNormConfig(NamedTuple):
    """``instance_norm_v1(cfg, x, [weight], [bias], [scale], [shift], [snake_a, snake_c], y)``."""
    abi: int = ABI_VERSION
    has_weight: int = 0
    has_bias: int = 0
    has_scale: int = 0    # AdaIN: y = scale * norm + shift, C or N * C values each
    has_shift: int = 0
    has_snake: int = 0    # then y + c * sin(a * y)^2, a and c C values each (Kokoro's Snake)
    eps_bits: int = 0     # the float64 epsilon's bits (f64_bits)
    num_threads: int = 0


def f64_bits(x) -> int:
    """The bits of float64 ``x`` as a signed int (InstanceNormConfig.eps_bits)."""
    import struct

    return struct.unpack("<q", struct.pack("<d", x))[0]


#: extern name -> its config's schema
CONFIGS = {MATMUL_FUNC: MatmulConfig, CONV1D_FUNC: Conv1dConfig,
           CONV1D_TRANSPOSE_DW_FUNC: Conv1dTransposeDwConfig,
           CONV1D_TRANSPOSE_FUNC: Conv1dTransposeConfig, SOFTMAX_FUNC: SoftmaxConfig,
           ATTENTION_FUNC: AttentionConfig, INSTANCE_NORM_FUNC: InstanceNormConfig}
FUNC_OF = {cls: name for name, cls in CONFIGS.items()}


def f32_bits(x) -> int:
    """The bits of float32 ``x`` as a signed int (AttentionConfig.scale_bits)."""
    import struct

    return struct.unpack("<i", struct.pack("<f", x))[0]
