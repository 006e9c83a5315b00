/* tvm-ffi functions of the engine's dense operators (kl_tvm_dense.c), listed in
 * kl_tvm_ffi.c's FUNCS table. Internal to the glue. */
#ifndef KL_TVM_DENSE_H
#define KL_TVM_DENSE_H

#include <tvm/ffi/c_api.h>

/* Names carry the calling convention's version (the first config value). */
#define KL_TVM_DENSE_ABI 1
#define KL_TVM_MATMUL_NAME "kokoro_lstm.matmul_v1"
#define KL_TVM_CONV1D_NAME "kokoro_lstm.conv1d_v1"
#define KL_TVM_CONV1D_TRANSPOSE_DW_NAME "kokoro_lstm.conv1d_transpose_dw_v1"
#define KL_TVM_SOFTMAX_NAME "kokoro_lstm.softmax_v1"
#define KL_TVM_ATTENTION_NAME "kokoro_lstm.attention_v1"

int kl_tvm_matmul(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);
int kl_tvm_conv1d(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);
int kl_tvm_conv1d_transpose_dw(void* self, const TVMFFIAny* args, int32_t nargs,
                               TVMFFIAny* result);

int kl_tvm_softmax(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);
int kl_tvm_attention(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);

/* Raises a tvm-ffi error of the given kind (kl_tvm_ffi.c); returns -1. */
int kl_tvm_raise(const char* kind, const char* msg);

#endif
