/* Depthwise transposed 1-D convolution, NCW (see dense.h): scalar loops, rows of
 * (batch, channel) dealt evenly to the threads. */
#include <string.h>

#include "dense_internal.h"
#include "threads.h"

/* ---- depthwise ConvTranspose1d --------------------------------------------- */
typedef struct dwt_job {
  const kl_conv1d_transpose_dw_args* a;
} dwt_job;

static void dwt_rows(const kl_conv1d_transpose_dw_args* a, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r++) { /* r = n * ch + c */
    const int64_t c = r % a->ch;
    const float* x = a->x + r * a->win;
    const float* w = a->w + c * a->ksize;
    float* y = a->y + r * a->wout;
    const float b0 = a->bias ? a->bias[c] : 0.0f;
    for (int64_t t = 0; t < a->wout; t++) y[t] = b0;
    for (int64_t k = 0; k < a->ksize; k++) {
      const float wk = w[k];
      const int64_t off = k * a->dilation - a->pad_l;
      for (int64_t i = 0; i < a->win; i++) {
        const int64_t t = i * a->stride + off;
        if (t >= 0 && t < a->wout) y[t] += x[i] * wk;
      }
    }
  }
}

static void dwt_task(void* ctx, int ith, int nth) {
  const kl_conv1d_transpose_dw_args* a = ((dwt_job*)ctx)->a;
  const int64_t rows = a->batch * a->ch, per = kl_cdiv(rows, nth);
  const int64_t r0 = per * ith, r1 = r0 + per < rows ? r0 + per : rows;
  if (r0 < r1) dwt_rows(a, r0, r1);
}

kl_status kl_f32_conv1d_transpose_dw(const kl_conv1d_transpose_dw_args* a) {
  if (!a || a->batch < 0 || a->ch < 1 || a->win < 0 || a->wout < 0 || a->ksize < 1 ||
      a->stride < 1 || a->dilation < 1 || a->pad_l < 0 || !a->x || !a->w || !a->y)
    return KL_ERR_ARG;
  if (a->batch == 0 || a->wout == 0) return KL_OK;
  dwt_job j = {a};
  const double work = (double)a->batch * (double)a->ch * (double)a->win * (double)a->ksize;
  const int nth = kl_threads_for_work(kl_threads_resolve(a->num_threads), work, KL_DENSE_MIN_DW_MACS);
  return kl_pool_run(nth, dwt_task, &j);
}

/* ---- the entry over DLTensors: the check, then the operator --------------------------- */
kl_status kl_conv1d_transpose_dw_check(const kl_conv1d_transpose_dw_config* cfg, const DLTensor* xt,
                                       const DLTensor* wt, const DLTensor* bt, const DLTensor* yt,
                                       kl_conv1d_transpose_dw_args* c) {
  kl_status st;
  memset(c, 0, sizeof(*c));
  if ((st = kl_conv_config(NULL, cfg->stride, cfg->dilation, cfg->pad_l, NULL, cfg->num_threads,
                           &c->num_threads)))
    return st;
  kl_view x, w, bias, y;
  if ((st = kl_conv_tensors(xt, wt, bt, yt, &x, &w, &bias, &y))) return st;
  kl_conv_data(&x, &w, bt ? &bias : NULL, &y, &c->x, &c->w, &c->bias, &c->y);
  c->stride = cfg->stride;
  c->pad_l = cfg->pad_l;
  c->dilation = cfg->dilation;
  c->batch = x.shape[0];
  c->ch = x.shape[1];
  c->win = x.shape[2];
  c->ksize = w.shape[2];
  c->wout = y.shape[2];
  if (w.shape[0] != c->ch || w.shape[1] != 1 || y.shape[1] != c->ch || (bt && bias.numel != c->ch))
    return kl_fail("shapes do not match: x [N, C, W], w [C, 1, K], y [N, C, Wout]%s (x [%lld, %lld, "
                   "%lld], w [%lld, %lld, %lld], y [.., %lld, %lld])",
                   bt ? ", bias C values" : "", (long long)c->batch, (long long)c->ch, (long long)c->win,
                   (long long)w.shape[0], (long long)w.shape[1], (long long)w.shape[2],
                   (long long)y.shape[1], (long long)c->wout);
  if (c->ksize < 1) return kl_fail("w has kernel size 0: ksize must be >= 1");
  return kl_conv_reach(c->win, c->stride, c->ksize, c->dilation);
}

kl_status kl_conv1d_transpose_dw_forward(const kl_conv1d_transpose_dw_config* cfg, const DLTensor* x,
                                         const DLTensor* w, const DLTensor* bias, const DLTensor* y) {
  kl_conv1d_transpose_dw_args a;
  kl_status st = kl_conv_cpu(x);
  if (!st) st = kl_conv1d_transpose_dw_check(cfg, x, w, bias, y, &a);
  return st ? st : kl_f32_conv1d_transpose_dw(&a);
}
