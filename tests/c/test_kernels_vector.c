/* The vector kernels (activations, snake, row moments, softmax, read-sum) against
 * the scalar ones or float64, at odd lengths and with +-inf and NaN. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels.h"

static const float SPECIALS[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f,
                                 -88.0f, 100.0f, -100.0f, 1e30f, -1e30f, 0.5f, -0.5f};
#define NSPECIALS ((int)(sizeof(SPECIALS) / sizeof(SPECIALS[0])))

/* Activations: odd lengths (vector tails), specials at every lane position. */
void test_vunary_kernel(const kl_vunary_entry* k, const kl_vunary_entry* ref, const char* what) {
  enum { N = 67 };
  float x[N], ys[N], yv[N];
  char why[160] = "";
  int ok = 1;
  for (size_t n = 1; n <= N && ok; n += n < 20 ? 1 : 23) {
    for (size_t i = 0; i < n; i++)
      x[i] = i % 3 == 0 ? SPECIALS[(i / 3 + n) % NSPECIALS] : (float)urand(-20.0, 20.0);
    for (size_t i = 0; i < N; i++) ys[i] = yv[i] = 12345.0f;
    ref->fn(n, x, ys);
    k->fn(n, x, yv);
    ok = all_close(yv, ys, N, 2e-6, why, sizeof(why), what);
  }
  check(ok, "[kernel %s] %s vs %s, n = 1..20, 43, 66 with +-inf, NaN, +-0, +-1e30 (tol 2e-6, NaN "
        "for NaN, no write past n)%s", k->name, what, ref->name, why);
}

/* Snake against float64: y = z + c sin(t)^2 with z = (x - m) g + off and t = a z
 * rounded to float, within 6e-7 |c| + 2 eps |y|; with and without the affine step,
 * odd lengths, in place, z up to 1.2x the fast path's range (libm beyond it), +-inf
 * and NaN give NaN, no write past n. */
void test_vsnake_kernel(const kl_vsnake_entry* k) {
  enum { N = 203 };
  static const float AS[] = {1.0f, 0.37f, 13.0f, -2.5f};
  float x[N], y[N];
  char why[200] = "";
  int ok = 1;
  for (size_t ia = 0; ia < 4 * 3 * 2 && ok; ia++) {
    const float a = AS[ia % 4], c = 1.0f / a;
    const int affine = ia >= 12;
    const float m = affine ? 0.75f : 0.0f, g = affine ? -1.5f : 1.0f, off = affine ? 0.3f : 0.0f;
    const double span = ia / 4 % 3 == 0   ? 20.0
                        : ia / 4 % 3 == 1 ? 2000.0
                                          : 1.2 * KL_SINSQ_RANGE / fabs(a) / fabs(g);
    for (size_t n = 1; n <= N && ok; n += n < 40 ? 1 : 37) {
      for (size_t i = 0; i < n; i++) x[i] = (float)urand(-span, span);
      if (n > 8) x[n / 3] = INFINITY, x[n / 2] = NAN, x[n - 2] = -INFINITY, x[1] = 0.0f;
      for (size_t i = 0; i < N; i++) y[i] = 12345.0f;
      const int inplace = n % 2;
      if (inplace) memcpy(y, x, n * sizeof(float));
      k->fn(n, inplace ? y : x, m, g, off, a, c, y);
      for (size_t i = 0; i < N && ok; i++) {
        if (i >= n) {
          ok = y[i] == 12345.0f;
          if (!ok) snprintf(why, sizeof(why), " (write past n=%zu)", n);
          continue;
        }
        const float z = (x[i] - m) * g + off;
        const double sn = sin((double)(a * z));
        const double ref = (double)z + (double)c * sn * sn;
        if (isnan(ref) || isinf(x[i])) {
          ok = isnan(y[i]);
        } else {
          ok = fabs((double)y[i] - ref) <= 6e-7 * fabs((double)c) + 2.0 * FLT_EPSILON * fabs(ref);
        }
        if (!ok)
          snprintf(why, sizeof(why), " (a=%g affine=%d n=%zu x[%zu]=%.9g: %.9g vs float64 %.9g)",
                   (double)a, affine, n, i, (double)x[i], (double)y[i], ref);
      }
    }
  }
  check(ok, "[kernel %s] snake vs float64, a = 1, 0.37, 13, -2.5, c = 1/a, with and without "
        "(x - m) g + off first, |a z| up to 1.2x %g, n = 1..40, 77, ..., in place, +-inf / NaN give "
        "NaN, no write past n%s",
        k->name, (double)KL_SINSQ_RANGE, why);
}

