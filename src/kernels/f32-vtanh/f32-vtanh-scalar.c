/* float32 tanh over n values, portable C (tanhf): the reference of the vector
 * entries. */
#include <math.h>

#include "internal.h"

void kl_f32_vtanh__scalar(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
}
