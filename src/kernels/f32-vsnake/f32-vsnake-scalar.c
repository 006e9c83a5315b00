/* Snake, portable C: see f32-vsnake.inc for the formula and order. */
#include "internal.h"
#include "scalar-math.h"

void kl_f32_vsnake__scalar(size_t n, const float* x, float m, float g, float off, float a, float c,
                           float* y) {
  for (size_t i = 0; i < n; i++) {
    const float z = (x[i] - m) * g + off;
    y[i] = z + c * kl_sinsqf(a * z);
  }
}
