/* Template: the NEON LSTM cell for one weight type, one batch row at a time; a
 * 16-unit block is four float32x4 per gate (16 accumulators of the 32 vector
 * registers). A <wt>-lstmcell-neon.c defines, then includes this file:
 *   KL_WTYPE         the panel element (float, uint16_t)
 *   KL_LOAD_W(p)     4 weights at p widened to float32x4_t
 *   KL_CELL_UKERNEL  the kernel's name
 * Panel layout: see lstmcell-avx512f.h. */

void KL_CELL_UKERNEL(size_t R, size_t Hp, size_t blk0, size_t blk1, const void* w,
                     const void* bias, size_t nb, const kl_cell_row* rows) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const KL_WTYPE* wp = (const KL_WTYPE*)w + blk * R * 64;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)rows[e].h;
      float32x4_t acc[4][4]; /* [quarter of the block][gate] */
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++)
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++) acc[q][g] = vdupq_n_f32(0.0f);
      for (size_t k = 0; k < R; k++) {
        const float hk = h[k];
        const KL_WTYPE* wk = wp + k * 64;
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++)
          _Pragma("GCC unroll 16")
          for (int q = 0; q < 4; q++) acc[q][g] = vfmaq_n_f32(acc[q][g], KL_LOAD_W(wk + g * 16 + q * 4), hk);
      }
      const float* gx = (const float*)rows[e].gx;
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++)
        kl_neon_cell_update(acc[q], gx, (const float*)bias, Hp, blk * KL_NR + (size_t)q * 4,
                            (float*)rows[e].c, (float*)rows[e].h_out);
    }
  }
}
