/* Row mean and variance with AVX-512F, lanes 8k..8k+7 in zmm k: see f32-rmoments.inc. */
#include <immintrin.h>

#include "internal.h"
#include "f32-rmoments-scalar.h"

void kl_f32_rmoments__avx512f(size_t n, const float* x, double* mean, double* var) {
  double acc[KL_RMOMENTS_LANES];
  __m512d a[4];
  size_t i;
  for (int k = 0; k < 4; k++) a[k] = _mm512_setzero_pd();
  for (i = 0; i + KL_RMOMENTS_LANES <= n; i += KL_RMOMENTS_LANES)
    for (int k = 0; k < 4; k++)
      a[k] = _mm512_add_pd(a[k], _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8 * k)));
  for (int k = 0; k < 4; k++) _mm512_storeu_pd(acc + 8 * k, a[k]);
  const double m = kl_rmoments_sum_tail(acc, i, n, x) / (double)n;
  const __m512d vm = _mm512_set1_pd(m);
  for (int k = 0; k < 4; k++) a[k] = _mm512_setzero_pd();
  for (i = 0; i + KL_RMOMENTS_LANES <= n; i += KL_RMOMENTS_LANES)
    for (int k = 0; k < 4; k++) {
      const __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8 * k)), vm);
      a[k] = _mm512_add_pd(a[k], _mm512_mul_pd(d, d));
    }
  for (int k = 0; k < 4; k++) _mm512_storeu_pd(acc + 8 * k, a[k]);
  *mean = m;
  *var = kl_rmoments_sq_tail(acc, i, n, x, m) / (double)n;
}
