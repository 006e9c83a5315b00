/* Portable C f32 LSTM cell, projection and activations (libm). The reference
 * for the SIMD kernels; always built, selectable with KOKORO_LSTM_ISA=scalar. */
#include <math.h>

#include "internal.h"
#include "scalar-math.h"

void kl_f32_vsigmoid__scalar(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; i++) y[i] = kl_sigmoidf(x[i]);
}

void kl_f32_vtanh__scalar(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
}

void kl_f32_lstmcell_ukernel__scalar(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                     const void* w, const void* bias_, size_t nb,
                                     const kl_cell_row* rows) {
  const float* bias = (const float*)bias_;
  for (size_t blk = blk0; blk < blk1; blk++) {
    const float* wp = (const float*)w + blk * R * 64;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)rows[e].h;
      const float* gx = (const float*)rows[e].gx;
      float* c = (float*)rows[e].c;
      float* h_out = (float*)rows[e].h_out;
      float acc[64] = {0};
      for (size_t k = 0; k < R; k++) {
        const float hk = h[k];
        for (int j = 0; j < 64; j++) acc[j] += wp[k * 64 + j] * hk;
      }
      kl_scalar_cell_update(acc, gx, bias, Hp, blk, c, h_out);
    }
  }
}

void kl_f32_lstmproj_ukernel__scalar(size_t H, size_t blk0, size_t blk1, const void* w,
                                     size_t nb, const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const float* wp = (const float*)w + blk * H * 16;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)h_in[e];
      float acc[16] = {0};
      for (size_t j = 0; j < H; j++)
        for (int l = 0; l < 16; l++) acc[l] += wp[j * 16 + l] * h[j];
      for (int l = 0; l < 16; l++) ((float*)h_out[e])[blk * 16 + l] = acc[l];
    }
  }
}
