/* float32 GEMM on one pre-packed panel with AVX2 + FMA (f32-pgemm-2x32.h): 8
 * accumulators, 4 panel vectors, one broadcast: 13 of the 16 ymm registers. */
#include <immintrin.h>

#include "internal.h"
#include "avx2fma-math.h"

#define KL_VF __m256
#define KL_VN 8
#define KL_VZERO _mm256_setzero_ps()
#define KL_VLOADU _mm256_loadu_ps
#define KL_VSTOREU _mm256_storeu_ps
#define KL_VADD _mm256_add_ps
#define KL_VA __m256
#define KL_VBCAST _mm256_broadcast_ss
#define KL_VFMA(acc, a, w) _mm256_fmadd_ps(a, w, acc)
#define KL_PGEMM_UKERNEL kl_f32_pgemm_ukernel__avx2fma
#include "f32-pgemm-2x32.h"
