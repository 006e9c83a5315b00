/* IEEE half (float16) LSTM cell for AArch64 NEON (lstmcell-neon.h): four halves
 * widened with FCVTL (vcvt_f32_f16, baseline on AArch64), float32 accumulation
 * in k order. Layout: see f16-lstmcell-scalar.c. */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"

#define KL_WTYPE uint16_t
#define KL_LOAD_W(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)))
#define KL_CELL_UKERNEL kl_f16_lstmcell_ukernel__neon
#include "lstmcell-neon.h"
