/* Dense float32 operators (see dense.h): OpenBLAS sgemm on tiles fixed by the
 * shapes, spread over the engine's pool with BLAS single-threaded inside. */
#include "dense.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "internal.h"
#include "scratch.h"
#include "threads.h"

/* Tiles of C, one per task, chosen from the shape; results never depend on
 * num_threads. Each tile is one single-threaded OpenBLAS sgemm, which packs its
 * operands per call, so tiles are large: up to KL_DENSE_MT_MAX x KL_DENSE_NT_MAX,
 * the dimension split evenly; an odd number of tiles (fewer than
 * KL_DENSE_EVEN_BELOW) gets one more column split, so that 2 or 4 threads get
 * equal shares. */
#define KL_DENSE_MT_MAX 512
#define KL_DENSE_NT_MAX 512
#define KL_DENSE_EVEN_BELOW 8
#define KL_DENSE_ALIGN 16
/* Tiles are then split further, rows first, down to KL_DENSE_MT_MIN rows and
 * KL_DENSE_NT_MIN columns while a tile keeps KL_DENSE_TILE_MIN_MACS
 * multiply-adds, until there are as many as the threads the call would run at
 * the process's thread count (kl_max_threads(), read once; kl_threads_for_work
 * of the shape), never for the call's num_threads: OpenBLAS's bits for an
 * element depend on where the call's M and N edges fall (its Haswell kernels,
 * also run on Zen, sum K in another order in the register blocks at the edges,
 * e.g. the last 8 of 128 rows or columns). */
#define KL_DENSE_MT_MIN 64
#define KL_DENSE_NT_MIN 128
#define KL_DENSE_TILE_MIN_MACS (1 << 21)

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The next index of a job's tasks, dealt to threads as they come free, or -1
 * when none is left. */
typedef struct mm_job {
  const kl_matmul_args* a;
  kl_f32_vunary_fn gelu; /* for act == KL_ACT_GELU_TANH */
  int64_t mt, nt;     /* tiles along M and N */
  int64_t msz, nsz;   /* tile sizes */
  int64_t ntasks;
  atomic_llong next;
} mm_job;

static int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

/* The thread count mm_tiles splits for: 0 until read; kl_dense_set_split_threads
 * sets it. */
static atomic_int g_split_threads;

void kl_dense_set_split_threads(int n) {
  atomic_store(&g_split_threads, n < 1 ? 0 : n > KL_MAX_THREADS ? KL_MAX_THREADS : n);
}

static int split_threads(void) {
  int n = atomic_load(&g_split_threads);
  if (n < 1) {
    const int m = kl_max_threads();
    int expected = 0;
    n = atomic_compare_exchange_strong(&g_split_threads, &expected, m) ? m : expected;
  }
  return n;
}

/* Tile counts and sizes of j from its matrix shape (work: its multiply-adds as
 * kl_f32_matmul counts them) and split_threads() alone (see KL_DENSE_MT_MAX/MT_MIN),
 * so that results never depend on num_threads. */
static void mm_tiles(mm_job* j, double work) {
  const kl_matmul_args* a = j->a;
  int64_t nm = (a->M + KL_DENSE_MT_MAX - 1) / KL_DENSE_MT_MAX;
  int64_t nn = (a->N + KL_DENSE_NT_MAX - 1) / KL_DENSE_NT_MAX;
  const double macs = (double)a->M * (double)a->N * (double)a->K;
  const int64_t total = a->batch * nm * nn;
  if (total % 2 == 1 && total < KL_DENSE_EVEN_BELOW && a->N >= 2 * KL_DENSE_ALIGN &&
      macs * (double)a->batch >= 2.0 * KL_DENSE_MIN_MACS)
    nn++;
  const int nth = kl_threads_for_work(split_threads(), work, KL_DENSE_MIN_MACS);
  while (a->batch * nm * nn < nth) {
    const int64_t rows = cdiv(a->M, nm + 1), cols = cdiv(a->N, nn);
    if (rows >= KL_DENSE_MT_MIN && (double)rows * (double)cols * (double)a->K >= KL_DENSE_TILE_MIN_MACS)
      nm++;
    else if (cdiv(a->N, nn + 1) >= KL_DENSE_NT_MIN &&
             (double)cdiv(a->M, nm) * (double)cdiv(a->N, nn + 1) * (double)a->K >=
                 KL_DENSE_TILE_MIN_MACS)
      nn++;
    else
      break;
  }
  j->msz = nm > 1 ? round_up((a->M + nm - 1) / nm, KL_DENSE_ALIGN) : a->M;
  j->nsz = nn > 1 ? round_up((a->N + nn - 1) / nn, KL_DENSE_ALIGN) : a->N;
  j->mt = (a->M + j->msz - 1) / j->msz;
  j->nt = (a->N + j->nsz - 1) / j->nsz;
  j->ntasks = a->batch * j->mt * j->nt;
}

/* GELU (tanh form) in place on m rows of n floats: the f32-vgelu kernels, in the
 * order of PyTorch's gelu_new as exported: (0.5 x) (1 + tanh(c2 (x + c1 x^3))).
 * Applied while the tile is in cache, instead of a separate pass over C. */
static void gelu_rows(kl_f32_vunary_fn gelu, float* c, int64_t m, int64_t n, int64_t ldc) {
  for (int64_t i = 0; i < m; i++) gelu((size_t)n, c + i * ldc, c + i * ldc);
}

