/* LSTM cell with bfloat16 recurrent weights using AArch64 BFDOT (FEAT_BF16):
 * h_{t-1} is rounded to bfloat16 pairs once per row, each BFDOT multiplies
 * 4 units x 2 k and accumulates in float32 (the counterpart of vdpbf16ps in
 * bf16-lstmcell-avx512bf16.c). Layout: see bf16-lstmcell-scalar.c; a panel's
 * (k even, k odd) pair per unit is exactly BFDOT's operand pair.
 * The projection uses the NEON widening kernel (bf16-lstmcell-neon.c). */
#include <arm_neon.h>
#include <string.h>

#include "internal.h"
#include "neon-math.h"

#define MAX_PAIRS 2048 /* R <= 4096; larger R uses the NEON widening kernel */

void kl_bf16_lstmcell_ukernel__neonbf16(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                        const void* w, const void* bias, size_t nb,
                                        const kl_cell_row* rows) {
  const size_t npair = (R + 1) / 2;
  if (npair > MAX_PAIRS) {
    kl_bf16_lstmcell_ukernel__neon(R, Hp, blk0, blk1, w, bias, nb, rows);
    return;
  }
  static _Thread_local uint32_t hb[MAX_PAIRS];
  for (size_t e = 0; e < nb; e++) {
    const float* h = (const float*)rows[e].h;
    for (size_t kp = 0; kp < npair; kp++) {
      const uint16_t lo = kl_f32_to_bf16(h[2 * kp]);
      const uint16_t hi = 2 * kp + 1 < R ? kl_f32_to_bf16(h[2 * kp + 1]) : 0;
      hb[kp] = (uint32_t)lo | (uint32_t)hi << 16;
    }
    for (size_t blk = blk0; blk < blk1; blk++) {
      const uint16_t* wp = (const uint16_t*)w + blk * npair * 128;
      float32x4_t acc[4][4]; /* [quarter of the block][gate] */
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++)
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++) acc[q][g] = vdupq_n_f32(0.0f);
      for (size_t kp = 0; kp < npair; kp++) {
        const bfloat16x8_t hk = vreinterpretq_bf16_u32(vdupq_n_u32(hb[kp]));
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 4; g++)
          _Pragma("GCC unroll 16")
          for (int q = 0; q < 4; q++) {
            const bfloat16x8_t v = vreinterpretq_bf16_u16(vld1q_u16(wp + kp * 128 + g * 32 + q * 8));
            acc[q][g] = vbfdotq_f32(acc[q][g], v, hk);
          }
      }
      _Pragma("GCC unroll 16")
      for (int q = 0; q < 4; q++)
        kl_neon_cell_update(acc[q], (const float*)rows[e].gx, (const float*)bias, Hp,
                            blk * KL_NR + (size_t)q * 4, (float*)rows[e].c, (float*)rows[e].h_out);
    }
  }
}
