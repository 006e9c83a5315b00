/* Inside the CUDA backend: the driver and NVRTC (module.c), the devices and their
 * work memory (device.c); the plan is cuda_plan.h, the kernels' parameters params.cuh. */
#ifndef KL_CUDA_INTERNAL_H
#define KL_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"
#include "error.h"
#include "kl_cuda.h"

/* module.c: the libraries, NULL (and the reason as the error) when missing. */
const kl_cu_api* kl_cu(void);
const kl_nvrtc_api* kl_nvrtc(void);
const char* kl_cu_error(CUresult r);
/* Sets "<what>: <the driver's reason> (error r)" as the error; returns KL_ERR_DEVICE. */
kl_status kl_cu_fail(CUresult r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* Returns kl_cu_fail(...) from the enclosing function when the driver call fails. */
#define KL_CU_TRY(call, ...)                             \
  do {                                                   \
    const CUresult kl_cu_r_ = (call);                    \
    if (kl_cu_r_) return kl_cu_fail(kl_cu_r_, __VA_ARGS__); \
  } while (0)

/* The programs the backend compiles (module.c): the LSTM's kernels (CUDA_SOURCES, built
 * per shape with kernels.def's -D options) and the ops program (ops.c: noise, convolutions). */
enum { KL_CUDA_PROGRAM_LSTM, KL_CUDA_PROGRAM_OPS, KL_CUDA_NPROGRAMS };

/* The kernels of one module (kernels.def), and launch facts kept for the next
 * calls (atomics; 0 = not yet known). */
typedef struct kl_cuda_kernels {
  CUmodule mod;
#define KL_CUDA_KERNEL(field, name, cluster_only) CUfunction field;
#include "kernels.def"
#undef KL_CUDA_KERNEL
  int max_clusters; /* clusters of the cluster kernel resident at once */
  int smem_bytes;   /* the cluster kernel's dynamic shared memory limit as set */
  int few_smem;     /* 1 once gemm_few's shared memory limit is set */
} kl_cuda_kernels;
/* The embedded kernels built with these -D options for the device (cached per
 * process, then on disk); the device's context is current. cluster is NULL
 * below sm_90 or without KL_C. NULL and the error on failure. */
kl_cuda_kernels* kl_cuda_module(CUdevice dev, const char* const* defines, int ndefines);
/* Program `program` built for the device with these -D options and loaded, from the
 * disk cache or NVRTC; the caller keeps it (no process cache). The device's context
 * is current. NULL and the error on failure. */
CUmodule kl_cuda_load(int program, CUdevice dev, const char* const* defines, int ndefines);
/* Compiles a program for arch ("sm_80", "sm_90a", ...) with these options, nothing
 * loaded: KL_OK, or KL_ERR_DEVICE and the compiler's log as the error. */
kl_status kl_cuda_compile_only(int program, const char* arch, const char* const* defines, int ndefines);

/* ops.c: the ops program's module on one device (its entry points; the fresh-seed
 * counter, 8 bytes of device memory). */
typedef struct kl_cuda_ops {
  struct kl_cuda_ops* next;
  CUdevice dev;
  CUmodule mod;
  CUfunction random, fresh_seed, conv1d, conv1d_transpose, conv_reduce;
  CUdeviceptr counter;
  int major; /* the device's compute capability */
} kl_cuda_ops;
/* The device's ops module (built at its first call) with the device's context made
 * current, and the driver's table in *cu; NULL with the error set and nothing
 * current. kl_cuda_ops_leave pops the context and returns st. */
const kl_cuda_ops* kl_cuda_ops_enter(const kl_cu_api** cu, int device_id);
kl_status kl_cuda_ops_leave(const kl_cu_api* cu, kl_status st);

/* device.c: a device's context and facts (kept for the process). */
typedef struct kl_cuda_device {
  struct kl_cuda_device* next;
  int id;
  CUdevice dev;
  CUcontext ctx;
  int major, sms, cluster, smem_optin;
} kl_cuda_device;
const kl_cuda_device* kl_cuda_device_get(const kl_cu_api* cu, int id);
/* At least size bytes of device memory for calls on (device, stream); 0 and the error on failure. */
CUdeviceptr kl_cuda_workspace(const kl_cu_api* cu, int id, void* stream, size_t size);

#endif /* KL_CUDA_INTERNAL_H */
