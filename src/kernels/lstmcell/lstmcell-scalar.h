/* Template: the portable C LSTM cell for one weight type, the reference of the
 * SIMD kernels. A <wt>-lstmcell-scalar.c defines, then includes this file:
 *   KL_WTYPE          the panel element
 *   KL_FTYPE          the state and accumulation type (float, double)
 *   KL_PANEL(R)       elements of one 16-unit block's panel
 *   KL_W(wp, k, j)    weight j (g*16 + lane) of input k in the panel at wp, as KL_FTYPE
 *   KL_CELL_UPDATE    the gate epilogue, (acc[64], gx, bias, Hp, blk, c, h_out)
 *   KL_CELL_UKERNEL   the kernel's name
 * Each output adds its products in k order from zero. */

void KL_CELL_UKERNEL(size_t R, size_t Hp, size_t blk0, size_t blk1, const void* w,
                     const void* bias, size_t nb, const kl_cell_row* rows) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const KL_WTYPE* wp = (const KL_WTYPE*)w + blk * KL_PANEL(R);
    for (size_t e = 0; e < nb; e++) {
      const KL_FTYPE* h = (const KL_FTYPE*)rows[e].h;
      KL_FTYPE acc[64] = {0};
      for (size_t k = 0; k < R; k++) {
        const KL_FTYPE hk = h[k];
        for (int j = 0; j < 64; j++) acc[j] += KL_W(wp, k, j) * hk;
      }
      KL_CELL_UPDATE(acc, (const KL_FTYPE*)rows[e].gx, (const KL_FTYPE*)bias, Hp, blk,
                     (KL_FTYPE*)rows[e].c, (KL_FTYPE*)rows[e].h_out);
    }
  }
}
