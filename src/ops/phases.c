/* Convolutions computed in phases of panel GEMMs (see dense_internal.h): the
 * time-major inputs of the phases, and the tasks over phases, row blocks and runs
 * of panels. */
#include <string.h>

#include "dense_internal.h"
#include "scratch.h"
#include "threads.h"

typedef struct kl_ph_job {
  int64_t batch, nph, cout, wout;
  const float* xt;
  int64_t xt_sb, xt_sph, lda;   /* xt: batch and phase strides, row stride */
  const int64_t* a_off;         /* per phase: A's first row, in floats from xt_g */
  const int64_t* m;             /* per phase: rows */
  const int64_t* t0;            /* per phase: first output step */
  const int64_t* kred;          /* per phase: the reduction length (rows of its panels) */
  const int64_t* w_off;         /* per phase: floats from a panel's start to its rows */
  int64_t tstep;
  const float* w;
  int64_t w_pstride;            /* floats between panels */
  const float* bias;
  float* y;
  kl_f32_pgemm_ukernel_fn kern;
  int64_t np, pchunk, pblocks, mb, rblocks, ntasks;
  float* tiles;                 /* per thread: mb x KL_PGEMM_NR */
  atomic_llong next;
} kl_ph_job;

static void ph_tile(const kl_ph_job* j, int64_t t, float* tile) {
  const int64_t per = j->rblocks * j->pblocks, b = t / per, r = t % per;
  const int64_t m0 = (r / j->pblocks) * j->mb, p0 = (r % j->pblocks) * j->pchunk;
  const int64_t p1 = p0 + j->pchunk < j->np ? p0 + j->pchunk : j->np;
  for (int64_t p = p0; p < p1; p++) {
    const int64_t n0 = p * KL_PGEMM_NR, n = j->cout - n0 < KL_PGEMM_NR ? j->cout - n0 : KL_PGEMM_NR;
    for (int64_t g = 0; g < j->nph; g++) {
      if (m0 >= j->m[g]) continue;
      const int64_t m = j->m[g] - m0 < j->mb ? j->m[g] - m0 : j->mb;
      const float* A = j->xt + b * j->xt_sb + g * j->xt_sph + j->a_off[g] + m0 * j->lda;
      kl_pgemm_panels(j->kern, m, n, j->kred[g], A, j->lda, j->w + p * j->w_pstride + j->w_off[g],
                      j->bias ? j->bias + n0 : NULL, 1, tile, KL_PGEMM_NR, 0, 1, 0);
      float* Y = j->y + b * j->cout * j->wout + j->t0[g] + m0 * j->tstep;
      for (int64_t c = 0; c < n; c++) {
        float* yr = Y + (n0 + c) * j->wout;
        for (int64_t i = 0; i < m; i++) yr[i * j->tstep] = tile[i * KL_PGEMM_NR + c];
      }
    }
  }
}

static void ph_task(void* ctx, int ith, int nth) {
  (void)nth;
  kl_ph_job* j = ctx;
  float* tile = j->tiles + (int64_t)ith * j->mb * KL_PGEMM_NR;
  for (int64_t t; (t = kl_take_task(&j->next, j->ntasks)) >= 0;) ph_tile(j, t, tile);
}

/* Runs j (its fields up to kern filled): blocks of rows of at most
 * KL_PGEMM_MC, split evenly; panels split in runs so that there are about 2
 * tasks per thread. Results do not depend on the split. */
static kl_status ph_run(kl_ph_job* j, int nth) {
  j->np = kl_cdiv(j->cout, KL_PGEMM_NR);
  int64_t mmax = 0;
  double macs = 0.0;
  for (int64_t g = 0; g < j->nph; g++) {
    if (j->m[g] > mmax) mmax = j->m[g];
    macs += (double)j->batch * (double)j->m[g] * (double)(j->kred[g] + 1) *
            (double)(j->np * KL_PGEMM_NR);
  }
  if (mmax == 0) return KL_OK;
  j->rblocks = kl_cdiv(mmax, KL_PGEMM_MC);
  j->mb = kl_cdiv(mmax, j->rblocks);
  const int64_t have = j->batch * j->rblocks;
  nth = kl_threads_for_work(nth, macs, KL_DENSE_MIN_MACS);
  const int64_t want = nth > 1 ? 2 * (int64_t)nth : 1;
  const int64_t split = have >= want ? 1 : kl_cdiv(want, have);
  j->pchunk = kl_cdiv(j->np, split < j->np ? split : j->np);
  j->pblocks = kl_cdiv(j->np, j->pchunk);
  j->ntasks = have * j->pblocks;
  if (nth > j->ntasks) nth = (int)j->ntasks;
  atomic_init(&j->next, 0);
  size_t cap = 0;
  j->tiles = kl_scratch_take((size_t)nth * (size_t)(j->mb * KL_PGEMM_NR) * sizeof(float), &cap);
  if (!j->tiles) return KL_ERR_NOMEM;
  const kl_status s = kl_pool_run(nth, ph_task, j);
  kl_scratch_give(j->tiles, cap);
  return s;
}

