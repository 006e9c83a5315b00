/* kl_lstm_forward on CUDA tensors: per layer, the input projection of every
 * step and direction as one GEMM launch, then the recurrence, either
 *   cluster: one launch for all steps (sm_90+, no projection): a cluster of CTAs
 *            per (direction, group of batch rows), W_hh held in registers, h
 *            exchanged through distributed shared memory with one cluster
 *            barrier per step; or
 *   step:    one launch per step (plus one for the projection), any GPU.
 * Everything runs on the caller's stream with no host synchronization; work
 * buffers are kept per (device, stream) and only grow, so a warm call
 * allocates nothing and can be captured in a CUDA graph. Weights are read in
 * place on every call (nothing is packed, so nothing can be stale). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_cuda.h"

/* Must match lstm.cu's structs. */
typedef struct {
  const float* g;
  int64_t g_st, g_sb;
  const float* b_ih[2];
  const float* b_hh[2];
  int64_t sb_ih[2], sb_hh[2];
  const float* gate_bias;
} gates_in;

#define LCAP_MAX 4096
#define KL_CUDA_EXCHANGE_DEFAULT 1
typedef struct {
  gates_in gi;
  const float* w_hh[2];
  int64_t ld_hh[2];
  const float* w_hr[2];
  int64_t ld_hr[2];
  const float *h0, *c0;
  float* y;
  int64_t y_st, y_sb;
  float *h_n, *c_n;
  float *hbuf, *cbuf, *mbuf;
  int T, B, reverse, step;
  int len[LCAP_MAX];
} rec_args; /* the kernels declare len[KL_LCAP]: the driver copies that much */

typedef struct {
  const float* a;
  int64_t lda;
  const float* w[2];
  int64_t ldw[2];
  float* c;
  int64_t ldc;
  int M, N, K;
} gemm_args;

/* ---- per-device state and per-stream work buffers --------------------------------- */

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

typedef struct dev_state {
  struct dev_state* next;
  int id;
  CUdevice dev;
  CUcontext ctx;
  int major, sms, cluster, smem_optin;
} dev_state;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static dev_state* g_devs;
static ws_buf* g_ws;

