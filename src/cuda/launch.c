/* kl_lstm_forward on CUDA tensors: the plan (plan.c), then per layer the input
 * projection of every step and direction as one GEMM launch and the recurrence,
 * either
 *   cluster: one launch for all steps (sm_90+, no projection): a cluster of CTAs
 *            per (direction, group of batch rows), W_hh held in registers, h
 *            exchanged through distributed shared memory; or
 *   step:    one launch per step (plus one for the projection), any GPU.
 * Everything runs on the caller's stream with no host synchronization. Weights
 * are read in place on every call (nothing is packed, so nothing can be stale). */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_plan.h"
#include "params.cuh"

/* KOKORO_LSTM_CUDA_RECURRENCE: auto (default), cluster or step; -1 if anything else. */
static int forced_path(void) {
  const char* e = getenv("KOKORO_LSTM_CUDA_RECURRENCE");
  if (!e || !*e || !strcmp(e, "auto")) return KL_CUDA_AUTO;
  return !strcmp(e, "cluster") ? KL_CUDA_CLUSTER : !strcmp(e, "step") ? KL_CUDA_STEP : -1;
}

/* How the cluster's CTAs exchange h each step: KOKORO_LSTM_CUDA_EXCHANGE = mbarrier
 * (the default: st.async stores counted by each CTA's mbarrier, no fence) or barrier
 * (stores, then one cluster barrier with release/acquire); -1 if set to anything else. */
static int exchange_kind(void) {
  const char* e = getenv("KOKORO_LSTM_CUDA_EXCHANGE");
  if (!e || !*e) return KL_CUDA_XCHG_MBARRIER;
  return !strcmp(e, "barrier") ? KL_CUDA_XCHG_BARRIER : !strcmp(e, "mbarrier") ? KL_CUDA_XCHG_MBARRIER : -1;
}

/* A launch of C x groups x D CTAs in clusters of C along x; attr is filled. */
static kl_CUlaunchConfig cluster_config(kl_CUlaunchAttribute* attr, int C, unsigned groups, int D, int threads,
                                        size_t smem, CUstream s) {
  memset(attr, 0, sizeof(*attr));
  attr->id = KL_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr->value.clusterDim.x = (unsigned)C;
  attr->value.clusterDim.y = attr->value.clusterDim.z = 1;
  return (kl_CUlaunchConfig){(unsigned)C, groups, (unsigned)D, (unsigned)threads, 1, 1, (unsigned)smem, s, attr, 1};
}

static CUresult launch(const kl_cu_api* cu, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       CUstream s, void* args) {
  void* params[] = {args};
  return cu->LaunchKernel(f, gx, gy, gz, bx, 1, 1, 0, s, params, NULL);
}

static CUresult launch2(const kl_cu_api* cu, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        CUstream s, void* a0, void* a1) {
  void* params[] = {a0, a1};
  return cu->LaunchKernel(f, gx, gy, gz, bx, 1, 1, 0, s, params, NULL);
}

/* What a call's launches share. */
typedef struct run {
  const kl_cu_api* cu;
  const kl_cuda_device* dv;
  kl_cuda_kernels* k;
  const kl_cuda_plan* p;
  const kl_call* c;
  CUstream s;
  float* G; /* the work memory: gates first (plan.c) */
} run;

/* gemm_few's shared memory limit raised once per module: 0, or nonzero where the
 * driver refuses it (the 64x64 tiles run instead). */
static int few_ready(const kl_cu_api* cu, kl_cuda_kernels* k) {
  if (__atomic_load_n(&k->few_smem, __ATOMIC_RELAXED)) return 0;
  if (cu->FuncSetAttribute(k->gemm_few, KL_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, KL_FEW_SMEM)) return -1;
  __atomic_store_n(&k->few_smem, 1, __ATOMIC_RELAXED);
  return 0;
}

/* G[m, dir*4H + n] = sum_k A[m, k] W_ih[dir][n, k] for M rows, in launches of at
 * most the grid's y limit of tiles. */
