/* Partial panels for f32-pgemm kernels that compute whole 32-column rows only
 * (avx2fma, neon): a panel of n < KL_PGEMM_NR columns runs row by row on a
 * 32-column copy of the row (and of init), then its n columns are copied back.
 * The same products in the same order, so the same bits as any other entry. */
#ifndef KL_F32_PGEMM_PARTIAL_H
#define KL_F32_PGEMM_PARTIAL_H

#include <string.h>

#include "internal.h"

/* C[M, KL_PGEMM_NR] (ldc) = init + A P for whole panel rows (the kernel's own loop) */
typedef void (*kl_pgemm_rows_fn)(size_t M, size_t K, const float* A, size_t lda, const float* P,
                                 const float* init, float* C, size_t ldc);

static inline void kl_pgemm_partial(kl_pgemm_rows_fn rows, size_t M, size_t n, size_t K,
                                    const float* A, size_t lda, const float* P,
                                    const float* init, float* C, size_t ldc) {
  float row[KL_PGEMM_NR], start[KL_PGEMM_NR];
  if (init) {
    memset(start, 0, sizeof(start));
    memcpy(start, init, n * sizeof(float));
  }
  for (size_t m = 0; m < M; m++) {
    memset(row, 0, sizeof(row));
    memcpy(row, C + m * ldc, n * sizeof(float));
    rows(1, K, A + m * lda, lda, P, init ? start : NULL, row, KL_PGEMM_NR);
    memcpy(C + m * ldc, row, n * sizeof(float));
  }
}

#endif
