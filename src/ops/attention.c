/* Fused scaled dot-product attention (see dense.h) on the f32-pgemm kernels. */
#include <math.h>
#include <string.h>

#include "dense_internal.h"
#include "scratch.h"
#include "threads.h"

/* ---- fused attention ----------------------------------------------------------
 * Each task takes one (batch, head, block of rows): S = Q_blk K^T in a per-thread
 * scratch that stays in L2, then mask + softmax row by row, then O_blk = P V
 * written straight into o's layout; no [L, S] tensor goes to memory. Both
 * products run on the f32-pgemm kernels with scale K^T and V packed in 32-column
 * panels, every head's first (its own pass over the pool). */
#define KL_ATTN_ROWS 128
#define KL_ATTN_PAD 16 /* scores rows S + 16 floats apart: rows 2^k floats apart share L1 sets */

typedef struct attn_job {
  const kl_attention_args* a;
  int64_t nblk, ntasks, rows, lds;
  size_t kp_size, vp_size; /* floats of one head's K^T and V panels */
  float* panels;           /* batch x heads x (kp_size + vp_size) */
  float* scores;           /* nth x rows x lds */
  kl_f32_vunary_fn softmax;
  kl_f32_pgemm_ukernel_fn kern;
  atomic_llong next;
} attn_job;

/* scale K^T ([D][32] per 32 keys) and V ([S][32] per 32 of D) of head (b, h) in
 * panels, zeros past S and D */
static float* attn_panels(const attn_job* j, int64_t bh) {
  return j->panels + (size_t)bh * (j->kp_size + j->vp_size);
}

static void attn_pack(const attn_job* j, int64_t bh) {
  const kl_attention_args* a = j->a;
  const int64_t b = bh / a->heads, h = bh % a->heads;
  float* kp = attn_panels(j, bh);
  float* vp = kp + j->kp_size;
  const int64_t S = a->S, D = a->D, nks = kl_cdiv(S, KL_PGEMM_NR), nvd = kl_cdiv(D, KL_PGEMM_NR);
  const float* k = a->k + b * a->skb + h * a->skh;
  const float* v = a->v + b * a->svb + h * a->svh;
  memset(kp + (nks - 1) * D * KL_PGEMM_NR, 0, (size_t)(D * KL_PGEMM_NR) * sizeof(float));
  for (int64_t s = 0; s < S; s++) {
    float* col = kp + (s / KL_PGEMM_NR) * D * KL_PGEMM_NR + s % KL_PGEMM_NR;
    const float* row = k + s * a->sks;
    for (int64_t d = 0; d < D; d++) col[d * KL_PGEMM_NR] = a->scale * row[d];
  }
  for (int64_t p = 0; p < nvd; p++) {
    const int64_t d0 = p * KL_PGEMM_NR, n = D - d0 < KL_PGEMM_NR ? D - d0 : KL_PGEMM_NR;
    float* panel = vp + p * S * KL_PGEMM_NR;
    for (int64_t s = 0; s < S; s++) {
      memcpy(panel + s * KL_PGEMM_NR, v + s * a->svs + d0, (size_t)n * sizeof(float));
      if (n < KL_PGEMM_NR) memset(panel + s * KL_PGEMM_NR + n, 0, (size_t)(KL_PGEMM_NR - n) * sizeof(float));
    }
  }
}

static void attn_block(const attn_job* j, int64_t t, float* sc) {
  const kl_attention_args* a = j->a;
  const int64_t bh = t / j->nblk, l0 = (t % j->nblk) * KL_ATTN_ROWS;
  const float* kp = attn_panels(j, bh);
  const float* vp = kp + j->kp_size;
  const int64_t b = bh / a->heads, h = bh % a->heads;
  const int64_t m = a->L - l0 < KL_ATTN_ROWS ? a->L - l0 : KL_ATTN_ROWS;
  const int64_t S = a->S, D = a->D, lds = j->lds;
  const float* q = a->q + b * a->sqb + h * a->sqh + l0 * a->sql;
  float* o = a->o + b * a->sob + h * a->soh + l0 * a->sol;
  /* S = Q (scale K^T) + mask: the mask rows are copied in and the products
   * continue from them (the softmax kernel finds each row's max) */
  if (a->mask)
    for (int64_t i = 0; i < m; i++)
      memcpy(sc + i * lds, a->mask + b * a->smb + h * a->smh + (l0 + i) * a->sml,
             (size_t)S * sizeof(float));
  kl_pgemm_panels(j->kern, m, S, D, q, a->sql, kp, NULL, 0, sc, lds, 0, kl_cdiv(S, KL_PGEMM_NR),
                  a->mask != NULL);
  for (int64_t i = 0; i < m; i++) {
    float* row = sc + i * lds;
    int64_t s = 0;
    while (s < S && row[s] == -INFINITY) s++; /* exits at once on an unmasked row */
    if (s == S) { /* every score -inf (masked): zeros, as PyTorch (NaN stays softmax's) */
      memset(row, 0, (size_t)S * sizeof(float));
      continue;
    }
    j->softmax((size_t)S, row, row);
  }
  kl_pgemm_panels(j->kern, m, D, S, sc, lds, vp, NULL, 0, o, a->sol, 0, kl_cdiv(D, KL_PGEMM_NR), 0);
}

