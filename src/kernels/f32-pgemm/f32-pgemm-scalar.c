/* float32 GEMM on one pre-packed panel, portable C: C[M, n] (ldc) = init +
 * A[M, K] (lda) * P, P = [K][KL_PGEMM_NR] (the panel's columns n..NR-1 zero, not
 * read), init: n start values, or NULL to add to C (C += A P: a later K block, or
 * another tap of a convolution). Each element is one fmaf chain in k order, from
 * init or from zero, then added to C: the vector kernels' bits. */
#include <math.h>

#include "internal.h"

void kl_f32_pgemm_ukernel__scalar(size_t M, size_t n, size_t K, const float* A, size_t lda,
                                  const float* P, const float* init, float* C, size_t ldc) {
  for (size_t r = 0; r < M; r++) {
    const float* a = A + r * lda;
    float* c = C + r * ldc;
    for (size_t j = 0; j < n; j++) {
      float acc = init ? init[j] : 0.0f;
      for (size_t k = 0; k < K; k++) acc = fmaf(a[k], P[k * KL_PGEMM_NR + j], acc);
      c[j] = init ? acc : c[j] + acc;
    }
  }
}
