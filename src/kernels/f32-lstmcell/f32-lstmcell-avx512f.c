/* f32 LSTM cell, projection and activations for AVX-512F.
 * Panel layout (see lstm.c): w[(blk*R + k)*64 + g*16 + lane] = W_hh[g*H + blk*16 + lane, k]. */
#include <immintrin.h>

#include "internal.h"
#include "avx512f-math.h"

void kl_f32_vsigmoid__avx512f(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, kl_avx512_sigmoid(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, kl_avx512_sigmoid(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void kl_f32_vtanh__avx512f(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, kl_avx512_tanh(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, kl_avx512_tanh(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

/* NB (up to 6) elements share each weight load: 24 accumulators, 4 weight
 * vectors and the broadcast h fill 29 of the 32 registers. Every element's
 * accumulation order is the same whatever NB is, so results never depend on the
 * batch tiling. 6 rows instead of 4 read W_hh from L2 fewer times per step:
 * one step at H = R = 256 in a loop, 2-vCPU Xeon VM, B = 16 / 64: 0.93 / 0.91x
 * the time of 4-row tiles (paired medians of 401), B <= 8 level. */
KL_INLINE void cell_tile(size_t R, size_t Hp, size_t blk, const float* w, const float* bias,
                         const kl_cell_row* rows, const int NB) {
  __m512 acc[6][4];
  const float* h[6];
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++) {
    h[e] = (const float*)rows[e].h;
    _Pragma("GCC unroll 8")
    for (int g = 0; g < 4; g++) acc[e][g] = _mm512_setzero_ps();
  }
  const float* wp = w + blk * R * 64;
  for (size_t k = 0; k < R; k++) {
    const __m512 w0 = _mm512_load_ps(wp + k * 64);
    const __m512 w1 = _mm512_load_ps(wp + k * 64 + 16);
    const __m512 w2 = _mm512_load_ps(wp + k * 64 + 32);
    const __m512 w3 = _mm512_load_ps(wp + k * 64 + 48);
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
    kl_avx512_cell_update(acc[e], (const float*)rows[e].gx, bias, Hp, blk * KL_NR, (float*)rows[e].c,
                (float*)rows[e].h_out);
}

void kl_f32_lstmcell_ukernel__avx512f(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                      const void* w, const void* bias, size_t nb,
                                      const kl_cell_row* rows) {
  for (size_t blk = blk0; blk < blk1; blk++) {
#define TILE(e, n) cell_tile(R, Hp, blk, w, bias, rows + (e), n)
    KL_AVX512_CELL_TILES(nb, TILE)
#undef TILE
  }
}

KL_INLINE void proj_tile(size_t H, size_t blk, const float* w, const void* const* h_in,
                         void* const* h_out, const int NB) {
  __m512 acc[8];
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++) acc[e] = _mm512_setzero_ps();
  const float* wp = w + blk * H * 16;
  for (size_t j = 0; j < H; j++) {
    const __m512 wj = _mm512_load_ps(wp + j * 16);
    _Pragma("GCC unroll 8")
    for (int e = 0; e < NB; e++)
      acc[e] = _mm512_fmadd_ps(wj, _mm512_set1_ps(((const float*)h_in[e])[j]), acc[e]);
  }
  _Pragma("GCC unroll 8")
  for (int e = 0; e < NB; e++) _mm512_storeu_ps((float*)h_out[e] + blk * 16, acc[e]);
}

void kl_f32_lstmproj_ukernel__avx512f(size_t H, size_t blk0, size_t blk1, const void* w,
                                      size_t nb, const void* const* h_in, void* const* h_out) {
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
