/* Counter-based noise on CUDA devices (kl_cuda_random, kl_cuda_fresh_seed, kl_cuda.h):
 * random.cu's kernels in the device's ops module (ops.c). */
#include "cuda_internal.h"
#include "random.h"

/* Threads per CTA, each drawing one Philox block (4 elements) at a time; a grid of at
 * most KL_RANDOM_MAX_CTAS strides over the rest. */
#define KL_RANDOM_THREADS 256
#define KL_RANDOM_MAX_CTAS 65535

static kl_status launch(const kl_cu_api* cu, CUfunction f, int dist, const int64_t* seed, uint64_t stream,
                        int64_t n, float* y, int device_id, CUstream s) {
  const uint64_t blocks = ((uint64_t)n + 3) / 4;
  uint64_t ctas = (blocks + KL_RANDOM_THREADS - 1) / KL_RANDOM_THREADS;
  if (ctas > KL_RANDOM_MAX_CTAS) ctas = KL_RANDOM_MAX_CTAS;
  long long nn = n;
  unsigned long long st = stream;
  void* params[] = {&dist, &seed, &st, &nn, &y};
  KL_CU_TRY(cu->LaunchKernel(f, (unsigned)ctas, 1, 1, KL_RANDOM_THREADS, 1, 1, 0, s, params, NULL),
            "CUDA: launching the noise kernel on device %d failed", device_id);
  return KL_OK;
}

kl_status kl_cuda_random(int dist, const int64_t* seed, uint64_t stream, int64_t n, float* y, int device_id,
                         void* cu_stream) {
  if (dist != KL_RANDOM_UNIFORM && dist != KL_RANDOM_NORMAL)
    return kl_fail("random: dist must be KL_RANDOM_UNIFORM or KL_RANDOM_NORMAL");
  if (n < 0 || n > ((int64_t)1 << 62) || (n > 0 && (!y || !seed)) || device_id < 0)
    return kl_fail("random: need 0 <= n <= 2^62, the seed and an output in device memory, device_id >= 0");
  if (n == 0) return KL_OK;
  const kl_cu_api* cu;
  const kl_cuda_ops* m = kl_cuda_ops_enter(&cu, device_id);
  if (!m) return KL_ERR_DEVICE;
  return kl_cuda_ops_leave(cu, launch(cu, m->random, dist, seed, stream, n, y, device_id, (CUstream)cu_stream));
}

kl_status kl_cuda_fresh_seed(uint64_t base, int64_t* out, int device_id, void* cu_stream) {
  if (!out || device_id < 0) return kl_fail("fresh seed: need an output in device memory, device_id >= 0");
  const kl_cu_api* cu;
  const kl_cuda_ops* m = kl_cuda_ops_enter(&cu, device_id);
  if (!m) return KL_ERR_DEVICE;
  unsigned long long b = base;
  CUdeviceptr counter = m->counter;
  void* params[] = {&out, &b, &counter};
  const CUresult r = cu->LaunchKernel(m->fresh_seed, 1, 1, 1, 1, 1, 1, 0, (CUstream)cu_stream, params, NULL);
  return kl_cuda_ops_leave(
      cu, r ? kl_cu_fail(r, "CUDA: launching the fresh-seed kernel on device %d failed", device_id) : KL_OK);
}
