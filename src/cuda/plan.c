/* The CUDA call's plan (cuda_plan.h): pure functions, nothing of CUDA is called. */
#include <stddef.h>
#include <stdio.h>

#include "cuda_plan.h"
#include "error.h"
#include "params.cuh"

kl_cuda_shape kl_cuda_shape_of(const kl_call* c) {
  const int wt = c->dtype == KL_BF16 ? 1 : c->dtype == KL_F16 ? 2 : 0;
  return (kl_cuda_shape){c->T, c->B, c->L, c->D, (int)c->H, (int)c->R, c->x_gates, wt,
                         c->lengths != NULL || c->lengths_dev != NULL};
}

kl_status kl_cuda_plan_check(const kl_cuda_shape* s) {
  if (s->T > INT32_MAX || s->B > INT32_MAX / 4)
    return kl_fail("CUDA: T and B must be below 2^31 (and B below 2^29)");
  if (s->lengths && s->B > KL_LCAP_MAX)
    return kl_fail("CUDA: lengths are supported for batches up to %d rows, got %lld (split the batch)",
                   KL_LCAP_MAX, (long long)s->B);
  return KL_OK;
}

int kl_cuda_cluster_shape(int H, int R, int* C, int* ntw) {
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

/* two mbarriers, h's two buffers, the partial sums' two buffers */
size_t kl_cuda_cluster_smem(int NB, int R, int ntw) {
  return 16 + sizeof(float) * ((size_t)2 * NB * R + (size_t)2 * NB * ntw);
}

/* gates, the outputs of inner layers, the step path's state, in aligned parts */
static void plan_workspace(kl_cuda_plan* p, const kl_cuda_shape* s) {
  const size_t al = 64; /* floats: 256-byte aligned parts */
#define UP(x) (((x) + al - 1) / al * al)
  const int need_gates = !(s->L == 1 && s->x_gates);
  const size_t ng = need_gates ? (size_t)s->T * s->B * s->D * 4 * s->H : 0;
  const size_t no = s->L > 1 ? (size_t)s->T * s->B * s->D * s->R : 0;
  const size_t nh = (size_t)4 * s->B * s->R, nc = (size_t)2 * s->B * s->H;
  p->off_out[0] = UP(ng);
  p->off_out[1] = p->off_out[0] + UP(no);
  p->off_h = p->off_out[1] + UP(no);
  p->off_c = p->off_h + UP(nh);
  p->off_m = p->off_c + UP(nc);
  p->ws_floats = p->off_m + UP(nc);
#undef UP
}

kl_status kl_cuda_plan_path(kl_cuda_plan* p, const kl_cuda_shape* s, const kl_cuda_facts* f, int force,
                            int exchange) {
  *p = (kl_cuda_plan){.groups = 1, .ndefs = KL_CUDA_COMMON_DEFINES};
  p->defs.H = s->H;
  p->defs.R = s->R;
  p->defs.WT = s->wt;
  p->defs.LCAP = !s->lengths ? 0 : s->B <= 64 ? 64 : s->B <= 1024 ? 1024 : KL_LCAP_MAX;
  plan_workspace(p, s);
  const int can_cluster = f->major >= 9 && f->cluster_launch && kl_cuda_cluster_shape(s->H, s->R, &p->C, &p->ntw) &&
                          kl_cuda_cluster_smem(1, s->R, p->ntw) <= (size_t)f->smem_optin;
  if (force == KL_CUDA_CLUSTER && !can_cluster)
    return kl_fail("CUDA: the cluster recurrence needs sm_90+, no proj_size and a hidden size it can "
                   "split (H %% 4 == 0, 4H*H/8 <= 32768)");
  if (!can_cluster || force == KL_CUDA_STEP) return KL_OK;
  if (exchange < 0) return kl_fail("KOKORO_LSTM_CUDA_EXCHANGE must be barrier or mbarrier");
  p->cluster = 1;
  p->nt = (p->ntw + 31) / 32 * 32;
  p->defs.C = p->C;
  p->defs.NB = 1;
  p->defs.NT = p->nt;
  p->defs.NTW = p->ntw;
  p->defs.XCHG = p->C > 1 ? exchange : KL_CUDA_XCHG_BARRIER; /* st.async needs a peer CTA */
  p->ndefs = KL_CUDA_NUM_DEFINES;
  p->smem = kl_cuda_cluster_smem(1, s->R, p->ntw);
  return KL_OK;
}

void kl_cuda_plan_batch(kl_cuda_plan* p, const kl_cuda_shape* s, int max_clusters, int smem_optin) {
  /* more clusters than are resident at once would run in a second wave */
  const int64_t per_dir = max_clusters / s->D > 0 ? max_clusters / s->D : 1;
  const int64_t want = (s->B + per_dir - 1) / per_dir;
  int NB = want < 16 ? (int)want : 16;
  while (NB > 1 && kl_cuda_cluster_smem(NB, s->R, p->ntw) > (size_t)smem_optin) NB--;
  p->defs.NB = NB;
  p->groups = (unsigned)((s->B + NB - 1) / NB);
  p->smem = kl_cuda_cluster_smem(NB, s->R, p->ntw);
}

static const struct {
  const char* format;
  size_t offset;
} DEFINES[] = {
#define KL_CUDA_DEFINE(name) {"-DKL_" #name "=%d", offsetof(kl_cuda_defs, name)},
#include "kernels.def"
#undef KL_CUDA_DEFINE
};

int kl_cuda_plan_defines(const kl_cuda_plan* p, char buf[][32], const char** out) {
  for (int i = 0; i < p->ndefs; i++) {
    snprintf(buf[i], 32, DEFINES[i].format, *(const int*)((const char*)&p->defs + DEFINES[i].offset));
    out[i] = buf[i];
  }
  return p->ndefs;
}

int kl_cuda_gemm_tile(int64_t M, int N, int D, int sms, int aligned, int smem_optin) {
  if (M <= KL_CUDA_GEMM_FEW_ROWS && smem_optin >= KL_FEW_SMEM) return KL_FEW_TILE;
  return (M + 127) / 128 * ((N + 127) / 128) * D >= sms && aligned ? 128 : 64;
}
