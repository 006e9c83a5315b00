/* The backends as rows of one table: kl_lstm_forward picks the row of x's device,
 * kl_cache_clear clears every row. */
#include <stddef.h>

#include "backend.h"
#include "cache.h"
#include "error.h"
#include "kl_cuda.h"

static kl_status cpu_supports(const kl_forward_args* a) {
  (void)a;
  return KL_OK;
}

static kl_status cuda_supports(const kl_forward_args* a) {
  if (a->dtype == KL_F64)
    return kl_fail("float64 runs on the CPU only: pass float32 CUDA tensors (dtype float32, bfloat16 or "
                   "float16 weights)");
  return KL_OK;
}

static const kl_backend BACKENDS[] = {
    {"cpu", kDLCPU, cpu_supports, kl_cpu_run, NULL, NULL, kl_cache_clear_cpu},
    {"cuda", kDLCUDA, cuda_supports, kl_cuda_lstm_forward, kl_cuda_read_int64, kl_cuda_stream_capturing,
     kl_cuda_clear},
};
#define NUM_BACKENDS (sizeof(BACKENDS) / sizeof(BACKENDS[0]))

const kl_backend* kl_backend_for(const DLTensor* x) {
  const DLDeviceType type = x ? x->device.device_type : kDLCPU;
  for (size_t i = 0; i < NUM_BACKENDS; i++)
    if (BACKENDS[i].device_type == type) return &BACKENDS[i];
  kl_fail("x is on device type %d: kokoro_lstm runs on the CPU (kDLCPU) and CUDA (kDLCUDA)", (int)type);
  return NULL;
}

void kl_cache_clear(void) {
  for (size_t i = NUM_BACKENDS; i-- > 0;) BACKENDS[i].clear();
}
