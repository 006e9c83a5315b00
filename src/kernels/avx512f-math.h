/* AVX-512F float32 math shared by the AVX-512 kernels (header-only). */
#ifndef KL_AVX512F_MATH_H
#define KL_AVX512F_MATH_H

#include <immintrin.h>
#include <stddef.h>

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

/* exp(x) for x already clamped; Cephes-style polynomial, ~1 ulp. */
KL_INLINE __m512 kl_avx512f_exp(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

/* Clamp keeping NaN: max/min return their second operand when either is NaN. */
KL_INLINE __m512 kl_avx512f_clamp(__m512 x, float lo, float hi) {
  return _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), x));
}

KL_INLINE __m512 kl_avx512f_sigmoid(__m512 x) {
  __m512 e = kl_avx512f_exp(kl_avx512f_clamp(_mm512_sub_ps(_mm512_setzero_ps(), x), -87.0f, 89.0f));
  return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* tanh(x) = 1 - 2 / (1 + exp(2x)) */
KL_INLINE __m512 kl_avx512f_tanh(__m512 x) {
  __m512 e = kl_avx512f_exp(kl_avx512f_clamp(_mm512_add_ps(x, x), -87.0f, 89.0f));
  __m512 q = _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  return _mm512_sub_ps(_mm512_set1_ps(1.0f), q);
}

/* Gate epilogue for one element and one 16-unit block. */
KL_INLINE void kl_avx512f_cell_update(const __m512 acc[4], const float* gx, const float* bias,
                                       size_t Hp, size_t u, float* c, float* h_out) {
  __m512 pre[4];
  _Pragma("GCC unroll 8")
  for (int g = 0; g < 4; g++)
    pre[g] = _mm512_add_ps(_mm512_add_ps(acc[g], _mm512_loadu_ps(gx + g * Hp + u)),
                           _mm512_loadu_ps(bias + g * Hp + u));
  __m512 i = kl_avx512f_sigmoid(pre[0]);
  __m512 f = kl_avx512f_sigmoid(pre[1]);
  __m512 gg = kl_avx512f_tanh(pre[2]);
  __m512 o = kl_avx512f_sigmoid(pre[3]);
  __m512 cn = _mm512_fmadd_ps(f, _mm512_loadu_ps(c + u), _mm512_mul_ps(i, gg));
  _mm512_storeu_ps(c + u, cn);
  _mm512_storeu_ps(h_out + u, _mm512_mul_ps(o, kl_avx512f_tanh(cn)));
}

/* Rows [0, total) in the fewest tiles of at most max rows, sizes as even as
 * possible (8 rows by 6: 4 + 4, not 6 + 2):
 *   for (KL_EVEN_TILES(e, n, total, max)) ... rows [e, e + n) ...
 * Used by the cells' batch tiles and f32-pgemm's row tiles. */
#define KL_EVEN_TILES(e, n, total, max)                            \
  size_t e = 0, n = 0, e##tiles_ = ((total) + (max) - 1) / (max); \
  e < (total) && (n = ((total) - e + e##tiles_ - 1) / e##tiles_, 1); e += n, e##tiles_--

#endif