static CUresult input_gemm(const run* x, const float* A, int64_t lda, int64_t M, int K, int layer) {
  const kl_call* c = x->c;
  kl_gemm_args g;
  memset(&g, 0, sizeof(g));
  int aligned = (uintptr_t)A % 16 == 0 && lda % 4 == 0;
  for (int d = 0; d < c->D; d++) {
    g.w[d] = c->w[layer * c->D + d].w_ih;
    g.ldw[d] = c->w[layer * c->D + d].ld_ih;
    aligned &= (uintptr_t)g.w[d] % 16 == 0 && g.ldw[d] % 4 == 0;
  }
  g.lda = lda;
  g.ldc = (int64_t)c->D * 4 * c->H;
  g.N = 4 * (int)c->H;
  g.K = K;
  int tile = kl_cuda_gemm_tile(M, g.N, c->D, x->dv->sms, aligned, x->dv->smem_optin);
  if (tile == KL_FEW_TILE && few_ready(x->cu, x->k)) tile = 64;
  CUfunction f = tile == KL_FEW_TILE ? x->k->gemm_few : tile == 128 ? x->k->gemm128 : x->k->gemm;
  const unsigned smem = tile == KL_FEW_TILE ? KL_FEW_SMEM : 0;
  const int64_t chunk = 65535LL * tile;
  for (int64_t m0 = 0; m0 < M; m0 += chunk) {
    g.a = A + m0 * lda;
    g.c = x->G + m0 * g.ldc;
    g.M = (int)(M - m0 < chunk ? M - m0 : chunk);
    void* params[] = {&g};
    const CUresult r = x->cu->LaunchKernel(f, (unsigned)((g.N + tile - 1) / tile), (unsigned)((g.M + tile - 1) / tile),
                                           (unsigned)c->D, 256, 1, 1, smem, x->s, params, NULL);
    if (r) return r;
  }
  return 0;
}

/* Layer l's gate inputs: layer 0's x with x_gates, else the input projection of
 * `in` (the call's x, or the previous layer's output) into G; biases: layer_params. */
static CUresult layer_gates(const run* x, kl_gates_in* gi, const float* in, int l) {
  const kl_call* c = x->c;
  const int64_t T = c->T, B = c->B, D = c->D, H = c->H;
  memset(gi, 0, sizeof(*gi));
  if (l == 0 && c->x_gates) {
    gi->g = c->x;
    gi->g_st = c->x_st;
    gi->g_sb = c->x_sb;
  } else {
    int64_t lda = D * c->R, gt = B, gb = 1; /* inner layers: [T, B, D*R] contiguous */
    if (l == 0) kl_row_layout(T, B, c->x_st, c->x_sb, c->input_size, &lda, &gt, &gb); /* validated: one sequence */
    const CUresult r = input_gemm(x, in, lda, T * B, l == 0 ? (int)c->input_size : (int)(D * c->R), l);
    if (r) return r;
    gi->g = x->G;
    gi->g_st = gt * D * 4 * H;
    gi->g_sb = gb * D * 4 * H;
  }
  gi->gate_bias = l == 0 ? c->gate_bias : NULL;
  return 0;
}

/* Layer l's biases, recurrent weights, states and output in ra. */
static void layer_params(const run* x, kl_rec_args* ra, float* out, int l) {
  const kl_call* c = x->c;
  const int64_t B = c->B, D = c->D, R = c->R, H = c->H;
  for (int d = 0; d < D; d++) {
    const kl_wsrc* w = &c->w[l * D + d];
    ra->gi.b_ih[d] = w->b_ih;
    ra->gi.b_hh[d] = w->b_hh;
    ra->gi.sb_ih[d] = w->s_bi;
    ra->gi.sb_hh[d] = w->s_bh;
    ra->w_hh[d] = w->w_hh;
    ra->ld_hh[d] = w->ld_hh;
    ra->w_hr[d] = w->w_hr;
    ra->ld_hr[d] = w->ld_hr;
  }
  const size_t sh = (size_t)l * D * B * R, sc = (size_t)l * D * B * H;
  ra->h0 = c->h0 ? (const float*)c->h0 + sh : NULL;
  ra->c0 = c->c0 ? (const float*)c->c0 + sc : NULL;
  ra->h_n = c->h_n ? (float*)c->h_n + sh : NULL;
  ra->c_n = c->c_n ? (float*)c->c_n + sc : NULL;
  ra->y = out;
  const int last = l == c->L - 1;
  ra->y_st = last ? c->y_st : B * D * R;
  ra->y_sb = last ? c->y_sb : D * R;
}

