/* Portable C f64 LSTM cell and projection: the float64 end-to-end path.
 * Same panel layout as f32 with double elements. */
#include <math.h>

#include "internal.h"

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

void kl_f64_lstmcell_ukernel__scalar(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                     const void* w, const void* bias_, size_t nb,
                                     const kl_cell_row* rows) {
  const double* bias = (const double*)bias_;
  for (size_t blk = blk0; blk < blk1; blk++) {
    const double* wp = (const double*)w + blk * R * 64;
    for (size_t e = 0; e < nb; e++) {
      const double* h = (const double*)rows[e].h;
      const double* gx = (const double*)rows[e].gx;
      double* c = (double*)rows[e].c;
      double* h_out = (double*)rows[e].h_out;
      double acc[64] = {0};
      for (size_t k = 0; k < R; k++) {
        const double hk = h[k];
        for (int j = 0; j < 64; j++) acc[j] += wp[k * 64 + j] * hk;
      }
      for (int l = 0; l < KL_NR; l++) {
        const size_t u = blk * KL_NR + (size_t)l;
        double pre[4];
        for (int g = 0; g < 4; g++) pre[g] = acc[g * 16 + l] + gx[g * Hp + u] + bias[g * Hp + u];
        const double cn = sigmoid(pre[1]) * c[u] + sigmoid(pre[0]) * tanh(pre[2]);
        c[u] = cn;
        h_out[u] = sigmoid(pre[3]) * tanh(cn);
      }
    }
  }
}

void kl_f64_lstmproj_ukernel__scalar(size_t H, size_t blk0, size_t blk1, const void* w,
                                     size_t nb, const void* const* h_in, void* const* h_out) {
  for (size_t blk = blk0; blk < blk1; blk++) {
    const double* wp = (const double*)w + blk * H * 16;
    for (size_t e = 0; e < nb; e++) {
      const double* h = (const double*)h_in[e];
      double acc[16] = {0};
      for (size_t j = 0; j < H; j++)
        for (int l = 0; l < 16; l++) acc[l] += wp[j * 16 + l] * h[j];
      for (int l = 0; l < 16; l++) ((double*)h_out[e])[blk * 16 + l] = acc[l];
    }
  }
}
