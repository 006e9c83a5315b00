/* Snake, portable C: see f32-vsnake.inc for the formula and order. */
#include "internal.h"
#include "scalar-math.h"

void kl_f32_vsnake__scalar(size_t n, const float* x, float a, float c, float* y) {
  for (size_t i = 0; i < n; i++) y[i] = x[i] + c * kl_sinsqf(a * x[i]);
}
