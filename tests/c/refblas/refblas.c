/* Reference (naive, single-threaded) sgemm/dgemm for the cross-compiled C test:
 * C = alpha * op(A) op(B) + beta * C, row- or column-major. Correct, not fast. */
#include "cblas.h"

#define KL_REF_GEMM(name, T)                                                                  \
  void name(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M,  \
            int N, int K, T alpha, const T* A, int lda, const T* B, int ldb, T beta, T* C,    \
            int ldc) {                                                                        \
    if (order == CblasColMajor) { /* C^T = op(B)^T op(A)^T in row-major terms */              \
      name(CblasRowMajor, tb, ta, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc);              \
      return;                                                                                 \
    }                                                                                         \
    for (int i = 0; i < M; i++)                                                               \
      for (int j = 0; j < N; j++) {                                                           \
        T acc = 0;                                                                            \
        for (int k = 0; k < K; k++) {                                                         \
          const T a = ta == CblasNoTrans ? A[(long)i * lda + k] : A[(long)k * lda + i];       \
          const T b = tb == CblasNoTrans ? B[(long)k * ldb + j] : B[(long)j * ldb + k];       \
          acc += a * b;                                                                       \
        }                                                                                     \
        T* c = &C[(long)i * ldc + j];                                                         \
        *c = alpha * acc + (beta == 0 ? (T)0 : beta * *c);                                    \
      }                                                                                       \
  }

KL_REF_GEMM(cblas_sgemm, float)
KL_REF_GEMM(cblas_dgemm, double)

static int g_threads = 1;
int openblas_get_num_threads(void) { return g_threads; }
void openblas_set_num_threads(int n) { g_threads = n; }
