/* Portable C LSTM cell with IEEE half (float16) recurrent weights, float32 state
 * and accumulation (lstmcell-scalar.h). Same panel layout as the float32 kernels
 * with 16-bit elements: w[(blk*R + k)*64 + g*16 + lane]. Half -> float is exact
 * (kl_f16_to_f32). */
#include <math.h>

#include "internal.h"
#include "scalar-math.h"

#define KL_WTYPE uint16_t
#define KL_FTYPE float
#define KL_PANEL(R) ((R) * 64)
#define KL_W(wp, k, j) kl_f16_to_f32((wp)[(k) * 64 + (j)])
#define KL_CELL_UPDATE kl_scalar_cell_update
#define KL_CELL_UKERNEL kl_f16_lstmcell_ukernel__scalar
#include "lstmcell-scalar.h"
