/* Counter-based noise on CUDA devices (kl_cuda_random, kl_cuda.h): random.cu's kernel,
 * one module per device, kept for the process (captured graphs may launch it at any
 * time). */
#include <pthread.h>
#include <stdlib.h>

#include "cuda_internal.h"
#include "random.h"

/* Threads per CTA, each drawing one Philox block (4 elements) at a time; a grid of at
 * most KL_RANDOM_MAX_CTAS strides over the rest. */
#define KL_RANDOM_THREADS 256
#define KL_RANDOM_MAX_CTAS 65535

typedef struct random_module {
  struct random_module* next;
  CUdevice dev;
  CUmodule mod;
  CUfunction f, fresh;   /* kl_random, kl_fresh_seed */
  CUdeviceptr counter; /* kl_fresh_seed's calls on this device (8 bytes, zeroed) */
} random_module;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static random_module* g_mods;

static const random_module* find(CUdevice dev) {
  pthread_mutex_lock(&g_lock);
  const random_module* m = g_mods;
  while (m && m->dev != dev) m = m->next;
  pthread_mutex_unlock(&g_lock);
  return m;
}

/* Its entry points and the zeroed counter; KL_OK or the error set. */
static kl_status module_parts(const kl_cu_api* cu, random_module* m) {
  CUresult r = cu->ModuleGetFunction(&m->f, m->mod, "kl_random");
  if (!r) r = cu->ModuleGetFunction(&m->fresh, m->mod, "kl_fresh_seed");
  if (r) return kl_cu_fail(r, "the noise module lacks its entry points");
  if ((r = cu->MemAlloc(&m->counter, sizeof(uint64_t))) ||
      (r = cu->MemsetD8(m->counter, 0, sizeof(uint64_t)))) {
    if (m->counter) cu->MemFree(m->counter);
    return kl_cu_fail(r, "allocating the fresh-seed counter");
  }
  return KL_OK;
}

/* The device's module, built at the first call (the disk cache, else NVRTC): loading
 * a module is allowed while a stream is captured (relaxed capture mode), so a graph
 * captured before any draw on the device still works. The context is current. */
static const random_module* random_module_get(const kl_cu_api* cu, const kl_cuda_device* dv) {
  const random_module* o = find(dv->dev);
  if (o) return o;
  random_module* m = calloc(1, sizeof(*m));
  if (!m) {
    kl_errorf(KL_ERR_NOMEM, "out of memory");
    return NULL;
  }
  int mode = KL_CU_STREAM_CAPTURE_MODE_RELAXED;
  cu->ThreadExchangeStreamCaptureMode(&mode);
  m->mod = kl_cuda_load(KL_CUDA_PROGRAM_RANDOM, dv->dev, NULL, 0);
  const kl_status st = m->mod ? module_parts(cu, m) : KL_ERR_DEVICE;
  if (m->mod && st) cu->ModuleUnload(m->mod);
  cu->ThreadExchangeStreamCaptureMode(&mode);
  if (st) {
    free(m);
    return NULL;
  }
  m->dev = dv->dev;
  pthread_mutex_lock(&g_lock);
  o = g_mods;
  while (o && o->dev != dv->dev) o = o->next;
  if (!o) { /* else another thread was first: its module stays, this one goes */
    m->next = g_mods;
    g_mods = m;
  }
  pthread_mutex_unlock(&g_lock);
  if (!o) return m;
  cu->MemFree(m->counter);
  cu->ModuleUnload(m->mod);
  free(m);
  return o;
}

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

/* The device's noise module with its context made current (leave() pops it), or NULL
 * with the error set and nothing current. */
static const random_module* enter(const kl_cu_api** cu_out, int device_id) {
  const kl_cu_api* cu = *cu_out = kl_cu();
  const kl_cuda_device* dv = cu ? kl_cuda_device_get(cu, device_id) : NULL;
  if (!dv) return NULL;
  const CUresult r = cu->CtxPushCurrent(dv->ctx);
  if (r) {
    kl_cu_fail(r, "CUDA: cannot make device %d's context current", device_id);
    return NULL;
  }
  const random_module* m = random_module_get(cu, dv);
  if (!m) {
    CUcontext popped;
    cu->CtxPopCurrent(&popped);
  }
  return m;
}

static kl_status leave(const kl_cu_api* cu, kl_status st) {
  CUcontext popped;
  cu->CtxPopCurrent(&popped);
  return st;
}

kl_status kl_cuda_random(int dist, const int64_t* seed, uint64_t stream, int64_t n, float* y, int device_id,
                         void* cu_stream) {
  if (dist != KL_RANDOM_UNIFORM && dist != KL_RANDOM_NORMAL)
    return kl_fail("random: dist must be KL_RANDOM_UNIFORM or KL_RANDOM_NORMAL");
  if (n < 0 || n > ((int64_t)1 << 62) || (n > 0 && (!y || !seed)) || device_id < 0)
    return kl_fail("random: need 0 <= n <= 2^62, the seed and an output in device memory, device_id >= 0");
  if (n == 0) return KL_OK;
  const kl_cu_api* cu;
  const random_module* m = enter(&cu, device_id);
  if (!m) return KL_ERR_DEVICE;
  return leave(cu, launch(cu, m->f, dist, seed, stream, n, y, device_id, (CUstream)cu_stream));
}

kl_status kl_cuda_fresh_seed(uint64_t base, int64_t* out, int device_id, void* cu_stream) {
  if (!out || device_id < 0) return kl_fail("fresh seed: need an output in device memory, device_id >= 0");
  const kl_cu_api* cu;
  const random_module* m = enter(&cu, device_id);
  if (!m) return KL_ERR_DEVICE;
  unsigned long long b = base;
  CUdeviceptr counter = m->counter;
  void* params[] = {&out, &b, &counter};
  const CUresult r = cu->LaunchKernel(m->fresh, 1, 1, 1, 1, 1, 1, 0, (CUstream)cu_stream, params, NULL);
  return leave(cu, r ? kl_cu_fail(r, "CUDA: launching the fresh-seed kernel on device %d failed", device_id)
                     : KL_OK);
}
