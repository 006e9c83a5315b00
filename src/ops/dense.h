/* Dense float32 operators of the engine, one file each (matmul.c, conv1d.c,
 * conv1d_transpose.c, conv1d_transpose_dw.c, softmax.c, attention.c): batched matrix
 * products, 1-D convolutions, softmax and attention on OpenBLAS and the f32-pgemm
 * kernels, threaded on the engine's pool. Used by the TVM lowering
 * (src/tvm/kl_tvm_dense.c) for the non-LSTM parts of Kokoro.
 *
 * Each operator has three entries: kl_f32_<op> over its kernel arguments,
 * kl_<op>_check filling them from a config and DLTensors, and kl_<op>_forward, the
 * two in turn. A new operator is a new file with the three (README.md in this folder).
 *
 * Work is cut into tiles fixed by the shapes and the process's kl_max_threads()
 * (never by a call's thread count), each tile one single-threaded sgemm, so
 * results are bitwise identical for any num_threads; a B packed in panels (constant weights) runs the f32-pgemm
 * kernels instead, whose elements do not depend on the tiles at all. Strides are
 * in elements. */
#ifndef KL_DENSE_H
#define KL_DENSE_H

#include <stdint.h>

#include "kokoro_lstm.h"

/* C[b] = A[b] @ op(B[b]) (+ bias) for b in [0, batch):
 *   A[b]: M x K rows of stride lda, at a + b * sa (sa 0: shared by every b);
 *   B[b]: K x N (trans_b 0) or N x K (trans_b 1) rows of stride ldb, at b + b * sb;
 *   bias: N values of stride sbias, or NULL;  C[b]: M x N, stride ldc, at c + b * sc.
 * act: KL_ACT_NONE, or KL_ACT_GELU_TANH to apply
 *   0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3))) to each result (bias included)
 *   while its tile is in cache (ALBERT's gelu_new; tanh: the engine's vectorized one).
 * num_threads >= 1, or 0 for kl_get_num_threads(). */
enum { KL_ACT_NONE = 0, KL_ACT_GELU_TANH = 1 };
typedef struct kl_matmul_args {
  int64_t batch, M, N, K;
  const float* a;
  int64_t lda, sa;
  const float* b;
  int64_t ldb, sb;
  int trans_b;
  /* 1: B[b] is packed in panels (trans_b and ldb unused): [ceil(N / 32)][K][32]
   * compact floats, panel p holding columns 32p.. of op(B) row k at [p][k][:],
   * zeros past N (internal.h, KL_PGEMM_NR). Runs the f32-pgemm kernel list instead of
   * OpenBLAS: no packing per call. */
  int b_panels;
  /* 1 (b_panels only): C[b] is stored transposed, N x M rows of stride ldc
   * (C^T = (A @ op(B))^T: a convolution's NCW output from time-major rows). */
  int c_trans;
  const float* bias;
  int64_t sbias;
  float* c;
  int64_t ldc, sc;
  int act;
  int num_threads;
} kl_matmul_args;

kl_status kl_f32_matmul(const kl_matmul_args* args);
/* Test hook: kl_f32_matmul's OpenBLAS tiles are split for n threads (n >= 1)
 * whatever each call's num_threads, or (n 0) for kl_max_threads(), the default,
 * read at the next call. */
void kl_dense_set_split_threads(int n);

/* Width of B's panels for b_panels (KL_PGEMM_NR). */
#define KL_DENSE_PANEL 32

/* A call runs at most one thread per this much work of its family
 * (kl_threads_for_work), about 0.1 ms of one thread's work, so that waking and
 * waiting for a thread never costs more than it saves: multiply-adds of the GEMM
 * kernels (matmul, convolutions on panels or im2col, attention; the panels'
 * padded columns count, they are computed), bytes of a copy pass (im2col, the
 * transposed inputs), multiply-adds of the scalar depthwise transposed conv,
 * and elements of a softmax. Work is split by the shapes alone: results do not
 * depend on the thread count. */
#define KL_DENSE_MIN_MACS (1 << 22)
#define KL_DENSE_MIN_COPY_BYTES (1 << 20)
#define KL_DENSE_MIN_DW_MACS (1 << 17)
#define KL_DENSE_MIN_SOFTMAX (1 << 18)

/* The arguments of a 1-D convolution, NCW, groups 1, plain (kl_f32_conv1d) or
 * transposed (kl_f32_conv1d_transpose, which reads w and wout its own way):
 *   x: [batch, cin, win] compact; y: [batch, cout, wout] compact; bias: cout values
 *   or NULL; w: ksize taps, packed in panels of KL_DENSE_PANEL output channels when
 *   w_panels is 1. */