static void attn_pack_task(void* ctx, int ith, int nth) {
  (void)ith;
  (void)nth;
  attn_job* j = ctx;
  for (int64_t t; (t = kl_take_task(&j->next, j->a->batch * j->a->heads)) >= 0;) attn_pack(j, t);
}

static void attn_task(void* ctx, int ith, int nth) {
  (void)nth;
  attn_job* j = ctx;
  float* sc = j->scores + (size_t)ith * (size_t)(j->rows * j->lds);
  for (int64_t t; (t = kl_take_task(&j->next, j->ntasks)) >= 0;) attn_block(j, t, sc);
}

kl_status kl_f32_attention(const kl_attention_args* a) {
  if (!a || a->batch < 0 || a->heads < 0 || a->L < 0 || a->S < 0 || a->D < 0 ||
      a->L > INT32_MAX || a->S > INT32_MAX || a->D > INT32_MAX)
    return KL_ERR_ARG;
  if (a->batch == 0 || a->heads == 0 || a->L == 0 || a->D == 0) return KL_OK;
  if (!a->q || !a->o || (a->S > 0 && (!a->k || !a->v))) return KL_ERR_ARG;
  if (a->sql < a->D || a->sol < a->D || (a->S > 0 && (a->sks < a->D || a->svs < a->D)))
    return KL_ERR_ARG; /* rows overlap (BLAS leading dimensions) */
  if (a->S == 0) { /* no keys: an empty sum, zeros (as PyTorch) */
    for (int64_t b = 0; b < a->batch; b++)
      for (int64_t h = 0; h < a->heads; h++)
        for (int64_t l = 0; l < a->L; l++)
          memset(a->o + b * a->sob + h * a->soh + l * a->sol, 0, (size_t)a->D * sizeof(float));
    return KL_OK;
  }
  attn_job j;
  j.a = a;
  j.nblk = kl_cdiv(a->L, KL_ATTN_ROWS);
  j.ntasks = a->batch * a->heads * j.nblk;
  j.softmax = kl_dense_kernels_active().softmax;
  atomic_init(&j.next, 0);
  const double macs = 2.0 * (double)a->batch * (double)a->heads * (double)a->L * (double)a->S *
                      (double)a->D;
  int nth = kl_threads_for_work(kl_threads_resolve(a->num_threads), macs, KL_DENSE_MIN_MACS);
  if (nth > j.ntasks) nth = (int)j.ntasks;
  j.rows = a->L < KL_ATTN_ROWS ? a->L : KL_ATTN_ROWS;
  j.lds = a->S + KL_ATTN_PAD;
  j.kern = kl_dense_kernels_active().pgemm;
  j.kp_size = (size_t)(kl_cdiv(a->S, KL_PGEMM_NR) * KL_PGEMM_NR * a->D);
  j.vp_size = (size_t)(kl_cdiv(a->D, KL_PGEMM_NR) * KL_PGEMM_NR * a->S);
  const size_t npanel = (size_t)(a->batch * a->heads) * (j.kp_size + j.vp_size);
  size_t cap = 0;
  j.panels = kl_scratch_take((npanel + (size_t)nth * (size_t)(j.rows * j.lds)) * sizeof(float), &cap);
  if (!j.panels) return KL_ERR_NOMEM;
  j.scores = j.panels + npanel;
  kl_status s = kl_pool_run(nth, attn_pack_task, &j);
  atomic_store(&j.next, 0);
  if (s == KL_OK) s = kl_pool_run(nth, attn_task, &j);
  kl_scratch_give(j.panels, cap);
  return s;
}