static const dev_state* device(const kl_cu_api* cu, int id, char* err, size_t n) {
  pthread_mutex_lock(&g_lock);
  dev_state* d = g_devs;
  while (d && d->id != id) d = d->next;
  if (!d && (d = calloc(1, sizeof(*d)))) {
    CUresult r = cu->DeviceGet(&d->dev, id);
    if (!r) r = cu->DevicePrimaryCtxRetain(&d->ctx, d->dev);
    if (r) {
      snprintf(err, n, "CUDA device %d: %s", id, kl_cu_error(r));
      free(d);
      d = NULL;
    } else {
      d->id = id;
      cu->DeviceGetAttribute(&d->major, KL_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
      cu->DeviceGetAttribute(&d->sms, KL_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev);
      cu->DeviceGetAttribute(&d->cluster, KL_CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, d->dev);
      cu->DeviceGetAttribute(&d->smem_optin, KL_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                             d->dev);
      d->next = g_devs;
      g_devs = d;
    }
  } else if (!d) {
    snprintf(err, n, "out of memory");
  }
  pthread_mutex_unlock(&g_lock);
  return d;
}

/* At least size bytes of device memory for calls on (device, stream). A buffer
 * that is outgrown is kept until kl_cuda_clear: work in flight or a captured
 * graph may still use it. */
static CUdeviceptr workspace(const kl_cu_api* cu, int id, void* stream, size_t size, char* err, size_t n) {
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
  if (!w) {
    snprintf(err, n, "out of memory");
  } else if (w->size >= size) {
    p = w->ptr;
  } else {
    struct retired* old = w->ptr ? malloc(sizeof(*old)) : NULL;
    size_t want = size + size / 4;
    int mode = KL_CU_STREAM_CAPTURE_MODE_RELAXED; /* allowed while the stream is captured */
    cu->ThreadExchangeStreamCaptureMode(&mode);
    CUresult r = (w->ptr && !old) ? 2 /* CUDA_ERROR_OUT_OF_MEMORY */ : cu->MemAlloc(&p, want);
    cu->ThreadExchangeStreamCaptureMode(&mode);
    if (r) {
      snprintf(err, n, "cannot allocate %zu bytes of CUDA work memory: %s", want, kl_cu_error(r));
      free(old);
      p = 0;
    } else {
      if (old) {
        old->ptr = w->ptr;
        old->next = w->old;
        w->old = old;
      }
      w->ptr = p;
      w->size = want;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return p;
}

void kl_cuda_clear(void) {
  pthread_mutex_lock(&g_lock);
  ws_buf* w = g_ws;
  g_ws = NULL;
  pthread_mutex_unlock(&g_lock);
  if (!w) return;
  /* cuMemFree waits for the device to finish the work that uses the memory */
  for (; w;) {
    ws_buf* next = w->next;
    for (struct retired* o = w->old; o;) {
      struct retired* on = o->next;
      kl_cu(NULL, 0)->MemFree(o->ptr);
      free(o);
      o = on;
    }
    if (w->ptr) kl_cu(NULL, 0)->MemFree(w->ptr);
    free(w);
    w = next;
  }
}

/* ---- planning ------------------------------------------------------------------------ */

/* The cluster recurrence's shape for (H, R): the fewest CTAs per cluster (C)
 * whose share of W_hh fits in registers at <= 64 floats a thread and <= 512
 * threads. 0 if none. */
static int cluster_plan(int H, int R, int* C, int* ntw) {
  if (R != H || R % 4) return 0;
  for (int c = 1; c <= 8; c *= 2) {
    if (H % c) continue;
    const int rows = 4 * (H / c);
    for (int ks = 1; ks <= 64; ks *= 2) {
      if (R % ks || (R / ks) % 4) continue;
      if (R / ks > 64) continue;
      if (rows * ks <= 512) {
        *C = c;
        *ntw = rows * ks;
        return 1;
      }
      break;
    }
  }
  return 0;
}

/* "auto" (default), "cluster" or "step": KOKORO_LSTM_CUDA_RECURRENCE. */
static int forced_path(void) {
  const char* e = getenv("KOKORO_LSTM_CUDA_RECURRENCE");
  if (!e || !*e || !strcmp(e, "auto")) return 0;
  return !strcmp(e, "cluster") ? 1 : !strcmp(e, "step") ? 2 : -1;
}

/* two mbarriers, h's two buffers, the partial sums' two buffers */
static size_t cluster_smem(int NB, int R, int ntw) {
  return 16 + sizeof(float) * ((size_t)2 * NB * R + (size_t)2 * NB * ntw);
}

/* How the cluster's CTAs exchange h each step: KOKORO_LSTM_CUDA_EXCHANGE = mbarrier
 * (the default: st.async stores counted by each CTA's mbarrier, no fence) or barrier
 * (stores, then one cluster barrier with release/acquire); -1 if set to anything else. */
static int exchange_kind(void) {
  const char* e = getenv("KOKORO_LSTM_CUDA_EXCHANGE");
  if (!e || !*e) return KL_CUDA_EXCHANGE_DEFAULT;
  return !strcmp(e, "barrier") ? 0 : !strcmp(e, "mbarrier") ? 1 : -1;
}

#define DEF(buf, ...) snprintf(buf, sizeof(buf), __VA_ARGS__)

/* A launch of C x groups x D CTAs in clusters of C along x; attr is filled. */
static kl_CUlaunchConfig cluster_config(kl_CUlaunchAttribute* attr, int C, unsigned groups, int D, int threads,
                                        size_t smem, CUstream s) {
  memset(attr, 0, sizeof(*attr));
  attr->id = KL_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr->value.clusterDim.x = (unsigned)C;
  attr->value.clusterDim.y = attr->value.clusterDim.z = 1;
  return (kl_CUlaunchConfig){(unsigned)C, groups, (unsigned)D, (unsigned)threads, 1, 1, (unsigned)smem, s, attr, 1};
}

/* ---- launches ------------------------------------------------------------------------- */

static CUresult launch(const kl_cu_api* cu, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                       unsigned bx, CUstream s, void* args) {
  void* params[] = {args};
  return cu->LaunchKernel(f, gx, gy, gz, bx, 1, 1, 0, s, params, NULL);
}

static CUresult launch2(const kl_cu_api* cu, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, CUstream s, void* a0, void* a1) {
  void* params[] = {a0, a1};
  return cu->LaunchKernel(f, gx, gy, gz, bx, 1, 1, 0, s, params, NULL);
}

/* G[m, dir*4H + n] = sum_k A[m, k] W_ih[dir][n, k] for M rows: 128x128 tiles when
 * they fill the GPU and the rows allow 16-byte loads, else 64x64 (same bits). */
static CUresult input_gemm(const kl_cu_api* cu, const kl_cuda_kernels* k, int sms, CUstream s, const float* A,
                           int64_t lda, int64_t M, int K, const kl_cuda_call* c, int layer, float* G) {
  gemm_args g;
  memset(&g, 0, sizeof(g));
  for (int d = 0; d < c->D; d++) {
    g.w[d] = c->w[layer * c->D + d].w_ih;
    g.ldw[d] = c->w[layer * c->D + d].ld_ih;
  }
  g.lda = lda;
  g.ldc = (int64_t)c->D * 4 * c->H;
  g.N = 4 * c->H;
  g.K = K;
  int big = (M + 127) / 128 * ((g.N + 127) / 128) * c->D >= sms && (uintptr_t)A % 16 == 0 && lda % 4 == 0;
  for (int d = 0; d < c->D; d++) big &= (uintptr_t)g.w[d] % 16 == 0 && g.ldw[d] % 4 == 0;
  const int tile = big ? 128 : 64;
  const int64_t chunk = 65535LL * tile; /* rows per launch: the grid's y limit */
  for (int64_t m0 = 0; m0 < M; m0 += chunk) {
    g.a = A + m0 * lda;
    g.c = G + m0 * g.ldc;
    g.M = (int)(M - m0 < chunk ? M - m0 : chunk);
    CUresult r = launch(cu, big ? k->gemm128 : k->gemm, (unsigned)((g.N + tile - 1) / tile),
                        (unsigned)((g.M + tile - 1) / tile), (unsigned)c->D, 256, s, &g);
    if (r) return r;
  }
  return 0;
}

kl_status kl_cuda_lstm_forward(const kl_cuda_call* c, char* err, size_t n) {
  const kl_cu_api* cu = kl_cu(err, n);
  if (!cu) return KL_ERR_DEVICE;
  const int H = c->H, R = c->R, D = c->D, L = c->L;
  const int64_t T = c->T, B = c->B;
  if (T > INT32_MAX || B > INT32_MAX / 4) {
    snprintf(err, n, "CUDA: T and B must be below 2^31 (and B below 2^29)");
    return KL_ERR_ARG;
  }
  if (c->lengths && B > LCAP_MAX) {
    snprintf(err, n, "CUDA: lengths are supported for batches up to %d rows, got %lld (split the batch)",
             LCAP_MAX, (long long)B);
    return KL_ERR_ARG;
  }
  const dev_state* dv = device(cu, c->device_id, err, n);
  if (!dv) return KL_ERR_DEVICE;
  CUstream s = (CUstream)c->stream;
  const int lcap = !c->lengths ? 0 : B <= 64 ? 64 : B <= 1024 ? 1024 : LCAP_MAX;
  const int wt = c->dtype == KL_BF16 ? 1 : c->dtype == KL_F16 ? 2 : 0;
  const int force = forced_path();
  if (force < 0) {
    snprintf(err, n, "KOKORO_LSTM_CUDA_RECURRENCE must be auto, cluster or step");
    return KL_ERR_ARG;
  }
  int C = 0, ntw = 0, NB = 1;
  const int can_cluster = dv->major >= 9 && dv->cluster && cu->LaunchKernelEx && cu->OccupancyMaxActiveClusters &&
                          cluster_plan(H, R, &C, &ntw) && cluster_smem(1, R, ntw) <= (size_t)dv->smem_optin;
  if (force == 1 && !can_cluster) {
    snprintf(err, n, "CUDA: the cluster recurrence needs sm_90+, no proj_size and a hidden size it can "
             "split (H %% 4 == 0, 4H*H/8 <= 32768)");
    return KL_ERR_ARG;
  }
  const int use_cluster = can_cluster && force != 2;

  CUresult r = cu->CtxPushCurrent(dv->ctx);
  if (r) {
    snprintf(err, n, "CUDA: cannot make device %d's context current: %s", c->device_id, kl_cu_error(r));
    return KL_ERR_DEVICE;
  }
  kl_status st = KL_ERR_DEVICE; /* what a failure below is, unless it says otherwise */
  /* the launches' parameters: per thread, so that a call allocates nothing */
  static _Thread_local rec_args ra_buf;
  rec_args* ra = &ra_buf;
  memset(ra, 0, sizeof(*ra));
  char d_h[32], d_r[32], d_wt[32], d_lcap[32], d_c[32], d_nb[32], d_nt[32], d_ntw[32], d_x[32];
  const char* defs[9] = {d_h, d_r, d_wt, d_lcap, d_c, d_nb, d_nt, d_ntw, d_x};
  DEF(d_h, "-DKL_H=%d", H);
  DEF(d_r, "-DKL_R=%d", R);
  DEF(d_wt, "-DKL_WT=%d", wt);
  DEF(d_lcap, "-DKL_LCAP=%d", lcap);
  kl_cuda_kernels* k = NULL;
  unsigned groups = 1;
  size_t smem = 0;
  if (use_cluster) {
    /* rows per cluster: spread the batch over the clusters that fit at once */
    const int nt = (ntw + 31) / 32 * 32;
    DEF(d_c, "-DKL_C=%d", C);
    DEF(d_nt, "-DKL_NT=%d", nt);
    DEF(d_ntw, "-DKL_NTW=%d", ntw);
    DEF(d_nb, "-DKL_NB=1");
    const int xk = exchange_kind();
    if (xk < 0) {
      snprintf(err, n, "KOKORO_LSTM_CUDA_EXCHANGE must be barrier or mbarrier");
      st = KL_ERR_ARG;
      goto done;
    }
    DEF(d_x, "-DKL_XCHG=%d", C > 1 ? xk : 0); /* st.async needs a peer CTA */
    if (!(k = kl_cuda_module(dv->dev, defs, 9, err, n))) goto done;
    if (!k->cluster) {
      snprintf(err, n, "CUDA: the cluster kernel was not built for this device");
      goto done;
    }
    int maxc = __atomic_load_n(&k->max_clusters, __ATOMIC_RELAXED);
    if (!maxc) { /* the cluster kernel with one row per cluster: how many fit at once */
      kl_CUlaunchAttribute attr;
      kl_CUlaunchConfig cfg = cluster_config(&attr, C, 1, 1, nt, cluster_smem(1, R, ntw), s);
      cu->FuncSetAttribute(k->cluster, KL_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)cfg.sharedMemBytes);
      if ((r = cu->OccupancyMaxActiveClusters(&maxc, k->cluster, &cfg)) || maxc < 1) {
        snprintf(err, n, "CUDA: a cluster of %d CTAs of %d threads cannot be resident on device %d (%s)", C, nt,
                 c->device_id, r ? kl_cu_error(r) : "occupancy 0");
        goto done;
      }
      __atomic_store_n(&k->max_clusters, maxc, __ATOMIC_RELAXED);
    }
    /* rows per cluster: the batch spread over the clusters resident at once (more
     * clusters would run in a second wave), at most 16 */
    const int64_t per_dir = maxc / D > 0 ? maxc / D : 1;
    const int64_t want = (B + per_dir - 1) / per_dir;
    NB = want < 16 ? (int)want : 16;
    while (NB > 1 && cluster_smem(NB, R, ntw) > (size_t)dv->smem_optin) NB--;
    if (NB > 1) {
      DEF(d_nb, "-DKL_NB=%d", NB);
      if (!(k = kl_cuda_module(dv->dev, defs, 9, err, n))) goto done;
    }
    groups = (unsigned)((B + NB - 1) / NB);
    smem = cluster_smem(NB, R, ntw);
    if (__atomic_load_n(&k->smem_bytes, __ATOMIC_RELAXED) < (int)smem) {
      if ((r = cu->FuncSetAttribute(k->cluster, KL_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem))) {
        snprintf(err, n, "CUDA: %zu bytes of shared memory: %s", smem, kl_cu_error(r));
        goto done;
      }
      __atomic_store_n(&k->smem_bytes, (int)smem, __ATOMIC_RELAXED);
    }
  } else if (!(k = kl_cuda_module(dv->dev, defs, 4, err, n))) {
    goto done;
  }

  /* work memory: gates, the outputs of inner layers, the step path's state */
  const int need_gates = !(L == 1 && c->x_gates);
  const size_t ng = need_gates ? (size_t)T * B * D * 4 * H : 0;
  const size_t no = L > 1 ? (size_t)T * B * D * R : 0;
  const size_t nh = (size_t)4 * B * R, nc = (size_t)2 * B * H;
  const size_t al = 64; /* floats: 256-byte aligned parts */
#define UP(x) (((x) + al - 1) / al * al)
  const size_t total = UP(ng) + 2 * UP(no) + UP(nh) + 2 * UP(nc);
#undef UP
  CUdeviceptr base = workspace(cu, c->device_id, c->stream, total * sizeof(float), err, n);
  if (!base) {
    st = KL_ERR_NOMEM;
    goto done;
  }
  float* G = (float*)(uintptr_t)base;
  size_t off = (ng + al - 1) / al * al;
  float* obuf[2] = {G + off, G + off + (no + al - 1) / al * al};
  off += 2 * ((no + al - 1) / al * al);
  ra->hbuf = G + off;
  off += (nh + al - 1) / al * al;
  ra->cbuf = G + off;
  ra->mbuf = G + off + (nc + al - 1) / al * al;

  ra->T = (int)T;
  ra->B = (int)B;
  ra->reverse = c->reverse;
  if (c->lengths)
    for (int64_t b = 0; b < B; b++) ra->len[b] = (int)c->lengths[b];
  for (int l = 0; l < L; l++) {
    const float* in = l == 0 ? c->x : obuf[(l - 1) & 1];
    float* out = l == L - 1 ? c->y : obuf[l & 1];
    const int64_t o_st = l == L - 1 ? c->y_st : B * D * R, o_sb = l == L - 1 ? c->y_sb : (int64_t)D * R;
    /* the layer's input rows: one strided sequence (kl_row_layout) */
    int64_t lda, gt, gb;
    if (l == 0)
      kl_row_layout(T, B, c->x_st, c->x_sb, c->x_gates ? (int64_t)D * 4 * H : c->I, &lda, &gt, &gb);
    else
      lda = (int64_t)D * R, gt = B, gb = 1;
    gates_in* gi = &ra->gi;
    memset(gi, 0, sizeof(*gi));
    if (l == 0 && c->x_gates) {
      gi->g = c->x;
      gi->g_st = c->x_st;
      gi->g_sb = c->x_sb;
    } else {
      if ((r = input_gemm(cu, k, dv->sms, s, in, lda, T * B, l == 0 ? (int)c->I : D * R, c, l, G)))
        goto launch_failed;
      gi->g = G;
      gi->g_st = gt * D * 4 * H;
      gi->g_sb = gb * D * 4 * H;
    }
    gi->gate_bias = l == 0 ? c->gate_bias : NULL;
    for (int d = 0; d < D; d++) {
      const kl_wsrc* w = &c->w[l * D + d];
      gi->b_ih[d] = w->b_ih;
      gi->b_hh[d] = w->b_hh;
      gi->sb_ih[d] = w->s_bi;
      gi->sb_hh[d] = w->s_bh;
      ra->w_hh[d] = w->w_hh;
      ra->ld_hh[d] = w->ld_hh;
      ra->w_hr[d] = w->w_hr;
      ra->ld_hr[d] = w->ld_hr;
    }
    const size_t sh = (size_t)l * D * B * R, sc = (size_t)l * D * B * H;
    ra->h0 = c->h0 ? c->h0 + sh : NULL;
    ra->c0 = c->c0 ? c->c0 + sc : NULL;
    ra->h_n = c->h_n ? c->h_n + sh : NULL;
    ra->c_n = c->c_n ? c->c_n + sc : NULL;
    ra->y = out;
    ra->y_st = o_st;
    ra->y_sb = o_sb;
    if (use_cluster) {
      kl_CUlaunchAttribute attr;
      const kl_CUlaunchConfig cfg = cluster_config(&attr, C, groups, D, (ntw + 31) / 32 * 32, smem, s);
      void* params[] = {ra};
      if ((r = cu->LaunchKernelEx(&cfg, k->cluster, params, NULL))) goto launch_failed;
    } else {
      int Dv = D;
      if ((r = launch2(cu, k->state_init, (unsigned)((D * B * (R + H) + 255) / 256 < 1024 ? (D * B * (R + H) + 255) / 256 : 1024),
                       1, 1, 256, s, ra, &Dv)))
        goto launch_failed;
      for (int t = 0; t < T; t++) {
        ra->step = t;
        if ((r = launch(cu, k->step, (unsigned)((H + 15) / 16), (unsigned)((B + 15) / 16), (unsigned)D, 256, s, ra)))
          goto launch_failed;
        if (R != H &&
            (r = launch(cu, k->proj, (unsigned)((R + 63) / 64), (unsigned)((B + 15) / 16), (unsigned)D, 256, s, ra)))
          goto launch_failed;
      }
    }
  }
  st = KL_OK;
  goto done;
launch_failed:
  snprintf(err, n, "CUDA launch failed: %s (error %d)", kl_cu_error(r), r);
done:
  CUcontext popped;
  cu->CtxPopCurrent(&popped);
  return st;
}

kl_status kl_cuda_read_int64(int device_id, void* stream, const int64_t* src, size_t count, int64_t* dst,
                             char* err, size_t n) {
  const kl_cu_api* cu = kl_cu(err, n);
  if (!cu) return KL_ERR_DEVICE;
  const dev_state* dv = device(cu, device_id, err, n);
  if (!dv) return KL_ERR_DEVICE;
  CUresult r = cu->CtxPushCurrent(dv->ctx);
  if (r) {
    snprintf(err, n, "CUDA device %d: %s", device_id, kl_cu_error(r));
    return KL_ERR_DEVICE;
  }
  int capturing = 0;
  r = cu->StreamIsCapturing((CUstream)stream, &capturing);
  kl_status st = KL_OK;
  if (!r && capturing) {
    snprintf(err, n, "lengths on the GPU cannot be read while the stream is captured: pass them in host memory");
    st = KL_ERR_ARG;
  } else {
    if (!r) r = cu->MemcpyDtoHAsync(dst, (CUdeviceptr)src, count * sizeof(int64_t), (CUstream)stream);
    if (!r) r = cu->StreamSynchronize((CUstream)stream);
    if (r) {
      snprintf(err, n, "reading lengths from CUDA device %d: %s", device_id, kl_cu_error(r));
      st = KL_ERR_DEVICE;
    }
  }
  CUcontext prev;
  cu->CtxPopCurrent(&prev);
  return st;
}

kl_status kl_cuda_compile_check(const char* arch) {
  if (!arch || !*arch || strlen(arch) > 32) {
    kl_set_error("kl_cuda_compile_check: arch must be a name such as sm_80 or sm_90a");
    return KL_ERR_ARG;
  }
  /* every kernel and option the engine uses: the step path (with and without a
   * projection, lengths, rounded weights) everywhere, the cluster path on sm_90+ */
  static const char* const configs[][9] = {
      {"-DKL_H=256", "-DKL_R=256", "-DKL_WT=0", "-DKL_LCAP=0"},
      {"-DKL_H=48", "-DKL_R=20", "-DKL_WT=1", "-DKL_LCAP=64"},
      {"-DKL_H=7", "-DKL_R=7", "-DKL_WT=2", "-DKL_LCAP=4096"},
      {"-DKL_H=256", "-DKL_R=256", "-DKL_WT=0", "-DKL_LCAP=64", "-DKL_C=8", "-DKL_NB=1", "-DKL_NT=512",
       "-DKL_NTW=512", "-DKL_XCHG=1"},
      {"-DKL_H=64", "-DKL_R=64", "-DKL_WT=1", "-DKL_LCAP=1024", "-DKL_C=1", "-DKL_NB=16", "-DKL_NT=512",
       "-DKL_NTW=512", "-DKL_XCHG=0"},
  };
  const int sm90 = (strncmp(arch, "sm_", 3) == 0 || strncmp(arch, "compute_", 8) == 0) &&
                   atoi(strchr(arch, '_') + 1) >= 90;
  char err[4096];
  for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) {
    int nd = 0;
    while (nd < 9 && configs[i][nd]) nd++;
    if (nd > 4 && !sm90) continue;
    if (kl_cuda_compile_only(arch, configs[i], nd, err, sizeof(err))) {
      kl_set_error(err);
      return KL_ERR_DEVICE;
    }
  }
  return KL_OK;
}
