/* tvm-ffi glue of instance normalization (src/ops/norm.h), destination-passing like
 * the dense externs.
 *
 * kokoro_lstm.instance_norm_v1(cfg, x [N, C, *], [weight [C]], [bias [C]], [scale], [shift],
 *                              [snake_a [C]], [snake_c [C]], y)
 *   cfg = (abi, has_weight, has_bias, has_scale, has_shift, has_snake, eps_bits, num_threads);
 *   eps_bits: the float64 epsilon's bits; num_threads 0: the process default.
 *   y = scale * instance_norm(x) + shift per (n, c) (Kokoro's AdaIN1d); scale and
 *   shift hold C values (shared by the batch: [C, 1], [1, C, 1]) or N * C ([N, C, 1]);
 *   with has_snake, then y + snake_c * sin(snake_a * y)^2 per channel (Kokoro's Snake).
 *   Every tensor float32, CPU and compact; y like x (may alias it). */
#include <stdio.h>
#include <string.h>

#include "kl_tvm_dense.h"
#include "kl_tvm_norm.h"
#include "norm.h"

static int errf(const char* kind, const char* what) {
  return kl_tvm_errf(kind, KL_TVM_INSTANCE_NORM_NAME, what);
}

static int get_f32(const TVMFFIAny* arg, const char* name, const DLTensor** out, int64_t* n) {
  return kl_tvm_compact_tensor(KL_TVM_INSTANCE_NORM_NAME, arg, name, kDLFloat, 32, out, n);
}

static const float* data_of(const DLTensor* t) {
  return (const float*)((const char*)t->data + t->byte_offset);
}

int kl_tvm_instance_norm(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  char what[300];
  result->type_index = kTVMFFINone;
  const int64_t* cfg;
  if (kl_tvm_config(KL_TVM_INSTANCE_NORM_NAME, args, nargs, KL_TVM_DENSE_ABI,
                    KL_INSTANCE_NORM_CFG_N, KL_INSTANCE_NORM_CFG_N, &cfg, NULL))
    return -1;
  for (int i = KL_INSTANCE_NORM_CFG_HAS_WEIGHT; i <= KL_INSTANCE_NORM_CFG_HAS_SNAKE; i++)
    if (cfg[i] != 0 && cfg[i] != 1) return errf("ValueError", "config flags must be 0 or 1");
  int nth;
  if (kl_tvm_cfg_threads(KL_TVM_INSTANCE_NORM_NAME, cfg[KL_INSTANCE_NORM_CFG_NUM_THREADS], &nth))
    return -1;
  double eps;
  memcpy(&eps, &cfg[KL_INSTANCE_NORM_CFG_EPS_BITS], sizeof(eps));
  if (!(eps >= 0)) return errf("ValueError", "eps must be >= 0");
  const int hw = (int)cfg[KL_INSTANCE_NORM_CFG_HAS_WEIGHT], hb = (int)cfg[KL_INSTANCE_NORM_CFG_HAS_BIAS];
  const int hs = (int)cfg[KL_INSTANCE_NORM_CFG_HAS_SCALE], ht = (int)cfg[KL_INSTANCE_NORM_CFG_HAS_SHIFT];
  const int hn = (int)cfg[KL_INSTANCE_NORM_CFG_HAS_SNAKE];
  const int want = 3 + hw + hb + hs + ht + 2 * hn;
  if (nargs != want) {
    snprintf(what, sizeof(what), "expected %d arguments for this config, got %d", want, (int)nargs);
    return errf("TypeError", what);
  }
  const DLTensor *x, *y, *t;
  int64_t nx, ny, nt;
  int k = 1;
  if (get_f32(&args[k++], "x", &x, &nx)) return -1;
  if (x->ndim < 3) return errf("ValueError", "x must be [N, C, ...] (3 or more dimensions)");
  kl_instance_norm_args a;
  memset(&a, 0, sizeof(a));
  a.batch = x->shape[0];
  a.channels = x->shape[1];
  a.length = a.batch > 0 && a.channels > 0 ? nx / (a.batch * a.channels) : 0;
  a.x = data_of(x);
  a.eps = eps;
  a.num_threads = nth;
  const char* names[6] = {"weight", "bias", "scale", "shift", "snake_a", "snake_c"};
  const int has[6] = {hw, hb, hs, ht, hn, hn};
  const float** dst[6] = {&a.weight, &a.bias, &a.scale, &a.shift, &a.snake_a, &a.snake_c};
  int* per_batch[6] = {NULL, NULL, &a.scale_per_batch, &a.shift_per_batch, NULL, NULL};
  for (int i = 0; i < 6; i++) {
    if (!has[i]) continue;
    if (get_f32(&args[k++], names[i], &t, &nt)) return -1;
    const int batched = per_batch[i] && nt == a.batch * a.channels && a.batch != 1;
    if (nt != a.channels && !batched) {
      snprintf(what, sizeof(what), "%s must hold C = %lld values%s, got %lld", names[i],
               (long long)a.channels, per_batch[i] ? " or N * C" : "", (long long)nt);
      return errf("ValueError", what);
    }
    *dst[i] = data_of(t);
    if (per_batch[i]) *per_batch[i] = batched;
  }
  if (get_f32(&args[k++], "y", &y, &ny)) return -1;
  if (y->ndim != x->ndim || ny != nx || memcmp(y->shape, x->shape, (size_t)x->ndim * sizeof(int64_t)))
    return errf("ValueError", "y must have x's shape");
  a.y = (float*)data_of(y);
  const kl_status s = kl_f32_instance_norm(&a);
  if (s != KL_OK)
    return errf(s == KL_ERR_NOMEM ? "MemoryError" : s == KL_ERR_ARG ? "ValueError" : "RuntimeError",
                kl_status_str(s));
  return 0;
}
