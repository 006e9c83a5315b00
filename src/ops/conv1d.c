/* 1-D convolution, NCW, groups 1 (see dense.h): im2col per batch element and one
 * tiled GEMM, or on weights packed in panels the f32-pgemm kernels without im2col. */
#include <stdlib.h>
#include <string.h>

#include "dense_internal.h"
#include "scratch.h"
#include "threads.h"


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
  const int64_t per = kl_cdiv(rows, nth);
  const int64_t r0 = per * ith, r1 = r0 + per < rows ? r0 + per : rows;
  if (r0 < r1) im2col_rows(j->a, j->x, j->cols, r0, r1);
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
  const int64_t total = a->batch * j->rows, per = kl_cdiv(total, nth);
  const int64_t r0 = per * ith, r1 = r0 + per < total ? r0 + per : total;
  for (int64_t r = r0; r < r1;) { /* a run of steps of one batch element */
    const int64_t b = r / j->rows, t0 = r % j->rows;
    const int64_t t1 = r1 - b * j->rows < j->rows ? r1 - b * j->rows : j->rows;
    float* xt = j->xt + r * a->cin;
    /* steps t hold x[.., t - pad_l] for t - pad_l in [0, win), zeros elsewhere */
    int64_t lo = a->pad_l > t0 ? a->pad_l : t0, hi = a->pad_l + a->win < t1 ? a->pad_l + a->win : t1;
    if (hi < lo) lo = hi = t1;
    memset(xt, 0, (size_t)((lo - t0) * a->cin) * sizeof(float));
    kl_dense_transpose(a->x + b * a->cin * a->win + (lo - a->pad_l), a->win, xt + (lo - t0) * a->cin, a->cin,
              a->cin, hi - lo);
    memset(xt + (hi - t0) * a->cin, 0, (size_t)((t1 - hi) * a->cin) * sizeof(float));
    r += t1 - t0;
  }
}

/* conv1d on panels with dilation d > 1 (stride 1): output t = g + d i (phase
 * g < d) is rows i .. i + ksize - 1 of xt_g, every d-th step of x from g - pad_l. */
