/* tvm-ffi functions of the engine's counter-based random numbers
 * (kl_tvm_random.c over src/ops/random.h), listed in kl_tvm_ffi.c's FUNCS table.
 * Internal to the glue. */
#ifndef KL_TVM_RANDOM_H
#define KL_TVM_RANDOM_H

#include <tvm/ffi/c_api.h>

/* Names carry the calling convention's version (the first config value). */
#define KL_TVM_RANDOM_ABI 1
#define KL_TVM_RANDOM_NAME "kokoro_lstm.random_v1"
#define KL_TVM_FRESH_SEED_NAME "kokoro_lstm.fresh_seed_v1"

/* random_v1's config layout; kokoro_lstm.tvm._noise.RandomConfig lists the same
 * fields in the same order (tests/test_noise.py checks that they agree). */
enum kl_tvm_random_cfg {
  KL_RANDOM_CFG_ABI, KL_RANDOM_CFG_DIST, KL_RANDOM_CFG_STREAM, KL_RANDOM_CFG_NUM_THREADS,
  KL_RANDOM_CFG_N
};

int kl_tvm_random(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);
int kl_tvm_fresh_seed(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);

#endif
