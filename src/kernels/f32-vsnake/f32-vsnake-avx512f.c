/* Snake with AVX-512F: see f32-vsnake.inc for the formula and order. */
#include <immintrin.h>

#include "internal.h"
#include "avx512f-math.h"
#include "scalar-math.h"

KL_INLINE __m512 snake(__m512 x, const __m512 p[5]) {
  x = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(x, p[0]), p[1]), p[2]);
  const __m512 t = _mm512_mul_ps(p[3], x);
  __m512 s2 = kl_avx512f_sinsq(t);
  const __mmask16 far =
      _mm512_cmp_ps_mask(_mm512_abs_ps(t), _mm512_set1_ps(KL_SINSQ_RANGE), _CMP_NLE_UQ);
  if (far) {
    float tt[16], ss[16];
    _mm512_storeu_ps(tt, t);
    _mm512_storeu_ps(ss, s2);
    for (int j = 0; j < 16; j++)
      if (far >> j & 1) ss[j] = kl_sinsqf(tt[j]);
    s2 = _mm512_loadu_ps(ss);
  }
  return _mm512_add_ps(x, _mm512_mul_ps(p[4], s2));
}

void kl_f32_vsnake__avx512f(size_t n, const float* x, float m, float g, float off, float a, float c,
                            float* y) {
  const __m512 p[5] = {_mm512_set1_ps(m), _mm512_set1_ps(g), _mm512_set1_ps(off), _mm512_set1_ps(a),
                       _mm512_set1_ps(c)};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, snake(_mm512_loadu_ps(x + i), p));
  if (i < n) {
    const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, k, snake(_mm512_maskz_loadu_ps(k, x + i), p));
  }
}
