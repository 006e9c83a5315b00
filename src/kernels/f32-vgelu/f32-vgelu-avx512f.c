/* GELU (tanh form) with AVX-512F: see f32-vgelu.inc for the formula and order. */
#include <immintrin.h>

#include "internal.h"
#include "avx512f-math.h"

KL_INLINE __m512 gelu(__m512 x) {
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 u = _mm512_mul_ps(_mm512_add_ps(x, _mm512_mul_ps(x3, _mm512_set1_ps(0.044715f))),
                                 _mm512_set1_ps(0.7978845608f));
  return _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5f)),
                       _mm512_add_ps(kl_avx512f_tanh(u), _mm512_set1_ps(1.0f)));
}

void kl_f32_vgelu__avx512f(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, gelu(_mm512_maskz_loadu_ps(m, x + i)));
  }
}
