/* Batched matrix products (see dense.h): OpenBLAS sgemm on tiles fixed by the
 * shapes, spread over the engine's pool with BLAS single-threaded inside, or the
 * f32-pgemm kernels on a B packed in panels. */
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "dense_internal.h"
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
    const int64_t rows = kl_cdiv(a->M, nm + 1), cols = kl_cdiv(a->N, nn);
    if (rows >= KL_DENSE_MT_MIN && (double)rows * (double)cols * (double)a->K >= KL_DENSE_TILE_MIN_MACS)
      nm++;
    else if (kl_cdiv(a->N, nn + 1) >= KL_DENSE_NT_MIN &&
             (double)kl_cdiv(a->M, nm) * (double)kl_cdiv(a->N, nn + 1) * (double)a->K >=
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
      kl_dense_transpose(tile, KL_PGEMM_NR, Ct + n0 * a->ldc, a->ldc, m, n);
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
  j.kern = kl_dense_kernels_active().pgemm;
  j.gelu = a->act == KL_ACT_GELU_TANH ? kl_dense_kernels_active().gelu : NULL;
  j.np = kl_cdiv(a->N, KL_PGEMM_NR);
  j.rblocks = kl_cdiv(a->M, KL_PGEMM_MC);
  j.mb = kl_cdiv(a->M, j.rblocks);
  const int64_t want = nth > 1 ? 2 * (int64_t)nth : 1, have = a->batch * j.rblocks;
  const int64_t base = have >= want ? 1 : kl_cdiv(want, have);
  j.pchunk = kl_cdiv(j.np, base < j.np ? base : j.np);
  if (nth > 1 && nth <= KL_PK_PLAN_THREADS && have <= 16 * (int64_t)nth) {
    int64_t best = pk_makespan(a->batch, a->M, j.mb, j.np, j.pchunk, nth);
    for (int64_t pc = j.pchunk - 1; pc >= 1 && kl_cdiv(j.np, pc) <= 4 * base; pc--) {
      const int64_t span = pk_makespan(a->batch, a->M, j.mb, j.np, pc, nth);
      if (span < best) best = span, j.pchunk = pc;
    }
  }
  j.pblocks = kl_cdiv(j.np, j.pchunk);
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
  const double n = a->b_panels ? (double)(kl_cdiv(a->N, KL_PGEMM_NR) * KL_PGEMM_NR) : (double)a->N;
  const double macs = (double)a->batch * (double)a->M * n * (double)(a->K + 1);
  int nth = kl_threads_for_work(kl_threads_resolve(a->num_threads), macs, KL_DENSE_MIN_MACS);
  if (a->b_panels) return pgemm(a, nth);
  mm_job j;
  j.a = a;
  j.gelu = a->act == KL_ACT_GELU_TANH ? kl_dense_kernels_active().gelu : NULL;
  mm_tiles(&j, macs);
  atomic_init(&j.next, 0);
  if (nth > j.ntasks) nth = (int)j.ntasks;
  return run_pool(nth, mm_task, &j);
}

/* ---- the entry over DLTensors: the check, then the operator --------------------------- */
kl_status kl_matmul_forward(const kl_matmul_config* cfg, const DLTensor* A, const DLTensor* B,
                            const DLTensor* bias, const DLTensor* C) {
  kl_matmul_args m;
  const kl_status st = kl_matmul_check(cfg, A, B, bias, C, &m);
  return st ? st : kl_f32_matmul(&m);
}

/* Batch dims [0, nb) of v, right-aligned against C's batch shape cb[0, ncb): sets
 * *stride to the element stride of the folded batch (0: broadcast). -1 when v's batch
 * is neither C's nor all ones, or does not fold. */
static int fold_batch(const kl_view* v, int nb, const int64_t* cb, int ncb, int64_t* stride) {
  int64_t n = 1;
  for (int i = 0; i < nb; i++) n *= v->shape[i]; /* no overflow: kl_view_of bounded numel */
  if (n <= 1) {
    *stride = 0;
    return 0;
  }
  if (nb > ncb) return -1;
  for (int i = 0; i < ncb; i++) {
    const int j = i - (ncb - nb);
    const int64_t d = j >= 0 ? v->shape[j] : 1;
    if (d != cb[i]) return -1;
  }
  /* the innermost batch dim with size > 1 gives the stride; each outer one continues it */
  int64_t s = 0, expect = 0;
  int have = 0;
  for (int i = nb - 1; i >= 0; i--) {
    if (v->shape[i] == 1) continue;
    if (!have) {
      have = 1;
      s = v->strides[i];
      if (kl_mul(s, v->shape[i], &expect)) return -1;
    } else {
      if (v->strides[i] != expect || kl_mul(expect, v->shape[i], &expect)) return -1;
    }
  }
  *stride = s;
  return 0;
}

/* Row stride of the matrix made of the last two dims (rows, cols): -1 unless the
 * column stride is 1 (or cols <= 1); -2 when rows overlap (stride < cols) and that is
 * not allowed (only an A read by the panel kernels may: a convolution's windows). */
static int64_t row_stride(const kl_view* v, int overlap_ok) {
  const int64_t rows = v->shape[v->ndim - 2], cols = v->shape[v->ndim - 1];
  if (cols > 1 && v->strides[v->ndim - 1] != 1) return -1;
  const int64_t ld = v->strides[v->ndim - 2];
  if (rows <= 1) return cols > 0 ? cols : 1; /* any value >= cols is valid for BLAS */
  if (ld < cols) return overlap_ok && ld >= 1 ? ld : -2;
  return ld;
}

