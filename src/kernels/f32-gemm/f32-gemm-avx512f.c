/* float32 input projection for few rows with AVX-512F: C[M, N] (ldc) =
 * A[M, K] (lda) * W[N, K]^T (ldw), W read in place (the caller's row-major
 * W_ih, no packing). OpenBLAS packs W for every call and runs small M at a
 * fraction of its peak; here each 4-row
 * block of W is loaded once into L1 and used for all M rows, 4 x 4 outputs at
 * a time as 16 lane-wise dot products over k, reduced at the end.
 * Every output adds its products in the same order (lane k % 16, then a fixed
 * tree over the 16 lanes) whatever its position in a block, so results depend
 * on the shape only. */
#include <immintrin.h>

#include "internal.h"

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

/* 4 accumulators (one output row, 4 columns) -> their 4 sums: each from its own
 * lanes only, by the same tree (lane i + lane i+8, then pairs, then halves). */
KL_INLINE __m256 fold(__m512 v) { /* lane i + lane i+8 (AVX-512F: no extractf32x8) */
  return _mm256_add_ps(_mm512_castps512_ps256(v),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

KL_INLINE __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m256 a8 = fold(a), b8 = fold(b), c8 = fold(c), d8 = fold(d);
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a8, b8), _mm256_hadd_ps(c8, d8));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

KL_INLINE void tile(size_t K, const float* A, size_t lda, const float* W, size_t ldw, float* C,
                    size_t ldc, const int MR, const int NR) {
  __m512 acc[6][4];
  _Pragma("GCC unroll 6")
  for (int r = 0; r < 6; r++)
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++) acc[r][j] = _mm512_setzero_ps();
  size_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 w[4];
    _Pragma("GCC unroll 4")
    for (int j = 0; j < NR; j++) w[j] = _mm512_loadu_ps(W + (size_t)j * ldw + k);
    _Pragma("GCC unroll 6")
    for (int r = 0; r < MR; r++) {
      const __m512 a = _mm512_loadu_ps(A + (size_t)r * lda + k);
      _Pragma("GCC unroll 4")
      for (int j = 0; j < NR; j++) acc[r][j] = _mm512_fmadd_ps(a, w[j], acc[r][j]);
    }
  }
  if (k < K) {
    const __mmask16 m = (__mmask16)((1u << (K - k)) - 1u);
    __m512 w[4];
    _Pragma("GCC unroll 4")
    for (int j = 0; j < NR; j++) w[j] = _mm512_maskz_loadu_ps(m, W + (size_t)j * ldw + k);
    _Pragma("GCC unroll 6")
    for (int r = 0; r < MR; r++) {
      const __m512 a = _mm512_maskz_loadu_ps(m, A + (size_t)r * lda + k);
      _Pragma("GCC unroll 4")
      for (int j = 0; j < NR; j++) acc[r][j] = _mm512_fmadd_ps(a, w[j], acc[r][j]);
    }
  }
  _Pragma("GCC unroll 6")
  for (int r = 0; r < MR; r++) {
    const __m128 s = reduce4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    if (NR == 4) {
      _mm_storeu_ps(C + (size_t)r * ldc, s);
    } else {
      float t[4];
      _mm_storeu_ps(t, s);
      for (int j = 0; j < NR; j++) C[(size_t)r * ldc + (size_t)j] = t[j];
    }
  }
}

/* the rows of one 4-column block of W (NR columns) */
KL_INLINE void column_block(size_t M, size_t K, const float* A, size_t lda, const float* W,
                            size_t ldw, float* C, size_t ldc, const int NR) {
  size_t m = 0;
  for (; m + 6 <= M; m += 6) tile(K, A + m * lda, lda, W, ldw, C + m * ldc, ldc, 6, NR);
  switch (M - m) {
    case 5: tile(K, A + m * lda, lda, W, ldw, C + m * ldc, ldc, 5, NR); break;
    case 4: tile(K, A + m * lda, lda, W, ldw, C + m * ldc, ldc, 4, NR); break;
    case 3: tile(K, A + m * lda, lda, W, ldw, C + m * ldc, ldc, 3, NR); break;
    case 2: tile(K, A + m * lda, lda, W, ldw, C + m * ldc, ldc, 2, NR); break;
    case 1: tile(K, A + m * lda, lda, W, ldw, C + m * ldc, ldc, 1, NR); break;
    default: break;
  }
}

void kl_f32_gemm_ukernel__avx512f(size_t M, size_t N, size_t K, const float* A, size_t lda,
                             const float* W, size_t ldw, float* C, size_t ldc) {
  size_t n = 0;
  for (; n + 4 <= N; n += 4) column_block(M, K, A, lda, W + n * ldw, ldw, C + n, ldc, 4);
  switch (N - n) {
    case 3: column_block(M, K, A, lda, W + n * ldw, ldw, C + n, ldc, 3); break;
    case 2: column_block(M, K, A, lda, W + n * ldw, ldw, C + n, ldc, 2); break;
    case 1: column_block(M, K, A, lda, W + n * ldw, ldw, C + n, ldc, 1); break;
    default: break;
  }
}
