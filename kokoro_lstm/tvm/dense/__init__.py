"""Dense ops of a Relax module into the kokoro_lstm engine (``--dense-method native``).

TVM's CPU pipeline legalizes ``R.matmul`` and ``R.nn.conv1d`` into naive loop nests
(the PyPI wheel has no BLAS backend). :func:`rewrite_dense` replaces, where every
shape is static and the dtype float32, each of these by a call of one of the
engine's externs (C functions registered with tvm-ffi: src/tvm/kl_tvm_dense.c over
src/ops/<op>.c), one ``relax.dpl`` pattern and one check per rule (:data:`.rules.RULES`):

* ``matmul(A, B)`` (numpy batch broadcasting where each operand's batch is the
  result's or all ones) by ``matmul_v1``: ``B = permute_dims(W)`` of a 2-D ``W`` is
  read transposed in place; a constant 2-D B (a linear's weight) is packed in
  32-column panels at compile time (:func:`pack_panels`, once per constant) for the
  engine's f32-pgemm kernels; a following per-column bias add and a GELU (tanh
  form, ALBERT's ``gelu_new``) are fused into the call;
* ``conv1d`` (NCW/OIW, groups 1) by ``conv1d_v1``, a per-channel bias add fused; a
  constant weight of more than one tap (stride or dilation 1) is packed in panels
  over (tap, channel) (:func:`pack_conv_panels`), a weight computed from constants
  (weight norm) evaluated at compile time first (:func:`_fold_weights`);
* a depthwise ``conv1d_transpose`` by ``conv1d_transpose_dw_v1``;
* a ``conv1d_transpose`` with groups 1 by ``conv1d_transpose_v1``, its constant
  weight (weight norm folded) packed by output phase at compile time
  (:func:`pack_conv_transpose_panels`), a per-channel bias add fused;
* the scaled-dot-product attention that ``torch.export`` decomposes SDPA into
  (``matmul(q*a, permute(k)*a)`` [``+ mask``] -> ``softmax`` -> fully-masked-row fix
  -> ``matmul(., v)``) by ``attention_v1``, reading q/k/v and writing its output in
  the ``[B, L, H, D]`` layout of the linears around it (their head transposes
  folded);
* ``softmax`` over the last axis by ``softmax_v1``.

Every extern's config (its first argument, a shape) is one NamedTuple of
:mod:`.configs` (:data:`CONFIGS`), whose fields are the C side's ``KL_*_CFG_*`` indices
in src/tvm/kl_tvm_dense.h in the same order. The package: :mod:`.configs`,
:mod:`.patterns`, one module per op family (:mod:`.matmul`, :mod:`.conv`,
:mod:`.epilogue`, :mod:`.attention`, :mod:`.norm`), :mod:`.panels` (constant weights
packed), :mod:`.ir` (what the rules read and write) and :mod:`.rules` (the table and
the rewrite). :func:`kokoro_lstm.tvm.export_library`
links the engine into the artifact, so it runs where TVM's runtime runs.
"""
from __future__ import annotations

from .configs import (ABI_VERSION, ACT_GELU_TANH, ATTENTION_FUNC, CONFIGS, CONV1D_FUNC,
                      CONV1D_TRANSPOSE_DW_FUNC, CONV1D_TRANSPOSE_FUNC, DENSE_METHODS,
                      INSTANCE_NORM_FUNC, MATMUL_FUNC, PANEL, SOFTMAX_FUNC, AttentionConfig,
                      Conv1dConfig, Conv1dTransposeConfig, Conv1dTransposeDwConfig,
                      InstanceNormConfig, MatmulConfig, SoftmaxConfig, f32_bits, f64_bits)
from .ir import count_dense_calls, dense_calls, extern_call
from .panels import pack_conv_panels, pack_conv_transpose_panels, pack_panels
from .rules import rewrite_dense, select_dense_method

__all__ = ["MATMUL_FUNC", "CONV1D_FUNC", "CONV1D_TRANSPOSE_DW_FUNC", "CONV1D_TRANSPOSE_FUNC",
           "SOFTMAX_FUNC", "ATTENTION_FUNC", "INSTANCE_NORM_FUNC", "ABI_VERSION", "PANEL",
           "ACT_GELU_TANH", "CONFIGS", "MatmulConfig", "Conv1dConfig", "Conv1dTransposeDwConfig",
           "Conv1dTransposeConfig", "SoftmaxConfig", "AttentionConfig", "InstanceNormConfig",
           "f32_bits", "f64_bits", "pack_panels", "pack_conv_panels",
           "pack_conv_transpose_panels", "extern_call", "DENSE_METHODS", "select_dense_method",
           "rewrite_dense", "dense_calls", "count_dense_calls"]