kl_status kl_matmul_check(const kl_matmul_config* cfg, const DLTensor* At, const DLTensor* Bt,
                          const DLTensor* biast, const DLTensor* Ct, kl_matmul_args* m) {
  kl_status st;
  if (cfg->act != KL_ACT_NONE && cfg->act != KL_ACT_GELU_TANH)
    return kl_fail("unknown activation %lld in the config (0: none, 1: GELU tanh)", (long long)cfg->act);
  if (cfg->b_panels != 0 && cfg->b_panels != 1)
    return kl_fail("unknown B layout in the config (b_panels must be 0 or 1, got %lld)",
                   (long long)cfg->b_panels);
  memset(m, 0, sizeof(*m));
  if ((st = kl_check_flag("trans_b", cfg->trans_b)) ||
      (st = kl_check_threads(cfg->num_threads, &m->num_threads)))
    return st;
  const int panels = (int)cfg->b_panels, trans_b = !panels && cfg->trans_b;
  kl_view A, B, C, bias;
  if ((st = kl_view_f32(At, "A", 2, KL_VIEW_MAXD, &A)) ||
      (st = kl_view_f32(Bt, "B", 2, KL_VIEW_MAXD, &B)) ||
      (biast && (st = kl_view_f32(biast, "bias", 1, KL_VIEW_MAXD, &bias))) ||
      (st = kl_view_f32(Ct, "C", 2, KL_VIEW_MAXD, &C)))
    return st;
  const int64_t M = A.shape[A.ndim - 2], K = A.shape[A.ndim - 1];
  const int64_t N = panels ? C.shape[C.ndim - 1] : trans_b ? B.shape[B.ndim - 2] : B.shape[B.ndim - 1];
  const int64_t KB = panels ? K : trans_b ? B.shape[B.ndim - 1] : B.shape[B.ndim - 2];
  const int64_t np = kl_cdiv(N, KL_DENSE_PANEL); /* panels of a packed B */
  if (panels && (B.ndim != 3 || B.shape[0] != np || B.shape[1] != K ||
                 B.shape[2] != KL_DENSE_PANEL || !kl_view_compact(&B)))
    return kl_fail("B packed in panels must be a compact [%lld, %lld, %d] tensor for K = %lld, N = %lld",
                   (long long)np, (long long)K, KL_DENSE_PANEL, (long long)K, (long long)N);
  if (KB != K || C.shape[C.ndim - 2] != M || C.shape[C.ndim - 1] != N)
    return kl_fail("shapes do not match: A [..., %lld, %lld], B%s [..., %lld, %lld], C [..., %lld, %lld]",
                   (long long)M, (long long)K, trans_b ? "^T" : "", (long long)KB, (long long)N,
                   (long long)C.shape[C.ndim - 2], (long long)C.shape[C.ndim - 1]);
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
    return kl_fail("M %lld, N %lld and K %lld must each be at most %d", (long long)M, (long long)N,
                   (long long)K, INT32_MAX);
  if (biast && (bias.shape[bias.ndim - 1] != N || bias.numel != N))
    return kl_fail("bias must have %lld values along its last dimension", (long long)N);
  const int ncb = C.ndim - 2;
  m->batch = 1;
  for (int i = 0; i < ncb; i++) m->batch *= C.shape[i]; /* bounded: C's numel */
  if (fold_batch(&C, ncb, C.shape, ncb, &m->sc) || fold_batch(&A, A.ndim - 2, C.shape, ncb, &m->sa) ||
      (!panels && fold_batch(&B, B.ndim - 2, C.shape, ncb, &m->sb)))
    return kl_fail("batch dimensions must be C's or all ones, and fold into one stride");
  m->lda = row_stride(&A, panels);
  m->ldb = panels ? KL_DENSE_PANEL : row_stride(&B, 0);
  m->ldc = row_stride(&C, 0);
  if (m->lda == -1 || m->ldb == -1 || m->ldc == -1)
    return kl_fail("the last dimension of A, B and C must have stride 1");
  if (m->lda < 0 || m->ldb < 0 || m->ldc < 0)
    return kl_fail("rows of a matrix overlap (row stride < row length): only A, and only with B "
                   "packed in panels, may");
  if (!panels && (m->lda > INT32_MAX || m->ldb > INT32_MAX || m->ldc > INT32_MAX))
    return kl_fail("row strides of A (%lld), B (%lld) and C (%lld) must be at most %d", (long long)m->lda,
                   (long long)m->ldb, (long long)m->ldc, INT32_MAX);
  if ((st = kl_check_distinct(&C, "C"))) return st;
  const DLTensor* outs[1] = {Ct};
  const DLTensor* ins[3] = {At, Bt, biast};
  static const char* const out_names[1] = {"C"};
  static const char* const in_names[3] = {"A", "B", "bias"};
  if ((st = kl_check_disjoint(outs, out_names, 1, ins, in_names, 3))) return st;
  m->M = M;
  m->N = N;
  m->K = K;
  m->trans_b = trans_b;
  m->b_panels = panels;
  m->a = kl_cdata(&A);
  m->b = kl_cdata(&B);
  m->c = kl_wdata(&C);
  if (biast) {
    m->bias = kl_cdata(&bias);
    m->sbias = bias.strides[bias.ndim - 1];
  }
  m->act = (int)cfg->act;
  return KL_OK;
}
