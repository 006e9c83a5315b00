/* Template: a float32 GEMM on one pre-packed panel (see f32-pgemm-scalar.c for
 * the contract) in tiles of 2 rows x 32 columns, for ISAs of 16 (x86) or 32
 * (AArch64) vector registers. An f32-pgemm-<isa>.c maps, then includes this file:
 *   KL_VF, KL_VN           the vector type and its lanes (32 / KL_VN vectors per row)
 *   KL_VZERO, KL_VLOADU(p), KL_VSTOREU(p, v), KL_VADD(a, b)
 *   KL_VA, KL_VBCAST(p)    A's element as the FMA takes it, read from p
 *   KL_VFMA(acc, a, w)     acc + a*w, fused
 *   KL_PGEMM_UKERNEL       the kernel's name
 * One fused multiply-add per k in k order per element, as the scalar kernel. A
 * partial panel (n < 32) runs row by row on a 32-column copy of the row (and of
 * init), then its n columns are copied back: the same products in the same order. */
#include <string.h>

#define MR 2
#define NV (KL_PGEMM_NR / KL_VN)

KL_INLINE void tile(size_t K, const float* A, size_t lda, const float* P, const float* init,
                    float* C, size_t ldc, const int mr) {
  KL_VF acc[MR][NV];
  _Pragma("GCC unroll 2")
  for (int r = 0; r < mr; r++)
    _Pragma("GCC unroll 8")
    for (int v = 0; v < NV; v++) acc[r][v] = init ? KL_VLOADU(init + KL_VN * v) : KL_VZERO;
  for (size_t k = 0; k < K; k++) {
    KL_VF w[NV];
    _Pragma("GCC unroll 8")
    for (int v = 0; v < NV; v++) w[v] = KL_VLOADU(P + k * KL_PGEMM_NR + KL_VN * v);
    _Pragma("GCC unroll 2")
    for (int r = 0; r < mr; r++) {
      const KL_VA a = KL_VBCAST(A + (size_t)r * lda + k);
      _Pragma("GCC unroll 8")
      for (int v = 0; v < NV; v++) acc[r][v] = KL_VFMA(acc[r][v], a, w[v]);
    }
  }
  _Pragma("GCC unroll 2")
  for (int r = 0; r < mr; r++)
    _Pragma("GCC unroll 8")
    for (int v = 0; v < NV; v++) {
      float* c = C + (size_t)r * ldc + KL_VN * v;
      KL_VSTOREU(c, init ? acc[r][v] : KL_VADD(KL_VLOADU(c), acc[r][v]));
    }
}

static void rows(size_t M, size_t K, const float* A, size_t lda, const float* P,
                 const float* init, float* C, size_t ldc) {
  size_t m = 0;
  for (; m + MR <= M; m += MR) tile(K, A + m * lda, lda, P, init, C + m * ldc, ldc, MR);
  if (m < M) tile(K, A + m * lda, lda, P, init, C + m * ldc, ldc, 1);
}

void KL_PGEMM_UKERNEL(size_t M, size_t n, size_t K, const float* A, size_t lda, const float* P,
                      const float* init, float* C, size_t ldc) {
  if (n == KL_PGEMM_NR) {
    rows(M, K, A, lda, P, init, C, ldc);
    return;
  }
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
