/* Template: the NEON LSTM projection for one weight type, one batch row at a
 * time, a 16-unit block in four float32x4. A <wt>-lstmproj-neon.c defines, then
 * includes this file:
 *   KL_WTYPE         the panel element (float, uint16_t)
 *   KL_LOAD_W(p)     4 weights at p widened to float32x4_t
 *   KL_PROJ_UKERNEL  the kernel's name
 * Panel layout: see lstmproj-avx512f.h. */

void KL_PROJ_UKERNEL(size_t H, size_t blk0, size_t blk1, const void* w, size_t nb,
                     const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const KL_WTYPE* wp = (const KL_WTYPE*)w + blk * H * 16;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)h_in[e];
      float32x4_t acc[4];
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++) acc[q] = vdupq_n_f32(0.0f);
      for (size_t j = 0; j < H; j++) {
        const float hj = h[j];
        _Pragma("GCC unroll 16")
        for (int q = 0; q < 4; q++) acc[q] = vfmaq_n_f32(acc[q], KL_LOAD_W(wp + j * 16 + q * 4), hj);
      }
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++) vst1q_f32((float*)h_out[e] + blk * 16 + q * 4, acc[q]);
    }
  }
}
