/* Sum of n floats, 4 zmm accumulators: the read-bandwidth probe. */
#include <immintrin.h>

#include "internal.h"

float kl_f32_rsum__avx512f(size_t n, const float* x) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 48));
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (; i < n; i++) s += x[i];
  return s;
}
