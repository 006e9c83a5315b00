/* Products on a B packed in 32-column panels (the f32-pgemm kernel list): used by
 * the dense operators (src/ops/matmul.c and the convolutions, constant weights of the TVM lowering) and
 * by the LSTM's input projection (inproj.c, W_ih of entries whose weights cannot
 * change behind the cache). OpenBLAS packs its B panel on every call, which at
 * few rows costs a large share of the call; a B packed once skips that, and each element is one
 * fused multiply-add per k in k order, so results depend on neither the blocks,
 * the tasks, the thread count nor the ISA. */
#include "internal.h"

void kl_pgemm_panels(kl_f32_pgemm_ukernel_fn kern, int64_t m, int64_t N, int64_t K,
                     const float* A, int64_t lda, const float* P, const float* bias, int64_t sbias,
                     float* C, int64_t ldc, int64_t p0, int64_t p1, int accumulate) {
  for (int64_t p = p0; p < p1; p++) {
    const int64_t n0 = p * KL_PGEMM_NR, n = N - n0 < KL_PGEMM_NR ? N - n0 : KL_PGEMM_NR;
    float* c = C + n0;
    float init[KL_PGEMM_NR];
    for (int64_t i = 0; i < n; i++) init[i] = bias ? bias[(n0 + i) * sbias] : 0.0f;
    if (K == 0) {
      if (accumulate) continue;
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) c[i * ldc + j] = init[j];
      continue;
    }
    const float* panel = P + p * K * KL_PGEMM_NR;
    for (int64_t k0 = 0; k0 < K; k0 += KL_PGEMM_KC) {
      const int64_t kc = K - k0 < KL_PGEMM_KC ? K - k0 : KL_PGEMM_KC;
      kern((size_t)m, (size_t)n, (size_t)kc, A + k0, (size_t)lda, panel + k0 * KL_PGEMM_NR,
           k0 == 0 && !accumulate ? init : NULL, c, (size_t)ldc);
    }
  }
}
