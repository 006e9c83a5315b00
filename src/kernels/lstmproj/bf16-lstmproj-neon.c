/* bfloat16 LSTM projection for AArch64 NEON without BF16 instructions: each
 * bfloat16 pair of a 32-bit lane is widened to float32 (a shift or a mask) and
 * accumulated with FMA in j order. Layout: see bf16-lstmproj-scalar.c. */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"

/* A 32-bit lane holds (j even, j odd) as (low, high) halves. */
KL_INLINE float32x4_t widen_even(uint16x8_t v) {
  return vreinterpretq_f32_u32(vshlq_n_u32(vreinterpretq_u32_u16(v), 16));
}
KL_INLINE float32x4_t widen_odd(uint16x8_t v) {
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_u16(v), vdupq_n_u32(0xffff0000u)));
}

void kl_bf16_lstmproj_ukernel__neon(size_t H, size_t blk0, size_t blk1, const void* w,
                                    size_t nb, const void* const* h_in, void* const* h_out) {
  const size_t npair = (H + 1) / 2;
  for (size_t blk = blk0; blk < blk1; blk++) {
    const uint16_t* wp = (const uint16_t*)w + blk * npair * 32;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)h_in[e];
      float32x4_t acc[4];
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++) acc[q] = vdupq_n_f32(0.0f);
      for (size_t jp = 0; jp < npair; jp++) {
        const float h0 = h[2 * jp], h1 = 2 * jp + 1 < H ? h[2 * jp + 1] : 0.0f;
        const int odd = 2 * jp + 1 < H;
        _Pragma("GCC unroll 16")
        for (int q = 0; q < 4; q++) {
          const uint16x8_t v = vld1q_u16(wp + jp * 32 + q * 8);
          acc[q] = vfmaq_n_f32(acc[q], widen_even(v), h0);
          if (odd) acc[q] = vfmaq_n_f32(acc[q], widen_odd(v), h1);
        }
      }
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++) vst1q_f32((float*)h_out[e] + blk * 16 + q * 4, acc[q]);
    }
  }
}
