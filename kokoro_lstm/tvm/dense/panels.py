"""Constant weights packed in the engine's 32-column panels at compile time, for the
f32-pgemm kernels (``b_panels``, ``w_panels``)."""
from __future__ import annotations

from .configs import PANEL

def pack_panels(w, trans):
    """op(w) packed for ``matmul_v1``'s ``b_panels``: w is [N, K] (``trans``, a
    linear's weight) or [K, N]; the result [ceil(N / 32), K, 32] float32 holds
    columns 32p.. of op(w) = [K, N] in panel p, zeros past N (the engine's
    panel layout, src/core/internal.h at KL_PGEMM_NR)."""
    import numpy as np

    b = np.asarray(w, dtype=np.float32)
    b = b.T if trans else b                       # [K, N]
    K, N = b.shape
    npan = -(-N // PANEL)
    out = np.zeros((K, npan * PANEL), np.float32)
    out[:, :N] = b
    return np.ascontiguousarray(out.reshape(K, npan, PANEL).transpose(1, 0, 2))


def pack_conv_panels(w):
    """A conv1d weight [Cout, Cin, K] packed for ``conv1d_v1``'s ``w_panels``: the
    kernel axis ordered (tap, channel), i.e. :func:`pack_panels` of the [K * Cin,
    Cout] matrix whose row ``j * Cin + c`` holds ``w[:, c, j]``."""
    import numpy as np

    w = np.asarray(w, dtype=np.float32)
    cout, cin, k = w.shape
    return pack_panels(w.transpose(2, 1, 0).reshape(k * cin, cout), False)


def pack_conv_transpose_panels(w, stride, dilation=1):
    """A conv1d_transpose weight [Cin, Cout, K] (IOW; dilation a divisor of stride)
    packed for ``conv1d_transpose_v1``'s ``w_panels``: :func:`pack_panels` of the
    [K * Cin, Cout] matrix whose rows are, for each output phase r < stride in
    turn, its taps k = r // dilation + m * (stride // dilation), m < n_r, as rows
    ``j * Cin + c`` (m = n_r - 1 - j) holding ``w[c, :, k]``
    (kl_f32_conv1d_transpose_pack in src/ops/conv1d_transpose.c)."""
    import numpy as np

    w = np.asarray(w, dtype=np.float32)
    cin, cout, k = w.shape
    if stride % dilation:
        raise ValueError(f"dilation {dilation} does not divide stride {stride}")
    s1, rows = stride // dilation, []
    for r in range(0, min(stride, k * dilation), dilation):
        taps = list(range(r // dilation, k, s1))
        rows += [w[:, :, t] for t in reversed(taps)]
    return pack_panels(np.concatenate(rows), False)


def conv_on_panels(w_shape, stride, dilation):
    """Whether a conv1d with a constant weight runs on panels (``w_panels``):
    stride or dilation 1 (each output's window is then one run of the time-major
    input, of every d-th step for dilation d) and a kernel of more than one tap (a
    1-tap conv needs no im2col on the BLAS path, which is as fast)."""
    return (stride == 1 or dilation == 1) and w_shape is not None and w_shape[2] > 1