typedef struct kl_conv1d_args {
  int64_t batch, cin, cout, win, wout, ksize, stride, dilation, pad_l;
  const float* x;
  const float* w;
  int w_panels;
  const float* bias;
  float* y;
  int num_threads;
} kl_conv1d_args;

/* y[n] = conv1d(x[n], w) (+ bias) (PyTorch's Conv1d):
 *   w: [cout, cin, ksize] compact, or with w_panels (stride 1 or dilation 1) packed
 *   in panels over the kernel axis ordered (tap, channel): [ceil(cout / 32)][ksize * cin][32]
 *   compact, w[o, c, j] at [o / 32][j * cin + c][o % 32], zeros past cout;
 *   wout = (win + pad_l + pad_r - dilation*(ksize-1) - 1)/stride + 1 (pad_r is implied by wout). */
kl_status kl_f32_conv1d(const kl_conv1d_args* args);

/* y[n] = conv_transpose1d(x[n], w) (+ bias) (PyTorch's ConvTranspose1d), dilation a
 * divisor of stride: y[o, t] = bias[o] + sum over (c, i, k) with
 * i*stride + k*dilation - pad_l == t of x[c, i] * w[c, o, k];
 *   any wout (output padding is implied by it);
 *   w: [cin, cout, ksize] compact (PyTorch's IOW), or with w_panels packed by
 *   kl_f32_conv1d_transpose_pack. Each element sums its terms in an order fixed
 *   by the shapes: results do not depend on num_threads. */
typedef kl_conv1d_args kl_conv1d_transpose_args;

kl_status kl_f32_conv1d_transpose(const kl_conv1d_transpose_args* args);

/* w [cin, cout, ksize] packed for w_panels into out, ceil(cout / 32) panels of
 * ksize * cin rows of 32 floats (zeros past cout): within a panel, the rows of
 * output phase r = 0 .. stride - 1 in turn, phase r's taps k = r / dilation + m
 * stride / dilation (m < its count n_r) as rows j * cin + c for m = n_r - 1 - j
 * holding w[c, o, k] (kokoro_lstm.tvm.dense.pack_conv_transpose_panels). */
kl_status kl_f32_conv1d_transpose_pack(int64_t cin, int64_t cout, int64_t ksize, int64_t stride,
                                       int64_t dilation, const float* w, float* out);

/* Depthwise transposed 1-D convolution (ConvTranspose1d with groups == channels,
 * one output channel per group), NCW:
 *   x: [batch, ch, win] compact; w: [ch, 1, ksize] compact (PyTorch's IOW);
 *   y: [batch, ch, wout] compact; y[t] = sum over (i, k) with
 *   i*stride + k*dilation - pad_l == t of x[i] * w[k]; bias: ch values or NULL. */
typedef struct kl_conv1d_transpose_dw_args {
  int64_t batch, ch, win, wout, ksize, stride, dilation, pad_l;
  const float* x;
  const float* w;
  const float* bias;
  float* y;
  int num_threads;
} kl_conv1d_transpose_dw_args;

kl_status kl_f32_conv1d_transpose_dw(const kl_conv1d_transpose_dw_args* args);


/* y[r, :] = softmax(x[r, :]) for r in [0, rows), rows of n compact floats;
 * vectorized for the active ISA (src/kernels/f32-softmax/). exp of arguments
 * below -87 is flushed to exp(-87) (< 2e-38, nothing after normalization); a row
 * that is all -inf gives NaN, as in PyTorch. */
kl_status kl_f32_softmax(int64_t rows, int64_t n, const float* x, float* y, int num_threads);

/* Scaled dot-product attention, heads at once, without [L, S] score tensors in
 * memory: for b < batch, h < heads, l < L
 *   o[b,h,l,:] = softmax_s(scale * q[b,h,l,:] . k[b,h,s,:] + mask[b,h,l,s]) @ v[b,h,:,:]
 * and a row whose every score is -inf gives zeros (PyTorch's CPU SDPA with a
 * mask that hides a whole row). q [L, D], k and v [S, D], o [L, D] per (b, h),
 * each with unit stride along D and element strides (batch, head, row) given,
 * so [B, L, H, D] (a linear's output, before its head transpose) is read or
 * written in place. mask: NULL, or [*, *, L, S] with unit stride along S and
 * strides (batch, head, row); 0 broadcasts. The scores are computed as
 * q . (scale k), the scale applied when k is packed (exact for a power of two,
 * bert's 1/8). Rows are done in blocks of KL_ATTN_ROWS fixed by the shape:
 * results do not depend on num_threads. */
