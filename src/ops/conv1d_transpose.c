/* Transposed 1-D convolution, NCW, groups 1 (see dense.h): one phase of panel GEMMs
 * per output step modulo the stride (phases.c). */
#include <stdlib.h>
#include <string.h>

#include "dense_internal.h"
#include "threads.h"

/* ---- ConvTranspose1d, groups 1 -------------------------------------------------
 * With dilation d dividing stride s, output phase r (t + pad_l = q s + r) takes
 * the taps k = r / d + m s / d, m < taps_r (none when d does not divide r):
 * y[o, t] = sum over m, c of x[c, q - m] w[c, o, k], a plain correlation, i.e.
 * rows q + taps - taps_r .. of xt (x transposed after taps - 1 zero steps,
 * taps = the most of any phase) times the phase's rows of the panels. Every
 * term is a tap of the kernel: no zero weights meet an inf or NaN. */
static int64_t ct_phase_taps(int64_t ksize, int64_t stride, int64_t dilation, int64_t r) {
  const int64_t s1 = stride / dilation;
  return r % dilation || r / dilation >= ksize ? 0 : kl_cdiv(ksize - r / dilation, s1);
}

kl_status kl_f32_conv1d_transpose_pack(int64_t cin, int64_t cout, int64_t ksize, int64_t stride,
                                       int64_t dilation, const float* w, float* out) {
  if (cin < 1 || cout < 1 || ksize < 1 || stride < 1 || dilation < 1 || stride % dilation ||
      !w || !out)
    return KL_ERR_ARG;
  const int64_t np = kl_cdiv(cout, KL_PGEMM_NR), kred = ksize * cin, s1 = stride / dilation;
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
    const int64_t q0 = r < p ? kl_cdiv(p - r, s) : 0;
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
    packed = malloc((size_t)(kl_cdiv(a->cout, KL_PGEMM_NR) * pstride) * sizeof(float));
    if (!packed) {
      free(tab);
      return KL_ERR_NOMEM;
    }
    kl_f32_conv1d_transpose_pack(a->cin, a->cout, a->ksize, s, a->dilation, a->w, packed);
    w = packed;
  }
  kl_gx_job gx = {a->x, a->batch, a->cin, a->win, 1, qmax + taps, 1, taps - 1, NULL};
  kl_status st = kl_ph_convolve(a, &gx, s, w, tab, nth);
  free(packed);
  free(tab);
  return st;
}

/* ---- the entry over DLTensors: the check, then the operator --------------------------- */
kl_status kl_conv1d_transpose_forward(const kl_conv1d_transpose_config* cfg, const DLTensor* x,
                                      const DLTensor* w, const DLTensor* bias, const DLTensor* y) {
  kl_conv1d_transpose_args a;
  kl_status st = kl_conv_cpu(x);
  if (!st) st = kl_conv1d_transpose_check(cfg, x, w, bias, y, &a);
  return st ? st : kl_f32_conv1d_transpose(&a);
}

kl_status kl_conv1d_transpose_check(const kl_conv1d_transpose_config* cfg, const DLTensor* xt,
                                    const DLTensor* wt, const DLTensor* bt, const DLTensor* yt,
                                    kl_conv1d_transpose_args* c) {
  kl_status st;
  memset(c, 0, sizeof(*c));
  if ((st = kl_conv_config(&cfg->w_panels, cfg->stride, cfg->dilation, cfg->pad_l, NULL,
                           cfg->num_threads, &c->num_threads)))
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
  if ((st = kl_conv_tensors(xt, wt, bt, yt, &x, &w, &bias, &y))) return st;
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
  const int64_t np = kl_cdiv(c->cout, KL_DENSE_PANEL);
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
  if ((st = kl_conv_reach(c->win, c->stride, c->ksize, c->dilation))) return st;
  const int64_t taps = kl_cdiv(c->ksize, c->stride / c->dilation);
  if (c->wout > 0 &&
      (st = kl_scratch_size("x transposed", c->batch, (c->wout - 1 + c->pad_l) / c->stride + taps,
                         c->cin, 1)))
    return st;
  if (!panels && (st = kl_scratch_size("w packed by phase", np, KL_DENSE_PANEL, kred, 1))) return st;
  if (kred > INT32_MAX || c->cout > INT32_MAX || c->wout > INT32_MAX)
    return kl_fail("cin %lld x ksize %lld, cout %lld and wout %lld must each be at most %d",
                   (long long)c->cin, (long long)c->ksize, (long long)c->cout, (long long)c->wout, INT32_MAX);
  c->w_panels = panels;
  kl_conv_data(&x, &w, bt ? &bias : NULL, &y, &c->x, &c->w, &c->bias, &c->y);
  return KL_OK;
}
