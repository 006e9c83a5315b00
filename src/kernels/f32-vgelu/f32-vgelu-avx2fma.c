/* GELU (tanh form) with AVX2: see f32-vgelu.inc for the formula and order. */
#include <immintrin.h>

#include "internal.h"
#include "avx2fma-math.h"

KL_INLINE __m256 gelu(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u = _mm256_mul_ps(_mm256_add_ps(x, _mm256_mul_ps(x3, _mm256_set1_ps(0.044715f))),
                                 _mm256_set1_ps(0.7978845608f));
  return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.5f)),
                       _mm256_add_ps(kl_avx2fma_tanh(u), _mm256_set1_ps(1.0f)));
}

void kl_f32_vgelu__avx2fma(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu(_mm256_loadu_ps(x + i)));
  if (i < n) {
    float t[8] = {0};
    for (size_t j = 0; j < n - i; j++) t[j] = x[i + j];
    _mm256_storeu_ps(t, gelu(_mm256_loadu_ps(t)));
    for (size_t j = 0; j < n - i; j++) y[i + j] = t[j];
  }
}
