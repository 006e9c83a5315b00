/* IEEE half (float16) LSTM cell for AVX-512F (lstmcell-avx512f.h): each 16-unit
 * gate vector is 32 bytes of halves widened with vcvtph2ps (part of AVX-512F),
 * accumulated in float32 with FMA in k order. Layout: see f16-lstmcell-scalar.c.
 *
 * The _narrow entry widens a single batch row's halves 8 per instruction (F16C)
 * into two ymm accumulators per gate: the same bits, for CPUs that split 512-bit
 * conversions in two; the dispatch decides which (KL_ARCH_F16_NARROW,
 * kl_f16_narrow_rows in src/core/cpu.c). */
#include <immintrin.h>

#include "internal.h"
#include "avx512f-math.h"

#define KL_WTYPE uint16_t
#define KL_LOAD_W(p) _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(const void*)(p)))
#define KL_CELL_UKERNEL kl_f16_lstmcell_ukernel__avx512f
#include "lstmcell-avx512f.h"

/* One batch row, halves widened 8 at a time, the two ymm halves of each gate
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
  kl_avx512f_cell_update(acc, (const float*)row->gx, bias, Hp, blk * KL_NR, (float*)row->c,
                         (float*)row->h_out);
}

/* Several rows: the 6-row tiles of kl_f16_lstmcell_ukernel__avx512f. */
void kl_f16_lstmcell_ukernel__avx512f_narrow(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                             const void* w, const void* bias, size_t nb,
                                             const kl_cell_row* rows) {
  if (nb != 1) {
    kl_f16_lstmcell_ukernel__avx512f(R, Hp, blk0, blk1, w, bias, nb, rows);
    return;
  }
  for (size_t blk = blk0; blk < blk1; blk++) row_narrow(R, Hp, blk, w, bias, rows);
}
