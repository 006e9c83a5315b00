/* The 1-D convolutions and the weight products of the TVM externs on CUDA devices
 * (kl_cuda_conv1d, kl_cuda_matmul, kl_cuda.h):
 * conv.cu's kernels in the device's ops module (ops.c), launched on the caller's
 * stream. Grids too small to fill a GPU cut the reduction into runs (split-K) whose
 * partial sums go to the stream's work memory (device.c) and are added in order by
 * a second kernel; the runs depend on the shape alone, so the bits do too. After a
 * shape's first call nothing is allocated or synchronized: a CUDA graph captures it. */
#include <limits.h>

#include "conv_params.cuh"
#include "cuda_internal.h"
#include "dense.h"

#define KL_CONV_MAX_GRID_YZ 65535
/* CTAs that keep a GPU busy (132 SMs x 4): the split-K choice's target, fixed so
 * that the runs, and the bits, are the same on every GPU */
#define KL_CONV_FILL 528
#define KL_CONV_MAX_SPLITS 8
#define KL_CONV_MIN_RUN 8 /* k slices per run at least */
#define KL_CONV_REDUCE_THREADS 256

/* The runs for tiles CTAs of slices k slices each: none where the tiles fill the GPU
 * (their partial sums would cost more memory traffic than they save), else enough
 * for two fills, each of KL_CONV_MIN_RUN slices at least. */
static int choose_splits(int64_t tiles, int64_t slices) {
  if (tiles >= KL_CONV_FILL) return 1;
  int64_t s = (2 * KL_CONV_FILL + tiles - 1) / tiles;
  if (s > KL_CONV_MAX_SPLITS) s = KL_CONV_MAX_SPLITS;
  if (s > slices / KL_CONV_MIN_RUN) s = slices / KL_CONV_MIN_RUN;
  return s < 1 ? 1 : (int)s;
}

/* The kernel (conv, or the transposed one) over p with its runs chosen, and their
 * reduction (per_col: a product, y = C^T, its bias per column of C); on the device's
 * context, on stream s. */
static kl_status run(const kl_cu_api* cu, const kl_cuda_ops* m, kl_conv_params* p, int transpose, int64_t cols,
                     int64_t z, int64_t taps, int per_col, int device_id, void* stream) {
  if (m->major < KL_CONV_MIN_MAJOR)
    return kl_fail("CUDA convolutions and products need compute capability %d.0 or newer (device %d has "
                   "%d.x): compile for this GPU with --dense-method tvm",
                   KL_CONV_MIN_MAJOR, device_id, m->major);
  const int64_t gx = (cols + KL_CONV_BN - 1) / KL_CONV_BN, gy = (p->cout + KL_CONV_BM - 1) / KL_CONV_BM;
  const int64_t slices = ((int64_t)p->cin * taps + KL_CONV_BK - 1) / KL_CONV_BK;
  p->splits = choose_splits(gx * gy * z, slices);
  p->kslices = (int)((slices + p->splits - 1) / p->splits);
  p->splits = (int)((slices + p->kslices - 1) / p->kslices); /* no empty run */
  if (gy > KL_CONV_MAX_GRID_YZ || z * p->splits > KL_CONV_MAX_GRID_YZ || gx > INT_MAX)
    return kl_fail("CUDA convolution: %d output channels and %lld batch elements%s are beyond one launch's grid",
                   p->cout, (long long)z, transpose ? " x stride" : "");
  if (p->splits > 1 && !(p->part = (float*)kl_cuda_workspace(cu, device_id, stream,
                                                             (size_t)p->splits * (size_t)p->part_st * 4)))
    return KL_ERR_DEVICE;
  const CUstream s = (CUstream)stream;
  void* params[] = {p};
  CUresult r = cu->LaunchKernel(transpose ? m->conv1d_transpose : m->conv1d, (unsigned)gx, (unsigned)gy,
                                (unsigned)(z * p->splits), KL_CONV_THREADS, 1, 1, 0, s, params, NULL);
  if (!r && p->splits > 1) { /* y as [rows, cols]: a convolution's (batch, channel) rows, a product's rows */
    long long rows = per_col ? p->wout : (long long)p->part_st / p->wout;
    int cols = per_col ? p->cout : p->wout, cout = p->cout;
    const int64_t bx = (cols + KL_CONV_REDUCE_THREADS - 1) / KL_CONV_REDUCE_THREADS;
    void* rp[] = {&p->part, &rows, &cols, &p->splits, &p->bias, &per_col, &cout, &p->y};
    r = cu->LaunchKernel(m->conv_reduce, (unsigned)bx, (unsigned)(rows < 65535 ? rows : 65535), 1,
                         KL_CONV_REDUCE_THREADS, 1, 1, 0, s, rp, NULL);
  }
  return r ? kl_cu_fail(r, "CUDA: launching the convolution kernels on device %d failed", device_id) : KL_OK;
}

