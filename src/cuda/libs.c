/* The CUDA driver and NVRTC, found by dlopen at the first CUDA call: nothing of
 * CUDA is needed at build time (cuda_api.h declares what the engine calls). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static kl_cu_api g_cu;
static int g_cu_state; /* 0 untried, 1 ready, -1 failed */
static char g_cu_err[256];
static kl_nvrtc_api g_nvrtc;
static int g_nvrtc_state;
static char g_nvrtc_err[512];
static char g_nvrtc_path[1024]; /* kl_cuda_set_nvrtc_path's, "" if none */

const char* kl_cu_error(CUresult r) {
  const char* s = NULL;
  if (g_cu.GetErrorString && g_cu.GetErrorString(r, &s) == 0 && s) return s;
  return "unknown CUDA error";
}

kl_status kl_cu_fail(CUresult r, const char* fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  return kl_errorf(KL_ERR_DEVICE, "%s: %s (error %d)", what, kl_cu_error(r), r);
}

/* Every symbol the engine takes from the driver and NVRTC: its library, where it
 * goes in that library's table, whether a load fails without it. */
enum { LIB_CU, LIB_NVRTC };
static const struct {
  int lib;
  size_t offset;
  const char* name;
  int required;
} SYMS[] = {
    {LIB_CU, offsetof(kl_cu_api, Init), "cuInit", 1},
    {LIB_CU, offsetof(kl_cu_api, DriverGetVersion), "cuDriverGetVersion", 1},
    {LIB_CU, offsetof(kl_cu_api, DeviceGet), "cuDeviceGet", 1},
    {LIB_CU, offsetof(kl_cu_api, DeviceGetAttribute), "cuDeviceGetAttribute", 1},
    {LIB_CU, offsetof(kl_cu_api, DevicePrimaryCtxRetain), "cuDevicePrimaryCtxRetain", 1},
    {LIB_CU, offsetof(kl_cu_api, CtxPushCurrent), "cuCtxPushCurrent_v2", 1},
    {LIB_CU, offsetof(kl_cu_api, CtxPopCurrent), "cuCtxPopCurrent_v2", 1},
    {LIB_CU, offsetof(kl_cu_api, MemAlloc), "cuMemAlloc_v2", 1},
    {LIB_CU, offsetof(kl_cu_api, MemsetD8), "cuMemsetD8_v2", 1},
    {LIB_CU, offsetof(kl_cu_api, MemFree), "cuMemFree_v2", 1},
    {LIB_CU, offsetof(kl_cu_api, ModuleLoadData), "cuModuleLoadData", 1},
    {LIB_CU, offsetof(kl_cu_api, ModuleUnload), "cuModuleUnload", 1},
    {LIB_CU, offsetof(kl_cu_api, ModuleGetFunction), "cuModuleGetFunction", 1},
    {LIB_CU, offsetof(kl_cu_api, FuncSetAttribute), "cuFuncSetAttribute", 1},
    {LIB_CU, offsetof(kl_cu_api, LaunchKernel), "cuLaunchKernel", 1},
    {LIB_CU, offsetof(kl_cu_api, LaunchKernelEx), "cuLaunchKernelEx", 0},
    {LIB_CU, offsetof(kl_cu_api, OccupancyMaxActiveClusters), "cuOccupancyMaxActiveClusters", 0},
    {LIB_CU, offsetof(kl_cu_api, ThreadExchangeStreamCaptureMode), "cuThreadExchangeStreamCaptureMode", 1},
    {LIB_CU, offsetof(kl_cu_api, PointerGetAttribute), "cuPointerGetAttribute", 1},
    {LIB_CU, offsetof(kl_cu_api, MemcpyDtoHAsync), "cuMemcpyDtoHAsync_v2", 1},
    {LIB_CU, offsetof(kl_cu_api, StreamSynchronize), "cuStreamSynchronize", 1},
    {LIB_CU, offsetof(kl_cu_api, StreamIsCapturing), "cuStreamIsCapturing", 1},
    {LIB_CU, offsetof(kl_cu_api, GetErrorString), "cuGetErrorString", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, Version), "nvrtcVersion", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, GetNumSupportedArchs), "nvrtcGetNumSupportedArchs", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, GetSupportedArchs), "nvrtcGetSupportedArchs", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, CreateProgram), "nvrtcCreateProgram", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, CompileProgram), "nvrtcCompileProgram", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, GetProgramLogSize), "nvrtcGetProgramLogSize", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, GetProgramLog), "nvrtcGetProgramLog", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, GetCUBINSize), "nvrtcGetCUBINSize", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, GetCUBIN), "nvrtcGetCUBIN", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, GetPTXSize), "nvrtcGetPTXSize", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, GetPTX), "nvrtcGetPTX", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, DestroyProgram), "nvrtcDestroyProgram", 1},
    {LIB_NVRTC, offsetof(kl_nvrtc_api, GetErrorString), "nvrtcGetErrorString", 1},
};

