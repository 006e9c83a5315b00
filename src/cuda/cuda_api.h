/* The parts of the CUDA driver API and NVRTC that the engine calls, declared
 * here so that nothing of CUDA is needed at build time: both libraries are
 * found by dlopen at the first CUDA call (module.c). Types and constants are
 * those of cuda.h / nvrtc.h (CUDA 12 and 13 ABI). */
#ifndef KL_CUDA_API_H
#define KL_CUDA_API_H

#include <stddef.h>

typedef int CUresult; /* 0 = CUDA_SUCCESS */
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef unsigned long long CUdeviceptr;

enum {
  KL_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  KL_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  KL_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  KL_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  KL_CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH = 120,
  KL_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  KL_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
  KL_CU_STREAM_CAPTURE_MODE_RELAXED = 2,
  KL_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
};

typedef struct {
  int id;
  char pad[4];
  union {
    char pad[64];
    void* align; /* cuda.h's union holds pointers */
    struct {
      unsigned x, y, z;
    } clusterDim;
  } value;
} kl_CUlaunchAttribute;

typedef struct {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream hStream;
  kl_CUlaunchAttribute* attrs;
  unsigned numAttrs;
} kl_CUlaunchConfig;

typedef struct kl_cu_api {
  CUresult (*Init)(unsigned flags);
  CUresult (*DriverGetVersion)(int* v);
  CUresult (*DeviceGet)(CUdevice* d, int ordinal);
  CUresult (*DeviceGetAttribute)(int* v, int attr, CUdevice d);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext* c, CUdevice d);
  CUresult (*CtxPushCurrent)(CUcontext c);
  CUresult (*CtxPopCurrent)(CUcontext* c);
  CUresult (*MemAlloc)(CUdeviceptr* p, size_t n);
  CUresult (*MemsetD8)(CUdeviceptr p, unsigned char v, size_t n);
  CUresult (*MemFree)(CUdeviceptr p);
  CUresult (*ModuleLoadData)(CUmodule* m, const void* image);
  CUresult (*ModuleUnload)(CUmodule m);
  CUresult (*ModuleGetFunction)(CUfunction* f, CUmodule m, const char* name);
  CUresult (*FuncSetAttribute)(CUfunction f, int attr, int value);
  CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned smem, CUstream s, void** params,
                           void** extra);
  CUresult (*LaunchKernelEx)(const kl_CUlaunchConfig* cfg, CUfunction f, void** params, void** extra);
  CUresult (*OccupancyMaxActiveClusters)(int* n, CUfunction f, const kl_CUlaunchConfig* cfg);
  CUresult (*ThreadExchangeStreamCaptureMode)(int* mode);
  CUresult (*PointerGetAttribute)(void* data, int attr, CUdeviceptr p);
  CUresult (*MemcpyDtoHAsync)(void* dst, CUdeviceptr src, size_t n, CUstream s);
  CUresult (*StreamSynchronize)(CUstream s);
  CUresult (*StreamIsCapturing)(CUstream s, int* status);
  CUresult (*GetErrorString)(CUresult e, const char** s);
} kl_cu_api;

typedef struct _nvrtcProgram* nvrtcProgram;
typedef struct kl_nvrtc_api {
  int (*Version)(int* major, int* minor);
  int (*GetNumSupportedArchs)(int* n);
  int (*GetSupportedArchs)(int* archs);
  int (*CreateProgram)(nvrtcProgram* p, const char* src, const char* name, int nh,
                       const char* const* headers, const char* const* names);
  int (*CompileProgram)(nvrtcProgram p, int nopt, const char* const* opts);
  int (*GetProgramLogSize)(nvrtcProgram p, size_t* n);
  int (*GetProgramLog)(nvrtcProgram p, char* log);
  int (*GetCUBINSize)(nvrtcProgram p, size_t* n);
  int (*GetCUBIN)(nvrtcProgram p, char* out);
  int (*GetPTXSize)(nvrtcProgram p, size_t* n);
  int (*GetPTX)(nvrtcProgram p, char* out);
  int (*DestroyProgram)(nvrtcProgram* p);
  const char* (*GetErrorString)(int e);
} kl_nvrtc_api;

#endif /* KL_CUDA_API_H */
