/* Row softmax (see dense.h): the f32-softmax kernels, rows dealt evenly to the threads. */
#include <string.h>

#include "dense_internal.h"
#include "threads.h"

/* ---- row softmax ------------------------------------------------------------ */
typedef struct softmax_job {
  int64_t rows, n;
  const float* x;
  float* y;
  kl_f32_vunary_fn fn;
} softmax_job;

static void softmax_task(void* ctx, int ith, int nth) {
  const softmax_job* j = ctx;
  const int64_t per = kl_cdiv(j->rows, nth);
  const int64_t r0 = per * ith, r1 = r0 + per < j->rows ? r0 + per : j->rows;
  for (int64_t r = r0; r < r1; r++) j->fn((size_t)j->n, j->x + r * j->n, j->y + r * j->n);
}

kl_status kl_f32_softmax(int64_t rows, int64_t n, const float* x, float* y, int num_threads) {
  if (rows < 0 || n < 0) return KL_ERR_ARG;
  if (rows == 0 || n == 0) return KL_OK;
  if (!x || !y) return KL_ERR_ARG;
  softmax_job j = {rows, n, x, y, kl_dense_kernels_active().softmax};
  int nth = kl_threads_for_work(kl_threads_resolve(num_threads), (double)rows * (double)n,
                                KL_DENSE_MIN_SOFTMAX);
  if (nth > rows) nth = (int)rows;
  return kl_pool_run(nth, softmax_task, &j);
}

/* ---- the entry over DLTensors: the check, then the operator --------------------------- */
kl_status kl_softmax_forward(const kl_softmax_config* cfg, const DLTensor* x, const DLTensor* y) {
  kl_softmax_args a;
  const kl_status st = kl_softmax_check(cfg, x, y, &a);
  return st ? st : kl_f32_softmax(a.rows, a.n, a.x, a.y, a.num_threads);
}

kl_status kl_softmax_check(const kl_softmax_config* cfg, const DLTensor* xt, const DLTensor* yt,
                           kl_softmax_args* out) {
  kl_status st;
  kl_view x, y;
  memset(out, 0, sizeof(*out));
  if ((st = kl_check_threads(cfg->num_threads, &out->num_threads)) ||
      (st = kl_view_f32(xt, "x", 1, KL_VIEW_MAXD, &x)) ||
      (st = kl_view_f32(yt, "y", 1, KL_VIEW_MAXD, &y)))
    return st;
  if (x.ndim != y.ndim || x.numel != y.numel || x.shape[x.ndim - 1] != y.shape[y.ndim - 1])
    return kl_fail("x and y must have the same shape");
  if (!kl_view_compact(&x)) return kl_fail("x must be compact");
  if (!kl_view_compact(&y)) return kl_fail("y must be compact");
  const DLTensor* outs[1] = {yt};
  const DLTensor* ins[1] = {xt};
  static const char* const out_names[1] = {"y"};
  static const char* const in_names[1] = {"x"};
  if ((st = kl_check_disjoint(outs, out_names, 1, ins, in_names, 1))) return st;
  out->n = x.shape[x.ndim - 1];
  out->rows = out->n ? x.numel / out->n : 0;
  out->x = kl_cdata(&x);
  out->y = kl_wdata(&y);
  return KL_OK;
}
