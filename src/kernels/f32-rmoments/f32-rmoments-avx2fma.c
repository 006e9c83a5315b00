/* Row mean and variance with AVX2, lanes 4k..4k+3 in ymm k: see f32-rmoments.inc. */
#include <immintrin.h>

#include "internal.h"
#include "f32-rmoments-scalar.h"

void kl_f32_rmoments__avx2fma(size_t n, const float* x, double* mean, double* var) {
  double acc[KL_RMOMENTS_LANES];
  __m256d a[8];
  size_t i;
  for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_pd();
  for (i = 0; i + KL_RMOMENTS_LANES <= n; i += KL_RMOMENTS_LANES)
    for (int k = 0; k < 8; k++)
      a[k] = _mm256_add_pd(a[k], _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * k)));
  for (int k = 0; k < 8; k++) _mm256_storeu_pd(acc + 4 * k, a[k]);
  const double m = kl_rmoments_sum_tail(acc, i, n, x) / (double)n;
  const __m256d vm = _mm256_set1_pd(m);
  for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_pd();
  for (i = 0; i + KL_RMOMENTS_LANES <= n; i += KL_RMOMENTS_LANES)
    for (int k = 0; k < 8; k++) {
      const __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * k)), vm);
      a[k] = _mm256_add_pd(a[k], _mm256_mul_pd(d, d));
    }
  for (int k = 0; k < 8; k++) _mm256_storeu_pd(acc + 4 * k, a[k]);
  *mean = m;
  *var = kl_rmoments_sq_tail(acc, i, n, x, m) / (double)n;
}
