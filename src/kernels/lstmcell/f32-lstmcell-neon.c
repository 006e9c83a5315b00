/* float32 LSTM cell for AArch64 NEON (lstmcell-neon.h). */
#include <arm_neon.h>

#include "internal.h"
#include "neon-math.h"

#define KL_WTYPE float
#define KL_LOAD_W(p) vld1q_f32(p)
#define KL_CELL_UKERNEL kl_f32_lstmcell_ukernel__neon
#include "lstmcell-neon.h"
