/* The dense convolutions (src/ops): conv1d on packed panels, ConvTranspose1d and
 * its phases, against float64. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "dense.h"

/* conv1d on w packed in panels (w_panels: no im2col, the output stored from
 * transposed tiles) against a float64 convolution: batch 2, asymmetric padding
 * wider than the kernel's reach (all-zero windows at both ends), a partial panel
 * of output channels, K = 5 x 70 over two KL_PGEMM_KC blocks, 260 steps over two
 * row blocks; with and without bias; 1, 2, 3 and 8 threads bitwise equal; NaN in
 * x gives NaN in exactly the outputs whose window reads it; stride 2 with
 * dilation 2 refused (stride or dilation must be 1). */
void test_dense_conv1d_panels(void) {
  const int64_t batch = 2, cin = 70, cout = 45, ks = 5, win = 255, pl = 6, pr = 3;
  const int64_t wout = win + pl + pr - ks + 1, K = ks * cin, np = (cout + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL;
  float* x = malloc(sizeof(float) * (size_t)(batch * cin * win));
  float* w = malloc(sizeof(float) * (size_t)(cout * cin * ks));
  float* P = calloc((size_t)(np * K * KL_DENSE_PANEL), sizeof(float));
  float* bias = malloc(sizeof(float) * (size_t)cout);
  float* y[4];
  for (int i = 0; i < 4; i++) y[i] = malloc(sizeof(float) * (size_t)(batch * cout * wout));
  kl_status s = KL_ERR_NOMEM;
  double err = 0;
  int same = 1, nan_ok = 1;
  if (x && w && P && bias && y[0] && y[1] && y[2] && y[3]) {
    uint32_t st = 17;
    for (int64_t i = 0; i < batch * cin * win; i++) x[i] = frand(&st);
    for (int64_t i = 0; i < cout * cin * ks; i++) w[i] = frand(&st);
    for (int64_t i = 0; i < cout; i++) bias[i] = frand(&st);
    for (int64_t o = 0; o < cout; o++) /* w[o, c, j] at [o / 32][j * cin + c][o % 32] */
      for (int64_t c = 0; c < cin; c++)
        for (int64_t j = 0; j < ks; j++)
          P[((o / KL_DENSE_PANEL) * K + j * cin + c) * KL_DENSE_PANEL + o % KL_DENSE_PANEL] =
              w[(o * cin + c) * ks + j];
    const int threads[4] = {1, 2, 3, 8};
    s = KL_OK;
    for (int hb = 0; hb < 2 && s == KL_OK; hb++) {
      for (int t = 0; t < 4 && s == KL_OK; t++) {
        kl_conv1d_args c;
        memset(&c, 0, sizeof(c));
        c.batch = batch, c.cin = cin, c.cout = cout, c.win = win, c.wout = wout, c.ksize = ks;
        c.stride = 1, c.dilation = 1, c.pad_l = pl, c.x = x, c.w = P, c.w_panels = 1;
        c.bias = hb ? bias : NULL, c.y = y[t], c.num_threads = threads[t];
        s = kl_f32_conv1d(&c);
      }
      for (int64_t n = 0; n < batch && s == KL_OK; n++)
        for (int64_t o = 0; o < cout; o++)
          for (int64_t t = 0; t < wout; t++) {
            double r = hb ? bias[o] : 0.0;
            for (int64_t c = 0; c < cin; c++)
              for (int64_t j = 0; j < ks; j++) {
                const int64_t u = t + j - pl;
                if (u >= 0 && u < win) r += (double)x[(n * cin + c) * win + u] * w[(o * cin + c) * ks + j];
              }
            err = fmax(err, fabs(r - y[0][(n * cout + o) * wout + t]));
          }
      for (int t = 1; t < 4; t++) same = same && !memcmp(y[0], y[t], sizeof(float) * (size_t)(batch * cout * wout));
    }
    /* NaN at step 100 of channel 3 of the second element: outputs 100 + pl - j, j < ks */
    x[(cin + 3) * win + 100] = NAN;
    kl_conv1d_args c;
    memset(&c, 0, sizeof(c));
    c.batch = batch, c.cin = cin, c.cout = cout, c.win = win, c.wout = wout, c.ksize = ks;
    c.stride = 1, c.dilation = 1, c.pad_l = pl, c.x = x, c.w = P, c.w_panels = 1, c.y = y[1];
    c.num_threads = 2;
    if (s == KL_OK) s = kl_f32_conv1d(&c);
    for (int64_t n = 0; n < batch && s == KL_OK; n++)
      for (int64_t o = 0; o < cout; o++)
        for (int64_t t = 0; t < wout; t++)
          nan_ok &= isnan(y[1][(n * cout + o) * wout + t]) == (n == 1 && t > 100 + pl - ks && t <= 100 + pl);
    c.stride = 2, c.dilation = 2;
    nan_ok &= kl_f32_conv1d(&c) == KL_ERR_ARG;
  }
  check(s == KL_OK && err < 1e-4 && same && nan_ok,
        "[dense] conv1d on panels, 2 x 70 -> 45 channels, 5 taps, padding 6/3, 255 steps: %s, max "
        "abs err %.2g, threads 1/2/3/8 bitwise equal, NaN confined to its windows, stride 2 "
        "with dilation 2 refused", kl_status_str(s), err);
  free(x);
  free(w);
  free(P);
  free(bias);
  for (int i = 0; i < 4; i++) free(y[i]);
}

/* A float64 transposed convolution (groups 1) of x [batch, cin, win] and
 * w [cin, cout, ks] into y [batch, cout, wout]. */
static void ref_conv_transpose(const float* x, const float* w, const float* bias, double* y,
                               int64_t batch, int64_t cin, int64_t cout, int64_t win, int64_t wout,
                               int64_t ks, int64_t stride, int64_t dil, int64_t pad) {
  for (int64_t n = 0; n < batch; n++)
    for (int64_t o = 0; o < cout; o++) {
      double* yr = y + (n * cout + o) * wout;
      for (int64_t t = 0; t < wout; t++) yr[t] = bias ? bias[o] : 0.0;
      for (int64_t c = 0; c < cin; c++)
        for (int64_t i = 0; i < win; i++)
          for (int64_t k = 0; k < ks; k++) {
            const int64_t t = i * stride + k * dil - pad;
            if (t >= 0 && t < wout)
              yr[t] += (double)x[(n * cin + c) * win + i] * w[(c * cout + o) * ks + k];
          }
    }
}

/* ConvTranspose1d with groups 1 (kl_f32_conv1d_transpose) against float64, raw
 * and packed weights, 1/2/3 threads bitwise equal: output padding, stride >
 * kernel (phases without taps), dilation dividing stride, padding > kernel, a
 * partial panel; dilation 3 with stride 4 refused. */
static kl_status conv_transpose_phases(void) {
  static const int64_t cases[][8] = { /* cin, cout, ks, stride, dil, pad, out_pad, win */
      {5, 33, 4, 2, 1, 1, 1, 9}, {3, 7, 3, 5, 1, 0, 2, 6}, {8, 5, 7, 6, 2, 4, 1, 10},
      {4, 3, 2, 3, 3, 6, 0, 5}, {70, 9, 9, 1, 1, 4, 0, 40},
      {64, 64, 12, 6, 1, 3, 0, 200}}; /* the last: enough work for 2 threads */
  const int64_t batch = 2;
  int ok = 1;
  double err = 0;
  kl_status s = KL_OK;
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]) && s == KL_OK; ci++) {
    const int64_t cin = cases[ci][0], cout = cases[ci][1], ks = cases[ci][2], st = cases[ci][3];
    const int64_t dil = cases[ci][4], pad = cases[ci][5], win = cases[ci][7];
    const int64_t wout = (win - 1) * st - 2 * pad + dil * (ks - 1) + cases[ci][6] + 1;
    const int64_t np = (cout + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL;
    float* x = malloc(sizeof(float) * (size_t)(batch * cin * win));
    float* w = malloc(sizeof(float) * (size_t)(cin * cout * ks));
    float* P = malloc(sizeof(float) * (size_t)(np * ks * cin * KL_DENSE_PANEL));
    float* bias = malloc(sizeof(float) * (size_t)cout);
    double* ref = malloc(sizeof(double) * (size_t)(batch * cout * wout));
    float* y[4];
    for (int i = 0; i < 4; i++) y[i] = malloc(sizeof(float) * (size_t)(batch * cout * wout));
    if (!x || !w || !P || !bias || !ref || !y[0] || !y[1] || !y[2] || !y[3]) s = KL_ERR_NOMEM;
    if (s == KL_OK) {
      uint32_t r = 29 + (uint32_t)ci;
      for (int64_t i = 0; i < batch * cin * win; i++) x[i] = frand(&r);
      for (int64_t i = 0; i < cin * cout * ks; i++) w[i] = frand(&r);
      for (int64_t i = 0; i < cout; i++) bias[i] = frand(&r);
      s = kl_f32_conv1d_transpose_pack(cin, cout, ks, st, dil, w, P);
      ref_conv_transpose(x, w, bias, ref, batch, cin, cout, win, wout, ks, st, dil, pad);
      const int threads[4] = {1, 2, 3, 2}, panels[4] = {1, 1, 1, 0};
      for (int t = 0; t < 4 && s == KL_OK; t++) {
        kl_conv1d_transpose_args c;
        memset(&c, 0, sizeof(c));
        c.batch = batch, c.cin = cin, c.cout = cout, c.win = win, c.wout = wout, c.ksize = ks;
        c.stride = st, c.dilation = dil, c.pad_l = pad, c.x = x, c.w = panels[t] ? P : w;
        c.w_panels = panels[t], c.bias = bias, c.y = y[t], c.num_threads = threads[t];
        s = kl_f32_conv1d_transpose(&c);
      }
      for (int64_t i = 0; i < batch * cout * wout && s == KL_OK; i++) err = fmax(err, fabs(ref[i] - y[0][i]));
      for (int t = 1; t < 4; t++)
        ok = ok && !memcmp(y[0], y[t], sizeof(float) * (size_t)(batch * cout * wout));
    }
    free(x);
    free(w);
    free(P);
    free(bias);
    free(ref);
    for (int i = 0; i < 4; i++) free(y[i]);
  }
  float one = 1.0f, out[8];
  kl_conv1d_transpose_args bad;
  memset(&bad, 0, sizeof(bad));
  bad.batch = 1, bad.cin = 1, bad.cout = 1, bad.win = 1, bad.wout = 8, bad.ksize = 1;
  bad.stride = 4, bad.dilation = 3, bad.x = &one, bad.w = &one, bad.y = out;
  ok = ok && kl_f32_conv1d_transpose(&bad) == KL_ERR_ARG;
  check(s == KL_OK && ok && err < 1e-4,
        "[dense] conv1d_transpose (groups 1), 6 shapes, raw and packed weights: %s, max abs err "
        "%.2g, threads 1/2/3 bitwise equal, dilation not dividing stride refused",
        kl_status_str(s), err);
  return s;
}

