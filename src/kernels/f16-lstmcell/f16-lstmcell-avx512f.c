/* LSTM cell/projection with IEEE half (float16) recurrent weights on AVX-512F:
 * each 16-unit gate vector is 32 bytes of halves widened with vcvtph2ps (part
 * of AVX-512F) and accumulated in float32 with FMA, in k order, for up to 6
 * batch rows per weight load (the float32 kernel's tiling, half the bytes).
 * Layout: see f16-lstmcell-scalar.c. */
#include <immintrin.h>

#include "internal.h"
#include "avx512f-math.h"

KL_INLINE __m512 ld_half16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(const void*)p));
}

KL_INLINE void cell_tile(size_t R, size_t Hp, size_t blk, const uint16_t* w, const float* bias,
                         const kl_cell_row* rows, const int NB) {
  __m512 acc[6][4];
  const float* h[6];
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++) {
    h[e] = (const float*)rows[e].h;
    _Pragma("GCC unroll 8")
    for (int g = 0; g < 4; g++) acc[e][g] = _mm512_setzero_ps();
  }
  const uint16_t* wp = w + blk * R * 64;
  for (size_t k = 0; k < R; k++) {
    const __m512 w0 = ld_half16(wp + k * 64);
    const __m512 w1 = ld_half16(wp + k * 64 + 16);
    const __m512 w2 = ld_half16(wp + k * 64 + 32);
    const __m512 w3 = ld_half16(wp + k * 64 + 48);
    _Pragma("GCC unroll 8")
    for (int e = 0; e < NB; e++) {
      const __m512 hk = _mm512_set1_ps(h[e][k]);
      acc[e][0] = _mm512_fmadd_ps(w0, hk, acc[e][0]);
      acc[e][1] = _mm512_fmadd_ps(w1, hk, acc[e][1]);
      acc[e][2] = _mm512_fmadd_ps(w2, hk, acc[e][2]);
      acc[e][3] = _mm512_fmadd_ps(w3, hk, acc[e][3]);
    }
  }
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++)
    kl_avx512_cell_update(acc[e], (const float*)rows[e].gx, bias, Hp, blk * KL_NR,
                          (float*)rows[e].c, (float*)rows[e].h_out);
}

void kl_f16_lstmcell_ukernel__avx512f(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                      const void* w, const void* bias, size_t nb,
                                      const kl_cell_row* rows) {
  for (size_t blk = blk0; blk < blk1; blk++) {
#define TILE(e, n) cell_tile(R, Hp, blk, w, bias, rows + (e), n)
    KL_AVX512_CELL_TILES(nb, TILE)
#undef TILE
  }
}

KL_INLINE void proj_tile(size_t H, size_t blk, const uint16_t* w, const void* const* h_in,
                         void* const* h_out, const int NB) {
  __m512 acc[8];
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++) acc[e] = _mm512_setzero_ps();
  const uint16_t* wp = w + blk * H * 16;
  for (size_t j = 0; j < H; j++) {
    const __m512 wj = ld_half16(wp + j * 16);
    _Pragma("GCC unroll 8")
    for (int e = 0; e < NB; e++)
      acc[e] = _mm512_fmadd_ps(wj, _mm512_set1_ps(((const float*)h_in[e])[j]), acc[e]);
  }
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++) _mm512_storeu_ps((float*)h_out[e] + blk * 16, acc[e]);
}

void kl_f16_lstmproj_ukernel__avx512f(size_t H, size_t blk0, size_t blk1, const void* w,
                                      size_t nb, const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    size_t e = 0;
    for (; e + 8 <= nb; e += 8) proj_tile(H, blk, w, h_in + e, h_out + e, 8);
    switch (nb - e) {
      case 7: proj_tile(H, blk, w, h_in + e, h_out + e, 7); break;
      case 6: proj_tile(H, blk, w, h_in + e, h_out + e, 6); break;
      case 5: proj_tile(H, blk, w, h_in + e, h_out + e, 5); break;
      case 4: proj_tile(H, blk, w, h_in + e, h_out + e, 4); break;
      case 3: proj_tile(H, blk, w, h_in + e, h_out + e, 3); break;
      case 2: proj_tile(H, blk, w, h_in + e, h_out + e, 2); break;
      case 1: proj_tile(H, blk, w, h_in + e, h_out + e, 1); break;
      default: break;
    }
  }
}
