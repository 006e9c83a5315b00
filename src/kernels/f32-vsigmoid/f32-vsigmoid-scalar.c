/* float32 sigmoid over n values, portable C (1 / (1 + expf(-x))): the reference of
 * the vector entries. */
#include <math.h>

#include "internal.h"
#include "scalar-math.h"

void kl_f32_vsigmoid__scalar(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; i++) y[i] = kl_sigmoidf(x[i]);
}
