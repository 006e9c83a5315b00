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
 *   Every tensor float32, CPU and compact; y like x (may be x itself, may not overlap
 *   any input otherwise): kl_instance_norm_check (src/ops/norm.c) checks them. */
#include <stdio.h>
#include <string.h>

#include "kl_tvm_dense.h"
#include "kl_tvm_norm.h"
#include "norm.h"

static int errf(const char* kind, const char* what) {
  return kl_tvm_errf(kind, KL_TVM_INSTANCE_NORM_NAME, what);
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
  double eps;
  memcpy(&eps, &cfg[KL_INSTANCE_NORM_CFG_EPS_BITS], sizeof(eps));
  const int hw = (int)cfg[KL_INSTANCE_NORM_CFG_HAS_WEIGHT], hb = (int)cfg[KL_INSTANCE_NORM_CFG_HAS_BIAS];
  const int hs = (int)cfg[KL_INSTANCE_NORM_CFG_HAS_SCALE], ht = (int)cfg[KL_INSTANCE_NORM_CFG_HAS_SHIFT];
  const int hn = (int)cfg[KL_INSTANCE_NORM_CFG_HAS_SNAKE];
  const int want = 3 + hw + hb + hs + ht + 2 * hn;
  if (nargs != want) {
    snprintf(what, sizeof(what), "expected %d arguments for this config, got %d", want, (int)nargs);
    return errf("TypeError", what);
  }
  /* x, the parameters given (NULL: absent), y; checked by kl_instance_norm_check */
  static const char* const names[8] = {"x",     "weight",  "bias",    "scale",
                                       "shift", "snake_a", "snake_c", "y"};
  const int has[8] = {1, hw, hb, hs, ht, hn, hn, 1};
  const DLTensor* t[8];
  for (int i = 0, k = 1; i < 8; i++) {
    t[i] = NULL;
    if (has[i] && kl_tvm_cpu_tensor(KL_TVM_INSTANCE_NORM_NAME, &args[k++], names[i], kDLFloat, 32, &t[i]))
      return -1;
  }
  kl_instance_norm_args a;
  if (kl_instance_norm_check(eps, cfg[KL_INSTANCE_NORM_CFG_NUM_THREADS], t[0], t[1], t[2], t[3], t[4],
                             t[5], t[6], t[7], &a))
    return errf("ValueError", kl_last_error());
  const kl_status s = kl_f32_instance_norm(&a);
  if (s != KL_OK)
    return errf(s == KL_ERR_NOMEM ? "MemoryError" : s == KL_ERR_ARG ? "ValueError" : "RuntimeError",
                kl_status_str(s));
  return 0;
}
