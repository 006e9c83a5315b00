/* Snake with NEON: see f32-vsnake.inc for the formula and order. */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"
#include "scalar-math.h"

KL_INLINE float32x4_t snake(float32x4_t x, const float32x4_t p[5]) {
  x = vaddq_f32(vmulq_f32(vsubq_f32(x, p[0]), p[1]), p[2]);
  const float32x4_t t = vmulq_f32(p[3], x);
  float32x4_t s2 = kl_neon_sinsq(t);
  const uint32x4_t near = vcleq_f32(vabsq_f32(t), vdupq_n_f32(KL_SINSQ_RANGE));
  if (vminvq_u32(near) == 0) { /* a lane out of range, inf or NaN */
    float tt[4], ss[4];
    vst1q_f32(tt, t);
    vst1q_f32(ss, s2);
    for (int j = 0; j < 4; j++)
      if (!(fabsf(tt[j]) <= KL_SINSQ_RANGE)) ss[j] = kl_sinsqf(tt[j]);
    s2 = vld1q_f32(ss);
  }
  return vaddq_f32(x, vmulq_f32(p[4], s2));
}

void kl_f32_vsnake__neon(size_t n, const float* x, float m, float g, float off, float a, float c,
                         float* y) {
  const float32x4_t p[5] = {vdupq_n_f32(m), vdupq_n_f32(g), vdupq_n_f32(off), vdupq_n_f32(a),
                            vdupq_n_f32(c)};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, snake(vld1q_f32(x + i), p));
  if (i < n) kl_neon_store_tail(y + i, snake(kl_neon_load_tail(x + i, n - i), p), n - i);
}
