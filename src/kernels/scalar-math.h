/* Portable float32 math shared by the scalar kernels (header-only). */
#ifndef KL_SCALAR_MATH_H
#define KL_SCALAR_MATH_H

#include <math.h>
#include <stddef.h>

static inline float kl_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* sin(x)^2 as the square of libm's sinf (the Snake kernels' reference and far lanes). */
static inline float kl_sinsqf(float x) {
  const float s = sinf(x);
  return s * s;
}

/* Gate epilogue for the 16 units of block blk; acc[g*16 + lane] = (W_hh h)[g, unit]. */
static inline void kl_scalar_cell_update(const float acc[64], const float* gx, const float* bias,
                                         size_t Hp, size_t blk, float* c, float* h_out) {
  for (size_t l = 0; l < 16; l++) {
    const size_t u = blk * 16 + l;
    float pre[4];
    for (size_t g = 0; g < 4; g++) pre[g] = acc[g * 16 + l] + gx[g * Hp + u] + bias[g * Hp + u];
    const float cn = kl_sigmoidf(pre[1]) * c[u] + kl_sigmoidf(pre[0]) * tanhf(pre[2]);
    c[u] = cn;
    h_out[u] = kl_sigmoidf(pre[3]) * tanhf(cn);
  }
}

#endif