/* ---- the entry over DLTensors: the check, then the operator --------------------------- */
kl_status kl_attention_forward(const kl_attention_config* cfg, const DLTensor* q, const DLTensor* k,
                               const DLTensor* v, const DLTensor* mask, const DLTensor* o) {
  kl_attention_args a;
  const kl_status st = kl_attention_check(cfg, q, k, v, mask, o, &a);
  return st ? st : kl_f32_attention(&a);
}

/* ---- attention ------------------------------------------------------------------- */
/* (batch, head, row) strides and sizes of a 4-D attention operand in layout 0
 * [B, H, rows, D] or 1 [B, rows, H, D]; -1 unless D has unit stride and rows are
 * at least D apart. */
static int attn_view(const kl_view* v, int layout, int64_t dims[4], int64_t st[3]) {
  const int hi = layout ? 2 : 1, ri = layout ? 1 : 2;
  dims[0] = v->shape[0];
  dims[1] = v->shape[hi];
  dims[2] = v->shape[ri];
  dims[3] = v->shape[3];
  if (dims[3] > 1 && v->strides[3] != 1) return -1;
  st[0] = v->strides[0];
  st[1] = v->strides[hi];
  st[2] = dims[2] > 1 ? v->strides[ri] : dims[3];
  if (st[2] < dims[3]) return -1;
  return 0;
}

/* An operand's (batch, head, row) strides into its three fields. */
static void attn_strides(const int64_t st[3], int64_t* b, int64_t* h, int64_t* row) {
  *b = st[0];
  *h = st[1];
  *row = st[2];
}

/* The config's values: layouts, the scale's bits, num_threads (a zeroed first). */
static kl_status attn_config(const kl_attention_config* cfg, kl_attention_args* a) {
  const int64_t layouts[4] = {cfg->q_layout, cfg->k_layout, cfg->v_layout, cfg->o_layout};
  for (int i = 0; i < 4; i++)
    if (layouts[i] != 0 && layouts[i] != 1)
      return kl_fail("layouts must be 0 or 1, got %lld for %s", (long long)layouts[i],
                     (const char* const[]){"q", "k", "v", "o"}[i]);
  if (cfg->scale_bits < INT32_MIN || cfg->scale_bits > (int64_t)UINT32_MAX)
    return kl_fail("scale_bits must be a float32's 32 bits, got %lld", (long long)cfg->scale_bits);
  memset(a, 0, sizeof(*a));
  return kl_check_threads(cfg->num_threads, &a->num_threads);
}

/* mask [.., L, S] broadcast to a's [B, H, L, S]: its data and (batch, head, row) strides. */
static kl_status attn_mask(const kl_view* mask, kl_attention_args* a) {
  const int nd = mask->ndim;
  const int64_t full[4] = {a->batch, a->heads, a->L, a->S};
  if (mask->shape[nd - 2] != a->L || mask->shape[nd - 1] != a->S ||
      (a->S > 1 && mask->strides[nd - 1] != 1))
    return kl_fail("mask must be [.., L %lld, S %lld] with unit stride along S", (long long)a->L,
                   (long long)a->S);
  int64_t ms[3] = {0, 0, a->L > 1 ? mask->strides[nd - 2] : 0};
  for (int i = 0; i < nd - 2; i++) {
    const int d = 4 - nd + i; /* the [B, H, L, S] axis of mask's axis i */
    if (mask->shape[i] == 1) continue;
    if (mask->shape[i] != full[d]) return kl_fail("mask's leading dimensions must be 1 or [B, H]'s");
    ms[d] = mask->strides[i];
  }
  a->mask = kl_cdata(mask);
  a->smb = ms[0];
  a->smh = ms[1];
  a->sml = ms[2];
  return KL_OK;
}

/* The packed copies of every head's k and v (k, v may be broadcast views) fit int64 sizes. */
static kl_status attn_scratch(const kl_attention_args* a) {
  if (a->S == 0 || a->D == 0) return KL_OK;
  int64_t per, kp, vp;
  kl_status st = KL_OK;
  if (kl_mul(kl_cdiv(a->S, KL_DENSE_PANEL) * KL_DENSE_PANEL, a->D, &kp) ||
      kl_mul(kl_cdiv(a->D, KL_DENSE_PANEL) * KL_DENSE_PANEL, a->S, &vp) || kl_add(kp, vp, &per) ||
      (st = kl_scratch_size("k and v packed per head", a->batch, a->heads, per, 1)))
    return st ? st : kl_fail("k and v: S %lld x D %lld overflows", (long long)a->S, (long long)a->D);
  return KL_OK;
}

