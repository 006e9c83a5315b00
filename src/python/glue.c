/* The binding's plain-C helpers (glue.h). */
#include "glue.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kl_tvm.h"

int kl_py_dtype_from_name(const char* name, kl_dtype* dt) {
  static const char* const names[] = {"float32", "float64", "bfloat16", "float16"};
  static const kl_dtype dtypes[] = {KL_F32, KL_F64, KL_BF16, KL_F16};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(name, names[i]) == 0) {
      *dt = dtypes[i];
      return 1;
    }
  return 0;
}

int kl_py_isa_from_name(const char* name, kl_isa* isa) {
  for (int i = 0; i < KL_ISA_COUNT; i++)
    if (strcmp(name, kl_isa_name((kl_isa)i)) == 0) {
      *isa = (kl_isa)i;
      return 1;
    }
  return 0;
}

int kl_py_isa_set(const char* name, char* err, size_t n) {
  kl_isa isa;
  if (!kl_py_isa_from_name(name, &isa)) {
    snprintf(err, n, "unknown ISA '%s' (expected scalar, avx2, avx512, avx512-bf16, avx512-amx, neon or neon-bf16)",
             name);
    return 0;
  }
  if (kl_isa_set(isa) == KL_OK) return 1;
  snprintf(err, n, "this CPU does not support ISA '%s' (best: %s)", name, kl_isa_name(kl_isa_detected()));
  return 0;
}

int kl_py_poll_due(long long* next_ns, long long period_ns) {
  const long long t = kl_py_now_ns();
  if (t < *next_ns) return 0;
  *next_ns = t + period_ns;
  return 1;
}

long long kl_py_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int kl_py_tvm_load(const char* path, char* err, size_t errlen) {
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    snprintf(err, errlen, "%s", dlerror());
    return -1;
  }
  kl_tvm_api api;
  api.function_create = (int (*)(void*, TVMFFISafeCallType, void (*)(void*), TVMFFIObjectHandle*))dlsym(h, "TVMFFIFunctionCreate");
  api.function_get_global = (int (*)(const TVMFFIByteArray*, TVMFFIObjectHandle*))dlsym(h, "TVMFFIFunctionGetGlobal");
  api.function_set_global = (int (*)(const TVMFFIByteArray*, TVMFFIObjectHandle, int))dlsym(h, "TVMFFIFunctionSetGlobal");
  api.error_set_raised_from_cstr = (void (*)(const char*, const char*))dlsym(h, "TVMFFIErrorSetRaisedFromCStr");
  api.error_move_from_raised = (void (*)(TVMFFIObjectHandle*))dlsym(h, "TVMFFIErrorMoveFromRaised");
  api.object_inc_ref = (int (*)(TVMFFIObjectHandle))dlsym(h, "TVMFFIObjectIncRef");
  api.object_dec_ref = (int (*)(TVMFFIObjectHandle))dlsym(h, "TVMFFIObjectDecRef");
  api.env_get_stream = (void* (*)(int32_t, int32_t))dlsym(h, "TVMFFIEnvGetStream");
  const int n = kl_tvm_register(&api, err, errlen);
  return n < 0 ? -2 : n;
}
