/* f32 LSTM cell, projection and activations for AVX2 + FMA.
 * Same panel layout as the other f32 kernels; a 16-unit block is two ymm. */
#include <immintrin.h>

#include "internal.h"
#include "avx2fma-math.h"

void kl_f32_vsigmoid__avx2fma(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, kl_avx2_sigmoid(_mm256_loadu_ps(x + i)));
  if (i < n) {
    float tx[8] = {0}, ty[8];
    for (size_t j = 0; j < n - i; j++) tx[j] = x[i + j];
    _mm256_storeu_ps(ty, kl_avx2_sigmoid(_mm256_loadu_ps(tx)));
    for (size_t j = 0; j < n - i; j++) y[i + j] = ty[j];
  }
}

void kl_f32_vtanh__avx2fma(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, kl_avx2_tanh(_mm256_loadu_ps(x + i)));
  if (i < n) {
    float tx[8] = {0}, ty[8];
    for (size_t j = 0; j < n - i; j++) tx[j] = x[i + j];
    _mm256_storeu_ps(ty, kl_avx2_tanh(_mm256_loadu_ps(tx)));
    for (size_t j = 0; j < n - i; j++) y[i + j] = ty[j];
  }
}

void kl_f32_lstmcell_ukernel__avx2fma(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                      const void* w, const void* bias, size_t nb,
                                      const kl_cell_row* rows) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const float* wp = (const float*)w + blk * R * 64;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)rows[e].h;
      __m256 lo[4], hi[4];
      _Pragma("GCC unroll 8")
      for (int g = 0; g < 4; g++) lo[g] = hi[g] = _mm256_setzero_ps();
      for (size_t k = 0; k < R; k++) {
        const __m256 hk = _mm256_broadcast_ss(h + k);
        const float* wk = wp + k * 64;
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++) {
          lo[g] = _mm256_fmadd_ps(_mm256_load_ps(wk + g * 16), hk, lo[g]);
          hi[g] = _mm256_fmadd_ps(_mm256_load_ps(wk + g * 16 + 8), hk, hi[g]);
        }
      }
      const float* gx = (const float*)rows[e].gx;
      kl_avx2_cell_update(lo, gx, bias, Hp, blk * KL_NR, rows[e].c, rows[e].h_out);
      kl_avx2_cell_update(hi, gx, bias, Hp, blk * KL_NR + 8, rows[e].c, rows[e].h_out);
    }
  }
}

void kl_f32_lstmproj_ukernel__avx2fma(size_t H, size_t blk0, size_t blk1, const void* w,
                                      size_t nb, const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const float* wp = (const float*)w + blk * H * 16;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)h_in[e];
      __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
      for (size_t j = 0; j < H; j++) {
        const __m256 hj = _mm256_broadcast_ss(h + j);
        lo = _mm256_fmadd_ps(_mm256_load_ps(wp + j * 16), hj, lo);
        hi = _mm256_fmadd_ps(_mm256_load_ps(wp + j * 16 + 8), hj, hi);
      }
      _mm256_storeu_ps((float*)h_out[e] + blk * 16, lo);
      _mm256_storeu_ps((float*)h_out[e] + blk * 16 + 8, hi);
    }
  }
}
