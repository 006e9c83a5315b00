/* float32 LSTM projection for AArch64 NEON (lstmproj-neon.h). */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"

#define KL_WTYPE float
#define KL_LOAD_W(p) vld1q_f32(p)
#define KL_PROJ_UKERNEL kl_f32_lstmproj_ukernel__neon
#include "lstmproj-neon.h"
