/* Instance normalization (see norm.h): per row, the mean and the centered variance
 * in double (the f32-rmoments kernels: the same bits on every ISA), then
 * y = (x - mean) * g + off in float with g and off folded from the statistics and
 * the affine and AdaIN parameters, then the Snake kernel when asked. */
#include "norm.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"

#include "internal.h"
#include "threads.h"

/* A call uses at most one thread per KL_NORM_SERIAL elements (kl_threads_for_work). */
#define KL_NORM_SERIAL (1 << 18)

typedef struct norm_kernels {
  kl_f32_rmoments_fn moments;
  kl_f32_vsnake_fn snake; /* NULL: no Snake */
} norm_kernels;

static void norm_row(const kl_instance_norm_args* a, const norm_kernels* k, int64_t r) {
  const int64_t c = r % a->channels, L = a->length;
  const float* x = a->x + r * L;
  float* y = a->y + r * L;
  double mean, var;
  k->moments((size_t)L, x, &mean, &var);
  const double rstd = 1.0 / sqrt(var + a->eps);
  const double w = a->weight ? a->weight[c] : 1.0, b = a->bias ? a->bias[c] : 0.0;
  const double s = a->scale ? a->scale[a->scale_per_batch ? r : c] : 1.0;
  const double t = a->shift ? a->shift[a->shift_per_batch ? r : c] : 0.0;
  const float m = (float)mean, g = (float)(rstd * w * s), off = (float)(b * s + t);
  if (k->snake) {
    k->snake((size_t)L, x, m, g, off, a->snake_a[c], a->snake_c[c], y);
    return;
  }
  for (int64_t i = 0; i < L; i++) y[i] = (x[i] - m) * g + off;
}

typedef struct norm_job {
  const kl_instance_norm_args* a;
  norm_kernels k;
  int64_t rows;
  atomic_llong next;
} norm_job;

static void norm_task(void* ctx, int ith, int nth) {
  (void)ith;
  (void)nth;
  norm_job* j = ctx;
  for (int64_t r; (r = kl_take_task(&j->next, j->rows)) >= 0;) norm_row(j->a, &j->k, r);
}

kl_status kl_f32_instance_norm(const kl_instance_norm_args* a) {
  if (!a || a->batch < 0 || a->channels < 0 || a->length < 0 || !(a->eps >= 0) || a->num_threads < 0) {
    kl_set_error("instance_norm: need batch, channels, length, num_threads >= 0 and eps >= 0");
    return KL_ERR_ARG;
  }
  const int64_t rows = a->batch * a->channels;
  if (rows == 0 || a->length == 0) return KL_OK;
  if (!a->x || !a->y || !a->snake_a != !a->snake_c) {
    kl_set_error("instance_norm: x and y are required, snake_a and snake_c both or neither");
    return KL_ERR_ARG;
  }
  const norm_kernels k = {kl_select_rmoments(), a->snake_a ? kl_select_vsnake() : NULL};
  int nth = kl_threads_for_work(kl_threads_resolve(a->num_threads),
                                (double)rows * (double)a->length, KL_NORM_SERIAL);
  if (nth > rows) nth = (int)rows;
  if (nth <= 1) {
    for (int64_t r = 0; r < rows; r++) norm_row(a, &k, r);
    return KL_OK;
  }
  norm_job j;
  j.a = a;
  j.k = k;
  j.rows = rows;
  atomic_init(&j.next, 0);
  return kl_pool_run(nth, norm_task, &j);
}

kl_status kl_instance_norm_check(double eps, int64_t num_threads, const DLTensor* xt,
                                 const DLTensor* weight, const DLTensor* bias, const DLTensor* scale,
                                 const DLTensor* shift, const DLTensor* snake_a,
                                 const DLTensor* snake_c, const DLTensor* yt,
                                 kl_instance_norm_args* a) {
  kl_status st;
  memset(a, 0, sizeof(*a));
  if (!(eps >= 0)) return kl_fail("eps must be >= 0, got %g", eps);
  if (!snake_a != !snake_c) return kl_fail("snake_a and snake_c: both or neither");
  if ((st = kl_check_threads(num_threads, &a->num_threads))) return st;
  kl_view x, y, p;
  if ((st = kl_view_f32(xt, "x", 1, KL_VIEW_MAXD, &x))) return st;
  if (x.ndim < 3) return kl_fail("x must be [N, C, ...] (3 or more dimensions)");
  if (!kl_view_compact(&x)) return kl_fail("x must be compact");
  a->batch = x.shape[0];
  a->channels = x.shape[1];
  a->length = a->batch > 0 && a->channels > 0 ? x.numel / (a->batch * a->channels) : 0;
  a->x = (const float*)x.data;
  a->eps = eps;
  static const char* const names[6] = {"weight", "bias", "scale", "shift", "snake_a", "snake_c"};
  const DLTensor* const ts[6] = {weight, bias, scale, shift, snake_a, snake_c};
  const float** dst[6] = {&a->weight, &a->bias, &a->scale, &a->shift, &a->snake_a, &a->snake_c};
  int* per_batch[6] = {NULL, NULL, &a->scale_per_batch, &a->shift_per_batch, NULL, NULL};
  for (int i = 0; i < 6; i++) {
    if (!ts[i]) continue;
    if ((st = kl_view_f32(ts[i], names[i], 0, KL_VIEW_MAXD, &p))) return st;
    if (!kl_view_compact(&p)) return kl_fail("%s must be compact", names[i]);
    const int batched = per_batch[i] && p.numel == a->batch * a->channels && a->batch != 1;
    if (p.numel != a->channels && !batched)
      return kl_fail("%s must hold C = %lld values%s, got %lld", names[i], (long long)a->channels,
                     per_batch[i] ? " or N * C" : "", (long long)p.numel);
    *dst[i] = (const float*)p.data;
    if (per_batch[i]) *per_batch[i] = batched;
  }
  if ((st = kl_view_f32(yt, "y", 1, KL_VIEW_MAXD, &y))) return st;
  if (!kl_view_compact(&y)) return kl_fail("y must be compact");
  if (y.ndim != x.ndim || memcmp(y.shape, x.shape, (size_t)x.ndim * sizeof(int64_t)))
    return kl_fail("y must have x's shape");
  /* y may be x itself (each row is read whole before it is written), nothing else */
  const DLTensor* outs[1] = {yt};
  const DLTensor* ins[7] = {y.data == x.data ? NULL : xt, weight, bias, scale, shift, snake_a, snake_c};
  static const char* const out_names[1] = {"y"};
  static const char* const in_names[7] = {"x", "weight", "bias", "scale", "shift", "snake_a", "snake_c"};
  if ((st = kl_check_disjoint(outs, out_names, 1, ins, in_names, 7))) return st;
  a->y = (float*)y.data;
  return KL_OK;
}
