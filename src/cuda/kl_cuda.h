/* The engine's CUDA backend (private): kl_lstm_forward hands validated calls on
 * kDLCUDA tensors to kl_cuda_lstm_forward. Everything CUDA is found at run time
 * (module.c); a build without CUDA still has these functions, which then fail
 * with a message naming what is missing. */
#ifndef KL_CUDA_H
#define KL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

typedef struct kl_cuda_call {
  int device_id;
  void* stream; /* CUstream of device_id, NULL: the legacy default stream */
  int L, D, H, R, reverse, has_bias, x_gates;
  kl_dtype dtype; /* KL_F32, KL_BF16 or KL_F16 (recurrent weights rounded) */
  int64_t T, B, I;
  const float* x;
  int64_t x_st, x_sb;
  float* y;
  int64_t y_st, y_sb;
  const float *h0, *c0;
  float *h_n, *c_n;
  const int64_t* lengths; /* host memory, [B] in 1..T, or NULL */
  const float* gate_bias;
  const kl_wsrc* w; /* [L * D] device pointers */
} kl_cuda_call;

/* Runs the call on its stream (asynchronously); on failure writes a message. */
kl_status kl_cuda_lstm_forward(const kl_cuda_call* c, char* err, size_t n);
/* Copies n int64 from device memory to dst on the stream and waits for them
 * (lengths on the device: they shape the launches). Not while the stream is captured. */
kl_status kl_cuda_read_int64(int device_id, void* stream, const int64_t* src, size_t count, int64_t* dst,
                             char* err, size_t n);
/* Frees the work buffers and modules of every device. */
void kl_cuda_clear(void);

/* module.c: the driver, NVRTC and compiled modules. */
#include "cuda_api.h"
const kl_cu_api* kl_cu(char* err, size_t n); /* NULL (and a message) if no driver */
const kl_nvrtc_api* kl_nvrtc(char* err, size_t n);
/* The embedded kernels built with these -D options for the device (cached per
 * process, then on disk); the device's context is current. cluster is NULL
 * below sm_90 or without KL_C. */
typedef struct kl_cuda_kernels {
  CUmodule mod;
  CUfunction gemm, gemm128, step, proj, state_init, cluster;
  /* launch facts kept for the next calls (atomics; 0 = not yet known) */
  int max_clusters; /* clusters of the cluster kernel resident at once */
  int smem_bytes;   /* the cluster kernel's dynamic shared memory limit as set */
} kl_cuda_kernels;
kl_cuda_kernels* kl_cuda_module(CUdevice dev, const char* const* defines, int ndefines, char* err,
                                      size_t n);
/* Compiles the kernels for arch ("sm_80", "sm_90a", ...) with these options,
 * nothing loaded: 0, or -1 and the compiler's log in err. */
int kl_cuda_compile_only(const char* arch, const char* const* defines, int ndefines, char* err, size_t n);
const char* kl_cu_error(CUresult r);

#endif /* KL_CUDA_H */
