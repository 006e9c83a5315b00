/* Template: the AVX2 + FMA LSTM cell for one weight type, one batch row at a
 * time; a 16-unit block is two ymm per gate. A <wt>-lstmcell-<isa>.c defines,
 * then includes this file:
 *   KL_WTYPE         the panel element (float, uint16_t)
 *   KL_LOAD_W(p)     8 weights at p, 32-byte aligned as floats, widened to __m256
 *   KL_CELL_UKERNEL  the kernel's name
 * Panel layout: see lstmcell-avx512f.h. */

void KL_CELL_UKERNEL(size_t R, size_t Hp, size_t blk0, size_t blk1, const void* w,
                     const void* bias, size_t nb, const kl_cell_row* rows) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const KL_WTYPE* wp = (const KL_WTYPE*)w + blk * R * 64;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)rows[e].h;
      __m256 lo[4], hi[4];
      _Pragma("GCC unroll 8")
      for (int g = 0; g < 4; g++) lo[g] = hi[g] = _mm256_setzero_ps();
      for (size_t k = 0; k < R; k++) {
        const __m256 hk = _mm256_broadcast_ss(h + k);
        const KL_WTYPE* wk = wp + k * 64;
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++) {
          lo[g] = _mm256_fmadd_ps(KL_LOAD_W(wk + g * 16), hk, lo[g]);
          hi[g] = _mm256_fmadd_ps(KL_LOAD_W(wk + g * 16 + 8), hk, hi[g]);
        }
      }
      const float* gx = (const float*)rows[e].gx;
      kl_avx2fma_cell_update(lo, gx, bias, Hp, blk * KL_NR, rows[e].c, rows[e].h_out);
      kl_avx2fma_cell_update(hi, gx, bias, Hp, blk * KL_NR + 8, rows[e].c, rows[e].h_out);
    }
  }
}