static void mm_tile(const mm_job* j, int64_t t) {
  const kl_matmul_args* a = j->a;
  const int64_t per = j->mt * j->nt, b = t / per, r = t % per;
  const int64_t m0 = (r / j->nt) * j->msz, n0 = (r % j->nt) * j->nsz;
  const int64_t m = a->M - m0 < j->msz ? a->M - m0 : j->msz;
  const int64_t n = a->N - n0 < j->nsz ? a->N - n0 : j->nsz;
  const float* A = a->a + b * a->sa + m0 * a->lda;
  const float* B = a->b + b * a->sb + (a->trans_b ? n0 * a->ldb : n0);
  float* C = a->c + b * a->sc + m0 * a->ldc + n0;
  float beta = 0.0f;
  if (a->bias) {
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) C[i * a->ldc + j] = a->bias[(n0 + j) * a->sbias];
    beta = 1.0f;
  }
  if (a->K == 0) {
    if (!a->bias)
      for (int64_t i = 0; i < m; i++) memset(C + i * a->ldc, 0, (size_t)n * sizeof(float));
    if (a->act == KL_ACT_GELU_TANH) gelu_rows(j->gelu, C, m, n, a->ldc);
    return;
  }
  kl_cblas_sgemm(CblasRowMajor, CblasNoTrans, a->trans_b ? CblasTrans : CblasNoTrans, (int)m,
                 (int)n, (int)a->K, 1.0f, A, (int)a->lda, B, (int)a->ldb, beta, C, (int)a->ldc);
  if (a->act == KL_ACT_GELU_TANH) gelu_rows(j->gelu, C, m, n, a->ldc);
}

static void mm_task(void* ctx, int ith, int nth) {
  (void)ith;
  (void)nth;
  mm_job* j = ctx;
  for (int64_t t; (t = kl_take_task(&j->next, j->ntasks)) >= 0;) mm_tile(j, t);
}

/* Runs fn on the pool with nth threads, BLAS single-threaded meanwhile. */
static kl_status run_pool(int nth, kl_task_fn fn, void* ctx) {
  const int blas_prev = kl_blas_get_num_threads();
  if (blas_prev != 1) kl_blas_set_num_threads(1);
  const kl_status s = kl_pool_run(nth, fn, ctx);
  if (blas_prev != 1) kl_blas_set_num_threads(blas_prev);
  return s;
}

/* ---- B packed in panels: the f32-pgemm kernel list (src/core/pgemm.c) --------
 * Constant weights (a linear's W) are packed once, at compile time by the TVM
 * lowering, so no call packs B (OpenBLAS packs it on every call, a large share
 * of the work at few rows). Each task: a block of at most KL_PGEMM_MC rows times
 * a run of panels (kl_pgemm_panels); results do not depend on the tasks or the
 * thread count. */
#define KL_PGEMM_MC 240
/* A's rows a multiple of this many floats apart (4 KiB: L1's way size) fall in
 * one L1 set, and the 14 rows of a tile, each read a float per k, then contend
 * for its 12 ways. Such an A is copied per task, rows K + 16 apart. */
#define KL_PGEMM_ALIAS 1024

_Static_assert(KL_DENSE_PANEL == KL_PGEMM_NR, "dense.h's panel width is the kernels'");

typedef struct pk_job {
  const kl_matmul_args* a;
  kl_f32_pgemm_ukernel_fn kern;
  kl_f32_vunary_fn gelu; /* for act == KL_ACT_GELU_TANH */
  int64_t np, mb, pchunk, rblocks, pblocks, ntasks; /* panels; rows and panels per task */
  int64_t ldp;  /* 0, or the row stride of A's copy (see KL_PGEMM_ALIAS) */
  int64_t per_thread; /* floats of scratch per thread: A's copy, then c_trans's tile */
  float* scratch;
  atomic_llong next;
} pk_job;

/* dst[j * ldd + i] = src[i * lds + j] for i < m, j < n. */
static void transpose(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t m, int64_t n) {
  for (int64_t i0 = 0; i0 < m; i0 += 16) {
    const int64_t i1 = i0 + 16 < m ? i0 + 16 : m;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
      const int64_t j1 = j0 + 16 < n ? j0 + 16 : n;
      for (int64_t j = j0; j < j1; j++)
        for (int64_t i = i0; i < i1; i++) dst[j * ldd + i] = src[i * lds + j];
    }
  }
}

static void pk_tile(const pk_job* j, int64_t t, int ith) {
  const kl_matmul_args* a = j->a;
  const int64_t per = j->rblocks * j->pblocks, b = t / per, r = t % per;
  const int64_t m0 = (r / j->pblocks) * j->mb, p0 = (r % j->pblocks) * j->pchunk;
  const int64_t m = a->M - m0 < j->mb ? a->M - m0 : j->mb;
  const int64_t p1 = p0 + j->pchunk < j->np ? p0 + j->pchunk : j->np;
  const float* A = a->a + b * a->sa + m0 * a->lda;
  int64_t lda = a->lda;
  const float* P = a->K ? a->b + b * a->sb : NULL;
  float* mine = j->scratch ? j->scratch + (int64_t)ith * j->per_thread : NULL;
  if (j->ldp) { /* A's rows copied ldp apart (KL_PGEMM_ALIAS) */
    for (int64_t i = 0; i < m; i++) memcpy(mine + i * j->ldp, A + i * lda, (size_t)a->K * sizeof(float));
    A = mine;
    lda = j->ldp;
  }
  if (a->c_trans) { /* each panel's columns into this thread's tile, then to C^T's rows */
    float* tile = mine + (j->ldp ? j->mb * j->ldp : 0);
    float* Ct = a->c + b * a->sc + m0;
    for (int64_t p = p0; p < p1; p++) {
      const int64_t n0 = p * KL_PGEMM_NR, n = a->N - n0 < KL_PGEMM_NR ? a->N - n0 : KL_PGEMM_NR;
      kl_pgemm_panels(j->kern, m, n, a->K, A, lda, P + n0 * a->K,
                      a->bias ? a->bias + n0 * a->sbias : NULL, a->sbias, tile, KL_PGEMM_NR, 0, 1, 0);
      if (j->gelu) gelu_rows(j->gelu, tile, m, n, KL_PGEMM_NR);
      transpose(tile, KL_PGEMM_NR, Ct + n0 * a->ldc, a->ldc, m, n);
    }
    return;
  }
  float* C = a->c + b * a->sc + m0 * a->ldc;
  if (!j->gelu) {
    kl_pgemm_panels(j->kern, m, a->N, a->K, A, lda, P, a->bias, a->sbias, C, a->ldc, p0, p1, 0);
    return;
  }
  for (int64_t p = p0; p < p1; p++) { /* GELU on each panel's columns while they are in cache */
    const int64_t n0 = p * KL_PGEMM_NR, n = a->N - n0 < KL_PGEMM_NR ? a->N - n0 : KL_PGEMM_NR;
    kl_pgemm_panels(j->kern, m, a->N, a->K, A, lda, P, a->bias, a->sbias, C, a->ldc, p, p + 1, 0);
    gelu_rows(j->gelu, C + n0, m, n, a->ldc);
  }
}