/* Row moments: every entry gives the scalar entry's bits; within 1e-15 relative of a
 * long double two-pass reference; a constant row has variance 0 exactly; NaN gives
 * NaN. Lengths around the 32 lanes. */
void test_rmoments_kernel(const kl_rmoments_entry* k, const kl_rmoments_entry* ref) {
  enum { N = 300 };
  float x[N];
  char why[200] = "";
  int ok = 1;
  for (size_t n = 1; n <= N && ok; n += n < 70 ? 1 : 53) {
    const double off = n % 3 == 0 ? 1e4 : 0.5;
    for (size_t i = 0; i < n; i++) x[i] = (float)(urand(-3.0, 3.0) + off);
    double m, v, mr, vr;
    k->fn(n, x, &m, &v);
    ref->fn(n, x, &mr, &vr);
    long double sl = 0, ql = 0;
    for (size_t i = 0; i < n; i++) sl += x[i];
    const long double ml = sl / n;
    for (size_t i = 0; i < n; i++) ql += (x[i] - ml) * (x[i] - ml);
    const long double vl = ql / n;
    ok = memcmp(&m, &mr, sizeof(m)) == 0 && memcmp(&v, &vr, sizeof(v)) == 0 &&
         fabsl(m - ml) <= 1e-15L * fabsl(ml) + 1e-300L && fabsl(v - vl) <= 1e-13L * vl + 1e-300L;
    if (!ok) snprintf(why, sizeof(why), " (n=%zu: mean %.17g var %.17g, scalar %.17g %.17g, long double "
                      "%.17Lg %.17Lg)", n, m, v, mr, vr, ml, vl);
    if (ok) {
      for (size_t i = 0; i < n; i++) x[i] = 3.7f;
      k->fn(n, x, &m, &v);
      ok = v == 0.0 && m == (double)3.7f;
      if (!ok) snprintf(why, sizeof(why), " (n=%zu: constant row gave var %g)", n, v);
    }
    if (ok && n > 1) {
      x[n / 2] = NAN;
      k->fn(n, x, &m, &v);
      ok = isnan(m) && isnan(v);
      if (!ok) snprintf(why, sizeof(why), " (n=%zu: a NaN did not give NaN)", n);
    }
  }
  check(ok, "[kernel %s] row mean and variance: %s's bits, within 1e-15 / 1e-13 of long double, n = "
        "1..70, 123, ..., constant rows give 0, NaN gives NaN%s", k->name, ref->name, why);
}

/* Row softmax: finite rows (odd lengths, large magnitudes) within 2e-6 of the scalar
 * kernel, a row with NaN gives NaN, no write past n. */
void test_softmax_kernel(const kl_vunary_entry* k, const kl_vunary_entry* ref) {
  enum { N = 67 };
  float x[N], ys[N], yv[N];
  char why[160] = "";
  int ok = 1;
  for (size_t n = 1; n <= N && ok; n += n < 20 ? 1 : 23) {
    for (size_t i = 0; i < n; i++) x[i] = (float)urand(-30.0, 30.0);
    for (size_t i = 0; i < N; i++) ys[i] = yv[i] = 12345.0f;
    ref->fn(n, x, ys);
    k->fn(n, x, yv);
    ok = all_close(yv, ys, N, 2e-6, why, sizeof(why), "softmax");
    if (ok && n > 2) { /* NaN in, NaN out */
      x[n / 2] = NAN;
      k->fn(n, x, yv);
      ok = isnan(yv[0]) && isnan(yv[n - 1]) && yv[n] == 12345.0f;
      if (!ok) snprintf(why, sizeof(why), " (n=%zu: a NaN input did not give NaN)", n);
    }
  }
  check(ok, "[kernel %s] softmax vs %s, n = 1..20, 43, 66 (tol 2e-6, NaN for NaN, no write past n)%s",
        k->name, ref->name, why);
}

void test_rsum_kernel(const kl_rsum_entry* k, const kl_rsum_entry* ref) {
  char why[160] = "";
  int ok = 1;
  float x[301];
  for (int i = 0; i < 301; i++) x[i] = (float)urand(0.0, 1.0);
  for (size_t n = 0; n <= 301 && ok; n += 7) {
    const float a = k->fn(n, x), b = ref->fn(n, x);
    if (!close_f(a, b, 1e-5)) {
      ok = 0;
      snprintf(why, sizeof(why), " (n=%zu: %.9g vs %.9g)", n, (double)a, (double)b);
    }
  }
  x[100] = INFINITY;
  ok = ok && isinf(k->fn(301, x));
  x[5] = NAN;
  ok = ok && isnan(k->fn(301, x));
  check(ok, "[kernel %s] read-sum vs %s, n = 0..301 step 7, inf and NaN%s", k->name, ref->name, why);
}