kl_status kl_attention_check(const kl_attention_config* cfg, const DLTensor* qt, const DLTensor* kt,
                             const DLTensor* vt, const DLTensor* mt, const DLTensor* ot,
                             kl_attention_args* a) {
  kl_status st;
  if ((st = attn_config(cfg, a))) return st;
  kl_view q, k, v, mask, o;
  if ((st = kl_view_f32(qt, "q", 4, 4, &q)) || (st = kl_view_f32(kt, "k", 4, 4, &k)) ||
      (st = kl_view_f32(vt, "v", 4, 4, &v)) || (mt && (st = kl_view_f32(mt, "mask", 2, 4, &mask))) ||
      (st = kl_view_f32(ot, "o", 4, 4, &o)))
    return st;
  int64_t dq[4], dk[4], dv[4], dout[4], sq[3], sk[3], sv[3], so[3];
  if (attn_view(&q, (int)cfg->q_layout, dq, sq) || attn_view(&k, (int)cfg->k_layout, dk, sk) ||
      attn_view(&v, (int)cfg->v_layout, dv, sv) || attn_view(&o, (int)cfg->o_layout, dout, so))
    return kl_fail("q, k, v and o need unit stride along D and distinct rows");
  if (dk[0] != dq[0] || dv[0] != dq[0] || dout[0] != dq[0] || dk[1] != dq[1] || dv[1] != dq[1] ||
      dout[1] != dq[1] || dk[3] != dq[3] || dv[2] != dk[2] || dout[2] != dq[2] || dout[3] != dv[3] ||
      dv[3] != dq[3])
    return kl_fail("shapes do not match: q [B %lld, H %lld, L %lld, D %lld], k [%lld, %lld, S %lld, %lld], "
                   "v [%lld, %lld, %lld, %lld], o [%lld, %lld, %lld, %lld] (as B, H, rows, D)",
                   (long long)dq[0], (long long)dq[1], (long long)dq[2], (long long)dq[3],
                   (long long)dk[0], (long long)dk[1], (long long)dk[2], (long long)dk[3],
                   (long long)dv[0], (long long)dv[1], (long long)dv[2], (long long)dv[3],
                   (long long)dout[0], (long long)dout[1], (long long)dout[2], (long long)dout[3]);
  a->batch = dq[0];
  a->heads = dq[1];
  a->L = dq[2];
  a->S = dk[2];
  a->D = dq[3];
  if (a->L > INT32_MAX || a->S > INT32_MAX || a->D > INT32_MAX)
    return kl_fail("L %lld, S %lld and D %lld must each be at most %d", (long long)a->L, (long long)a->S,
                   (long long)a->D, INT32_MAX);
  /* o's rows are written once each: (batch, head, row) never meet */
  const kl_view orows = {4, {dout[0], dout[1], dout[2], dout[3]}, {so[0], so[1], so[2], 1},
                         o.numel, o.data};
  if (a->D > 0 && (st = kl_check_distinct(&orows, "o"))) return st;
  if (mt && (st = attn_mask(&mask, a))) return st;
  if ((st = attn_scratch(a))) return st;
  const DLTensor* outs[1] = {ot};
  const DLTensor* ins[4] = {qt, kt, vt, mt};
  static const char* const out_names[1] = {"o"};
  static const char* const in_names[4] = {"q", "k", "v", "mask"};
  if ((st = kl_check_disjoint(outs, out_names, 1, ins, in_names, 4))) return st;
  const uint32_t bits = (uint32_t)cfg->scale_bits;
  memcpy(&a->scale, &bits, sizeof(a->scale));
  a->q = kl_cdata(&q);
  attn_strides(sq, &a->sqb, &a->sqh, &a->sql);
  a->k = kl_cdata(&k);
  attn_strides(sk, &a->skb, &a->skh, &a->sks);
  a->v = kl_cdata(&v);
  attn_strides(sv, &a->svb, &a->svh, &a->svs);
  a->o = kl_wdata(&o);
  attn_strides(so, &a->sob, &a->soh, &a->sol);
  return KL_OK;
}