/* The rows of a gx job are built in runs of KL_GX_ROWS rows, dealt evenly to the threads. */
#define KL_GX_ROWS 256
static void gx_task(void* ctx, int ith, int nth) {
  const kl_gx_job* j = ctx;
  const int64_t runs = kl_cdiv(j->rows, KL_GX_ROWS), total = j->batch * j->nph * runs;
  const int64_t per = kl_cdiv(total, nth);
  const int64_t r0 = per * ith, r1 = r0 + per < total ? r0 + per : total;
  for (int64_t r = r0; r < r1; r++) { /* r = (b * nph + g) * runs + run */
    const int64_t bg = r / runs, g = bg % j->nph, b = bg / j->nph;
    const int64_t u0 = (r % runs) * KL_GX_ROWS, u1 = u0 + KL_GX_ROWS < j->rows ? u0 + KL_GX_ROWS : j->rows;
    const float* x = j->x + b * j->cin * j->win;
    float* xt = j->xt + bg * j->rows * j->cin;
    /* the rows of [u0, u1) whose step is in [0, win): u in [lo, hi) */
    int64_t lo = j->off - g > 0 ? kl_cdiv(j->off - g, j->step) : 0;
    int64_t hi = j->win + j->off - g > 0 ? kl_cdiv(j->win + j->off - g, j->step) : 0;
    if (lo < u0) lo = u0;
    if (lo > u1) lo = u1;
    if (hi > u1) hi = u1;
    if (hi < lo) hi = lo;
    memset(xt + u0 * j->cin, 0, (size_t)((lo - u0) * j->cin) * sizeof(float));
    if (j->step == 1) {
      kl_dense_transpose(x + (g + lo - j->off), j->win, xt + lo * j->cin, j->cin, j->cin, hi - lo);
    } else {
      for (int64_t u0 = lo; u0 < hi; u0 += 16) {
        const int64_t u1 = u0 + 16 < hi ? u0 + 16 : hi;
        for (int64_t c0 = 0; c0 < j->cin; c0 += 16) {
          const int64_t c1 = c0 + 16 < j->cin ? c0 + 16 : j->cin;
          for (int64_t u = u0; u < u1; u++) {
            const float* src = x + g + j->step * u - j->off;
            for (int64_t c = c0; c < c1; c++) xt[u * j->cin + c] = src[c * j->win];
          }
        }
      }
    }
    memset(xt + hi * j->cin, 0, (size_t)((u1 - hi) * j->cin) * sizeof(float));
  }
}

/* Builds the xt_g of gx (its xt allocated here; give it back with cap). */
static kl_status gx_build(kl_gx_job* gx, size_t* cap, int nth) {
  const size_t n = (size_t)(gx->batch * gx->nph * gx->rows * gx->cin);
  gx->xt = kl_scratch_take((n ? n : 1) * sizeof(float), cap);
  if (!gx->xt) return KL_ERR_NOMEM;
  return kl_pool_run(kl_threads_for_work(nth, (double)n * 4.0, KL_DENSE_MIN_COPY_BYTES), gx_task, gx);
}

static void ph_init(kl_ph_job* j, const kl_conv1d_args* a, const kl_gx_job* gx, int64_t nph,
                    const float* w, const int64_t* tab) {
  memset(j, 0, sizeof(*j));
  j->batch = a->batch;
  j->nph = nph;
  j->cout = a->cout;
  j->wout = a->wout;
  j->xt = gx->xt;
  j->xt_sb = gx->nph * gx->rows * gx->cin;
  j->xt_sph = gx->nph > 1 ? gx->rows * gx->cin : 0;
  j->lda = gx->cin;
  j->a_off = tab;
  j->m = tab + nph;
  j->t0 = tab + 2 * nph;
  j->kred = tab + 3 * nph;
  j->w_off = tab + 4 * nph;
  j->tstep = nph;
  j->w = w;
  j->w_pstride = a->ksize * a->cin * KL_PGEMM_NR;
  j->bias = a->bias;
  j->y = a->y;
  j->kern = kl_dense_kernels_active().pgemm;
}

kl_status kl_ph_convolve(const kl_conv1d_args* a, kl_gx_job* gx, int64_t nph, const float* w,
                         const int64_t* tab, int nth) {
  size_t cap = 0;
  kl_status st = gx_build(gx, &cap, nth);
  if (!gx->xt) return st;
  kl_ph_job j;
  ph_init(&j, a, gx, nph, w, tab);
  if (st == KL_OK) st = ph_run(&j, nth);
  kl_scratch_give(gx->xt, cap);
  return st;
}
