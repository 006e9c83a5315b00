/* bfloat16 GEMM for the input projection with AVX512_BF16 (vdpbf16ps):
 * C[M, N] (ldc) = A[M, 2*Kp] * W[N, 2*Kp]^T, float32 accumulation.
 * A: rows of Kp bfloat16 pairs (uint32, row stride Kp), from kl_f32_to_bf16_pairs.
 * W: panels of 64 columns: W[((p*Kp + kp)*4 + j)*32 + l*2 + q] is column
 *    p*64 + j*16 + l, k = 2*kp + q. N is a multiple of 64. */
#include <immintrin.h>
#include <string.h>

#include "internal.h"

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

KL_INLINE void gemm_tile(size_t Kp, const uint32_t* A, const uint16_t* wp, float* C, size_t ldc,
                         const int MR) {
  __m512 acc[6][4];
  _Pragma("GCC unroll 8")
  for (int r = 0; r < MR; r++)
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 4; j++) acc[r][j] = _mm512_setzero_ps();
  for (size_t kp = 0; kp < Kp; kp++) {
    __m512bh w[4];
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 4; j++) w[j] = (__m512bh)_mm512_load_si512((const void*)(wp + (kp * 4 + (size_t)j) * 32));
    _Pragma("GCC unroll 8")
    for (int r = 0; r < MR; r++) {
      const __m512bh b = (__m512bh)_mm512_set1_epi32((int)A[(size_t)r * Kp + kp]);
      _Pragma("GCC unroll 8")
      for (int j = 0; j < 4; j++) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], w[j], b);
    }
  }
  _Pragma("GCC unroll 8")
  for (int r = 0; r < MR; r++)
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 4; j++) _mm512_storeu_ps(C + (size_t)r * ldc + (size_t)j * 16, acc[r][j]);
}

void kl_bf16_gemm_ukernel__avx512bf16(size_t M, size_t N, size_t Kp, const uint32_t* A,
                                      const uint16_t* W, float* C, size_t ldc) {
  for (size_t n0 = 0; n0 < N; n0 += 64) {
    const uint16_t* wp = W + (n0 / 64) * Kp * 128;
    size_t m = 0;
    for (; m + 6 <= M; m += 6) gemm_tile(Kp, A + m * Kp, wp, C + m * ldc + n0, ldc, 6);
    const uint32_t* a = A + m * Kp;
    float* c = C + m * ldc + n0;
    switch (M - m) {
      case 5: gemm_tile(Kp, a, wp, c, ldc, 5); break;
      case 4: gemm_tile(Kp, a, wp, c, ldc, 4); break;
      case 3: gemm_tile(Kp, a, wp, c, ldc, 3); break;
      case 2: gemm_tile(Kp, a, wp, c, ldc, 2); break;
      case 1: gemm_tile(Kp, a, wp, c, ldc, 1); break;
      default: break;
    }
  }
}

/* rows [0, M) of X (K floats, row stride ldx) -> bfloat16 pairs [M][Kp],
 * round to nearest even, the odd tail padded with 0. */
void kl_f32_to_bf16_pairs__avx512bf16(size_t M, size_t K, const float* X, size_t ldx,
                                      uint32_t* out) {
  const size_t Kp = (K + 1) / 2;
  for (size_t m = 0; m < M; m++) {
    const float* x = X + m * ldx;
    uint32_t* o = out + m * Kp;
    size_t k = 0;
    for (; k + 32 <= K; k += 32) {
      __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
      _mm512_storeu_si512((void*)(o + k / 2), (__m512i)v);
    }
    if (k < K) {
      float tmp[32] = {0};
      memcpy(tmp, x + k, (K - k) * sizeof(float));
      __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(tmp + 16), _mm512_loadu_ps(tmp));
      uint32_t t32[16];
      _mm512_storeu_si512((void*)t32, (__m512i)v);
      memcpy(o + k / 2, t32, ((K - k + 1) / 2) * sizeof(uint32_t));
    }
  }
}
