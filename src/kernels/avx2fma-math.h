/* AVX2+FMA float32 math shared by the AVX2 kernels (header-only). */
#ifndef KL_AVX2FMA_MATH_H
#define KL_AVX2FMA_MATH_H

#include <immintrin.h>
#include <stddef.h>

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

/* exp(x) for x in [-88, 88]; Cephes-style polynomial, ~1 ulp. */
KL_INLINE __m256 kl_avx2fma_exp(__m256 x) {
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693359375f);
  const __m256 ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
  r = _mm256_fnmadd_ps(n, ln2_lo, r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  /* 2^n: n in [-126, 128] after the clamp (2^128 encodes inf: exp overflows
   * exactly where expf does); NaN inputs stay NaN through p. */
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* Clamp keeping NaN: max/min return their second operand when either is NaN. */
KL_INLINE __m256 kl_avx2fma_clamp(__m256 x, float lo, float hi) {
  return _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), x));
}

KL_INLINE __m256 kl_avx2fma_sigmoid(__m256 x) {
  __m256 e = kl_avx2fma_exp(kl_avx2fma_clamp(_mm256_sub_ps(_mm256_setzero_ps(), x), -87.0f, 89.0f));
  return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

KL_INLINE __m256 kl_avx2fma_tanh(__m256 x) {
  __m256 e = kl_avx2fma_exp(kl_avx2fma_clamp(_mm256_add_ps(x, x), -87.0f, 89.0f));
  __m256 q = _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  return _mm256_sub_ps(_mm256_set1_ps(1.0f), q);
}

/* Gate epilogue for one element and 8 units starting at u. */
KL_INLINE void kl_avx2fma_cell_update(const __m256 acc[4], const float* gx, const float* bias,
                                      size_t Hp, size_t u, float* c, float* h_out) {
  __m256 pre[4];
  _Pragma("GCC unroll 8")
  for (int g = 0; g < 4; g++)
    pre[g] = _mm256_add_ps(_mm256_add_ps(acc[g], _mm256_loadu_ps(gx + g * Hp + u)),
                           _mm256_loadu_ps(bias + g * Hp + u));
  __m256 i = kl_avx2fma_sigmoid(pre[0]);
  __m256 f = kl_avx2fma_sigmoid(pre[1]);
  __m256 gg = kl_avx2fma_tanh(pre[2]);
  __m256 o = kl_avx2fma_sigmoid(pre[3]);
  __m256 cn = _mm256_fmadd_ps(f, _mm256_loadu_ps(c + u), _mm256_mul_ps(i, gg));
  _mm256_storeu_ps(c + u, cn);
  _mm256_storeu_ps(h_out + u, _mm256_mul_ps(o, kl_avx2fma_tanh(cn)));
}

#endif
