/* float32 GEMM on one pre-packed panel with AVX-512F (see f32-pgemm-scalar.c for
 * the contract): up to 14 rows x 32 columns per tile, 28 accumulators, B's two
 * vectors per k loaded once for the rows, A broadcast; rows split into the fewest
 * tiles of at most 14, sizes as even as possible (240 = 12 x 13 + 6 x 14, not
 * 17 x 14 + 2). B is packed once, ahead of the call (OpenBLAS packs it on every
 * call). One fused multiply-add per k in k order per element, as the scalar
 * kernel: the tiling does not change the bits. */
#include <immintrin.h>
#include <stdint.h>

#include "avx512f-math.h"
#include "internal.h"

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

#define MR 14
#define PF 32 /* k steps ahead to prefetch the panel (it streams from L3 on the first tile) */

KL_INLINE void tile(size_t K, const float* A, size_t lda, const float* P, const float* init,
                    float* C, size_t ldc, __mmask16 m0, __mmask16 m1, const int mr) {
  __m512 acc[MR][2];
  if (init) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, init), b1 = _mm512_maskz_loadu_ps(m1, init + 16);
    _Pragma("GCC unroll 14")
    for (int r = 0; r < mr; r++) acc[r][0] = b0, acc[r][1] = b1;
  } else {
    _Pragma("GCC unroll 14")
    for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  }
  size_t k = 0;
  for (; k < K; k++) {
    /* unconditional: a prefetch past the panel's end is harmless, and the bounds
     * test it replaced cost 4-5% in a standalone probe (an integer address, so
     * no pointer is formed out of bounds) */
    const uintptr_t ahead = (uintptr_t)(P + k * KL_PGEMM_NR) + PF * KL_PGEMM_NR * sizeof(float);
    _mm_prefetch((const char*)ahead, _MM_HINT_T0);
    _mm_prefetch((const char*)(ahead + 64), _MM_HINT_T0);
    const __m512 w0 = _mm512_loadu_ps(P + k * KL_PGEMM_NR);
    const __m512 w1 = _mm512_loadu_ps(P + k * KL_PGEMM_NR + 16);
    _Pragma("GCC unroll 14")
    for (int r = 0; r < mr; r++) {
      const __m512 a = _mm512_set1_ps(A[(size_t)r * lda + k]);
      acc[r][0] = _mm512_fmadd_ps(a, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, w1, acc[r][1]);
    }
  }
  if (!init) {
    _Pragma("GCC unroll 14")
    for (int r = 0; r < mr; r++) {
      acc[r][0] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, C + (size_t)r * ldc), acc[r][0]);
      acc[r][1] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, C + (size_t)r * ldc + 16), acc[r][1]);
    }
  }
  _Pragma("GCC unroll 14")
  for (int r = 0; r < mr; r++) {
    _mm512_mask_storeu_ps(C + (size_t)r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_ps(C + (size_t)r * ldc + 16, m1, acc[r][1]);
  }
}

void kl_f32_pgemm_ukernel__avx512f(size_t M, size_t n, size_t K, const float* A, size_t lda,
                                   const float* P, const float* init, float* C, size_t ldc) {
  const __mmask16 m0 = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
  const __mmask16 m1 = n >= 32 ? (__mmask16)0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1u) : 0;
  for (KL_EVEN_TILES(m, mr, M, MR)) {
    const float* a = A + m * lda;
    float* c = C + m * ldc;
    switch (mr) {
#define KL_TILE(R) \
  case R: tile(K, a, lda, P, init, c, ldc, m0, m1, R); break;
      KL_TILE(14) KL_TILE(13) KL_TILE(12) KL_TILE(11) KL_TILE(10) KL_TILE(9) KL_TILE(8)
      KL_TILE(7) KL_TILE(6) KL_TILE(5) KL_TILE(4) KL_TILE(3) KL_TILE(2) KL_TILE(1)
#undef KL_TILE
      default: break;
    }
  }
}