/* Layer l's recurrence: one cluster launch, or the step path's launches. */
static CUresult recurrence(const run* x, kl_rec_args* ra) {
  const kl_cuda_plan* p = x->p;
  const int D = x->c->D, H = (int)x->c->H, R = (int)x->c->R, B = (int)x->c->B;
  CUresult r;
  if (p->cluster) {
    kl_CUlaunchAttribute attr;
    const kl_CUlaunchConfig cfg = cluster_config(&attr, p->C, p->groups, D, p->nt, p->smem, x->s);
    void* params[] = {ra};
    return x->cu->LaunchKernelEx(&cfg, x->k->cluster, params, NULL);
  }
  int Dv = D;
  const int blocks = (D * B * (R + H) + 255) / 256;
  if ((r = launch2(x->cu, x->k->state_init, (unsigned)(blocks < 1024 ? blocks : 1024), 1, 1, 256, x->s, ra, &Dv)))
    return r;
  for (int t = 0; t < ra->T; t++) {
    ra->step = t;
    if ((r = launch(x->cu, x->k->step, (unsigned)((H + 15) / 16), (unsigned)((B + 15) / 16), (unsigned)D, 256, x->s,
                    ra)))
      return r;
    if (R != H &&
        (r = launch(x->cu, x->k->proj, (unsigned)((R + 63) / 64), (unsigned)((B + 15) / 16), (unsigned)D, 256, x->s, ra)))
      return r;
  }
  return 0;
}

/* Every layer's launches; layer l writes the inner-layer buffer l & 1. */
static kl_status launch_layers(const run* x) {
  const kl_call* c = x->c;
  /* the launches' parameters: per thread, so that a call allocates nothing */
  static _Thread_local kl_rec_args ra_buf;
  kl_rec_args* ra = &ra_buf;
  memset(ra, 0, sizeof(*ra));
  float* obuf[2] = {x->G + x->p->off_out[0], x->G + x->p->off_out[1]};
  ra->hbuf = x->G + x->p->off_h;
  ra->cbuf = x->G + x->p->off_c;
  ra->mbuf = x->G + x->p->off_m;
  ra->T = (int)c->T;
  ra->B = (int)c->B;
  ra->reverse = c->reverse;
  if (c->lengths)
    for (int64_t b = 0; b < c->B; b++) ra->len[b] = (int)c->lengths[b];
  ra->len_dev = (const long long*)c->lengths_dev;
  ra->len_st = c->lengths_st;
  for (int l = 0; l < c->L; l++) {
    const float* in = l == 0 ? (const float*)c->x : obuf[(l - 1) & 1];
    float* out = l == c->L - 1 ? (float*)c->y : obuf[l & 1];
    CUresult r = layer_gates(x, &ra->gi, in, l);
    if (!r) {
      layer_params(x, ra, out, l);
      r = recurrence(x, ra);
    }
    if (r) return kl_cu_fail(r, "CUDA launch failed");
  }
  return KL_OK;
}

/* The cluster path's module: built with NB = 1 to learn how many clusters fit at
 * once (kept in the module), then with the batch rows per cluster that gives. */
