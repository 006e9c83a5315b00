/* Instance norm (src/ops/norm.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "norm.h"

/* Against a double reference; a constant row gives exactly the shift, a NaN only
 * its own row; 1, 2 and 4 threads bitwise equal; bad arguments KL_ERR_ARG. */
void test_instance_norm(void) {
  const int64_t N = 2, C = 5, L = 30011, rows = N * C;
  float* x = xcalloc((size_t)(rows * L), sizeof(float));
  float* y = xcalloc((size_t)(rows * L), sizeof(float));
  float* z = xcalloc((size_t)(rows * L), sizeof(float));
  float w[5], b[5], sc[10], sh[10];
  uint64_t st = 12345;
  for (int64_t i = 0; i < rows * L; i++) {
    st = st * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = (float)((double)(st >> 40) / (double)(1 << 24) * 4.0 + 1.0);
  }
  for (int c = 0; c < 5; c++) {
    w[c] = 0.5f + 0.25f * (float)c;
    b[c] = -0.3f * (float)c;
  }
  for (int r = 0; r < 10; r++) {
    sc[r] = 1.0f + 0.1f * (float)r;
    sh[r] = 0.05f * (float)r;
  }
  for (int64_t i = 0; i < L; i++) x[2 * L + i] = 3.7f; /* row 2 constant */
  kl_instance_norm_args a;
  memset(&a, 0, sizeof(a));
  a.batch = N;
  a.channels = C;
  a.length = L;
  a.x = x;
  a.weight = w;
  a.bias = b;
  a.scale = sc;
  a.shift = sh;
  a.scale_per_batch = a.shift_per_batch = 1;
  a.eps = 1e-5;
  a.y = y;
  a.num_threads = 1;
  kl_status s = kl_f32_instance_norm(&a);
  double err = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float* xr = x + r * L;
    double m = 0, v = 0;
    for (int64_t i = 0; i < L; i++) m += xr[i];
    m /= (double)L;
    for (int64_t i = 0; i < L; i++) v += (xr[i] - m) * (xr[i] - m);
    v /= (double)L;
    for (int64_t i = 0; i < L; i++) {
      const double want = sc[r] * ((xr[i] - m) / sqrt(v + 1e-5) * w[r % C] + b[r % C]) + sh[r];
      const double e = fabs(y[r * L + i] - want);
      if (!(e <= err)) err = e;
    }
  }
  int constant_exact = 1;
  for (int64_t i = 0; i < L; i++)
    if (y[2 * L + i] != (float)((double)b[2] * sc[2] + sh[2])) constant_exact = 0;
  int same = 1;
  for (int nth = 2; nth <= 4; nth += 2) {
    a.y = z;
    a.num_threads = nth;
    same = same && kl_f32_instance_norm(&a) == KL_OK &&
           memcmp(y, z, (size_t)(rows * L) * sizeof(float)) == 0;
  }
  check(s == KL_OK && err < 2e-5 && constant_exact && same,
        "[norm] instance norm + AdaIN 2x5x%lld: max abs err %.2g, constant row exact, threads 1/2/4 "
        "bitwise equal",
        (long long)L, err);
  x[7 * L + 11] = NAN;
  a.num_threads = 2;
  s = kl_f32_instance_norm(&a);
  int nan_ok = s == KL_OK;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < L; i += 997) nan_ok = nan_ok && (isnan(z[r * L + i]) == (r == 7));
  check(nan_ok, "[norm] a NaN gives NaN in its own row only");
  a.eps = -1;
  kl_status bad1 = kl_f32_instance_norm(&a);
  a.eps = 1e-5;
  a.y = NULL;
  kl_status bad2 = kl_f32_instance_norm(&a);
  check(bad1 == KL_ERR_ARG && bad2 == KL_ERR_ARG, "[norm] eps < 0 or no output -> KL_ERR_ARG");
  free(x);
  free(y);
  free(z);
}
