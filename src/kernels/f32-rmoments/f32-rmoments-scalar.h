/* The tails and the lane sums of the f32-rmoments kernels (see f32-rmoments.inc):
 * acc[32] holds the lanes after the vector loop over the first i elements. */
#ifndef KL_F32_RMOMENTS_SCALAR_H
#define KL_F32_RMOMENTS_SCALAR_H

#include <stddef.h>

#define KL_RMOMENTS_LANES 32

static inline double kl_rmoments_sum_tail(double acc[KL_RMOMENTS_LANES], size_t i, size_t n,
                                          const float* x) {
  for (; i < n; i++) acc[i % KL_RMOMENTS_LANES] += (double)x[i];
  double s = 0.0;
  for (int j = 0; j < KL_RMOMENTS_LANES; j++) s += acc[j];
  return s;
}

static inline double kl_rmoments_sq_tail(double acc[KL_RMOMENTS_LANES], size_t i, size_t n,
                                         const float* x, double mean) {
  for (; i < n; i++) {
    const double d = (double)x[i] - mean;
    acc[i % KL_RMOMENTS_LANES] += d * d;
  }
  double s = 0.0;
  for (int j = 0; j < KL_RMOMENTS_LANES; j++) s += acc[j];
  return s;
}

#endif
