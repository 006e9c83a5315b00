/* f32 LSTM cell, projection and activations for AArch64 NEON.
 * Same panel layout as the other f32 kernels; a 16-unit block is four
 * float32x4 per gate (16 accumulators of the 32 vector registers). */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"

void kl_f32_vsigmoid__neon(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, kl_neon_sigmoid(vld1q_f32(x + i)));
  if (i < n) kl_neon_store_tail(y + i, kl_neon_sigmoid(kl_neon_load_tail(x + i, n - i)), n - i);
}

void kl_f32_vtanh__neon(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, kl_neon_tanh(vld1q_f32(x + i)));
  if (i < n) kl_neon_store_tail(y + i, kl_neon_tanh(kl_neon_load_tail(x + i, n - i)), n - i);
}

void kl_f32_lstmcell_ukernel__neon(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                   const void* w, const void* bias, size_t nb,
                                   const kl_cell_row* rows) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const float* wp = (const float*)w + blk * R * 64;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)rows[e].h;
      float32x4_t acc[4][4]; /* [quarter of the block][gate] */
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++)
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++) acc[q][g] = vdupq_n_f32(0.0f);
      for (size_t k = 0; k < R; k++) {
        const float hk = h[k];
        const float* wk = wp + k * 64;
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++)
          _Pragma("GCC unroll 16")
          for (int q = 0; q < 4; q++) acc[q][g] = vfmaq_n_f32(acc[q][g], vld1q_f32(wk + g * 16 + q * 4), hk);
      }
      const float* gx = (const float*)rows[e].gx;
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++)
        kl_neon_cell_update(acc[q], gx, (const float*)bias, Hp, blk * KL_NR + (size_t)q * 4,
                            (float*)rows[e].c, (float*)rows[e].h_out);
    }
  }
}

void kl_f32_lstmproj_ukernel__neon(size_t H, size_t blk0, size_t blk1, const void* w,
                                   size_t nb, const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const float* wp = (const float*)w + blk * H * 16;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)h_in[e];
      float32x4_t acc[4];
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++) acc[q] = vdupq_n_f32(0.0f);
      for (size_t j = 0; j < H; j++) {
        const float hj = h[j];
        _Pragma("GCC unroll 16")
        for (int q = 0; q < 4; q++) acc[q] = vfmaq_n_f32(acc[q], vld1q_f32(wp + j * 16 + q * 4), hj);
      }
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++) vst1q_f32((float*)h_out[e] + blk * 16 + q * 4, acc[q]);
    }
  }
}
