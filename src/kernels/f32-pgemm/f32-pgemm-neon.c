/* float32 GEMM on one pre-packed panel with AArch64 NEON (f32-pgemm-2x32.h): 16
 * accumulators, 8 panel vectors, FMLA by element. */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"

#define KL_VF float32x4_t
#define KL_VN 4
#define KL_VZERO vdupq_n_f32(0.0f)
#define KL_VLOADU vld1q_f32
#define KL_VSTOREU vst1q_f32
#define KL_VADD vaddq_f32
#define KL_VA float
#define KL_VBCAST(p) (*(p))
#define KL_VFMA(acc, a, w) vfmaq_n_f32(acc, w, a)
#define KL_PGEMM_UKERNEL kl_f32_pgemm_ukernel__neon
#include "f32-pgemm-2x32.h"
