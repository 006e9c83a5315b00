/* Row softmax, AVX-512F: y = exp(x - max) / sum (see src/ops/dense.h). */
#include <immintrin.h>
#include <math.h>

#include "avx512f-math.h"
#include "internal.h"

void kl_f32_softmax_ukernel__avx512f(size_t n, const float* x, float* y) {
  if (n == 0) return;
  __m512 vm = _mm512_set1_ps(-INFINITY);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    vm = _mm512_mask_max_ps(vm, m, vm, _mm512_maskz_loadu_ps(m, x + i));
  }
  const float mx = _mm512_reduce_max_ps(vm);
  const __m512 vmx = _mm512_set1_ps(mx);
  __m512 vs = _mm512_setzero_ps();
  for (i = 0; i + 16 <= n; i += 16) {
    const __m512 e = kl_avx512f_exp(kl_avx512f_clamp(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmx), -87.0f, 0.0f));
    _mm512_storeu_ps(y + i, e);
    vs = _mm512_add_ps(vs, e);
  }
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    const __m512 e = kl_avx512f_exp(kl_avx512f_clamp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmx), -87.0f, 0.0f));
    _mm512_mask_storeu_ps(y + i, m, e);
    vs = _mm512_mask_add_ps(vs, m, vs, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vs));
  for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv));
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), inv));
  }
}
