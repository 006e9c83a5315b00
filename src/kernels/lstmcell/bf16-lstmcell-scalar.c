/* Portable C LSTM cell with bfloat16 recurrent weights, float32 state and
 * accumulation (lstmcell-scalar.h). The panels pair consecutive k:
 * w[((blk*Re/2 + kp)*4 + g)*32 + lane*2 + (k&1)], Re = round_up(R, 2). */
#include <math.h>

#include "internal.h"
#include "scalar-math.h"

#define KL_WTYPE uint16_t
#define KL_FTYPE float
#define KL_PANEL(R) (((R) + 1) / 2 * 128)
#define KL_W(wp, k, j) kl_bf16_to_f32((wp)[((k) / 2) * 128 + ((k) & 1) + (j) * 2])
#define KL_CELL_UPDATE kl_scalar_cell_update
#define KL_CELL_UKERNEL kl_bf16_lstmcell_ukernel__scalar
#include "lstmcell-scalar.h"
