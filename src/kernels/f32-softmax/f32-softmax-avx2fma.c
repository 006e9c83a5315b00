/* Row softmax, AVX2+FMA: y = exp(x - max) / sum (see src/ops/dense.h). */
#include <immintrin.h>
#include <math.h>

#include "avx2fma-math.h"
#include "internal.h"

static float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

static float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

void kl_f32_softmax_ukernel__avx2fma(size_t n, const float* x, float* y) {
  if (n == 0) return;
  __m256 vm = _mm256_set1_ps(-INFINITY);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
  float mx = hmax8(vm);
  for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  const __m256 vmx = _mm256_set1_ps(mx), lo = _mm256_set1_ps(-87.0f), hi = _mm256_setzero_ps();
  __m256 vs = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_sub_ps(_mm256_loadu_ps(x + i), vmx)));
    const __m256 e = kl_avx2fma_exp(d);
    _mm256_storeu_ps(y + i, e);
    vs = _mm256_add_ps(vs, e);
  }
  float s = hsum8(vs);
  for (; i < n; i++) {
    y[i] = expf(x[i] - mx);
    s += y[i];
  }
  const float inv = 1.0f / s;
  const __m256 vinv = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vinv));
  for (; i < n; i++) y[i] *= inv;
}