typedef struct kl_attention_args {
  int64_t batch, heads, L, S, D;
  const float* q;
  int64_t sqb, sqh, sql;
  const float* k;
  int64_t skb, skh, sks;
  const float* v;
  int64_t svb, svh, svs;
  const float* mask;
  int64_t smb, smh, sml;
  float scale;
  float* o;
  int64_t sob, soh, sol;
  int num_threads;
} kl_attention_args;

kl_status kl_f32_attention(const kl_attention_args* args);

/* ---- the entries over DLTensors ------------------------------------------------------
 * kl_<op>_check, one per operator, over its config and its DLTensors (NULL: an
 * optional tensor not given): every value range, rank, shape, stride and size product
 * (overflow-checked), and no output sharing memory with an input, checked before
 * anything is read or written; on success the kernel's arguments are filled in. A
 * failure is KL_ERR_ARG with kl_last_error() naming the argument. Config values are
 * taken as the caller gave them (int64), so that the ranges are checked here, once.
 * kl_<op>_forward checks, then runs the operator: the one call a front makes. */
typedef struct kl_matmul_config {
  int64_t trans_b, act, b_panels, num_threads;
} kl_matmul_config;
kl_status kl_matmul_check(const kl_matmul_config* cfg, const DLTensor* A, const DLTensor* B,
                          const DLTensor* bias, const DLTensor* C, kl_matmul_args* out);
kl_status kl_matmul_forward(const kl_matmul_config* cfg, const DLTensor* A, const DLTensor* B,
                            const DLTensor* bias, const DLTensor* C);

typedef struct kl_conv1d_config {
  int64_t stride, pad_l, pad_r, dilation, w_panels, num_threads;
} kl_conv1d_config;
kl_status kl_conv1d_check(const kl_conv1d_config* cfg, const DLTensor* x, const DLTensor* w,
                          const DLTensor* bias, const DLTensor* y, kl_conv1d_args* out);
kl_status kl_conv1d_forward(const kl_conv1d_config* cfg, const DLTensor* x, const DLTensor* w,
                            const DLTensor* bias, const DLTensor* y);

typedef struct kl_conv1d_transpose_config {
  int64_t stride, pad_l, dilation, ksize, w_panels, num_threads;
} kl_conv1d_transpose_config;
kl_status kl_conv1d_transpose_check(const kl_conv1d_transpose_config* cfg, const DLTensor* x,
                                    const DLTensor* w, const DLTensor* bias, const DLTensor* y,
                                    kl_conv1d_transpose_args* out);
kl_status kl_conv1d_transpose_forward(const kl_conv1d_transpose_config* cfg, const DLTensor* x,
                                      const DLTensor* w, const DLTensor* bias, const DLTensor* y);

typedef struct kl_conv1d_transpose_dw_config {
  int64_t stride, pad_l, dilation, num_threads;
} kl_conv1d_transpose_dw_config;
kl_status kl_conv1d_transpose_dw_check(const kl_conv1d_transpose_dw_config* cfg, const DLTensor* x,
                                       const DLTensor* w, const DLTensor* bias, const DLTensor* y,
                                       kl_conv1d_transpose_dw_args* out);
kl_status kl_conv1d_transpose_dw_forward(const kl_conv1d_transpose_dw_config* cfg, const DLTensor* x,
                                         const DLTensor* w, const DLTensor* bias, const DLTensor* y);

/* kl_f32_softmax's arguments. */
typedef struct kl_softmax_args {
  int64_t rows, n;
  const float* x;
  float* y;
  int num_threads;
} kl_softmax_args;
typedef struct kl_softmax_config {
  int64_t num_threads;
} kl_softmax_config;
kl_status kl_softmax_check(const kl_softmax_config* cfg, const DLTensor* x, const DLTensor* y,
                           kl_softmax_args* out);
kl_status kl_softmax_forward(const kl_softmax_config* cfg, const DLTensor* x, const DLTensor* y);

/* layouts 0 [B, H, rows, D] or 1 [B, rows, H, D]; scale_bits: the float32 scale's
 * bits, as a signed or an unsigned 32-bit value. */
typedef struct kl_attention_config {
  int64_t q_layout, k_layout, v_layout, o_layout, scale_bits, num_threads;
} kl_attention_config;
kl_status kl_attention_check(const kl_attention_config* cfg, const DLTensor* q, const DLTensor* k,
                             const DLTensor* v, const DLTensor* mask, const DLTensor* o,
                             kl_attention_args* out);
kl_status kl_attention_forward(const kl_attention_config* cfg, const DLTensor* q, const DLTensor* k,
                               const DLTensor* v, const DLTensor* mask, const DLTensor* o);

#endif