static kl_status conv1d_panels_dilated(const kl_conv1d_args* a, int nth) {
  const int64_t d = a->dilation, rows = kl_cdiv(a->wout + (a->ksize - 1) * d, d);
  int64_t* tab = malloc((size_t)(5 * d) * sizeof(int64_t));
  if (!tab) return KL_ERR_NOMEM;
  int64_t *a_off = tab, *m = tab + d, *t0 = tab + 2 * d, *kred = tab + 3 * d, *w_off = tab + 4 * d;
  for (int64_t g = 0; g < d; g++) {
    a_off[g] = w_off[g] = 0;
    m[g] = a->wout > g ? kl_cdiv(a->wout - g, d) : 0;
    t0[g] = g;
    kred[g] = a->ksize * a->cin;
  }
  kl_gx_job gx = {a->x, a->batch, a->cin, a->win, d, rows, d, a->pad_l, NULL};
  kl_status st = kl_ph_convolve(a, &gx, d, a->w, tab, nth);
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
  j.nblk = kl_cdiv(a->wout, KL_PGEMM_NR);
  j.runs = kl_cdiv(j.nblk, KL_DC_BLOCKS);
  j.ntasks = a->batch * j.runs;
  j.kern = kl_dense_kernels_active().pgemm;
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

/* ---- the entry over DLTensors: the check, then the operator --------------------------- */
kl_status kl_conv1d_forward(const kl_conv1d_config* cfg, const DLTensor* x, const DLTensor* w,
                            const DLTensor* bias, const DLTensor* y) {
  kl_conv1d_args a;
  kl_status st = kl_conv_cpu(x);
  if (!st) st = kl_conv1d_check(cfg, x, w, bias, y, &a);
  return st ? st : kl_f32_conv1d(&a);
}

kl_status kl_conv1d_check(const kl_conv1d_config* cfg, const DLTensor* xt, const DLTensor* wt,
                          const DLTensor* bt, const DLTensor* yt, kl_conv1d_args* c) {
  kl_status st;
  memset(c, 0, sizeof(*c));
  if ((st = kl_conv_config(&cfg->w_panels, cfg->stride, cfg->dilation, cfg->pad_l, &cfg->pad_r,
                           cfg->num_threads, &c->num_threads)))
    return st;
  const int panels = (int)cfg->w_panels;
  if (panels && cfg->stride != 1 && cfg->dilation != 1)
    return kl_fail("w packed in panels needs stride 1 or dilation 1 (got stride %lld, dilation %lld)",
                   (long long)cfg->stride, (long long)cfg->dilation);
  if (panels && cfg->dilation > KL_CONV_MAX_PHASES)
    return kl_fail("dilation %lld too large for w packed in panels (at most %d phases)",
                   (long long)cfg->dilation, KL_CONV_MAX_PHASES);
  kl_view x, w, bias, y;
  if ((st = kl_conv_tensors(xt, wt, bt, yt, &x, &w, &bias, &y))) return st;
  c->batch = x.shape[0];
  c->cin = x.shape[1];
  c->win = x.shape[2];
  c->cout = panels ? y.shape[1] : w.shape[0];
  c->ksize = panels ? w.shape[1] / c->cin : w.shape[2];
  c->wout = y.shape[2];
  c->stride = cfg->stride;
  c->pad_l = cfg->pad_l;
  c->dilation = cfg->dilation;
  if (c->cout < 1)
    return kl_fail("%s has no output channels: their count must be >= 1", panels ? "y" : "w");
  if (panels && (w.shape[0] != kl_cdiv(c->cout, KL_DENSE_PANEL) || c->ksize < 1 ||
                 w.shape[1] != c->ksize * c->cin || w.shape[2] != KL_DENSE_PANEL))
    return kl_fail("w packed in panels must be [%lld, ksize * %lld, %d] for %lld output channels, got "
                   "[%lld, %lld, %lld]",
                   (long long)kl_cdiv(c->cout, KL_DENSE_PANEL), (long long)c->cin, KL_DENSE_PANEL,
                   (long long)c->cout, (long long)w.shape[0], (long long)w.shape[1],
                   (long long)w.shape[2]);
  if (c->ksize < 1) return kl_fail("w has kernel size 0: ksize must be >= 1");
  int64_t reach, span;
  if (kl_mul(c->dilation, c->ksize - 1, &reach))
    return kl_fail("dilation %lld too large for ksize %lld: dilation * (ksize - 1) overflows",
                   (long long)c->dilation, (long long)c->ksize);
  if (kl_add(c->win, c->pad_l, &span) || kl_add(span, cfg->pad_r, &span))
    return kl_fail("x's %lld steps with pad_l %lld and pad_r %lld overflow", (long long)c->win,
                   (long long)c->pad_l, (long long)cfg->pad_r);
  span -= reach + 1;
  const int64_t wout = span < 0 ? 0 : span / c->stride + 1;
  if ((!panels && (w.shape[1] != c->cin || y.shape[1] != c->cout)) || c->wout != wout ||
      (bt && bias.numel != c->cout))
    return kl_fail("shapes do not match: x [%lld, %lld, %lld], w [%lld, %lld, %lld], y [.., %lld, %lld] "
                   "(expected %lld output steps)",
                   (long long)c->batch, (long long)c->cin, (long long)c->win, (long long)w.shape[0],
                   (long long)w.shape[1], (long long)w.shape[2], (long long)y.shape[1], (long long)c->wout,
                   (long long)wout);
  int64_t kred;
  if (kl_mul(c->cin, c->ksize, &kred) || kred > INT32_MAX || c->cout > INT32_MAX || c->wout > INT32_MAX)
    return kl_fail("cin %lld x ksize %lld, cout %lld and wout %lld must each be at most %d",
                   (long long)c->cin, (long long)c->ksize, (long long)c->cout, (long long)c->wout, INT32_MAX);
  /* the im2col columns; x transposed (strided), or per phase (dilated) */
  if (!panels && (st = kl_scratch_size("x's im2col columns", c->cin, c->ksize, c->wout, 1))) return st;
  if (panels && c->stride > 1 && c->wout > 0 &&
      (st = kl_scratch_size("x transposed", c->batch, (c->wout - 1) * c->stride + c->ksize, c->cin, 1)))
    return st;
  if (panels && c->dilation > 1 && c->wout > 0 &&
      (st = kl_scratch_size("x transposed per phase", c->batch, c->dilation,
                         kl_cdiv(c->wout + reach, c->dilation), c->cin)))
    return st;
  c->w_panels = panels;
  kl_conv_data(&x, &w, bt ? &bias : NULL, &y, &c->x, &c->w, &c->bias, &c->y);
  return KL_OK;
}
