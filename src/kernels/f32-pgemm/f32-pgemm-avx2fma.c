/* float32 GEMM on one pre-packed panel with AVX2 + FMA (see f32-pgemm-scalar.c for
 * the contract): 2 rows x 32 columns per tile (8 accumulators, 4 panel vectors,
 * one broadcast: 13 of the 16 ymm registers). One fused multiply-add per k in k
 * order per element, as the scalar kernel. A partial panel (n < 32) runs row by
 * row on 32-column copies (f32-pgemm-partial.h). */
#include <immintrin.h>

#include "f32-pgemm-partial.h"
#include "internal.h"

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

#define MR 2

KL_INLINE void tile(size_t K, const float* A, size_t lda, const float* P, const float* init,
                    float* C, size_t ldc, const int mr) {
  __m256 acc[MR][4];
  _Pragma("GCC unroll 2")
  for (int r = 0; r < mr; r++)
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 4; v++) acc[r][v] = init ? _mm256_loadu_ps(init + 8 * v) : _mm256_setzero_ps();
  for (size_t k = 0; k < K; k++) {
    __m256 w[4];
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 4; v++) w[v] = _mm256_loadu_ps(P + k * KL_PGEMM_NR + 8 * v);
    _Pragma("GCC unroll 2")
    for (int r = 0; r < mr; r++) {
      const __m256 a = _mm256_broadcast_ss(A + (size_t)r * lda + k);
      _Pragma("GCC unroll 8")
      for (int v = 0; v < 4; v++) acc[r][v] = _mm256_fmadd_ps(a, w[v], acc[r][v]);
    }
  }
  _Pragma("GCC unroll 2")
  for (int r = 0; r < mr; r++)
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 4; v++) {
      float* c = C + (size_t)r * ldc + 8 * v;
      _mm256_storeu_ps(c, init ? acc[r][v] : _mm256_add_ps(_mm256_loadu_ps(c), acc[r][v]));
    }
}

static void rows(size_t M, size_t K, const float* A, size_t lda, const float* P,
                 const float* init, float* C, size_t ldc) {
  size_t m = 0;
  for (; m + MR <= M; m += MR) tile(K, A + m * lda, lda, P, init, C + m * ldc, ldc, MR);
  if (m < M) tile(K, A + m * lda, lda, P, init, C + m * ldc, ldc, 1);
}

void kl_f32_pgemm_ukernel__avx2fma(size_t M, size_t n, size_t K, const float* A, size_t lda,
                                   const float* P, const float* init, float* C, size_t ldc) {
  if (n == KL_PGEMM_NR)
    rows(M, K, A, lda, P, init, C, ldc);
  else
    kl_pgemm_partial(rows, M, n, K, A, lda, P, init, C, ldc);
}
