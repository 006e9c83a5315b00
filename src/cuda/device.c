/* The CUDA devices' contexts and facts, and the work memory kept per (device,
 * stream): it only grows, so a warm call allocates nothing and can be captured
 * in a CUDA graph. */
#include <pthread.h>
#include <stdlib.h>

#include "cuda_internal.h"

typedef struct ws_buf {
  struct ws_buf* next;
  int device_id;
  void* stream;
  CUdeviceptr ptr;
  size_t size;
  struct retired* old;
} ws_buf;

struct retired {
  struct retired* next;
  CUdeviceptr ptr;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static kl_cuda_device* g_devs;
static ws_buf* g_ws;

static kl_cuda_device* device_new(const kl_cu_api* cu, int id) {
  kl_cuda_device* d = calloc(1, sizeof(*d));
  if (!d) {
    kl_errorf(KL_ERR_NOMEM, "out of memory");
    return NULL;
  }
  CUresult r = cu->DeviceGet(&d->dev, id);
  if (!r) r = cu->DevicePrimaryCtxRetain(&d->ctx, d->dev);
  if (r) {
    kl_cu_fail(r, "CUDA device %d", id);
    free(d);
    return NULL;
  }
  d->id = id;
  cu->DeviceGetAttribute(&d->major, KL_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
  cu->DeviceGetAttribute(&d->sms, KL_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev);
  cu->DeviceGetAttribute(&d->cluster, KL_CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, d->dev);
  cu->DeviceGetAttribute(&d->smem_optin, KL_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d->dev);
  return d;
}

const kl_cuda_device* kl_cuda_device_get(const kl_cu_api* cu, int id) {
  pthread_mutex_lock(&g_lock);
  kl_cuda_device* d = g_devs;
  while (d && d->id != id) d = d->next;
  if (!d && (d = device_new(cu, id))) {
    d->next = g_devs;
    g_devs = d;
  }
  pthread_mutex_unlock(&g_lock);
  return d;
}

/* Grows w to at least size bytes; the outgrown buffer is kept until kl_cuda_clear:
 * work in flight or a captured graph may still use it. */
static CUdeviceptr grow(const kl_cu_api* cu, ws_buf* w, size_t size) {
  struct retired* old = w->ptr ? malloc(sizeof(*old)) : NULL;
  const size_t want = size + size / 4;
  CUdeviceptr p = 0;
  int mode = KL_CU_STREAM_CAPTURE_MODE_RELAXED; /* allowed while the stream is captured */
  cu->ThreadExchangeStreamCaptureMode(&mode);
  const CUresult r = (w->ptr && !old) ? 2 /* CUDA_ERROR_OUT_OF_MEMORY */ : cu->MemAlloc(&p, want);
  cu->ThreadExchangeStreamCaptureMode(&mode);
  if (r) {
    kl_cu_fail(r, "cannot allocate %zu bytes of CUDA work memory", want);
    free(old);
    return 0;
  }
  if (old) {
    old->ptr = w->ptr;
    old->next = w->old;
    w->old = old;
  }
  w->ptr = p;
  w->size = want;
  return p;
}

CUdeviceptr kl_cuda_workspace(const kl_cu_api* cu, int id, void* stream, size_t size) {
  pthread_mutex_lock(&g_lock);
  ws_buf* w = g_ws;
  while (w && !(w->device_id == id && w->stream == stream)) w = w->next;
  if (!w && (w = calloc(1, sizeof(*w)))) {
    w->device_id = id;
    w->stream = stream;
    w->next = g_ws;
    g_ws = w;
  }
  CUdeviceptr p = 0;
  if (!w)
    kl_errorf(KL_ERR_NOMEM, "out of memory");
  else
    p = w->size >= size ? w->ptr : grow(cu, w, size);
  pthread_mutex_unlock(&g_lock);
  return p;
}

void kl_cuda_clear(void) {
  pthread_mutex_lock(&g_lock);
  ws_buf* w = g_ws;
  g_ws = NULL;
  pthread_mutex_unlock(&g_lock);
  if (!w) return;
  /* buffers exist, so the driver was loaded; cuMemFree waits for the device to
   * finish the work that uses the memory */
  const kl_cu_api* cu = kl_cu();
  for (; w;) {
    ws_buf* next = w->next;
    for (struct retired* o = w->old; o;) {
      struct retired* on = o->next;
      cu->MemFree(o->ptr);
      free(o);
      o = on;
    }
    if (w->ptr) cu->MemFree(w->ptr);
    free(w);
    w = next;
  }
}

int kl_cuda_stream_capturing(int device_id, void* stream) {
  const kl_cu_api* cu = kl_cu();
  const kl_cuda_device* dv = cu ? kl_cuda_device_get(cu, device_id) : NULL;
  if (!dv || cu->CtxPushCurrent(dv->ctx)) return 0; /* the read that follows says why */
  int st = 0; /* CU_STREAM_CAPTURE_STATUS_NONE; ACTIVE 1, INVALIDATED 2 */
  const CUresult r = cu->StreamIsCapturing((CUstream)stream, &st);
  CUcontext prev;
  cu->CtxPopCurrent(&prev);
  return !r && st != 0;
}

/* The copy and the wait, the device's context current. */
static kl_status read_current(const kl_cu_api* cu, int device_id, CUstream s, const int64_t* src, size_t count,
                              int64_t* dst) {
  CUresult r = cu->MemcpyDtoHAsync(dst, (CUdeviceptr)src, count * sizeof(int64_t), s);
  if (!r) r = cu->StreamSynchronize(s);
  if (r) return kl_cu_fail(r, "reading lengths from CUDA device %d", device_id);
  return KL_OK;
}

kl_status kl_cuda_read_int64(int device_id, void* stream, const int64_t* src, size_t count, int64_t* dst) {
  const kl_cu_api* cu = kl_cu();
  if (!cu) return KL_ERR_DEVICE;
  const kl_cuda_device* dv = kl_cuda_device_get(cu, device_id);
  if (!dv) return KL_ERR_DEVICE;
  KL_CU_TRY(cu->CtxPushCurrent(dv->ctx), "CUDA device %d", device_id);
  const kl_status st = read_current(cu, device_id, (CUstream)stream, src, count, dst);
  CUcontext prev;
  cu->CtxPopCurrent(&prev);
  return st;
}
