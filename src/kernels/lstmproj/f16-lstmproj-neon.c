/* IEEE half (float16) LSTM projection for AArch64 NEON (lstmproj-neon.h): four
 * halves widened with FCVTL, float32 accumulation in j order. */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"

#define KL_WTYPE uint16_t
#define KL_LOAD_W(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)))
#define KL_PROJ_UKERNEL kl_f16_lstmproj_ukernel__neon
#include "lstmproj-neon.h"
