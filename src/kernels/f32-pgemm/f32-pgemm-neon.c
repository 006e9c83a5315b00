/* float32 GEMM on one pre-packed panel with AArch64 NEON (see f32-pgemm-scalar.c
 * for the contract): 2 rows x 32 columns per tile (16 accumulators, 8 panel
 * vectors), FMLA by element. One fused multiply-add per k in k order per element,
 * as the scalar kernel. A partial panel (n < 32) runs row by row
 * on 32-column copies (f32-pgemm-partial.h). */
#include <arm_neon.h>

#include "f32-pgemm-partial.h"
#include "internal.h"

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

#define MR 2

KL_INLINE void tile(size_t K, const float* A, size_t lda, const float* P, const float* init,
                    float* C, size_t ldc, const int mr) {
  float32x4_t acc[MR][8];
  _Pragma("GCC unroll 2")
  for (int r = 0; r < mr; r++)
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 8; v++) acc[r][v] = init ? vld1q_f32(init + 4 * v) : vdupq_n_f32(0.0f);
  for (size_t k = 0; k < K; k++) {
    float32x4_t w[8];
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 8; v++) w[v] = vld1q_f32(P + k * KL_PGEMM_NR + 4 * v);
    _Pragma("GCC unroll 2")
    for (int r = 0; r < mr; r++) {
      const float a = A[(size_t)r * lda + k];
      _Pragma("GCC unroll 8")
      for (int v = 0; v < 8; v++) acc[r][v] = vfmaq_n_f32(acc[r][v], w[v], a);
    }
  }
  _Pragma("GCC unroll 2")
  for (int r = 0; r < mr; r++)
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 8; v++) {
      float* c = C + (size_t)r * ldc + 4 * v;
      vst1q_f32(c, init ? acc[r][v] : vaddq_f32(vld1q_f32(c), acc[r][v]));
    }
}

static void rows(size_t M, size_t K, const float* A, size_t lda, const float* P,
                 const float* init, float* C, size_t ldc) {
  size_t m = 0;
  for (; m + MR <= M; m += MR) tile(K, A + m * lda, lda, P, init, C + m * ldc, ldc, MR);
  if (m < M) tile(K, A + m * lda, lda, P, init, C + m * ldc, ldc, 1);
}

void kl_f32_pgemm_ukernel__neon(size_t M, size_t n, size_t K, const float* A, size_t lda,
                                const float* P, const float* init, float* C, size_t ldc) {
  if (n == KL_PGEMM_NR)
    rows(M, K, A, lda, P, init, C, ldc);
  else
    kl_pgemm_partial(rows, M, n, K, A, lda, P, init, C, ldc);
}
