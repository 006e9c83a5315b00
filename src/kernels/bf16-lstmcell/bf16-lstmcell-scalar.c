/* Portable C LSTM cell/projection with bfloat16 recurrent weights, float32
 * state and accumulation.
 * Cell panels pair consecutive k: w[((blk*Re/2 + kp)*4 + g)*32 + lane*2 + (k&1)],
 * Re = round_up(R, 2); projection panels w[(blk*He/2 + jp)*32 + lane*2 + (j&1)]. */
#include <math.h>

#include "internal.h"
#include "scalar-math.h"

void kl_bf16_lstmcell_ukernel__scalar(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                      const void* w, const void* bias_, size_t nb,
                                      const kl_cell_row* rows) {
  const float* bias = (const float*)bias_;
  const size_t npair = (R + 1) / 2;
  for (size_t blk = blk0; blk < blk1; blk++) {
    const uint16_t* wp = (const uint16_t*)w + blk * npair * 128;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)rows[e].h;
      const float* gx = (const float*)rows[e].gx;
      float* c = (float*)rows[e].c;
      float* h_out = (float*)rows[e].h_out;
      float acc[64] = {0};
      for (size_t k = 0; k < R; k++) {
        const float hk = h[k];
        const uint16_t* wk = wp + (k / 2) * 128 + (k & 1);
        for (int j = 0; j < 64; j++) acc[j] += kl_bf16_to_f32(wk[j * 2]) * hk;
      }
      kl_scalar_cell_update(acc, gx, bias, Hp, blk, c, h_out);
    }
  }
}

void kl_bf16_lstmproj_ukernel__scalar(size_t H, size_t blk0, size_t blk1, const void* w,
                                      size_t nb, const void* const* h_in, void* const* h_out) {
  const size_t npair = (H + 1) / 2;
  for (size_t blk = blk0; blk < blk1; blk++) {
    const uint16_t* wp = (const uint16_t*)w + blk * npair * 32;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)h_in[e];
      float acc[16] = {0};
      for (size_t j = 0; j < H; j++) {
        const uint16_t* wj = wp + (j / 2) * 32 + (j & 1);
        for (int l = 0; l < 16; l++) acc[l] += kl_bf16_to_f32(wj[l * 2]) * h[j];
      }
      for (int l = 0; l < 16; l++) ((float*)h_out[e])[blk * 16 + l] = acc[l];
    }
  }
}
