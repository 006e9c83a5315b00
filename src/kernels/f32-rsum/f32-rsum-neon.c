/* Sum of n floats, 4 NEON accumulators: the read-bandwidth probe. */
#include <arm_neon.h>

#include "internal.h"

float kl_f32_rsum__neon(size_t n, const float* x) {
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = vaddq_f32(a0, vld1q_f32(x + i));
    a1 = vaddq_f32(a1, vld1q_f32(x + i + 4));
    a2 = vaddq_f32(a2, vld1q_f32(x + i + 8));
    a3 = vaddq_f32(a3, vld1q_f32(x + i + 12));
  }
  float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
  for (; i < n; i++) s += x[i];
  return s;
}
