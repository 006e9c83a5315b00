/* tvm-ffi function of the engine's instance normalization (kl_tvm_norm.c over
 * src/ops/norm.h), listed in kl_tvm_ffi.c's FUNCS table. Internal to the glue.
 * Its calling convention's version is the dense externs' (KL_TVM_DENSE_ABI). */
#ifndef KL_TVM_NORM_H
#define KL_TVM_NORM_H

#include <tvm/ffi/c_api.h>

#define KL_TVM_INSTANCE_NORM_NAME "kokoro_lstm.instance_norm_v1"

/* The config layout; kokoro_lstm.tvm.dense.InstanceNormConfig lists the same
 * fields in the same order (tests/test_dense.py checks that they agree). */
enum kl_tvm_instance_norm_cfg {
  KL_INSTANCE_NORM_CFG_ABI, KL_INSTANCE_NORM_CFG_HAS_WEIGHT, KL_INSTANCE_NORM_CFG_HAS_BIAS,
  KL_INSTANCE_NORM_CFG_HAS_SCALE, KL_INSTANCE_NORM_CFG_HAS_SHIFT, KL_INSTANCE_NORM_CFG_HAS_SNAKE,
  KL_INSTANCE_NORM_CFG_EPS_BITS, KL_INSTANCE_NORM_CFG_NUM_THREADS, KL_INSTANCE_NORM_CFG_N
};

int kl_tvm_instance_norm(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);

#endif
