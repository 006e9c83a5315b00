/* Template: the AVX2 + FMA LSTM projection for one weight type, one batch row at
 * a time, a 16-unit block in two ymm. A <wt>-lstmproj-<isa>.c defines, then
 * includes this file:
 *   KL_WTYPE         the panel element (float, uint16_t)
 *   KL_LOAD_W(p)     8 weights at p, 32-byte aligned as floats, widened to __m256
 *   KL_PROJ_UKERNEL  the kernel's name
 * Panel layout: see lstmproj-avx512f.h. */

void KL_PROJ_UKERNEL(size_t H, size_t blk0, size_t blk1, const void* w, size_t nb,
                     const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const KL_WTYPE* wp = (const KL_WTYPE*)w + blk * H * 16;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)h_in[e];
      __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
      for (size_t j = 0; j < H; j++) {
        const __m256 hj = _mm256_broadcast_ss(h + j);
        lo = _mm256_fmadd_ps(KL_LOAD_W(wp + j * 16), hj, lo);
        hi = _mm256_fmadd_ps(KL_LOAD_W(wp + j * 16 + 8), hj, hi);
      }
      _mm256_storeu_ps((float*)h_out[e] + blk * 16, lo);
      _mm256_storeu_ps((float*)h_out[e] + blk * 16 + 8, hi);
    }
  }
}