static void pk_task(void* ctx, int ith, int nth) {
  (void)nth;
  pk_job* j = ctx;
  for (int64_t t; (t = kl_take_task(&j->next, j->ntasks)) >= 0;) pk_tile(j, t, ith);
}

/* When tasks are dealt in order to whichever of nth threads is free first
 * (take_task), the time the last one ends, in rows x panels, for row blocks of
 * mb (of M rows, batch times) and runs of pchunk (of np) panels. */
#define KL_PK_PLAN_THREADS 64
static int64_t pk_makespan(int64_t batch, int64_t M, int64_t mb, int64_t np, int64_t pchunk, int nth) {
  int64_t fin[KL_PK_PLAN_THREADS] = {0}, end = 0;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t m0 = 0; m0 < M; m0 += mb)
      for (int64_t p0 = 0; p0 < np; p0 += pchunk) {
        int i = 0;
        for (int k = 1; k < nth; k++)
          if (fin[k] < fin[i]) i = k;
        fin[i] += (M - m0 < mb ? M - m0 : mb) * (np - p0 < pchunk ? np - p0 : pchunk);
        if (fin[i] > end) end = fin[i];
      }
  return end;
}

/* Tasks: row blocks of at most KL_PGEMM_MC, each split into runs of panels so
 * that there are at least 2 tasks per thread; of the splits up to 4 times finer,
 * the one whose tasks end first on nth threads (pk_makespan). Results do not
 * depend on the split. */
static kl_status pgemm(const kl_matmul_args* a, int nth) {
  pk_job j;
  j.a = a;
  j.scratch = NULL;
  j.kern = kl_select_f32_pgemm();
  j.gelu = a->act == KL_ACT_GELU_TANH ? kl_select_vgelu() : NULL;
  j.np = cdiv(a->N, KL_PGEMM_NR);
  j.rblocks = cdiv(a->M, KL_PGEMM_MC);
  j.mb = cdiv(a->M, j.rblocks);
  const int64_t want = nth > 1 ? 2 * (int64_t)nth : 1, have = a->batch * j.rblocks;
  const int64_t base = have >= want ? 1 : cdiv(want, have);
  j.pchunk = cdiv(j.np, base < j.np ? base : j.np);
  if (nth > 1 && nth <= KL_PK_PLAN_THREADS && have <= 16 * (int64_t)nth) {
    int64_t best = pk_makespan(a->batch, a->M, j.mb, j.np, j.pchunk, nth);
    for (int64_t pc = j.pchunk - 1; pc >= 1 && cdiv(j.np, pc) <= 4 * base; pc--) {
      const int64_t span = pk_makespan(a->batch, a->M, j.mb, j.np, pc, nth);
      if (span < best) best = span, j.pchunk = pc;
    }
  }
  j.pblocks = cdiv(j.np, j.pchunk);
  j.ntasks = a->batch * j.rblocks * j.pblocks;
  atomic_init(&j.next, 0);
  if (nth > j.ntasks) nth = (int)j.ntasks;
  j.ldp = a->M > 1 && a->K >= KL_PGEMM_ALIAS && a->lda % KL_PGEMM_ALIAS == 0 ? a->K + 16 : 0;
  j.per_thread = j.mb * (j.ldp + (a->c_trans ? KL_PGEMM_NR : 0));
  if (!j.per_thread) return kl_pool_run(nth, pk_task, &j);
  size_t cap = 0;
  j.scratch = kl_scratch_take((size_t)nth * (size_t)j.per_thread * sizeof(float), &cap);
  if (!j.scratch) return KL_ERR_NOMEM;
  const kl_status s = kl_pool_run(nth, pk_task, &j);
  kl_scratch_give(j.scratch, cap);
  return s;
}

kl_status kl_f32_matmul(const kl_matmul_args* a) {
  if (!a || a->batch < 0 || a->M < 0 || a->N < 0 || a->K < 0 || a->M > INT32_MAX ||
      a->N > INT32_MAX || a->K > INT32_MAX)
    return KL_ERR_ARG;
  if (a->batch == 0 || a->M == 0 || a->N == 0) return KL_OK;
  if (!a->c || (a->K > 0 && (!a->a || !a->b))) return KL_ERR_ARG; /* empty operands may be NULL */
  if (a->act != KL_ACT_NONE && a->act != KL_ACT_GELU_TANH) return KL_ERR_ARG;
  if (a->c_trans && !a->b_panels) return KL_ERR_ARG;
  const double n = a->b_panels ? (double)(cdiv(a->N, KL_PGEMM_NR) * KL_PGEMM_NR) : (double)a->N;
  const double macs = (double)a->batch * (double)a->M * n * (double)(a->K + 1);
  int nth = kl_threads_for_work(kl_threads_resolve(a->num_threads), macs, KL_DENSE_MIN_MACS);
  if (a->b_panels) return pgemm(a, nth);
  mm_job j;
  j.a = a;
  j.gelu = a->act == KL_ACT_GELU_TANH ? kl_select_vgelu() : NULL;
  mm_tiles(&j, macs);
  atomic_init(&j.next, 0);
  if (nth > j.ntasks) nth = (int)j.ntasks;
  return run_pool(nth, mm_task, &j);
}

/* ---- conv1d: im2col per batch element + one tiled GEMM ---------------------- */
typedef struct im2col_job {
  const kl_conv1d_args* a;
  const float* x; /* this batch element, [cin][win] */
  float* cols;    /* [cin * ksize][wout] */
} im2col_job;

