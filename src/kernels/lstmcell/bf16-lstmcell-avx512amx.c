/* LSTM cell with bfloat16 recurrent weights on AMX tiles (tdpbf16ps): the
 * gates of up to 16 batch rows for one 16-unit block are one tile product,
 * h (rows of bfloat16 pairs) x the block's W_hh panel (the layout of
 * bf16-lstmcell-scalar.c, which is AMX's B-tile layout: the 16 units of gate
 * g at pair kp are 64 bytes, pair kp+1 lies 256 bytes on). The products leave
 * the tiles through a small buffer into the AVX-512 gate epilogue.
 * h is rounded as in the vdpbf16ps kernel (kl_f32_to_bf16_pairs) and the gate
 * sums accumulate in float32, with tdpbf16ps's own rounding of the pair sums
 * (a few ulp from vdpbf16ps's on random data: the avx512-amx level gives other
 * bits than avx512-bf16, within the same bfloat16 bounds). Tile rows (batch
 * rows) never mix, so no row depends on which rows share its tile.
 * h longer than AMX_MAX_PAIRS pairs goes to the vdpbf16ps kernel. */
#include "internal.h"
#include "avx512amx-tile.h"
#include "avx512f-math.h"

#define AMX_MAX_PAIRS 512 /* R <= 1024 */

void kl_bf16_lstmcell_ukernel__avx512amx(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                         const void* w, const void* bias, size_t nb,
                                         const kl_cell_row* rows) {
  const size_t npair = (R + 1) / 2, kfull = npair / KL_AMX_KB * KL_AMX_KB;
  /* pairs per h row, padded */
  const size_t ld = (npair + KL_AMX_KB - 1) / KL_AMX_KB * KL_AMX_KB;
  if (ld > AMX_MAX_PAIRS) {
    kl_bf16_lstmcell_ukernel__avx512bf16(R, Hp, blk0, blk1, w, bias, nb, rows);
    return;
  }
  static _Thread_local uint32_t hb[16 * AMX_MAX_PAIRS];
  _Alignas(64) float acc[16 * 64]; /* [row][gate][16 units] */
  _Alignas(64) uint8_t btail[4 * 1024];
  for (size_t e0 = 0; e0 < nb; e0 += 16) {
    const size_t n = nb - e0 < 16 ? nb - e0 : 16;
    for (size_t e = 0; e < n; e++) {
      uint32_t* he = hb + e * ld;
      kl_f32_to_bf16_pairs__avx512bf16(1, R, (const float*)rows[e0 + e].h, R, he);
      for (size_t p = npair; p < ld; p++) he[p] = 0;
    }
    KL_MEMORY_BARRIER();
    kl_avx512amx_configure((int)n);
    for (size_t blk = blk0; blk < blk1; blk++) {
      const uint16_t* wp = (const uint16_t*)w + blk * npair * 128;
      kl_avx512amx_zero_acc();
      for (size_t kb = 0; kb < kfull; kb += KL_AMX_KB) {
        _tile_loadd(4, hb + kb, ld * sizeof(uint32_t));
        kl_avx512amx_panel_product((const uint8_t*)(wp + kb * 128), 64, 256);
      }
      if (kfull < npair) { /* h rows are zero past npair; the panel's tail is copied */
        kl_avx512amx_panel_tail(wp, kfull, npair, btail);
        _tile_loadd(4, hb + kfull, ld * sizeof(uint32_t));
        kl_avx512amx_panel_product(btail, 1024, 64);
      }
      kl_avx512amx_store_acc(acc, 64);
      for (size_t e = 0; e < n; e++) {
        const float* a = acc + e * 64;
        const __m512 g4[4] = {_mm512_load_ps(a), _mm512_load_ps(a + 16), _mm512_load_ps(a + 32),
                              _mm512_load_ps(a + 48)};
        const kl_cell_row* r = &rows[e0 + e];
        kl_avx512f_cell_update(g4, (const float*)r->gx, (const float*)bias, Hp, blk * KL_NR,
                              (float*)r->c, (float*)r->h_out);
      }
    }
  }
  _tile_release();
}
