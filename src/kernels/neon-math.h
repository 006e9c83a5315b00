/* NEON (AArch64 Advanced SIMD) float32 math shared by the NEON kernels
 * (header-only): the same exp/sigmoid/tanh and gate epilogue as avx2fma-math.h,
 * four lanes at a time. */
#ifndef KL_NEON_MATH_H
#define KL_NEON_MATH_H

#include <arm_neon.h>
#include <stddef.h>

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

/* exp(x) for x in [-88, 88]; Cephes-style polynomial, ~1 ulp. */
KL_INLINE float32x4_t kl_neon_exp(float32x4_t x) {
  const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
  r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
  p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
  p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
  p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
  /* 2^n: n in [-126, 128] after the clamp (2^128 encodes inf: exp overflows
   * exactly where expf does); NaN inputs stay NaN through p. */
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

/* Clamp keeping NaN: FMIN/FMAX return NaN when either operand is NaN. */
KL_INLINE float32x4_t kl_neon_clamp(float32x4_t x, float lo, float hi) {
  return vminq_f32(vdupq_n_f32(hi), vmaxq_f32(vdupq_n_f32(lo), x));
}

KL_INLINE float32x4_t kl_neon_sigmoid(float32x4_t x) {
  const float32x4_t e = kl_neon_exp(kl_neon_clamp(vnegq_f32(x), -87.0f, 89.0f));
  return vdivq_f32(vdupq_n_f32(1.0f), vaddq_f32(vdupq_n_f32(1.0f), e));
}

KL_INLINE float32x4_t kl_neon_tanh(float32x4_t x) {
  const float32x4_t e = kl_neon_exp(kl_neon_clamp(vaddq_f32(x, x), -87.0f, 89.0f));
  const float32x4_t q = vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(vdupq_n_f32(1.0f), e));
  return vsubq_f32(vdupq_n_f32(1.0f), q);
}

/* Gate epilogue for one element and 4 units starting at u. */
KL_INLINE void kl_neon_cell_update(const float32x4_t acc[4], const float* gx, const float* bias,
                                   size_t Hp, size_t u, float* c, float* h_out) {
  float32x4_t pre[4];
  _Pragma("GCC unroll 8")
  for (int g = 0; g < 4; g++)
    pre[g] = vaddq_f32(vaddq_f32(acc[g], vld1q_f32(gx + g * Hp + u)), vld1q_f32(bias + g * Hp + u));
  const float32x4_t i = kl_neon_sigmoid(pre[0]);
  const float32x4_t f = kl_neon_sigmoid(pre[1]);
  const float32x4_t gg = kl_neon_tanh(pre[2]);
  const float32x4_t o = kl_neon_sigmoid(pre[3]);
  const float32x4_t cn = vfmaq_f32(vmulq_f32(i, gg), f, vld1q_f32(c + u));
  vst1q_f32(c + u, cn);
  vst1q_f32(h_out + u, vmulq_f32(o, kl_neon_tanh(cn)));
}

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
