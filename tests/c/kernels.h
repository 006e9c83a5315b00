/* What the kernel tests share: closeness of floats, the scalar entry of a weight
 * type, and one test per kernel list kind (test_kernels_*.c, run from
 * test_kernel_lists.c). */
#ifndef KL_TEST_KERNELS_H
#define KL_TEST_KERNELS_H

#include <stddef.h>

#include "internal.h" /* the kernel lists */

/* Both NaN, both the same infinity, or |a - b| <= tol * max(1, |b|). */
int close_f(float a, float b, double tol);
/* Whether n floats are all close; else the first mismatch written to why. */
int all_close(const float* a, const float* b, size_t n, double tol, char* why, size_t wn,
              const char* what);
const char* wtype_name(kl_wtype wt);
const kl_lstmcell_entry* scalar_cell(kl_wtype wt);
const kl_lstmproj_entry* scalar_proj(kl_wtype wt);

/* test_kernels_cell.c */
void test_cell_kernel(const kl_lstmcell_entry* k);
void test_proj_kernel(const kl_lstmproj_entry* k);
void test_fp_kernel(const kl_fp_entry* e);
/* test_kernels_vector.c */
void test_vunary_kernel(const kl_vunary_entry* k, const kl_vunary_entry* ref, const char* what);
void test_vsnake_kernel(const kl_vsnake_entry* k);
void test_rmoments_kernel(const kl_rmoments_entry* k, const kl_rmoments_entry* ref);
void test_softmax_kernel(const kl_vunary_entry* k, const kl_vunary_entry* ref);
void test_rsum_kernel(const kl_rsum_entry* k, const kl_rsum_entry* ref);
/* test_kernels_gemm.c */
void test_gemm_kernel(const kl_gemm_entry* k);
void test_x6gemm_kernel(const kl_x6gemm_entry* k);
void test_f32_gemm_kernel(const kl_f32_gemm_entry* k);
void test_pgemm_kernel(const kl_f32_pgemm_entry* k, const kl_f32_pgemm_entry* ref);

#endif
