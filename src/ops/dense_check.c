/* Argument checks of the dense operators (see dense.h): one function per operator,
 * over its config and DLTensors, run before the operator touches memory. */
#include <string.h>

#include "check.h"
#include "dense.h"

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The tensors' float data. */
static const float* cdata(const kl_view* v) { return (const float*)v->data; }
static float* wdata(const kl_view* v) { return (float*)v->data; }

/* A config length (stride, padding, dilation, kernel size) in lo..KL_CONV_MAX_LEN. */
static kl_status conv_len(const char* name, int64_t v, int64_t lo) {
  if (v < lo)
    return kl_fail("invalid config (stride, padding or dilation): %s must be >= %lld, got %lld", name,
                   (long long)lo, (long long)v);
  if (v > KL_CONV_MAX_LEN)
    return kl_fail("%s %lld too large (at most %d)", name, (long long)v, KL_CONV_MAX_LEN);
  return KL_OK;
}

/* bytes = n1 * n2 * n3 * n4 floats, or a message naming what it is the size of. */
static kl_status scratch_size(const char* what, int64_t n1, int64_t n2, int64_t n3, int64_t n4) {
  int64_t p;
  if (kl_mul(n1, n2, &p) || kl_mul(p, n3, &p) || kl_mul(p, n4, &p) || kl_mul(p, 4, &p))
    return kl_fail("%s: %lld x %lld x %lld x %lld floats overflow 64-bit sizes", what,
                   (long long)n1, (long long)n2, (long long)n3, (long long)n4);
  return KL_OK;
}

/* ---- matmul ------------------------------------------------------------------------ */
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
  const int64_t np = cdiv(N, KL_DENSE_PANEL); /* panels of a packed B */
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
  m->a = cdata(&A);
  m->b = cdata(&B);
  m->c = wdata(&C);
  if (biast) {
    m->bias = cdata(&bias);
    m->sbias = bias.strides[bias.ndim - 1];
  }
  m->act = (int)cfg->act;
  return KL_OK;
}

/* ---- convolutions ---------------------------------------------------------------- */
/* x, w, y (3-D, compact) and bias (any compact tensor), y's batch x's; outputs
 * disjoint from inputs. */
static kl_status conv_tensors(const DLTensor* xt, const DLTensor* wt, const DLTensor* bt,
                              const DLTensor* yt, kl_view* x, kl_view* w, kl_view* b, kl_view* y) {
  kl_status st;
  if ((st = kl_view_f32(xt, "x", 3, 3, x)) || (st = kl_view_f32(wt, "w", 3, 3, w)) ||
      (bt && (st = kl_view_f32(bt, "bias", 1, KL_VIEW_MAXD, b))) || (st = kl_view_f32(yt, "y", 3, 3, y)))
    return st;
  const kl_view* all[4] = {x, w, y, bt ? b : NULL};
  static const char* const names[4] = {"x", "w", "y", "bias"};
  for (int i = 0; i < 4; i++)
    if (all[i] && !kl_view_compact(all[i])) return kl_fail("%s must be compact", names[i]);
  if (x->shape[0] != y->shape[0])
    return kl_fail("x and y batch sizes differ (%lld and %lld)", (long long)x->shape[0],
                   (long long)y->shape[0]);
  if (x->shape[1] < 1) return kl_fail("x has no channels: its channel count must be >= 1");
  const DLTensor* outs[1] = {yt};
  const DLTensor* ins[3] = {xt, wt, bt};
  static const char* const out_names[1] = {"y"};
  static const char* const in_names[3] = {"x", "w", "bias"};
  return kl_check_disjoint(outs, out_names, 1, ins, in_names, 3);
}

