/* float32 sigmoid over n values for AVX2 + FMA (avx2fma-math.h), a zero-filled
 * copy for the tail. */
#include <immintrin.h>

#include "internal.h"
#include "avx2fma-math.h"

void kl_f32_vsigmoid__avx2fma(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, kl_avx2fma_sigmoid(_mm256_loadu_ps(x + i)));
  if (i < n) {
    float tx[8] = {0}, ty[8];
    for (size_t j = 0; j < n - i; j++) tx[j] = x[i + j];
    _mm256_storeu_ps(ty, kl_avx2fma_sigmoid(_mm256_loadu_ps(tx)));
    for (size_t j = 0; j < n - i; j++) y[i + j] = ty[j];
  }
}
