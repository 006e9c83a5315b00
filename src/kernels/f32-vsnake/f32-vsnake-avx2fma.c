/* Snake with AVX2: see f32-vsnake.inc for the formula and order. */
#include <immintrin.h>

#include "internal.h"
#include "avx2fma-math.h"
#include "scalar-math.h"

KL_INLINE __m256 snake(__m256 x, const __m256 p[5]) {
  x = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(x, p[0]), p[1]), p[2]);
  const __m256 t = _mm256_mul_ps(p[3], x);
  __m256 s2 = kl_avx2fma_sinsq(t);
  const __m256 at = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), t);
  const int far =
      _mm256_movemask_ps(_mm256_cmp_ps(at, _mm256_set1_ps(KL_SINSQ_RANGE), _CMP_NLE_UQ));
  if (far) {
    float tt[8], ss[8];
    _mm256_storeu_ps(tt, t);
    _mm256_storeu_ps(ss, s2);
    for (int j = 0; j < 8; j++)
      if (far >> j & 1) ss[j] = kl_sinsqf(tt[j]);
    s2 = _mm256_loadu_ps(ss);
  }
  return _mm256_add_ps(x, _mm256_mul_ps(p[4], s2));
}

void kl_f32_vsnake__avx2fma(size_t n, const float* x, float m, float g, float off, float a, float c,
                            float* y) {
  const __m256 p[5] = {_mm256_set1_ps(m), _mm256_set1_ps(g), _mm256_set1_ps(off), _mm256_set1_ps(a),
                       _mm256_set1_ps(c)};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, snake(_mm256_loadu_ps(x + i), p));
  if (i < n) {
    float t[8] = {0};
    for (size_t j = 0; j < n - i; j++) t[j] = x[i + j];
    _mm256_storeu_ps(t, snake(_mm256_loadu_ps(t), p));
    for (size_t j = 0; j < n - i; j++) y[i + j] = t[j];
  }
}
