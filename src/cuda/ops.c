/* The ops program's module on each device (kl_build.py's CUDA_OPS_SOURCES: the noise
 * and convolution kernels), built at a device's first call and kept for the process:
 * captured graphs may launch its kernels at any time. */
#include <pthread.h>
#include <stdlib.h>

#include "cuda_internal.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static kl_cuda_ops* g_mods;

static const kl_cuda_ops* find(CUdevice dev) {
  pthread_mutex_lock(&g_lock);
  const kl_cuda_ops* m = g_mods;
  while (m && m->dev != dev) m = m->next;
  pthread_mutex_unlock(&g_lock);
  return m;
}

/* Its entry points and the zeroed counter; KL_OK or the error set. */
static kl_status module_parts(const kl_cu_api* cu, kl_cuda_ops* m) {
  static const char* const names[] = {"kl_random", "kl_fresh_seed", "kl_conv1d", "kl_conv1d_transpose",
                                      "kl_conv_reduce"};
  CUfunction* const fns[] = {&m->random, &m->fresh_seed, &m->conv1d, &m->conv1d_transpose, &m->conv_reduce};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    const CUresult r = cu->ModuleGetFunction(fns[i], m->mod, names[i]);
    if (r) return kl_cu_fail(r, "the ops module lacks its entry point %s", names[i]);
  }
  CUresult r;
  if ((r = cu->MemAlloc(&m->counter, sizeof(uint64_t))) || (r = cu->MemsetD8(m->counter, 0, sizeof(uint64_t)))) {
    if (m->counter) cu->MemFree(m->counter);
    return kl_cu_fail(r, "allocating the fresh-seed counter");
  }
  return KL_OK;
}

/* The device's module, built at the first call (the disk cache, else NVRTC): loading
 * a module is allowed while a stream is captured (relaxed capture mode), so a graph
 * captured before any call on the device still works. The context is current. */
static const kl_cuda_ops* ops_get(const kl_cu_api* cu, const kl_cuda_device* dv) {
  const kl_cuda_ops* o = find(dv->dev);
  if (o) return o;
  kl_cuda_ops* m = calloc(1, sizeof(*m));
  if (!m) {
    kl_errorf(KL_ERR_NOMEM, "out of memory");
    return NULL;
  }
  int mode = KL_CU_STREAM_CAPTURE_MODE_RELAXED;
  cu->ThreadExchangeStreamCaptureMode(&mode);
  m->mod = kl_cuda_load(KL_CUDA_PROGRAM_OPS, dv->dev, NULL, 0);
  const kl_status st = m->mod ? module_parts(cu, m) : KL_ERR_DEVICE;
  if (m->mod && st) cu->ModuleUnload(m->mod);
  cu->ThreadExchangeStreamCaptureMode(&mode);
  if (st) {
    free(m);
    return NULL;
  }
  m->dev = dv->dev;
  m->major = dv->major;
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

const kl_cuda_ops* kl_cuda_ops_enter(const kl_cu_api** cu_out, int device_id) {
  const kl_cu_api* cu = *cu_out = kl_cu();
  const kl_cuda_device* dv = cu ? kl_cuda_device_get(cu, device_id) : NULL;
  if (!dv) return NULL;
  const CUresult r = cu->CtxPushCurrent(dv->ctx);
  if (r) {
    kl_cu_fail(r, "CUDA: cannot make device %d's context current", device_id);
    return NULL;
  }
  const kl_cuda_ops* m = ops_get(cu, dv);
  if (!m) {
    CUcontext popped;
    cu->CtxPopCurrent(&popped);
  }
  return m;
}

kl_status kl_cuda_ops_leave(const kl_cu_api* cu, kl_status st) {
  CUcontext popped;
  cu->CtxPopCurrent(&popped);
  return st;
}
