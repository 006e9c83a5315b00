/* Portable C LSTM cell/projection with IEEE half (float16) recurrent weights,
 * float32 state and accumulation. Same panel layouts as the float32 kernels,
 * 16-bit elements: cell w[(blk*R + k)*64 + g*16 + lane], projection
 * w[(blk*H + j)*16 + lane]. Half -> float is exact (kl_f16_to_f32). */
#include <math.h>

#include "internal.h"
#include "scalar-math.h"

void kl_f16_lstmcell_ukernel__scalar(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                     const void* w, const void* bias_, size_t nb,
                                     const kl_cell_row* rows) {
  const float* bias = (const float*)bias_;
  for (size_t blk = blk0; blk < blk1; blk++) {
    const uint16_t* wp = (const uint16_t*)w + blk * R * 64;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)rows[e].h;
      float acc[64] = {0};
      for (size_t k = 0; k < R; k++) {
        const float hk = h[k];
        for (int j = 0; j < 64; j++) acc[j] += kl_f16_to_f32(wp[k * 64 + j]) * hk;
      }
      kl_scalar_cell_update(acc, (const float*)rows[e].gx, bias, Hp, blk, (float*)rows[e].c,
                            (float*)rows[e].h_out);
    }
  }
}

void kl_f16_lstmproj_ukernel__scalar(size_t H, size_t blk0, size_t blk1, const void* w,
                                     size_t nb, const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const uint16_t* wp = (const uint16_t*)w + blk * H * 16;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)h_in[e];
      float acc[16] = {0};
      for (size_t j = 0; j < H; j++)
        for (int l = 0; l < 16; l++) acc[l] += kl_f16_to_f32(wp[j * 16 + l]) * h[j];
      for (int l = 0; l < 16; l++) ((float*)h_out[e])[blk * 16 + l] = acc[l];
    }
  }
}
