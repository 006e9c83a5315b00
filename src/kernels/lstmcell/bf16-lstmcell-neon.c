/* LSTM cell/projection with bfloat16 recurrent weights for AArch64 NEON
 * without BF16 instructions: each bfloat16 pair of a 32-bit lane is widened to
 * float32 (a shift or a mask) and accumulated with FMA in k order.
 * Layout: see bf16-lstmcell-scalar.c. */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"

/* A 32-bit lane holds (k even, k odd) as (low, high) halves. */
KL_INLINE float32x4_t widen_even(uint16x8_t v) {
  return vreinterpretq_f32_u32(vshlq_n_u32(vreinterpretq_u32_u16(v), 16));
}
KL_INLINE float32x4_t widen_odd(uint16x8_t v) {
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_u16(v), vdupq_n_u32(0xffff0000u)));
}

void kl_bf16_lstmcell_ukernel__neon(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                    const void* w, const void* bias, size_t nb,
                                    const kl_cell_row* rows) {
  const size_t npair = (R + 1) / 2;
  for (size_t blk = blk0; blk < blk1; blk++) {
    const uint16_t* wp = (const uint16_t*)w + blk * npair * 128;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)rows[e].h;
      float32x4_t acc[4][4]; /* [quarter of the block][gate] */
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++)
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++) acc[q][g] = vdupq_n_f32(0.0f);
      for (size_t kp = 0; kp < npair; kp++) {
        const float h0 = h[2 * kp], h1 = 2 * kp + 1 < R ? h[2 * kp + 1] : 0.0f;
        const int odd = 2 * kp + 1 < R;
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++)
          _Pragma("GCC unroll 16")
          for (int q = 0; q < 4; q++) {
            const uint16x8_t v = vld1q_u16(wp + kp * 128 + g * 32 + q * 8);
            acc[q][g] = vfmaq_n_f32(acc[q][g], widen_even(v), h0);
            if (odd) acc[q][g] = vfmaq_n_f32(acc[q][g], widen_odd(v), h1);
          }
      }
      const float* gx = (const float*)rows[e].gx;
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++)
        kl_neon_cell_update(acc[q], gx, (const float*)bias, Hp, blk * KL_NR + (size_t)q * 4,
                            (float*)rows[e].c, (float*)rows[e].h_out);
    }
  }
}
