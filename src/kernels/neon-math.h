/* NEON (AArch64 Advanced SIMD) float32 math shared by the NEON kernels
 * (header-only). */
#ifndef KL_NEON_MATH_H
#define KL_NEON_MATH_H

#include <arm_neon.h>
#include <stddef.h>

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

/* simd-math.h over float32x4_t: kl_neon_exp, _clamp, _sigmoid, _tanh, _sinsq, _cell_update
 * (FMIN/FMAX return NaN when either operand is NaN). */
#define KL_VF float32x4_t
#define KL_VNAME(name) kl_neon_##name
#define KL_VSET1 vdupq_n_f32
#define KL_VADD vaddq_f32
#define KL_VSUB vsubq_f32
#define KL_VMUL vmulq_f32
#define KL_VDIV vdivq_f32
#define KL_VMIN vminq_f32
#define KL_VMAX vmaxq_f32
#define KL_VNEG vnegq_f32
#define KL_VFMADD(a, b, c) vfmaq_f32(c, a, b)
#define KL_VFNMADD(a, b, c) vfmsq_f32(c, a, b)
#define KL_VROUND vrndnq_f32
/* 2^n built in the exponent field (2^128 encodes inf: exp overflows where expf does) */
#define KL_VSCALE(p, n) \
  vmulq_f32(p, vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23)))
#define KL_VLOADU vld1q_f32
#define KL_VSTOREU vst1q_f32
#include "simd-math.h"

/* n <= 4 floats from x into one vector, zero-filled / back into y. */
KL_INLINE float32x4_t kl_neon_load_tail(const float* x, size_t n) {
  float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (size_t j = 0; j < n; j++) t[j] = x[j];
  return vld1q_f32(t);
}
KL_INLINE void kl_neon_store_tail(float* y, float32x4_t v, size_t n) {
  float t[4];
  vst1q_f32(t, v);
  for (size_t j = 0; j < n; j++) y[j] = t[j];
}

#endif