/* conv1d on panels with dilation 3 (stride 1) and with stride 3 (dilation 1)
 * against float64 (skipped when the transposed convolutions failed: s). */
static void conv1d_dilated_strided(kl_status s) {
  /* cin, cout, ks, st, dil, pad: each with work for 2 threads or more (KL_DENSE_MIN_MACS) */
  static const int64_t convs[][6] = {{64, 40, 5, 1, 3, 6}, {64, 9, 12, 3, 1, 3},
                                     {100, 40, 11, 1, 2, 10}}; /* the last: ksize cin > 1024, phases */
  const int64_t batch = 2, win = 700;
  double err = 0;
  int ok = 1;
  for (size_t ci = 0; ci < sizeof(convs) / sizeof(convs[0]) && s == KL_OK; ci++) {
    const int64_t cin = convs[ci][0], cout = convs[ci][1], ks = convs[ci][2], st = convs[ci][3];
    const int64_t dil = convs[ci][4], pad = convs[ci][5];
    const int64_t wout = (win + 2 * pad - dil * (ks - 1) - 1) / st + 1, K = ks * cin;
    const int64_t np = (cout + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL;
    float* x = malloc(sizeof(float) * (size_t)(batch * cin * win));
    float* w = malloc(sizeof(float) * (size_t)(cout * K));
    float* P = calloc((size_t)(np * K * KL_DENSE_PANEL), sizeof(float));
    float* y[3];
    for (int i = 0; i < 3; i++) y[i] = malloc(sizeof(float) * (size_t)(batch * cout * wout));
    if (!x || !w || !P || !y[0] || !y[1] || !y[2]) s = KL_ERR_NOMEM;
    if (s == KL_OK) {
      uint32_t r = 41 + (uint32_t)ci;
      for (int64_t i = 0; i < batch * cin * win; i++) x[i] = frand(&r);
      for (int64_t i = 0; i < cout * K; i++) w[i] = frand(&r);
      for (int64_t o = 0; o < cout; o++)
        for (int64_t c = 0; c < cin; c++)
          for (int64_t j = 0; j < ks; j++)
            P[((o / KL_DENSE_PANEL) * K + j * cin + c) * KL_DENSE_PANEL + o % KL_DENSE_PANEL] =
                w[(o * cin + c) * ks + j];
      const int threads[3] = {1, 2, 3};
      for (int t = 0; t < 3 && s == KL_OK; t++) {
        kl_conv1d_args c;
        memset(&c, 0, sizeof(c));
        c.batch = batch, c.cin = cin, c.cout = cout, c.win = win, c.wout = wout, c.ksize = ks;
        c.stride = st, c.dilation = dil, c.pad_l = pad, c.x = x, c.w = P, c.w_panels = 1;
        c.y = y[t], c.num_threads = threads[t];
        s = kl_f32_conv1d(&c);
      }
      for (int64_t n = 0; n < batch && s == KL_OK; n++)
        for (int64_t o = 0; o < cout; o++)
          for (int64_t t = 0; t < wout; t++) {
            double acc = 0;
            for (int64_t c = 0; c < cin; c++)
              for (int64_t j = 0; j < ks; j++) {
                const int64_t u = t * st + j * dil - pad;
                if (u >= 0 && u < win) acc += (double)x[(n * cin + c) * win + u] * w[(o * cin + c) * ks + j];
              }
            err = fmax(err, fabs(acc - y[0][(n * cout + o) * wout + t]));
          }
      for (int t = 1; t < 3; t++)
        ok = ok && !memcmp(y[0], y[t], sizeof(float) * (size_t)(batch * cout * wout));
    }
    free(x);
    free(w);
    free(P);
    for (int i = 0; i < 3; i++) free(y[i]);
  }
  check(s == KL_OK && ok && err < 1e-4,
        "[dense] conv1d on panels, dilation 3 and 2 (ksize cin 320, 1100), stride 3: %s, max abs err "
        "%.2g, threads 1/2/3 "
        "bitwise equal", kl_status_str(s), err);
}

void test_dense_conv_phases(void) { conv1d_dilated_strided(conv_transpose_phases()); }
