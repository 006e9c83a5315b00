/* The parameters of conv.cu's kernels, one definition for both sides: the host C
 * (conv.c) fills them, and kl_build.py puts this file before conv.cu in the ops
 * program's NVRTC source. Plain C with no includes on the device side. */
#ifndef KL_CUDA_CONV_PARAMS_CUH
#define KL_CUDA_CONV_PARAMS_CUH

/* A CTA's tile: KL_CONV_BM output channels by KL_CONV_BN output columns, k slices
 * of KL_CONV_BK (channel, tap) pairs; KL_CONV_THREADS threads, four warps of 32 x 32
 * outputs. The kernels use sm_80's tensor-core instructions (KL_CONV_MIN_MAJOR). */
#define KL_CONV_BM 64
#define KL_CONV_BN 64
#define KL_CONV_BK 16
#define KL_CONV_THREADS 128
#define KL_CONV_MIN_MAJOR 8

/* x [batch, cin, win] and y [batch, cout, wout], element (c, i) of a batch element
 * at c x_sc + i x_st (y: o y_so + t y_st; batch elements x_sn, y_sn apart), bias
 * cout values or NULL.
 * kl_conv1d: w [cout, cin, ksize] (OIW), y[t] from x[t stride + k dilation - pad]; a
 * matmul C = A W^T is one of ksize 1 with x = A^T and y = C^T (strides swapped).
 * kl_conv1d_transpose (dilation 1): w [cin, cout, ksize] (IOW), one output phase
 * ph = (t + pad) mod stride per blockIdx.z % stride, its taps ph + j stride
 * (j < taps) reading x[(t + pad) / stride - j].
 * splits > 1: the k slices are cut into splits runs of kslices each (blockIdx.z %
 * splits), each run's sums written to part + run part_st (part_st: y's element count,
 * y's layout; no bias), and kl_conv_reduce adds the runs in order (then bias[(i /
 * bias_div) % cout]) into y. */
typedef struct kl_conv_params {
  const float* x;
  const float* w;
  const float* bias;
  float* y;
  float* part;
  long long part_st;
  long long x_sn, x_sc, x_st, y_sn, y_so, y_st;
  int cin, win, cout, wout, ksize, stride, dilation, pad, taps;
  int splits, kslices;
} kl_conv_params;

#endif /* KL_CUDA_CONV_PARAMS_CUH */
