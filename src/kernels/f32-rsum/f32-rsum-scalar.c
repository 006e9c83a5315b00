/* Sum of n floats with 16 independent lanes: the read-bandwidth probe. */
#include "internal.h"

float kl_f32_rsum__scalar(size_t n, const float* x) {
  float acc[16] = {0};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; l++) acc[l] += x[i + (size_t)l];
  float s = 0.0f;
  for (; i < n; i++) s += x[i];
  for (int l = 0; l < 16; l++) s += acc[l];
  return s;
}
