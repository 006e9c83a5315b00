/* float32 GEMM on one pre-packed panel with AVX-512F (see f32-pgemm-scalar.c for
 * the contract): 12 rows x 32 columns per tile, 24 accumulators, B's two vectors
 * per k loaded once for the 12 rows, A broadcast. No packing at run time: on
 * this project's 2-core AVX-512 Xeon, 1 thread, bert's 64 x 768 x 768 product
 * ran at 1.3-1.5x OpenBLAS sgemm (which packs B on every call); 512 rows: par.
 * One fused multiply-add per k in k order per element, as the scalar kernel. */
#include <immintrin.h>

#include "internal.h"

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

#define MR 12
#define PF 32 /* k steps ahead to prefetch the panel (it streams from L3 on the first tile) */

KL_INLINE void tile(size_t K, const float* A, size_t lda, const float* P, const float* init,
                    float* C, size_t ldc, __mmask16 m0, __mmask16 m1, const int mr) {
  __m512 acc[MR][2];
  if (init) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, init), b1 = _mm512_maskz_loadu_ps(m1, init + 16);
    _Pragma("GCC unroll 12")
    for (int r = 0; r < mr; r++) acc[r][0] = b0, acc[r][1] = b1;
  } else {
    _Pragma("GCC unroll 12")
    for (int r = 0; r < mr; r++) {
      acc[r][0] = _mm512_maskz_loadu_ps(m0, C + (size_t)r * ldc);
      acc[r][1] = _mm512_maskz_loadu_ps(m1, C + (size_t)r * ldc + 16);
    }
  }
  size_t k = 0;
  for (; k < K; k++) {
    if (k + PF < K) {
      _mm_prefetch((const char*)(P + (k + PF) * KL_PGEMM_NR), _MM_HINT_T0);
      _mm_prefetch((const char*)(P + (k + PF) * KL_PGEMM_NR + 16), _MM_HINT_T0);
    }
    const __m512 w0 = _mm512_loadu_ps(P + k * KL_PGEMM_NR);
    const __m512 w1 = _mm512_loadu_ps(P + k * KL_PGEMM_NR + 16);
    _Pragma("GCC unroll 12")
    for (int r = 0; r < mr; r++) {
      const __m512 a = _mm512_set1_ps(A[(size_t)r * lda + k]);
      acc[r][0] = _mm512_fmadd_ps(a, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, w1, acc[r][1]);
    }
  }
  _Pragma("GCC unroll 12")
  for (int r = 0; r < mr; r++) {
    _mm512_mask_storeu_ps(C + (size_t)r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_ps(C + (size_t)r * ldc + 16, m1, acc[r][1]);
  }
}

void kl_f32_pgemm_ukernel__avx512f(size_t M, size_t n, size_t K, const float* A, size_t lda,
                                   const float* P, const float* init, float* C, size_t ldc) {
  const __mmask16 m0 = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
  const __mmask16 m1 = n >= 32 ? (__mmask16)0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1u) : 0;
  size_t m = 0;
  for (; m + MR <= M; m += MR) tile(K, A + m * lda, lda, P, init, C + m * ldc, ldc, m0, m1, MR);
  A += m * lda, C += m * ldc;
  switch (M - m) {
    case 11: tile(K, A, lda, P, init, C, ldc, m0, m1, 11); break;
    case 10: tile(K, A, lda, P, init, C, ldc, m0, m1, 10); break;
    case 9: tile(K, A, lda, P, init, C, ldc, m0, m1, 9); break;
    case 8: tile(K, A, lda, P, init, C, ldc, m0, m1, 8); break;
    case 7: tile(K, A, lda, P, init, C, ldc, m0, m1, 7); break;
    case 6: tile(K, A, lda, P, init, C, ldc, m0, m1, 6); break;
    case 5: tile(K, A, lda, P, init, C, ldc, m0, m1, 5); break;
    case 4: tile(K, A, lda, P, init, C, ldc, m0, m1, 4); break;
    case 3: tile(K, A, lda, P, init, C, ldc, m0, m1, 3); break;
    case 2: tile(K, A, lda, P, init, C, ldc, m0, m1, 2); break;
    case 1: tile(K, A, lda, P, init, C, ldc, m0, m1, 1); break;
    default: break;
  }
}
