/* Row mean and variance with NEON, lanes 2k, 2k+1 in register k: see f32-rmoments.inc. */
#include <arm_neon.h>

#include "internal.h"
#include "f32-rmoments-scalar.h"

void kl_f32_rmoments__neon(size_t n, const float* x, double* mean, double* var) {
  double acc[KL_RMOMENTS_LANES];
  float64x2_t a[16];
  size_t i;
  for (int k = 0; k < 16; k++) a[k] = vdupq_n_f64(0.0);
  for (i = 0; i + KL_RMOMENTS_LANES <= n; i += KL_RMOMENTS_LANES)
    for (int k = 0; k < 8; k++) {
      const float32x4_t v = vld1q_f32(x + i + 4 * k);
      a[2 * k] = vaddq_f64(a[2 * k], vcvt_f64_f32(vget_low_f32(v)));
      a[2 * k + 1] = vaddq_f64(a[2 * k + 1], vcvt_high_f64_f32(v));
    }
  for (int k = 0; k < 16; k++) vst1q_f64(acc + 2 * k, a[k]);
  const double m = kl_rmoments_sum_tail(acc, i, n, x) / (double)n;
  const float64x2_t vm = vdupq_n_f64(m);
  for (int k = 0; k < 16; k++) a[k] = vdupq_n_f64(0.0);
  for (i = 0; i + KL_RMOMENTS_LANES <= n; i += KL_RMOMENTS_LANES)
    for (int k = 0; k < 8; k++) {
      const float32x4_t v = vld1q_f32(x + i + 4 * k);
      const float64x2_t d0 = vsubq_f64(vcvt_f64_f32(vget_low_f32(v)), vm);
      const float64x2_t d1 = vsubq_f64(vcvt_high_f64_f32(v), vm);
      a[2 * k] = vaddq_f64(a[2 * k], vmulq_f64(d0, d0));
      a[2 * k + 1] = vaddq_f64(a[2 * k + 1], vmulq_f64(d1, d1));
    }
  for (int k = 0; k < 16; k++) vst1q_f64(acc + 2 * k, a[k]);
  *mean = m;
  *var = kl_rmoments_sq_tail(acc, i, n, x, m) / (double)n;
}