kl_status kl_conv1d_check(const kl_conv1d_config* cfg, const DLTensor* xt, const DLTensor* wt,
                          const DLTensor* bt, const DLTensor* yt, kl_conv1d_args* c) {
  kl_status st;
  if (cfg->w_panels != 0 && cfg->w_panels != 1)
    return kl_fail("unknown w layout in the config (w_panels must be 0 or 1, got %lld)",
                   (long long)cfg->w_panels);
  memset(c, 0, sizeof(*c));
  if ((st = conv_len("stride", cfg->stride, 1)) || (st = conv_len("dilation", cfg->dilation, 1)) ||
      (st = conv_len("pad_l", cfg->pad_l, 0)) || (st = conv_len("pad_r", cfg->pad_r, 0)) ||
      (st = kl_check_threads(cfg->num_threads, &c->num_threads)))
    return st;
  const int panels = (int)cfg->w_panels;
  if (panels && cfg->stride != 1 && cfg->dilation != 1)
    return kl_fail("w packed in panels needs stride 1 or dilation 1 (got stride %lld, dilation %lld)",
                   (long long)cfg->stride, (long long)cfg->dilation);
  if (panels && cfg->dilation > KL_CONV_MAX_PHASES)
    return kl_fail("dilation %lld too large for w packed in panels (at most %d phases)",
                   (long long)cfg->dilation, KL_CONV_MAX_PHASES);
  kl_view x, w, bias, y;
  if ((st = conv_tensors(xt, wt, bt, yt, &x, &w, &bias, &y))) return st;
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
  if (panels && (w.shape[0] != cdiv(c->cout, KL_DENSE_PANEL) || c->ksize < 1 ||
                 w.shape[1] != c->ksize * c->cin || w.shape[2] != KL_DENSE_PANEL))
    return kl_fail("w packed in panels must be [%lld, ksize * %lld, %d] for %lld output channels, got "
                   "[%lld, %lld, %lld]",
                   (long long)cdiv(c->cout, KL_DENSE_PANEL), (long long)c->cin, KL_DENSE_PANEL,
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
  if (!panels && (st = scratch_size("x's im2col columns", c->cin, c->ksize, c->wout, 1))) return st;
  if (panels && c->stride > 1 && c->wout > 0 &&
      (st = scratch_size("x transposed", c->batch, (c->wout - 1) * c->stride + c->ksize, c->cin, 1)))
    return st;
  if (panels && c->dilation > 1 && c->wout > 0 &&
      (st = scratch_size("x transposed per phase", c->batch, c->dilation,
                         cdiv(c->wout + reach, c->dilation), c->cin)))
    return st;
  c->x = cdata(&x);
  c->w = cdata(&w);
  c->w_panels = panels;
  c->bias = bt ? cdata(&bias) : NULL;
  c->y = wdata(&y);
  return KL_OK;
}

kl_status kl_conv1d_transpose_check(const kl_conv1d_transpose_config* cfg, const DLTensor* xt,
                                    const DLTensor* wt, const DLTensor* bt, const DLTensor* yt,
                                    kl_conv1d_transpose_args* c) {
  kl_status st;
  if (cfg->w_panels != 0 && cfg->w_panels != 1)
    return kl_fail("unknown w layout in the config (w_panels must be 0 or 1, got %lld)",
                   (long long)cfg->w_panels);
  memset(c, 0, sizeof(*c));
  if ((st = conv_len("stride", cfg->stride, 1)) || (st = conv_len("dilation", cfg->dilation, 1)) ||
      (st = conv_len("pad_l", cfg->pad_l, 0)) ||
      (st = kl_check_threads(cfg->num_threads, &c->num_threads)))
    return st;
  if (cfg->ksize < 1 || cfg->ksize > KL_CONV_MAX_LEN)
    return kl_fail("invalid config: ksize must be in 1..%d, got %lld", KL_CONV_MAX_LEN,
                   (long long)cfg->ksize);
  if (cfg->stride % cfg->dilation)
    return kl_fail("invalid config: dilation not a divisor of stride (dilation %lld, stride %lld)",
                   (long long)cfg->dilation, (long long)cfg->stride);
  if (cfg->stride > KL_CONV_MAX_PHASES)
    return kl_fail("stride %lld too large for the phase table (at most %d output phases)",
                   (long long)cfg->stride, KL_CONV_MAX_PHASES);
  kl_view x, w, bias, y;
  if ((st = conv_tensors(xt, wt, bt, yt, &x, &w, &bias, &y))) return st;
  const int panels = (int)cfg->w_panels;
  c->batch = x.shape[0];
  c->cin = x.shape[1];
  c->win = x.shape[2];
  c->cout = y.shape[1];
  c->wout = y.shape[2];
  c->stride = cfg->stride;
  c->pad_l = cfg->pad_l;
  c->dilation = cfg->dilation;
  c->ksize = cfg->ksize;
  if (c->cout < 1) return kl_fail("y has no channels: the output channel count must be >= 1");
  const int64_t np = cdiv(c->cout, KL_DENSE_PANEL);
  int64_t kred;
  if (kl_mul(c->ksize, c->cin, &kred))
    return kl_fail("ksize %lld times cin %lld overflows", (long long)c->ksize, (long long)c->cin);
  if (panels && (w.shape[0] != np || w.shape[1] != kred || w.shape[2] != KL_DENSE_PANEL))
    return kl_fail("w packed by phase must be [%lld, %lld, %d] for %lld output channels, ksize %lld and "
                   "%lld input channels, got [%lld, %lld, %lld]",
                   (long long)np, (long long)kred, KL_DENSE_PANEL, (long long)c->cout, (long long)c->ksize,
                   (long long)c->cin, (long long)w.shape[0], (long long)w.shape[1], (long long)w.shape[2]);
  if (!panels && (w.shape[0] != c->cin || w.shape[1] != c->cout || w.shape[2] != c->ksize))
    return kl_fail("shapes do not match: x [%lld, %lld, %lld], w [%lld, %lld, %lld] (IOW), y [.., %lld, "
                   "%lld], ksize %lld",
                   (long long)c->batch, (long long)c->cin, (long long)c->win, (long long)w.shape[0],
                   (long long)w.shape[1], (long long)w.shape[2], (long long)c->cout, (long long)c->wout,
                   (long long)c->ksize);
  if (bt && bias.numel != c->cout) return kl_fail("bias must have one value per output channel (%lld)",
                                                  (long long)c->cout);
  /* input step i, tap k lands at i * stride + k * dilation - pad_l; x transposed has
   * (wout - 1 + pad_l) / stride + taps rows; w raw is packed into ceil(cout / 32) panels */
  int64_t last, reach;
  if (kl_mul(c->win > 0 ? c->win - 1 : 0, c->stride, &last) ||
      kl_mul(c->ksize - 1, c->dilation, &reach) || kl_add(last, reach, &last))
    return kl_fail("x's %lld steps at stride %lld with ksize %lld and dilation %lld overflow 64-bit "
                   "positions", (long long)c->win, (long long)c->stride, (long long)c->ksize,
                   (long long)c->dilation);
  const int64_t taps = cdiv(c->ksize, c->stride / c->dilation);
  if (c->wout > 0 &&
      (st = scratch_size("x transposed", c->batch, (c->wout - 1 + c->pad_l) / c->stride + taps,
                         c->cin, 1)))
    return st;
  if (!panels && (st = scratch_size("w packed by phase", np, KL_DENSE_PANEL, kred, 1))) return st;
  if (kred > INT32_MAX || c->cout > INT32_MAX || c->wout > INT32_MAX)
    return kl_fail("cin %lld x ksize %lld, cout %lld and wout %lld must each be at most %d",
                   (long long)c->cin, (long long)c->ksize, (long long)c->cout, (long long)c->wout, INT32_MAX);
  c->x = cdata(&x);
  c->w = cdata(&w);
  c->w_panels = panels;
  c->bias = bt ? cdata(&bias) : NULL;
  c->y = wdata(&y);
  return KL_OK;
}

kl_status kl_conv1d_transpose_dw_check(const kl_conv1d_transpose_dw_config* cfg, const DLTensor* xt,
                                       const DLTensor* wt, const DLTensor* bt, const DLTensor* yt,
                                       kl_conv1d_transpose_dw_args* c) {
  kl_status st;
  memset(c, 0, sizeof(*c));
  if ((st = conv_len("stride", cfg->stride, 1)) || (st = conv_len("dilation", cfg->dilation, 1)) ||
      (st = conv_len("pad_l", cfg->pad_l, 0)) ||
      (st = kl_check_threads(cfg->num_threads, &c->num_threads)))
    return st;
  kl_view x, w, bias, y;
  if ((st = conv_tensors(xt, wt, bt, yt, &x, &w, &bias, &y))) return st;
  c->batch = x.shape[0];
  c->ch = x.shape[1];
  c->win = x.shape[2];
  c->ksize = w.shape[2];
  c->wout = y.shape[2];
  c->stride = cfg->stride;
  c->pad_l = cfg->pad_l;
  c->dilation = cfg->dilation;
  if (w.shape[0] != c->ch || w.shape[1] != 1 || y.shape[1] != c->ch || (bt && bias.numel != c->ch))
    return kl_fail("shapes do not match: x [N, C, W], w [C, 1, K], y [N, C, Wout]%s (x [%lld, %lld, "
                   "%lld], w [%lld, %lld, %lld], y [.., %lld, %lld])",
                   bt ? ", bias C values" : "", (long long)c->batch, (long long)c->ch, (long long)c->win,
                   (long long)w.shape[0], (long long)w.shape[1], (long long)w.shape[2],
                   (long long)y.shape[1], (long long)c->wout);
  if (c->ksize < 1) return kl_fail("w has kernel size 0: ksize must be >= 1");
  int64_t last, reach;
  if (kl_mul(c->win > 0 ? c->win - 1 : 0, c->stride, &last) ||
      kl_mul(c->ksize - 1, c->dilation, &reach) || kl_add(last, reach, &last))
    return kl_fail("x's %lld steps at stride %lld with ksize %lld and dilation %lld overflow 64-bit "
                   "positions", (long long)c->win, (long long)c->stride, (long long)c->ksize,
                   (long long)c->dilation);
  c->x = cdata(&x);
  c->w = cdata(&w);
  c->bias = bt ? cdata(&bias) : NULL;
  c->y = wdata(&y);
  return KL_OK;
}

/* ---- softmax --------------------------------------------------------------------- */
kl_status kl_softmax_check(int64_t num_threads, const DLTensor* xt, const DLTensor* yt,
                           kl_softmax_args* out) {
  kl_status st;
  kl_view x, y;
  memset(out, 0, sizeof(*out));
  if ((st = kl_check_threads(num_threads, &out->num_threads)) ||
      (st = kl_view_f32(xt, "x", 1, KL_VIEW_MAXD, &x)) ||
      (st = kl_view_f32(yt, "y", 1, KL_VIEW_MAXD, &y)))
    return st;
  if (x.ndim != y.ndim || x.numel != y.numel || x.shape[x.ndim - 1] != y.shape[y.ndim - 1])
    return kl_fail("x and y must have the same shape");
  if (!kl_view_compact(&x)) return kl_fail("x must be compact");
  if (!kl_view_compact(&y)) return kl_fail("y must be compact");
  const DLTensor* outs[1] = {yt};
  const DLTensor* ins[1] = {xt};
  static const char* const out_names[1] = {"y"};
  static const char* const in_names[1] = {"x"};
  if ((st = kl_check_disjoint(outs, out_names, 1, ins, in_names, 1))) return st;
  out->n = x.shape[x.ndim - 1];
  out->rows = out->n ? x.numel / out->n : 0;
  out->x = cdata(&x);
  out->y = wdata(&y);
  return KL_OK;
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

kl_status kl_attention_check(const kl_attention_config* cfg, const DLTensor* qt, const DLTensor* kt,
                             const DLTensor* vt, const DLTensor* mt, const DLTensor* ot,
                             kl_attention_args* a) {
  kl_status st;
  const int64_t layouts[4] = {cfg->q_layout, cfg->k_layout, cfg->v_layout, cfg->o_layout};
  for (int i = 0; i < 4; i++)
    if (layouts[i] != 0 && layouts[i] != 1)
      return kl_fail("layouts must be 0 or 1, got %lld for %s", (long long)layouts[i],
                     (const char* const[]){"q", "k", "v", "o"}[i]);
  if (cfg->scale_bits < INT32_MIN || cfg->scale_bits > (int64_t)UINT32_MAX)
    return kl_fail("scale_bits must be a float32's 32 bits, got %lld", (long long)cfg->scale_bits);
  memset(a, 0, sizeof(*a));
  if ((st = kl_check_threads(cfg->num_threads, &a->num_threads))) return st;
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
  if (mt) {
    const int nd = mask.ndim;
    const int64_t full[4] = {a->batch, a->heads, a->L, a->S};
    if (mask.shape[nd - 2] != a->L || mask.shape[nd - 1] != a->S ||
        (a->S > 1 && mask.strides[nd - 1] != 1))
      return kl_fail("mask must be [.., L %lld, S %lld] with unit stride along S", (long long)a->L,
                     (long long)a->S);
    int64_t ms[3] = {0, 0, a->L > 1 ? mask.strides[nd - 2] : 0};
    for (int i = 0; i < nd - 2; i++) {
      const int d = 4 - nd + i; /* the [B, H, L, S] axis of mask's axis i */
      if (mask.shape[i] == 1) continue;
      if (mask.shape[i] != full[d]) return kl_fail("mask's leading dimensions must be 1 or [B, H]'s");
      ms[d] = mask.strides[i];
    }
    a->mask = cdata(&mask);
    a->smb = ms[0];
    a->smh = ms[1];
    a->sml = ms[2];
  }
  /* the packed copies of every head's k and v (k, v may be broadcast views) */
  if (a->S > 0 && a->D > 0) {
    int64_t per, kp, vp;
    if (kl_mul(cdiv(a->S, KL_DENSE_PANEL) * KL_DENSE_PANEL, a->D, &kp) ||
        kl_mul(cdiv(a->D, KL_DENSE_PANEL) * KL_DENSE_PANEL, a->S, &vp) || kl_add(kp, vp, &per) ||
        (st = scratch_size("k and v packed per head", a->batch, a->heads, per, 1)))
      return st ? st : kl_fail("k and v: S %lld x D %lld overflows", (long long)a->S, (long long)a->D);
  }
  const DLTensor* outs[1] = {ot};
  const DLTensor* ins[4] = {qt, kt, vt, mt};
  static const char* const out_names[1] = {"o"};
  static const char* const in_names[4] = {"q", "k", "v", "mask"};
  if ((st = kl_check_disjoint(outs, out_names, 1, ins, in_names, 4))) return st;
  const uint32_t bits = (uint32_t)cfg->scale_bits;
  memcpy(&a->scale, &bits, sizeof(a->scale));
  a->q = cdata(&q);
  a->sqb = sq[0];
  a->sqh = sq[1];
  a->sql = sq[2];
  a->k = cdata(&k);
  a->skb = sk[0];
  a->skh = sk[1];
  a->sks = sk[2];
  a->v = cdata(&v);
  a->svb = sv[0];
  a->svh = sv[1];
  a->svs = sv[2];
  a->o = wdata(&o);
  a->sob = so[0];
  a->soh = so[1];
  a->sol = so[2];
  return KL_OK;
}
