/* Template: the portable C LSTM projection for one weight type, the reference
 * of the SIMD kernels. A <wt>-lstmproj-scalar.c defines, then includes this file:
 *   KL_WTYPE          the panel element
 *   KL_FTYPE          the state and accumulation type (float, double)
 *   KL_PANEL(H)       elements of one 16-row block's panel
 *   KL_W(wp, j, l)    weight l (lane) of input j in the panel at wp, as KL_FTYPE
 *   KL_PROJ_UKERNEL   the kernel's name
 * Each output adds its products in j order from zero. */

void KL_PROJ_UKERNEL(size_t H, size_t blk0, size_t blk1, const void* w, size_t nb,
                     const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const KL_WTYPE* wp = (const KL_WTYPE*)w + blk * KL_PANEL(H);
    for (size_t e = 0; e < nb; e++) {
      const KL_FTYPE* h = (const KL_FTYPE*)h_in[e];
      KL_FTYPE acc[16] = {0};
      for (size_t j = 0; j < H; j++)
        for (int l = 0; l < 16; l++) acc[l] += KL_W(wp, j, l) * h[j];
      for (int l = 0; l < 16; l++) ((KL_FTYPE*)h_out[e])[blk * 16 + l] = acc[l];
    }
  }
}
