/* GELU (tanh form), portable C: see f32-vgelu.inc for the formula and order. */
#include <math.h>

#include "internal.h"

void kl_f32_vgelu__scalar(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; i++) {
    const float v = x[i];
    const float u = (v + v * v * v * 0.044715f) * 0.7978845608f;
    y[i] = (v * 0.5f) * (tanhf(u) + 1.0f);
  }
}
