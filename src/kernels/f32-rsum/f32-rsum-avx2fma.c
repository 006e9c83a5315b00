/* Sum of n floats, 4 ymm accumulators: the read-bandwidth probe. */
#include <immintrin.h>

#include "internal.h"

float kl_f32_rsum__avx2fma(size_t n, const float* x) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
  }
  float t[8], s = 0.0f;
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (int l = 0; l < 8; l++) s += t[l];
  for (; i < n; i++) s += x[i];
  return s;
}
