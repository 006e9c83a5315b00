/* LSTM cell/projection with IEEE half (float16) recurrent weights on AVX-512F:
 * each 16-unit gate vector is 32 bytes of halves widened with vcvtph2ps (part
 * of AVX-512F) and accumulated in float32 with FMA, in k order, for up to 6
 * batch rows per weight load (the float32 kernel's tiling, half the bytes).
 * A single batch row may instead widen 8 halves per instruction (row_narrow,
 * F16C): same bits, and on CPUs that split 512-bit operations in two halves
 * faster (Zen 4: 7.6 vs 10.7 us per step at H = 256, B = 1; the 16-core Xeon:
 * 16.0 vs 13.3, slower), so it is chosen by measurement (kl_f16_narrow_rows,
 * src/core/cpu.c). Layout: see f16-lstmcell-scalar.c. */
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

/* One batch row, halves widened 8 at a time into two ymm accumulators per gate,
 * joined for the 512-bit cell update. Each lane adds its products by one fused
 * multiply-add per k in k order from zero, as cell_tile: the same bits. */
__attribute__((target("f16c"))) static void row_narrow(size_t R, size_t Hp, size_t blk,
                                                       const uint16_t* w, const float* bias,
                                                       const kl_cell_row* row) {
  __m256 lo[4], hi[4];
  _Pragma("GCC unroll 8")
  for (int g = 0; g < 4; g++) lo[g] = hi[g] = _mm256_setzero_ps();
  const float* h = (const float*)row->h;
  const uint16_t* wp = w + blk * R * 64;
  for (size_t k = 0; k < R; k++) {
    const __m256 hk = _mm256_broadcast_ss(h + k);
    const __m128i* wk = (const __m128i*)(const void*)(wp + k * 64);
    _Pragma("GCC unroll 8")
    for (int g = 0; g < 4; g++) {
      lo[g] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_load_si128(wk + 2 * g)), hk, lo[g]);
      hi[g] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_load_si128(wk + 2 * g + 1)), hk, hi[g]);
    }
  }
  __m512 acc[4];
  _Pragma("GCC unroll 8")
  for (int g = 0; g < 4; g++)
    acc[g] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo[g])),
                                                 _mm256_castps_pd(hi[g]), 1));
  kl_avx512_cell_update(acc, (const float*)row->gx, bias, Hp, blk * KL_NR, (float*)row->c,
                        (float*)row->h_out);
}

void kl_f16_lstmcell_ukernel__avx512f(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                      const void* w, const void* bias, size_t nb,
                                      const kl_cell_row* rows) {
  if (nb == 1 && kl_f16_narrow_rows()) {
    for (size_t blk = blk0; blk < blk1; blk++) row_narrow(R, Hp, blk, w, bias, rows);
    return;
  }
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

/* The measurement behind kl_f16_narrow_rows: one row through one 16-unit block
 * of R = 128 (zero weights and state, L1-resident), reps times, either way. */
void kl_f16_lstmcell_probe__avx512f(int narrow, size_t reps) {
  enum { PR = 128 };
  static uint16_t w[PR * 64] __attribute__((aligned(64)));
  static float h[PR], gx[4 * KL_NR], bias[4 * KL_NR], c[KL_NR], h_out[KL_NR];
  const kl_cell_row row = {gx, h, c, h_out};
  for (size_t r = 0; r < reps; r++) {
    if (narrow) row_narrow(PR, KL_NR, 0, w, bias, &row);
    else cell_tile(PR, KL_NR, 0, w, bias, &row, 1);
  }
}