/* Resolves library lib's symbols from h (opened as name) into table; a missing
 * required one fails the load (-1, the message in err). */
static int resolve(void* h, int lib, void* table, const char* name, char* err, size_t err_size) {
  for (size_t i = 0; i < sizeof(SYMS) / sizeof(SYMS[0]); i++) {
    if (SYMS[i].lib != lib) continue;
    void** slot = (void**)((char*)table + SYMS[i].offset);
    *slot = dlsym(h, SYMS[i].name);
    if (!*slot && SYMS[i].required) {
      snprintf(err, err_size, "%s lacks %s (too old a version)", name, SYMS[i].name);
      return -1;
    }
  }
  return 0;
}

static int load_cu(void) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(g_cu_err, sizeof(g_cu_err),
             "CUDA tensors need the NVIDIA driver: libcuda.so.1 could not be loaded (%s)", dlerror());
    return -1;
  }
  if (resolve(h, LIB_CU, &g_cu, "libcuda.so.1", g_cu_err, sizeof(g_cu_err))) return -1;
  const CUresult r = g_cu.Init(0);
  if (r) {
    snprintf(g_cu_err, sizeof(g_cu_err), "cuInit failed: %s (error %d)", kl_cu_error(r), r);
    return -1;
  }
  return 0;
}

/* Loads a library once (*state: 0 untried, 1 ready, -1 failed); 1 if it is
 * ready, else 0 with its message (err) as the error. */
static int loaded(int* state, int (*load)(void), const char* err) {
  pthread_mutex_lock(&g_lock);
  if (!*state) *state = load() ? -1 : 1;
  const int ok = *state == 1;
  pthread_mutex_unlock(&g_lock);
  if (!ok) kl_set_error(err);
  return ok;
}

const kl_cu_api* kl_cu(void) { return loaded(&g_cu_state, load_cu, g_cu_err) ? &g_cu : NULL; }

/* NVRTC: $KOKORO_LSTM_NVRTC (a path: the user's choice), else the path given to
 * kl_cuda_set_nvrtc_path (kokoro_lstm's Python package gives the nvidia-cuda-nvrtc
 * wheel's when one is installed), else the sonames of CUDA 13 and 12 on the
 * loader's path. g_lock is held. */
static int load_nvrtc(void) {
  const char* env = getenv("KOKORO_LSTM_NVRTC");
  const char* names[] = {env && *env ? env : NULL, g_nvrtc_path[0] ? g_nvrtc_path : NULL, "libnvrtc.so.13",
                         "libnvrtc.so.12", "libnvrtc.so"};
  void* h = NULL;
  const char* what = NULL;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++)
    if (names[i] && (h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) what = names[i];
  if (!h) {
    snprintf(g_nvrtc_err, sizeof(g_nvrtc_err),
             "CUDA tensors need NVRTC to compile the kernels: none of libnvrtc.so.13, .12 could be "
             "loaded (pip install nvidia-cuda-nvrtc, or set KOKORO_LSTM_NVRTC to libnvrtc's path)");
    return -1;
  }
  if (resolve(h, LIB_NVRTC, &g_nvrtc, what, g_nvrtc_err, sizeof(g_nvrtc_err))) return -1;
  /* NVRTC opens libnvrtc-builtins by soname at compile time; where libnvrtc is
   * not on the loader's path (a pip wheel's folder) that fails unless the
   * builtins beside it are loaded first */
  int major = 0, minor = 0;
  Dl_info info;
  if (!g_nvrtc.Version(&major, &minor) && dladdr(*(void**)&g_nvrtc.Version, &info) && info.dli_fname) {
    const char* slash = strrchr(info.dli_fname, '/');
    char path[1200];
    if (slash && snprintf(path, sizeof(path), "%.*s/libnvrtc-builtins.so.%d.%d", (int)(slash - info.dli_fname),
                          info.dli_fname, major, minor) < (int)sizeof(path))
      dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  }
  return 0;
}

const kl_nvrtc_api* kl_nvrtc(void) {
  return loaded(&g_nvrtc_state, load_nvrtc, g_nvrtc_err) ? &g_nvrtc : NULL;
}

kl_status kl_cuda_set_nvrtc_path(const char* path) {
  if (path && strlen(path) >= sizeof(g_nvrtc_path))
    return kl_fail("kl_cuda_set_nvrtc_path: the path is longer than %zu bytes", sizeof(g_nvrtc_path) - 1);
  pthread_mutex_lock(&g_lock);
  snprintf(g_nvrtc_path, sizeof(g_nvrtc_path), "%s", path ? path : "");
  pthread_mutex_unlock(&g_lock);
  return KL_OK;
}
