/* Row mean and variance, portable C: see f32-rmoments.inc for the tree. */
#include "internal.h"
#include "f32-rmoments-scalar.h"

void kl_f32_rmoments__scalar(size_t n, const float* x, double* mean, double* var) {
  double acc[KL_RMOMENTS_LANES] = {0};
  const double m = kl_rmoments_sum_tail(acc, 0, n, x) / (double)n;
  for (int j = 0; j < KL_RMOMENTS_LANES; j++) acc[j] = 0.0;
  *mean = m;
  *var = kl_rmoments_sq_tail(acc, 0, n, x, m) / (double)n;
}
