/* GELU (tanh form) with NEON: see f32-vgelu.inc for the formula and order. */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"

KL_INLINE float32x4_t gelu(float32x4_t x) {
  const float32x4_t x3 = vmulq_f32(vmulq_f32(x, x), x);
  const float32x4_t u = vmulq_f32(vaddq_f32(x, vmulq_f32(x3, vdupq_n_f32(0.044715f))),
                                  vdupq_n_f32(0.7978845608f));
  return vmulq_f32(vmulq_f32(x, vdupq_n_f32(0.5f)), vaddq_f32(kl_neon_tanh(u), vdupq_n_f32(1.0f)));
}

void kl_f32_vgelu__neon(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, gelu(vld1q_f32(x + i)));
  if (i < n) kl_neon_store_tail(y + i, gelu(kl_neon_load_tail(x + i, n - i)), n - i);
}
