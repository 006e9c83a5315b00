/* LSTM cell/projection with bfloat16 recurrent weights on AVX-512F without
 * AVX512_BF16: each 32-bit lane holds a (k even, k odd) weight pair, widened
 * to float32 with one shift / one mask; h stays float32. Layout: see
 * bf16-lstmcell-scalar.c. */
#include <immintrin.h>

#include "internal.h"
#include "avx512f-math.h"

KL_INLINE __m512 even_ps(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
KL_INLINE __m512 odd_ps(__m512i v) {
  return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}

KL_INLINE void cell_tile(size_t R, size_t Hp, size_t blk, const uint16_t* w, const float* bias,
                         const kl_cell_row* rows, const int NB) {
  const size_t npair = (R + 1) / 2, nfull = R / 2;
  __m512 acc[4][4];
  const float* h[4];
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++) {
    h[e] = (const float*)rows[e].h;
    _Pragma("GCC unroll 8")
    for (int g = 0; g < 4; g++) acc[e][g] = _mm512_setzero_ps();
  }
  const uint16_t* wp = w + blk * npair * 128;
  for (size_t kp = 0; kp < nfull; kp++) {
    __m512i wv[4];
    _Pragma("GCC unroll 8")
    for (int g = 0; g < 4; g++) wv[g] = _mm512_load_si512((const void*)(wp + kp * 128 + g * 32));
    _Pragma("GCC unroll 8")
    for (int e = 0; e < NB; e++) {
      const __m512 h0 = _mm512_set1_ps(h[e][2 * kp]), h1 = _mm512_set1_ps(h[e][2 * kp + 1]);
      _Pragma("GCC unroll 8")
      for (int g = 0; g < 4; g++) {
        acc[e][g] = _mm512_fmadd_ps(even_ps(wv[g]), h0, acc[e][g]);
        acc[e][g] = _mm512_fmadd_ps(odd_ps(wv[g]), h1, acc[e][g]);
      }
    }
  }
  if (npair != nfull) { /* odd R: the last pair has no odd element */
    _Pragma("GCC unroll 8")
    for (int g = 0; g < 4; g++) {
      const __m512 we = even_ps(_mm512_load_si512((const void*)(wp + nfull * 128 + g * 32)));
      _Pragma("GCC unroll 8")
      for (int e = 0; e < NB; e++)
        acc[e][g] = _mm512_fmadd_ps(we, _mm512_set1_ps(h[e][2 * nfull]), acc[e][g]);
    }
  }
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++)
    kl_avx512f_cell_update(acc[e], (const float*)rows[e].gx, bias, Hp, blk * KL_NR,
                          (float*)rows[e].c, (float*)rows[e].h_out);
}

void kl_bf16_lstmcell_ukernel__avx512f(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                       const void* w, const void* bias, size_t nb,
                                       const kl_cell_row* rows) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    size_t e = 0;
    for (; e + 4 <= nb; e += 4) cell_tile(R, Hp, blk, w, bias, rows + e, 4);
    switch (nb - e) {
      case 3: cell_tile(R, Hp, blk, w, bias, rows + e, 3); break;
      case 2: cell_tile(R, Hp, blk, w, bias, rows + e, 2); break;
      case 1: cell_tile(R, Hp, blk, w, bias, rows + e, 1); break;
      default: break;
    }
  }
}