kl_status kl_cuda_conv1d(const struct kl_conv1d_args* a, int transpose, int device_id, void* cu_stream) {
  if (a->w_panels)
    return kl_fail("w packed in panels is the CPU's layout: a CUDA convolution takes w as PyTorch stores it");
  if (transpose && a->dilation != 1)
    return kl_fail("a transposed convolution on CUDA needs dilation 1 (got %lld)", (long long)a->dilation);
  if (a->batch == 0 || a->wout == 0) return KL_OK;
  /* kl_conv1d_check bounds cin ksize, cout and wout by INT32_MAX; the rest here */
  if (a->cin > INT_MAX || a->win > INT_MAX || a->stride > INT_MAX || a->dilation > INT_MAX ||
      a->pad_l > INT_MAX || a->ksize > INT_MAX)
    return kl_fail("CUDA convolution: cin, win, stride, dilation, pad_l and ksize must each be at most %d",
                   INT_MAX);
  kl_conv_params p = {a->x, a->w, a->bias, a->y, NULL, a->batch * a->cout * a->wout,
                      a->cin * a->win, a->win, 1, a->cout * a->wout, a->wout, 1,
                      (int)a->cin, (int)a->win, (int)a->cout, (int)a->wout, (int)a->ksize, (int)a->stride,
                      (int)a->dilation, (int)a->pad_l, 0, 1, 0};
  /* columns: output steps, or per phase the steps u with t = u stride + ph - pad in [0, wout) */
  int64_t cols = a->wout, z = a->batch, taps = a->ksize;
  if (transpose) {
    p.taps = (int)(taps = (a->ksize + a->stride - 1) / a->stride);
    cols = (a->wout + a->pad_l + a->stride - 1) / a->stride + 1;
    z = a->batch * a->stride;
  }
  const kl_cu_api* cu;
  const kl_cuda_ops* m = kl_cuda_ops_enter(&cu, device_id);
  if (!m) return KL_ERR_DEVICE;
  return kl_cuda_ops_leave(cu, run(cu, m, &p, transpose, cols, z, taps, 0, device_id, cu_stream));
}

kl_status kl_cuda_matmul(int64_t M, int64_t N, int64_t K, const float* a, const float* w, const float* bias,
                         float* c, int device_id, void* cu_stream) {
  if (M < 0 || N < 1 || K < 1 || M > INT_MAX || N > INT_MAX || K > INT_MAX)
    return kl_fail("CUDA matmul: need 0 <= M and 1 <= N, K, each at most %d (got %lld, %lld, %lld)", INT_MAX,
                   (long long)M, (long long)N, (long long)K);
  if (M == 0) return KL_OK;
  /* C^T = W A^T: a convolution of ksize 1 over x = A^T [K, M] into y = C^T [N, M] */
  kl_conv_params p = {a, w, bias, c, NULL, M * N, 0, 1, K, 0, 1, N,
                      (int)K, (int)M, (int)N, (int)M, 1, 1, 1, 0, 0, 1, 0};
  const kl_cu_api* cu;
  const kl_cuda_ops* m = kl_cuda_ops_enter(&cu, device_id);
  if (!m) return KL_ERR_DEVICE;
  return kl_cuda_ops_leave(cu, run(cu, m, &p, 0, M, 1, 1, 1, device_id, cu_stream));
}
