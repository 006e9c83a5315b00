/* Dense float32 operators (see dense.h): OpenBLAS sgemm on tiles fixed by the
 * shapes, spread over the engine's pool with BLAS single-threaded inside. */
#include "dense.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "internal.h"

/* Tile of C computed by one task. Fixed sizes: results never depend on the
 * thread count. 128 x 256 keeps a tile's panels in L2 for Kokoro's K <= 2560. */
#define KL_DENSE_MT 128
#define KL_DENSE_NT 256
/* Below this many multiply-adds a call runs on the calling thread alone. */
#define KL_DENSE_SERIAL_MACS (1 << 18)

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int resolve_threads(int n) { return n >= 1 ? n : kl_get_num_threads(); }

typedef struct mm_job {
  const kl_matmul_args* a;
  int64_t mt, nt, ntasks;
  atomic_llong next;
} mm_job;

static void mm_tile(const kl_matmul_args* a, int64_t t, int64_t mt, int64_t nt) {
  const int64_t per = mt * nt, b = t / per, r = t % per;
  const int64_t m0 = (r / nt) * KL_DENSE_MT, n0 = (r % nt) * KL_DENSE_NT;
  const int64_t m = a->M - m0 < KL_DENSE_MT ? a->M - m0 : KL_DENSE_MT;
  const int64_t n = a->N - n0 < KL_DENSE_NT ? a->N - n0 : KL_DENSE_NT;
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
    return;
  }
  kl_cblas_sgemm(CblasRowMajor, CblasNoTrans, a->trans_b ? CblasTrans : CblasNoTrans, (int)m,
                 (int)n, (int)a->K, 1.0f, A, (int)a->lda, B, (int)a->ldb, beta, C, (int)a->ldc);
}

static void mm_task(void* ctx, int ith, int nth) {
  (void)ith;
  (void)nth;
  mm_job* j = ctx;
  for (;;) {
    const int64_t t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
    if (t >= j->ntasks) return;
    mm_tile(j->a, t, j->mt, j->nt);
  }
}

/* Runs fn on the pool with nth threads, BLAS single-threaded meanwhile. */
static kl_status run_pool(int nth, kl_task_fn fn, void* ctx) {
  const int blas_prev = kl_blas_get_num_threads();
  if (blas_prev != 1) kl_blas_set_num_threads(1);
  const kl_status s = kl_pool_run(nth, fn, ctx);
  if (blas_prev != 1) kl_blas_set_num_threads(blas_prev);
  return s;
}

kl_status kl_f32_matmul(const kl_matmul_args* a) {
  if (!a || a->batch < 0 || a->M < 0 || a->N < 0 || a->K < 0 || a->M > INT32_MAX ||
      a->N > INT32_MAX || a->K > INT32_MAX)
    return KL_ERR_ARG;
  if (a->batch == 0 || a->M == 0 || a->N == 0) return KL_OK;
  if (!a->c || (a->K > 0 && (!a->a || !a->b))) return KL_ERR_ARG; /* empty operands may be NULL */
  mm_job j;
  j.a = a;
  j.mt = cdiv(a->M, KL_DENSE_MT);
  j.nt = cdiv(a->N, KL_DENSE_NT);
  j.ntasks = a->batch * j.mt * j.nt;
  atomic_init(&j.next, 0);
  const double macs = (double)a->batch * (double)a->M * (double)a->N * (double)(a->K + 1);
  int nth = resolve_threads(a->num_threads);
  if (macs < KL_DENSE_SERIAL_MACS) nth = 1;
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

kl_status kl_f32_conv1d(const kl_conv1d_args* a) {
  if (!a || a->batch < 0 || a->cin < 1 || a->cout < 1 || a->win < 0 || a->wout < 0 ||
      a->ksize < 1 || a->stride < 1 || a->dilation < 1 || a->pad_l < 0 || !a->x || !a->w || !a->y)
    return KL_ERR_ARG;
  if (a->batch == 0 || a->wout == 0) return KL_OK;
  const int nth = resolve_threads(a->num_threads);
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
      s = kl_pool_run(bytes < (1 << 18) ? 1 : nth, im2col_task, &ij);
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
  const int nth = work < (1 << 16) ? 1 : resolve_threads(a->num_threads);
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
  int nth = (double)rows * (double)n < (1 << 15) ? 1 : resolve_threads(num_threads);
  if (nth > rows) nth = (int)rows;
  return kl_pool_run(nth, softmax_task, &j);
}
