/* float32 sigmoid over n values for AVX-512F (avx512f-math.h), a masked load/store
 * for the tail. */
#include <immintrin.h>

#include "internal.h"
#include "avx512f-math.h"

void kl_f32_vsigmoid__avx512f(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, kl_avx512f_sigmoid(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, kl_avx512f_sigmoid(_mm512_maskz_loadu_ps(m, x + i)));
  }
}
