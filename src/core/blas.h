/* BLAS binding: OpenBLAS, either the system one (pkg-config "openblas") or the
 * scipy-openblas32 wheel, whose symbols carry a "scipy_" prefix. setup.py and
 * the Makefile define KL_BLAS_SCIPY for the latter. */
#ifndef KL_BLAS_H
#define KL_BLAS_H

#include <cblas.h>

#ifdef KL_BLAS_SCIPY
#define KL_BLAS_NAME "scipy-openblas32"
#define kl_cblas_sgemm scipy_cblas_sgemm
#define kl_cblas_dgemm scipy_cblas_dgemm
#define kl_blas_get_num_threads scipy_openblas_get_num_threads
#define kl_blas_set_num_threads scipy_openblas_set_num_threads
#else
#ifdef KL_BLAS_REF /* tests/c/refblas: the cross-compiled C test only */
#define KL_BLAS_NAME "reference cblas (C test)"
#else
#define KL_BLAS_NAME "openblas (system)"
#endif
#define kl_cblas_sgemm cblas_sgemm
#define kl_cblas_dgemm cblas_dgemm
#define kl_blas_get_num_threads openblas_get_num_threads
#define kl_blas_set_num_threads openblas_set_num_threads
#endif

#endif
