/* LSTM cell/projection with IEEE half (float16) recurrent weights for AArch64
 * NEON: four halves widened with FCVTL (vcvt_f32_f16, baseline on AArch64) and
 * accumulated with FMA in k order, as the float32 NEON kernel.
 * Layout: see f16-lstmcell-scalar.c. */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"

KL_INLINE float32x4_t ld_half4(const uint16_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

void kl_f16_lstmcell_ukernel__neon(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                   const void* w, const void* bias, size_t nb,
                                   const kl_cell_row* rows) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const uint16_t* wp = (const uint16_t*)w + blk * R * 64;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)rows[e].h;
      float32x4_t acc[4][4]; /* [quarter of the block][gate] */
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++)
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++) acc[q][g] = vdupq_n_f32(0.0f);
      for (size_t k = 0; k < R; k++) {
        const float hk = h[k];
        const uint16_t* wk = wp + k * 64;
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++)
          _Pragma("GCC unroll 16")
          for (int q = 0; q < 4; q++) acc[q][g] = vfmaq_n_f32(acc[q][g], ld_half4(wk + g * 16 + q * 4), hk);
      }
      const float* gx = (const float*)rows[e].gx;
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++)
        kl_neon_cell_update(acc[q], gx, (const float*)bias, Hp, blk * KL_NR + (size_t)q * 4,
                            (float*)rows[e].c, (float*)rows[e].h_out);
    }
  }
}

void kl_f16_lstmproj_ukernel__neon(size_t H, size_t blk0, size_t blk1, const void* w,
                                   size_t nb, const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const uint16_t* wp = (const uint16_t*)w + blk * H * 16;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)h_in[e];
      float32x4_t acc[4];
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++) acc[q] = vdupq_n_f32(0.0f);
      for (size_t j = 0; j < H; j++) {
        const float hj = h[j];
        _Pragma("GCC unroll 16")
        for (int q = 0; q < 4; q++) acc[q] = vfmaq_n_f32(acc[q], ld_half4(wp + j * 16 + q * 4), hj);
      }
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++) vst1q_f32((float*)h_out[e] + blk * 16 + q * 4, acc[q]);
    }
  }
}