static kl_cuda_kernels* cluster_module(const kl_cu_api* cu, const kl_cuda_device* dv, kl_cuda_plan* p,
                                             const kl_cuda_shape* sh, CUstream s) {
  char buf[KL_CUDA_NUM_DEFINES][32];
  const char* defs[KL_CUDA_NUM_DEFINES];
  kl_cuda_kernels* k = kl_cuda_module(dv->dev, defs, kl_cuda_plan_defines(p, buf, defs));
  if (!k) return NULL;
  if (!k->cluster) {
    kl_errorf(KL_ERR_DEVICE, "CUDA: the cluster kernel was not built for this device");
    return NULL;
  }
  int maxc = __atomic_load_n(&k->max_clusters, __ATOMIC_RELAXED);
  if (!maxc) { /* the cluster kernel with one row per cluster: how many fit at once */
    kl_CUlaunchAttribute attr;
    kl_CUlaunchConfig cfg = cluster_config(&attr, p->C, 1, 1, p->nt, p->smem, s);
    cu->FuncSetAttribute(k->cluster, KL_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)cfg.sharedMemBytes);
    const CUresult r = cu->OccupancyMaxActiveClusters(&maxc, k->cluster, &cfg);
    if (r || maxc < 1) {
      kl_errorf(KL_ERR_DEVICE, "CUDA: a cluster of %d CTAs of %d threads cannot be resident on device %d (%s)", p->C,
                p->nt, dv->id, r ? kl_cu_error(r) : "occupancy 0");
      return NULL;
    }
    __atomic_store_n(&k->max_clusters, maxc, __ATOMIC_RELAXED);
  }
  kl_cuda_plan_batch(p, sh, maxc, dv->smem_optin);
  if (p->defs.NB > 1 && !(k = kl_cuda_module(dv->dev, defs, kl_cuda_plan_defines(p, buf, defs)))) return NULL;
  if (__atomic_load_n(&k->smem_bytes, __ATOMIC_RELAXED) < (int)p->smem) {
    const CUresult r = cu->FuncSetAttribute(k->cluster, KL_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)p->smem);
    if (r) {
      kl_cu_fail(r, "CUDA: %zu bytes of shared memory", p->smem);
      return NULL;
    }
    __atomic_store_n(&k->smem_bytes, (int)p->smem, __ATOMIC_RELAXED);
  }
  return k;
}

/* The module, the work memory and the launches, the device's context current. */
static kl_status run_current(run* x, kl_cuda_plan* p, const kl_cuda_shape* sh) {
  if (p->cluster) {
    x->k = cluster_module(x->cu, x->dv, p, sh, x->s);
  } else {
    char buf[KL_CUDA_NUM_DEFINES][32];
    const char* defs[KL_CUDA_NUM_DEFINES];
    x->k = kl_cuda_module(x->dv->dev, defs, kl_cuda_plan_defines(p, buf, defs));
  }
  if (!x->k) return KL_ERR_DEVICE;
  const CUdeviceptr base = kl_cuda_workspace(x->cu, x->c->device.device_id, x->s, p->ws_floats * sizeof(float));
  if (!base) return KL_ERR_NOMEM;
  x->G = (float*)(uintptr_t)base;
  return launch_layers(x);
}

kl_status kl_cuda_lstm_forward(const kl_call* c) {
  const kl_cu_api* cu = kl_cu();
  if (!cu) return KL_ERR_DEVICE;
  const kl_cuda_shape sh = kl_cuda_shape_of(c);
  kl_status st = kl_cuda_plan_check(&sh);
  if (st) return st;
  const int id = c->device.device_id;
  const kl_cuda_device* dv = kl_cuda_device_get(cu, id);
  if (!dv) return KL_ERR_DEVICE;
  const int force = forced_path();
  if (force < 0) return kl_fail("KOKORO_LSTM_CUDA_RECURRENCE must be auto, cluster or step");
  const kl_cuda_facts facts = {dv->major, dv->cluster && cu->LaunchKernelEx && cu->OccupancyMaxActiveClusters,
                               dv->smem_optin};
  kl_cuda_plan p;
  if ((st = kl_cuda_plan_path(&p, &sh, &facts, force, exchange_kind()))) return st;
  KL_CU_TRY(cu->CtxPushCurrent(dv->ctx), "CUDA: cannot make device %d's context current", id);
  run x = {cu, dv, NULL, &p, c, (CUstream)c->stream, NULL};
  st = run_current(&x, &p, &sh);
  CUcontext popped;
  cu->CtxPopCurrent(&popped);
  return st;
}
