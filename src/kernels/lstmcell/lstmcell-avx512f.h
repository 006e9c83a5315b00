/* Template: the AVX-512F LSTM cell for one weight type. A <wt>-lstmcell-avx512f.c
 * defines, then includes this file:
 *   KL_WTYPE         the panel element (float, uint16_t)
 *   KL_LOAD_W(p)     16 weights at p, 64-byte aligned as floats, widened to __m512
 *   KL_CELL_UKERNEL  the kernel's name
 * Panel layout (see src/core/engine.h): w[(blk*R + k)*64 + g*16 + lane] = W_hh[g*H + blk*16 + lane, k].
 *
 * NB (up to 6) rows share each weight load: 24 accumulators, 4 weight vectors
 * and the broadcast h fill 29 of the 32 registers. Every row's accumulation
 * order is the same whatever NB is, so results never depend on the batch tiling. */

KL_INLINE void cell_tile(size_t R, size_t Hp, size_t blk, const KL_WTYPE* w, const float* bias,
                         const kl_cell_row* rows, const int NB) {
  __m512 acc[6][4];
  const float* h[6];
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++) {
    h[e] = (const float*)rows[e].h;
    _Pragma("GCC unroll 8")
    for (int g = 0; g < 4; g++) acc[e][g] = _mm512_setzero_ps();
  }
  const KL_WTYPE* wp = w + blk * R * 64;
  for (size_t k = 0; k < R; k++) {
    const __m512 w0 = KL_LOAD_W(wp + k * 64);
    const __m512 w1 = KL_LOAD_W(wp + k * 64 + 16);
    const __m512 w2 = KL_LOAD_W(wp + k * 64 + 32);
    const __m512 w3 = KL_LOAD_W(wp + k * 64 + 48);
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
    kl_avx512f_cell_update(acc[e], (const float*)rows[e].gx, bias, Hp, blk * KL_NR,
                           (float*)rows[e].c, (float*)rows[e].h_out);
}

/* Rows in even tiles of at most 6 (8 rows: 4 + 4); each tile size is a constant
 * in its call, so each is its own unrolled tile. */
void KL_CELL_UKERNEL(size_t R, size_t Hp, size_t blk0, size_t blk1, const void* w,
                     const void* bias, size_t nb, const kl_cell_row* rows) {
  for (size_t blk = blk0; blk < blk1; blk++)
    for (KL_EVEN_TILES(e, n, nb, 6)) {
      switch (n) {
        case 6: cell_tile(R, Hp, blk, w, bias, rows + e, 6); break;
        case 5: cell_tile(R, Hp, blk, w, bias, rows + e, 5); break;
        case 4: cell_tile(R, Hp, blk, w, bias, rows + e, 4); break;
        case 3: cell_tile(R, Hp, blk, w, bias, rows + e, 3); break;
        case 2: cell_tile(R, Hp, blk, w, bias, rows + e, 2); break;
        default: cell_tile(R, Hp, blk, w, bias, rows + e, 1); break;
      }
    }
}
