/* float32 sigmoid over n values for AArch64 NEON (neon-math.h), a zero-filled copy
 * for the tail. */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"

void kl_f32_vsigmoid__neon(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, kl_neon_sigmoid(vld1q_f32(x + i)));
  if (i < n) kl_neon_store_tail(y + i, kl_neon_sigmoid(kl_neon_load_tail(x + i, n - i)), n - i);
}