static void im2col_rows(const kl_conv1d_args* a, const float* x, float* cols, int64_t r0,
                        int64_t r1) {
  for (int64_t r = r0; r < r1; r++) { /* r = ci * ksize + k */
    const int64_t ci = r / a->ksize, k = r % a->ksize;
    const float* xr = x + ci * a->win;
    float* out = cols + r * a->wout;
    const int64_t off = k * a->dilation - a->pad_l;
    if (a->stride == 1) {
      /* t + off in [0, win) */
      int64_t lo = -off < 0 ? 0 : -off, hi = a->win - off;
      if (lo > a->wout) lo = a->wout;
      if (hi > a->wout) hi = a->wout;
      if (hi < lo) hi = lo;
      memset(out, 0, (size_t)lo * sizeof(float));
      if (hi > lo) memcpy(out + lo, xr + lo + off, (size_t)(hi - lo) * sizeof(float));
      memset(out + hi, 0, (size_t)(a->wout - hi) * sizeof(float));
    } else {
      for (int64_t t = 0; t < a->wout; t++) {
        const int64_t s = t * a->stride + off;
        out[t] = s >= 0 && s < a->win ? xr[s] : 0.0f;
      }
    }
  }
}

static void im2col_task(void* ctx, int ith, int nth) {
  im2col_job* j = ctx;
  const int64_t rows = j->a->cin * j->a->ksize;
  const int64_t per = cdiv(rows, nth);
  const int64_t r0 = per * ith, r1 = r0 + per < rows ? r0 + per : rows;
  if (r0 < r1) im2col_rows(j->a, j->x, j->cols, r0, r1);
}

/* ---- convolutions as phases of panel GEMMs ------------------------------------
 * When the im2col rows of a convolution's outputs are not evenly spaced rows of
 * the time-major input, its outputs are split into phases in which they are:
 * phase g's outputs t = t0[g] + tstep * i, i < m[g], output i being rows i .. of
 * the time-major input xt_g (rows lda apart, overlapping) times g's panels.
 * A transposed convolution of stride s has s phases (one per output t mod s,
 * each a plain correlation over its own taps) on one xt; a dilated one (stride
 * 1, dilation d) has d phases sharing one set of panels, each on its own xt_g
 * (every d-th input step). A task takes one block of rows i (the same block in
 * every phase: one window of the output) and a run of panels, and for each panel
 * computes every phase's tile in L1 and stores it to y's rows with stride
 * tstep: the lines of one output window are completed by one task, in its cache. */
typedef struct ph_job {
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
} ph_job;

static void ph_tile(const ph_job* j, int64_t t, float* tile) {
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
  ph_job* j = ctx;
  float* tile = j->tiles + (int64_t)ith * j->mb * KL_PGEMM_NR;
  for (int64_t t; (t = kl_take_task(&j->next, j->ntasks)) >= 0;) ph_tile(j, t, tile);
}

/* Runs j (its fields up to kern filled): blocks of rows of at most
 * KL_PGEMM_MC, split evenly; panels split in runs so that there are about 2
 * tasks per thread. Results do not depend on the split. */
