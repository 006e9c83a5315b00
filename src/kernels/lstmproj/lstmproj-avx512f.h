/* Template: the AVX-512F LSTM projection (h_out = W_hr h) for one weight type,
 * up to 8 batch rows per weight load. A <wt>-lstmproj-avx512f.c defines, then
 * includes this file:
 *   KL_WTYPE         the panel element (float, uint16_t)
 *   KL_LOAD_W(p)     16 weights at p, 64-byte aligned as floats, widened to __m512
 *   KL_PROJ_UKERNEL  the kernel's name
 * Panel layout: w[(blk*H + j)*16 + lane] = W_hr[blk*16 + lane, j]. */

KL_INLINE void proj_tile(size_t H, size_t blk, const KL_WTYPE* w, const void* const* h_in,
                         void* const* h_out, const int NB) {
  __m512 acc[8];
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++) acc[e] = _mm512_setzero_ps();
  const KL_WTYPE* wp = w + blk * H * 16;
  for (size_t j = 0; j < H; j++) {
    const __m512 wj = KL_LOAD_W(wp + j * 16);
    _Pragma("GCC unroll 8")
    for (int e = 0; e < NB; e++)
      acc[e] = _mm512_fmadd_ps(wj, _mm512_set1_ps(((const float*)h_in[e])[j]), acc[e]);
  }
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++) _mm512_storeu_ps((float*)h_out[e] + blk * 16, acc[e]);
}

void KL_PROJ_UKERNEL(size_t H, size_t blk0, size_t blk1, const void* w, size_t nb,
                     const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    size_t e = 0;
    for (; e + 8 <= nb; e += 8) proj_tile(H, blk, w, h_in + e, h_out + e, 8);
    switch (nb - e) {
      case 7: proj_tile(H, blk, w, h_in + e, h_out + e, 7); break;
      case 6: proj_tile(H, blk, w, h_in + e, h_out + e, 6); break;
      case 5: proj_tile(H, blk, w, h_in + e, h_out + e, 5); break;
      case 4: proj_tile(H, blk, w, h_in + e, h_out + e, 4); break;
      case 3: proj_tile(H, blk, w, h_in + e, h_out + e, 3); break;
      case 2: proj_tile(H, blk, w, h_in + e, h_out + e, 2); break;
      case 1: proj_tile(H, blk, w, h_in + e, h_out + e, 1); break;
      default: break;
    }
  }
}
