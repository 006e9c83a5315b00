/* LSTM cell/projection with IEEE half (float16) recurrent weights for AVX2 +
 * FMA + F16C: 8 halves widened with vcvtph2ps, a 16-unit block is two ymm per
 * gate, one batch row at a time (as the float32 avx2fma kernel).
 * Layout: see f16-lstmcell-scalar.c. */
#include <immintrin.h>

#include "internal.h"
#include "avx2fma-math.h"

KL_INLINE __m256 ld_half8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_load_si128((const __m128i*)(const void*)p));
}

void kl_f16_lstmcell_ukernel__avx2f16c(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                       const void* w, const void* bias, size_t nb,
                                       const kl_cell_row* rows) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const uint16_t* wp = (const uint16_t*)w + blk * R * 64;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)rows[e].h;
      __m256 lo[4], hi[4];
      _Pragma("GCC unroll 8")
      for (int g = 0; g < 4; g++) lo[g] = hi[g] = _mm256_setzero_ps();
      for (size_t k = 0; k < R; k++) {
        const __m256 hk = _mm256_broadcast_ss(h + k);
        const uint16_t* wk = wp + k * 64;
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++) {
          lo[g] = _mm256_fmadd_ps(ld_half8(wk + g * 16), hk, lo[g]);
          hi[g] = _mm256_fmadd_ps(ld_half8(wk + g * 16 + 8), hk, hi[g]);
        }
      }
      const float* gx = (const float*)rows[e].gx;
      kl_avx2_cell_update(lo, gx, bias, Hp, blk * KL_NR, rows[e].c, rows[e].h_out);
      kl_avx2_cell_update(hi, gx, bias, Hp, blk * KL_NR + 8, rows[e].c, rows[e].h_out);
    }
  }
}

void kl_f16_lstmproj_ukernel__avx2f16c(size_t H, size_t blk0, size_t blk1, const void* w,
                                       size_t nb, const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const uint16_t* wp = (const uint16_t*)w + blk * H * 16;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)h_in[e];
      __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
      for (size_t j = 0; j < H; j++) {
        const __m256 hj = _mm256_broadcast_ss(h + j);
        lo = _mm256_fmadd_ps(ld_half8(wp + j * 16), hj, lo);
        hi = _mm256_fmadd_ps(ld_half8(wp + j * 16 + 8), hj, hi);
      }
      _mm256_storeu_ps((float*)h_out[e] + blk * 16, lo);
      _mm256_storeu_ps((float*)h_out[e] + blk * 16 + 8, hi);
    }
  }
}
