/* Row softmax, portable C: y = exp(x - max) / sum (see src/ops/dense.h). */
#include <math.h>

#include "internal.h"

void kl_f32_softmax_ukernel__scalar(size_t n, const float* x, float* y) {
  if (n == 0) return;
  float mx = -INFINITY;
  for (size_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  float s = 0.0f;
  for (size_t i = 0; i < n; i++) {
    y[i] = expf(x[i] - mx);
    s += y[i];
  }
  const float inv = 1.0f / s;
  for (size_t i = 0; i < n; i++) y[i] *= inv;
}
