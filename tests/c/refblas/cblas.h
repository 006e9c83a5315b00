/* The few CBLAS declarations the core uses, for the reference BLAS of the
 * cross-compiled C test (refblas.c; `make test-aarch64`), where no OpenBLAS
 * for the target is installed. Not used by the Python build. */
#ifndef KL_REFBLAS_CBLAS_H
#define KL_REFBLAS_CBLAS_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M,
                 int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                 float beta, float* C, int ldc);
void cblas_dgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M,
                 int N, int K, double alpha, const double* A, int lda, const double* B, int ldb,
                 double beta, double* C, int ldc);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int n);

#endif