static kl_status ph_run(ph_job* j, int nth) {
  j->np = cdiv(j->cout, KL_PGEMM_NR);
  int64_t mmax = 0;
  double macs = 0.0;
  for (int64_t g = 0; g < j->nph; g++) {
    if (j->m[g] > mmax) mmax = j->m[g];
    macs += (double)j->batch * (double)j->m[g] * (double)(j->kred[g] + 1) *
            (double)(j->np * KL_PGEMM_NR);
  }
  if (mmax == 0) return KL_OK;
  j->rblocks = cdiv(mmax, KL_PGEMM_MC);
  j->mb = cdiv(mmax, j->rblocks);
  const int64_t have = j->batch * j->rblocks;
  nth = kl_threads_for_work(nth, macs, KL_DENSE_MIN_MACS);
  const int64_t want = nth > 1 ? 2 * (int64_t)nth : 1;
  const int64_t split = have >= want ? 1 : cdiv(want, have);
  j->pchunk = cdiv(j->np, split < j->np ? split : j->np);
  j->pblocks = cdiv(j->np, j->pchunk);
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

/* xt_g for g < nph, per batch element: rows u < rows of cin floats (a phase's
 * rows at xt + (b * nph + g) * rows * cin), row u holding x[.., g + step * u - off],
 * zeros where that step is outside [0, win). Built in runs of KL_GX_ROWS rows,
 * dealt evenly to the threads. */
#define KL_GX_ROWS 256
typedef struct gx_job {
  const float* x;
  int64_t batch, cin, win, nph, rows, step, off;
  float* xt;
} gx_job;

static void gx_task(void* ctx, int ith, int nth) {
  const gx_job* j = ctx;
  const int64_t runs = cdiv(j->rows, KL_GX_ROWS), total = j->batch * j->nph * runs;
  const int64_t per = cdiv(total, nth);
  const int64_t r0 = per * ith, r1 = r0 + per < total ? r0 + per : total;
  for (int64_t r = r0; r < r1; r++) { /* r = (b * nph + g) * runs + run */
    const int64_t bg = r / runs, g = bg % j->nph, b = bg / j->nph;
    const int64_t u0 = (r % runs) * KL_GX_ROWS, u1 = u0 + KL_GX_ROWS < j->rows ? u0 + KL_GX_ROWS : j->rows;
    const float* x = j->x + b * j->cin * j->win;
    float* xt = j->xt + bg * j->rows * j->cin;
    /* the rows of [u0, u1) whose step is in [0, win): u in [lo, hi) */
    int64_t lo = j->off - g > 0 ? cdiv(j->off - g, j->step) : 0;
    int64_t hi = j->win + j->off - g > 0 ? cdiv(j->win + j->off - g, j->step) : 0;
    if (lo < u0) lo = u0;
    if (lo > u1) lo = u1;
    if (hi > u1) hi = u1;
    if (hi < lo) hi = lo;
    memset(xt + u0 * j->cin, 0, (size_t)((lo - u0) * j->cin) * sizeof(float));
    if (j->step == 1) {
      transpose(x + (g + lo - j->off), j->win, xt + lo * j->cin, j->cin, j->cin, hi - lo);
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
static kl_status gx_build(gx_job* gx, size_t* cap, int nth) {
  const size_t n = (size_t)(gx->batch * gx->nph * gx->rows * gx->cin);
  gx->xt = kl_scratch_take((n ? n : 1) * sizeof(float), cap);
  if (!gx->xt) return KL_ERR_NOMEM;
  return kl_pool_run(kl_threads_for_work(nth, (double)n * 4.0, KL_DENSE_MIN_COPY_BYTES), gx_task, gx);
}

/* Fills j's fields up to kern for the convolution a in nph phases of output
 * stride nph over gx's rows, phase g on gx's xt_g when gx has one per phase, else
 * every phase on its one xt; w: panels of ksize * cin rows. tab holds the
 * per-phase tables a_off, m, t0, kred and w_off in turn, nph values each. */
static void ph_init(ph_job* j, const kl_conv1d_args* a, const gx_job* gx, int64_t nph,
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
  j->kern = kl_select_f32_pgemm();
}

/* ---- conv1d on weights packed in panels: no im2col -------------------------
 * With the kernel axis ordered (tap, channel), the im2col row of output step t
 * is rows t .. t + ksize - 1 of x transposed and zero padded (xt, [steps][cin]),
 * contiguous: so y^T = xt (rows cin apart, overlapping) @ W packed in panels, on
 * the f32-pgemm kernels, stored transposed (c_trans) panel by panel from a tile
 * in L1. One pass transposes x; nothing of ksize x the input is written. */
typedef struct xt_job {
  const kl_conv1d_args* a;
  float* xt;
  int64_t rows; /* steps of xt per batch element: wout + ksize - 1 */
} xt_job;

static void xt_task(void* ctx, int ith, int nth) {
  const xt_job* j = ctx;
  const kl_conv1d_args* a = j->a;
  const int64_t total = a->batch * j->rows, per = cdiv(total, nth);
  const int64_t r0 = per * ith, r1 = r0 + per < total ? r0 + per : total;
  for (int64_t r = r0; r < r1;) { /* a run of steps of one batch element */
    const int64_t b = r / j->rows, t0 = r % j->rows;
    const int64_t t1 = r1 - b * j->rows < j->rows ? r1 - b * j->rows : j->rows;
    float* xt = j->xt + r * a->cin;
    /* steps t hold x[.., t - pad_l] for t - pad_l in [0, win), zeros elsewhere */
    int64_t lo = a->pad_l > t0 ? a->pad_l : t0, hi = a->pad_l + a->win < t1 ? a->pad_l + a->win : t1;
    if (hi < lo) lo = hi = t1;
    memset(xt, 0, (size_t)((lo - t0) * a->cin) * sizeof(float));
    transpose(a->x + b * a->cin * a->win + (lo - a->pad_l), a->win, xt + (lo - t0) * a->cin, a->cin,
              a->cin, hi - lo);
    memset(xt + (hi - t0) * a->cin, 0, (size_t)((t1 - hi) * a->cin) * sizeof(float));
    r += t1 - t0;
  }
}

/* conv1d on panels with dilation d > 1 (stride 1): output t = g + d i (phase
 * g < d) is rows i .. i + ksize - 1 of xt_g, every d-th step of x from g - pad_l. */
static kl_status conv1d_panels_dilated(const kl_conv1d_args* a, int nth) {
  const int64_t d = a->dilation, rows = cdiv(a->wout + (a->ksize - 1) * d, d);
  int64_t* tab = malloc((size_t)(5 * d) * sizeof(int64_t));
  if (!tab) return KL_ERR_NOMEM;
  int64_t *a_off = tab, *m = tab + d, *t0 = tab + 2 * d, *kred = tab + 3 * d, *w_off = tab + 4 * d;
  for (int64_t g = 0; g < d; g++) {
    a_off[g] = w_off[g] = 0;
    m[g] = a->wout > g ? cdiv(a->wout - g, d) : 0;
    t0[g] = g;
    kred[g] = a->ksize * a->cin;
  }
  gx_job gx = {a->x, a->batch, a->cin, a->win, d, rows, d, a->pad_l, NULL};
  size_t cap = 0;
  kl_status st = gx_build(&gx, &cap, nth);
  if (gx.xt) {
    ph_job j;
    ph_init(&j, a, &gx, d, a->w, tab);
    if (st == KL_OK) st = ph_run(&j, nth);
    kl_scratch_give(gx.xt, cap);
  }
  free(tab);
  return st;
}

/* conv1d on panels with stride 1, in x's [cin, L] layout: for each run of
 * KL_PGEMM_NR output steps, the (tap, channel) rows x[c, t + k d - pad_l ..]
 * (zeros outside x) are packed as one panel and multiplied by W's rows (W
 * unpacked from its panels once per call), the tile going straight into y's rows
 * from the bias: neither x nor y is transposed. Used while W's rows stay in L2
 * as every block streams them (at most KL_DC_MAX_W_BYTES) and ksize cin is at
 * most KL_DC_MAX_K (a block's panel at most 128 KiB); larger W run on x
 * transposed (below). A task takes KL_DC_BLOCKS runs of one batch element; results do not
 * depend on the tasks. */
#define KL_DC_BLOCKS 4
#define KL_DC_MAX_W_BYTES (1 << 20)
#define KL_DC_MAX_K 1024
#define KL_DC_PAD 16 /* W's rows ksize cin + 16 floats apart: rows 2^k floats apart share L1 sets */
typedef struct dc_job {
  const kl_conv1d_args* a;
  const float* wr;  /* [cout][ksize cin], rows ldw apart */
  float* bufs;      /* per thread: ksize cin x KL_PGEMM_NR */
  int64_t K, ldw, nblk, runs, ntasks;
  kl_f32_pgemm_ukernel_fn kern;
  atomic_llong next;
} dc_job;

static void dc_block(const dc_job* j, int64_t b, int64_t t0, float* buf) {
  const kl_conv1d_args* a = j->a;
  const int64_t n = a->wout - t0 < KL_PGEMM_NR ? a->wout - t0 : KL_PGEMM_NR;
  const float* x = a->x + b * a->cin * a->win;
  for (int64_t k = 0; k < a->ksize; k++) {
    const int64_t s0 = t0 + k * a->dilation - a->pad_l;
    for (int64_t c = 0; c < a->cin; c++) {
      float* row = buf + (k * a->cin + c) * KL_PGEMM_NR;
      const float* xr = x + c * a->win;
      if (s0 >= 0 && s0 + KL_PGEMM_NR <= a->win) {
        memcpy(row, xr + s0, KL_PGEMM_NR * sizeof(float));
      } else {
        for (int64_t i = 0; i < KL_PGEMM_NR; i++)
          row[i] = s0 + i >= 0 && s0 + i < a->win ? xr[s0 + i] : 0.0f;
      }
    }
  }
  float* Y = a->y + b * a->cout * a->wout + t0;
  for (int64_t o = 0; o < a->cout; o++) {
    const float bo = a->bias ? a->bias[o] : 0.0f;
    for (int64_t i = 0; i < n; i++) Y[o * a->wout + i] = bo;
  }
  kl_pgemm_panels(j->kern, a->cout, n, j->K, j->wr, j->ldw, buf, NULL, 0, Y, a->wout, 0, 1, 1);
}

static void dc_task(void* ctx, int ith, int nth) {
  (void)nth;
  dc_job* j = ctx;
  float* buf = j->bufs + (int64_t)ith * j->K * KL_PGEMM_NR;
  for (int64_t t; (t = kl_take_task(&j->next, j->ntasks)) >= 0;) {
    const int64_t b = t / j->runs, r = t % j->runs;
    const int64_t e = (r + 1) * KL_DC_BLOCKS < j->nblk ? (r + 1) * KL_DC_BLOCKS : j->nblk;
    for (int64_t blk = r * KL_DC_BLOCKS; blk < e; blk++) dc_block(j, b, blk * KL_PGEMM_NR, buf);
  }
}

static kl_status conv1d_panels_direct(const kl_conv1d_args* a, int nth) {
  dc_job j;
  j.a = a;
  j.K = a->ksize * a->cin;
  j.ldw = j.K + KL_DC_PAD;
  j.nblk = cdiv(a->wout, KL_PGEMM_NR);
  j.runs = cdiv(j.nblk, KL_DC_BLOCKS);
  j.ntasks = a->batch * j.runs;
  j.kern = kl_select_f32_pgemm();
  atomic_init(&j.next, 0);
  const double macs = (double)a->batch * (double)(j.nblk * KL_PGEMM_NR) * (double)(j.K + 1) *
                      (double)a->cout;
  nth = kl_threads_for_work(nth, macs, KL_DENSE_MIN_MACS);
  if (nth > j.ntasks) nth = (int)j.ntasks;
  size_t cap = 0;
  const size_t nw = (size_t)(a->cout * j.ldw), nb = (size_t)nth * (size_t)(j.K * KL_PGEMM_NR);
  float* wr = kl_scratch_take((nw + nb) * sizeof(float), &cap);
  if (!wr) return KL_ERR_NOMEM;
  for (int64_t o = 0; o < a->cout; o++) /* W's rows from its panels: P[o / 32][kk][o % 32] */
    for (int64_t kk = 0; kk < j.K; kk++)
      wr[o * j.ldw + kk] = a->w[(o / KL_PGEMM_NR) * j.K * KL_PGEMM_NR + kk * KL_PGEMM_NR + o % KL_PGEMM_NR];
  j.wr = wr;
  j.bufs = wr + nw;
  const kl_status s = kl_pool_run(nth, dc_task, &j);
  kl_scratch_give(wr, cap);
  return s;
}

static kl_status conv1d_panels(const kl_conv1d_args* a, int nth) {
  if (a->stride == 1 && a->ksize * a->cin <= KL_DC_MAX_K &&
      (double)a->cout * (double)(a->ksize * a->cin) * sizeof(float) <= KL_DC_MAX_W_BYTES)
    return conv1d_panels_direct(a, nth);
  if (a->dilation != 1) return a->stride == 1 ? conv1d_panels_dilated(a, nth) : KL_ERR_ARG;
  /* stride s: output t is rows s t .. s t + ksize - 1 of xt, rows s cin apart */
  xt_job xj = {a, NULL, (a->wout - 1) * a->stride + a->ksize};
  size_t cap = 0;
  xj.xt = kl_scratch_take((size_t)(a->batch * xj.rows * a->cin) * sizeof(float), &cap);
  if (!xj.xt) return KL_ERR_NOMEM;
  const double bytes = (double)(a->batch * xj.rows * a->cin) * 4.0;
  kl_status s = kl_pool_run(kl_threads_for_work(nth, bytes, KL_DENSE_MIN_COPY_BYTES), xt_task, &xj);
  kl_matmul_args m;
  memset(&m, 0, sizeof(m));
  m.batch = a->batch;
  m.M = a->wout;
  m.N = a->cout;
  m.K = a->ksize * a->cin;
  m.a = xj.xt;
  m.lda = a->stride * a->cin;
  m.sa = xj.rows * a->cin;
  m.b = a->w;
  m.b_panels = 1;
  m.c_trans = 1;
  m.bias = a->bias;
  m.sbias = 1;
  m.c = a->y;
  m.ldc = a->wout;
  m.sc = a->cout * a->wout;
  m.num_threads = nth;
  if (s == KL_OK) s = kl_f32_matmul(&m);
  kl_scratch_give(xj.xt, cap);
  return s;
}

kl_status kl_f32_conv1d(const kl_conv1d_args* a) {
  if (!a || a->batch < 0 || a->cin < 1 || a->cout < 1 || a->win < 0 || a->wout < 0 ||
      a->ksize < 1 || a->stride < 1 || a->dilation < 1 || a->pad_l < 0 || !a->x || !a->w || !a->y)
    return KL_ERR_ARG;
  if (a->batch == 0 || a->wout == 0) return KL_OK;
  const int nth = kl_threads_resolve(a->num_threads);
  if (a->w_panels) return conv1d_panels(a, nth);
  const int direct = a->ksize == 1 && a->stride == 1 && a->pad_l == 0 && a->wout == a->win;
  float* cols = NULL;
  if (!direct) {
    cols = malloc((size_t)(a->cin * a->ksize) * (size_t)a->wout * sizeof(float));
    if (!cols) return KL_ERR_NOMEM;
  }
  kl_status s = KL_OK;
  for (int64_t n = 0; n < a->batch && s == KL_OK; n++) {
    const float* x = a->x + n * a->cin * a->win;
    const float* B = x;
    if (!direct) {
      im2col_job ij = {a, x, cols};
      const double bytes = (double)a->cin * (double)a->ksize * (double)a->wout * 4.0;
      s = kl_pool_run(kl_threads_for_work(nth, bytes, KL_DENSE_MIN_COPY_BYTES), im2col_task, &ij);
      B = cols;
    }
    /* y[cout][wout] = w[cout][cin*ksize] @ cols[cin*ksize][wout] (+ bias per row) */
    kl_matmul_args m;
    memset(&m, 0, sizeof(m));
    m.batch = 1;
    m.M = a->cout;
    m.N = a->wout;
    m.K = a->cin * a->ksize;
    m.a = a->w;
    m.lda = m.K;
    m.b = B;
    m.ldb = a->wout;
    m.c = a->y + n * a->cout * a->wout;
    m.ldc = a->wout;
    m.num_threads = nth;
    if (s == KL_OK) s = kl_f32_matmul(&m);
    if (s == KL_OK && a->bias)
      for (int64_t o = 0; o < a->cout; o++) {
        float* row = m.c + o * a->wout;
        const float bo = a->bias[o];
        for (int64_t t = 0; t < a->wout; t++) row[t] += bo;
      }
  }
  free(cols);
  return s;
}

/* ---- ConvTranspose1d, groups 1 -------------------------------------------------
 * With dilation d dividing stride s, output phase r (t + pad_l = q s + r) takes
 * the taps k = r / d + m s / d, m < taps_r (none when d does not divide r):
 * y[o, t] = sum over m, c of x[c, q - m] w[c, o, k], a plain correlation, i.e.
 * rows q + taps - taps_r .. of xt (x transposed after taps - 1 zero steps,
 * taps = the most of any phase) times the phase's rows of the panels. Every
 * term is a tap of the kernel: no zero weights meet an inf or NaN. */
static int64_t ct_phase_taps(int64_t ksize, int64_t stride, int64_t dilation, int64_t r) {
  const int64_t s1 = stride / dilation;
  return r % dilation || r / dilation >= ksize ? 0 : cdiv(ksize - r / dilation, s1);
}

kl_status kl_f32_conv1d_transpose_pack(int64_t cin, int64_t cout, int64_t ksize, int64_t stride,
                                       int64_t dilation, const float* w, float* out) {
  if (cin < 1 || cout < 1 || ksize < 1 || stride < 1 || dilation < 1 || stride % dilation ||
      !w || !out)
    return KL_ERR_ARG;
  const int64_t np = cdiv(cout, KL_PGEMM_NR), kred = ksize * cin, s1 = stride / dilation;
  memset(out, 0, (size_t)(np * kred * KL_PGEMM_NR) * sizeof(float));
  for (int64_t r = 0, row0 = 0; r < stride; r++) {
    const int64_t taps = ct_phase_taps(ksize, stride, dilation, r);
    for (int64_t jj = 0; jj < taps; jj++) {
      const int64_t k = r / dilation + (taps - 1 - jj) * s1;
      for (int64_t c = 0; c < cin; c++)
        for (int64_t o = 0; o < cout; o++)
          out[(o / KL_PGEMM_NR) * kred * KL_PGEMM_NR + (row0 + jj * cin + c) * KL_PGEMM_NR +
              o % KL_PGEMM_NR] = w[(c * cout + o) * ksize + k];
    }
    row0 += taps * cin;
  }
  return KL_OK;
}

kl_status kl_f32_conv1d_transpose(const kl_conv1d_transpose_args* a) {
  if (!a || a->batch < 0 || a->cin < 1 || a->cout < 1 || a->win < 0 || a->wout < 0 ||
      a->ksize < 1 || a->stride < 1 || a->dilation < 1 || a->stride % a->dilation ||
      a->pad_l < 0 || !a->x || !a->w || !a->y)
    return KL_ERR_ARG;
  if (a->batch == 0 || a->wout == 0) return KL_OK;
  const int nth = kl_threads_resolve(a->num_threads);
  const int64_t s = a->stride, p = a->pad_l, taps = ct_phase_taps(a->ksize, s, a->dilation, 0);
  int64_t* tab = malloc((size_t)(5 * s) * sizeof(int64_t));
  if (!tab) return KL_ERR_NOMEM;
  int64_t *a_off = tab, *m = tab + s, *t0 = tab + 2 * s, *kred = tab + 3 * s, *w_off = tab + 4 * s;
  const int64_t qmax = (a->wout - 1 + p) / s;
  for (int64_t r = 0, row0 = 0; r < s; r++) {
    const int64_t q0 = r < p ? cdiv(p - r, s) : 0;
    const int64_t q1 = a->wout - 1 + p - r >= 0 ? (a->wout - 1 + p - r) / s : -1;
    const int64_t tr = ct_phase_taps(a->ksize, s, a->dilation, r);
    m[r] = q1 >= q0 ? q1 - q0 + 1 : 0;
    a_off[r] = tr ? (q0 + taps - tr) * a->cin : 0;
    t0[r] = q0 * s + r - p;
    kred[r] = tr * a->cin;
    w_off[r] = row0 * KL_PGEMM_NR;
    row0 += kred[r];
  }
  const float* w = a->w;
  float* packed = NULL;
  const int64_t pstride = a->ksize * a->cin * KL_PGEMM_NR;
  if (!a->w_panels) {
    packed = malloc((size_t)(cdiv(a->cout, KL_PGEMM_NR) * pstride) * sizeof(float));
    if (!packed) {
      free(tab);
      return KL_ERR_NOMEM;
    }
    kl_f32_conv1d_transpose_pack(a->cin, a->cout, a->ksize, s, a->dilation, a->w, packed);
    w = packed;
  }
  gx_job gx = {a->x, a->batch, a->cin, a->win, 1, qmax + taps, 1, taps - 1, NULL};
  size_t cap = 0;
  kl_status st = gx_build(&gx, &cap, nth);
  if (gx.xt) {
    ph_job j;
    ph_init(&j, a, &gx, s, w, tab);
    if (st == KL_OK) st = ph_run(&j, nth);
    kl_scratch_give(gx.xt, cap);
  }
  free(packed);
  free(tab);
  return st;
}

/* ---- depthwise ConvTranspose1d --------------------------------------------- */
typedef struct dwt_job {
  const kl_conv1d_transpose_dw_args* a;
} dwt_job;

static void dwt_rows(const kl_conv1d_transpose_dw_args* a, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r++) { /* r = n * ch + c */
    const int64_t c = r % a->ch;
    const float* x = a->x + r * a->win;
    const float* w = a->w + c * a->ksize;
    float* y = a->y + r * a->wout;
    const float b0 = a->bias ? a->bias[c] : 0.0f;
    for (int64_t t = 0; t < a->wout; t++) y[t] = b0;
    for (int64_t k = 0; k < a->ksize; k++) {
      const float wk = w[k];
      const int64_t off = k * a->dilation - a->pad_l;
      for (int64_t i = 0; i < a->win; i++) {
        const int64_t t = i * a->stride + off;
        if (t >= 0 && t < a->wout) y[t] += x[i] * wk;
      }
    }
  }
}

static void dwt_task(void* ctx, int ith, int nth) {
  const kl_conv1d_transpose_dw_args* a = ((dwt_job*)ctx)->a;
  const int64_t rows = a->batch * a->ch, per = cdiv(rows, nth);
  const int64_t r0 = per * ith, r1 = r0 + per < rows ? r0 + per : rows;
  if (r0 < r1) dwt_rows(a, r0, r1);
}

kl_status kl_f32_conv1d_transpose_dw(const kl_conv1d_transpose_dw_args* a) {
  if (!a || a->batch < 0 || a->ch < 1 || a->win < 0 || a->wout < 0 || a->ksize < 1 ||
      a->stride < 1 || a->dilation < 1 || a->pad_l < 0 || !a->x || !a->w || !a->y)
    return KL_ERR_ARG;
  if (a->batch == 0 || a->wout == 0) return KL_OK;
  dwt_job j = {a};
  const double work = (double)a->batch * (double)a->ch * (double)a->win * (double)a->ksize;
  const int nth = kl_threads_for_work(kl_threads_resolve(a->num_threads), work, KL_DENSE_MIN_DW_MACS);
  return kl_pool_run(nth, dwt_task, &j);
}

/* ---- row softmax ------------------------------------------------------------ */
typedef struct softmax_job {
  int64_t rows, n;
  const float* x;
  float* y;
  kl_f32_vunary_fn fn;
} softmax_job;

static void softmax_task(void* ctx, int ith, int nth) {
  const softmax_job* j = ctx;
  const int64_t per = cdiv(j->rows, nth);
  const int64_t r0 = per * ith, r1 = r0 + per < j->rows ? r0 + per : j->rows;
  for (int64_t r = r0; r < r1; r++) j->fn((size_t)j->n, j->x + r * j->n, j->y + r * j->n);
}

kl_status kl_f32_softmax(int64_t rows, int64_t n, const float* x, float* y, int num_threads) {
  if (rows < 0 || n < 0) return KL_ERR_ARG;
  if (rows == 0 || n == 0) return KL_OK;
  if (!x || !y) return KL_ERR_ARG;
  softmax_job j = {rows, n, x, y, kl_select_softmax()};
  int nth = kl_threads_for_work(kl_threads_resolve(num_threads), (double)rows * (double)n,
                                KL_DENSE_MIN_SOFTMAX);
  if (nth > rows) nth = (int)rows;
  return kl_pool_run(nth, softmax_task, &j);
}

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
  const int64_t S = a->S, D = a->D, nks = cdiv(S, KL_PGEMM_NR), nvd = cdiv(D, KL_PGEMM_NR);
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
  kl_pgemm_panels(j->kern, m, S, D, q, a->sql, kp, NULL, 0, sc, lds, 0, cdiv(S, KL_PGEMM_NR),
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
  kl_pgemm_panels(j->kern, m, D, S, sc, lds, vp, NULL, 0, o, a->sol, 0, cdiv(D, KL_PGEMM_NR), 0);
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
  j.nblk = cdiv(a->L, KL_ATTN_ROWS);
  j.ntasks = a->batch * a->heads * j.nblk;
  j.softmax = kl_select_softmax();
  atomic_init(&j.next, 0);
  const double macs = 2.0 * (double)a->batch * (double)a->heads * (double)a->L * (double)a->S *
                      (double)a->D;
  int nth = kl_threads_for_work(kl_threads_resolve(a->num_threads), macs, KL_DENSE_MIN_MACS);
  if (nth > j.ntasks) nth = (int)j.ntasks;
  j.rows = a->L < KL_ATTN_ROWS ? a->L : KL_ATTN_ROWS;
  j.lds = a->S + KL_ATTN_PAD;
  j.kern = kl_select_f32_pgemm();
  j.kp_size = (size_t)(cdiv(a->S, KL_PGEMM_NR) * KL_PGEMM_NR * a->D);
  j.vp_size = (size_t)(cdiv(a->D, KL_PGEMM_NR) * KL_PGEMM_NR * a->S);
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
