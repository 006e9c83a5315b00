/* LSTM cell with bfloat16 recurrent weights using AVX512_BF16 (vdpbf16ps):
 * h_{t-1} is rounded to bfloat16 once per call, each instruction multiplies
 * 16 units x 2 k and accumulates in float32. Layout: see bf16-lstmcell-scalar.c.
 * The projection uses the AVX-512F widening kernel. */
#include <immintrin.h>
#include <string.h>

#include "internal.h"
#include "avx512f-math.h"

#define MAX_PAIRS 2048 /* R <= 4096; larger R uses the AVX-512F kernel */

/* h[0..R) -> bf16 pairs, zero-padded to an even count. */
static void pack_h(size_t R, const float* h, uint32_t* out) {
  size_t k = 0;
  for (; k + 32 <= R; k += 32) {
    __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(h + k + 16), _mm512_loadu_ps(h + k));
    _mm512_storeu_si512((void*)(out + k / 2), (__m512i)v);
  }
  if (k < R) {
    float tmp[32] = {0};
    memcpy(tmp, h + k, (R - k) * sizeof(float));
    __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(tmp + 16), _mm512_loadu_ps(tmp));
    uint32_t t32[16];
    _mm512_storeu_si512((void*)t32, (__m512i)v);
    memcpy(out + k / 2, t32, ((R - k + 1) / 2) * sizeof(uint32_t));
  }
}

KL_INLINE void cell_tile(size_t npair, size_t Hp, size_t blk, const uint16_t* w, const float* bias,
                         const kl_cell_row* rows, const uint32_t* hb, const int NB) {
  __m512 acc[4][4];
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++)
    _Pragma("GCC unroll 8")
    for (int g = 0; g < 4; g++) acc[e][g] = _mm512_setzero_ps();
  const uint16_t* wp = w + blk * npair * 128;
  for (size_t kp = 0; kp < npair; kp++) {
    __m512bh wv[4];
    _Pragma("GCC unroll 8")
    for (int g = 0; g < 4; g++) wv[g] = (__m512bh)_mm512_load_si512((const void*)(wp + kp * 128 + g * 32));
    _Pragma("GCC unroll 8")
    for (int e = 0; e < NB; e++) {
      const __m512bh hk = (__m512bh)_mm512_set1_epi32((int)hb[(size_t)e * MAX_PAIRS + kp]);
      _Pragma("GCC unroll 8")
      for (int g = 0; g < 4; g++) acc[e][g] = _mm512_dpbf16_ps(acc[e][g], wv[g], hk);
    }
  }
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++)
    kl_avx512f_cell_update(acc[e], (const float*)rows[e].gx, bias, Hp, blk * KL_NR,
                          (float*)rows[e].c, (float*)rows[e].h_out);
}

void kl_bf16_lstmcell_ukernel__avx512bf16(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                          const void* w, const void* bias, size_t nb,
                                          const kl_cell_row* rows) {
  const size_t npair = (R + 1) / 2;
  if (npair > MAX_PAIRS) {
    kl_bf16_lstmcell_ukernel__avx512f(R, Hp, blk0, blk1, w, bias, nb, rows);
    return;
  }
  static _Thread_local uint32_t hb[4 * MAX_PAIRS];
  for (size_t e0 = 0; e0 < nb; e0 += 4) {
    const size_t n = nb - e0 < 4 ? nb - e0 : 4;
    for (size_t e = 0; e < n; e++) pack_h(R, (const float*)rows[e0 + e].h, hb + e * MAX_PAIRS);
    for (size_t blk = blk0; blk < blk1; blk++) {
      switch (n) {
        case 4: cell_tile(npair, Hp, blk, w, bias, rows + e0, hb, 4); break;
        case 3: cell_tile(npair, Hp, blk, w, bias, rows + e0, hb, 3); break;
        case 2: cell_tile(npair, Hp, blk, w, bias, rows + e0, hb, 2); break;
        default: cell_tile(npair, Hp, blk, w, bias, rows + e0, hb, 1); break;
      }
    }
  }
}
