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
#define KL_TVM_CONV1D_TRANSPOSE_NAME "kokoro_lstm.conv1d_transpose_v1"
#define KL_TVM_SOFTMAX_NAME "kokoro_lstm.softmax_v1"
#define KL_TVM_ATTENTION_NAME "kokoro_lstm.attention_v1"

/* The config layouts: index of each value in an extern's config shape. The Python
 * schemas (kokoro_lstm.tvm.dense.configs' *Config NamedTuples) list the same fields in the
 * same order; tests/test_dense.py checks that they agree. Values from *_CFG_NMIN on
 * may be absent (read as 0). */
enum kl_tvm_matmul_cfg {
  KL_MATMUL_CFG_ABI, KL_MATMUL_CFG_TRANS_B, KL_MATMUL_CFG_HAS_BIAS, KL_MATMUL_CFG_NUM_THREADS,
  KL_MATMUL_CFG_ACT, KL_MATMUL_CFG_B_PANELS, KL_MATMUL_CFG_N
};
#define KL_MATMUL_CFG_NMIN KL_MATMUL_CFG_ACT
enum kl_tvm_conv1d_cfg {
  KL_CONV1D_CFG_ABI, KL_CONV1D_CFG_STRIDE, KL_CONV1D_CFG_PAD_L, KL_CONV1D_CFG_PAD_R,
  KL_CONV1D_CFG_DILATION, KL_CONV1D_CFG_HAS_BIAS, KL_CONV1D_CFG_NUM_THREADS,
  KL_CONV1D_CFG_W_PANELS, KL_CONV1D_CFG_N
};
#define KL_CONV1D_CFG_NMIN KL_CONV1D_CFG_W_PANELS
enum kl_tvm_conv1d_transpose_dw_cfg {
  KL_CONV1D_TRANSPOSE_DW_CFG_ABI, KL_CONV1D_TRANSPOSE_DW_CFG_STRIDE,
  KL_CONV1D_TRANSPOSE_DW_CFG_PAD_L, KL_CONV1D_TRANSPOSE_DW_CFG_DILATION,
  KL_CONV1D_TRANSPOSE_DW_CFG_HAS_BIAS, KL_CONV1D_TRANSPOSE_DW_CFG_NUM_THREADS,
  KL_CONV1D_TRANSPOSE_DW_CFG_N
};
enum kl_tvm_conv1d_transpose_cfg {
  KL_CONV1D_TRANSPOSE_CFG_ABI, KL_CONV1D_TRANSPOSE_CFG_STRIDE, KL_CONV1D_TRANSPOSE_CFG_PAD_L,
  KL_CONV1D_TRANSPOSE_CFG_DILATION, KL_CONV1D_TRANSPOSE_CFG_KSIZE, KL_CONV1D_TRANSPOSE_CFG_HAS_BIAS,
  KL_CONV1D_TRANSPOSE_CFG_NUM_THREADS, KL_CONV1D_TRANSPOSE_CFG_W_PANELS, KL_CONV1D_TRANSPOSE_CFG_N
};
enum kl_tvm_softmax_cfg { KL_SOFTMAX_CFG_ABI, KL_SOFTMAX_CFG_NUM_THREADS, KL_SOFTMAX_CFG_N };
enum kl_tvm_attention_cfg {
  KL_ATTENTION_CFG_ABI, KL_ATTENTION_CFG_Q_LAYOUT, KL_ATTENTION_CFG_K_LAYOUT,
  KL_ATTENTION_CFG_V_LAYOUT, KL_ATTENTION_CFG_O_LAYOUT, KL_ATTENTION_CFG_HAS_MASK,
  KL_ATTENTION_CFG_SCALE_BITS, KL_ATTENTION_CFG_NUM_THREADS, KL_ATTENTION_CFG_N
};

int kl_tvm_matmul(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);
int kl_tvm_conv1d(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);
int kl_tvm_conv1d_transpose_dw(void* self, const TVMFFIAny* args, int32_t nargs,
                               TVMFFIAny* result);

int kl_tvm_conv1d_transpose(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);

int kl_tvm_softmax(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);
int kl_tvm_attention(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result);

/* Raises a tvm-ffi error of the given kind (kl_tvm_ffi.c); returns -1. */
int kl_tvm_raise(const char* kind, const char* msg);
/* The stream TVM runs the device's work on (TVMFFIEnvGetStream, kl_tvm_ffi.c); NULL
 * where unset or where the libtvm_ffi lacks it (the legacy default stream then). */
void* kl_tvm_stream(int32_t device_type, int32_t device_id);
/* kl_tvm_raise with the message "fn: what"; returns -1. */
int kl_tvm_errf(const char* kind, const char* fn, const char* what);
/* Argument `name` of extern fn as a CPU tensor of dtype (code, bits), one lane, into
 * *out: 0, else raises (TypeError, ValueError) and returns -1. */
int kl_tvm_cpu_tensor(const char* fn, const TVMFFIAny* arg, const char* name, int code, int bits,
                      const DLTensor** out);
/* An extern's config shape (args[0]) for calling convention abi (its first value) with
 * nmin values, or up to nmax where the last ones are optional: *cfg its values, *ncfg
 * (may be NULL) their count; else raises, asking to recompile, and returns -1. */
int kl_tvm_config(const char* fn, const TVMFFIAny* args, int32_t nargs, int64_t abi, int nmin,
                  int nmax, const int64_t** cfg, int* ncfg);
/* A config's num_threads v (0: the process default) into *out; else raises, -1. */
int kl_tvm_cfg_threads(const char* fn, int64_t v, int* out);
/* Argument `name` as a compact tensor (unit strides but along dims of one) of dtype
 * (code, bits) on any device, its element count in *n: 0, else raises and returns -1.
 * The caller checks the device. */
int kl_tvm_compact_tensor(const char* fn, const TVMFFIAny* arg, const char* name, int code,
                          int bits, const DLTensor** out, int64_t* n);

#endif
