/* Portable C LSTM projection with bfloat16 weights, float32 accumulation
 * (lstmproj-scalar.h). The panels pair consecutive j:
 * w[(blk*He/2 + jp)*32 + lane*2 + (j&1)], He = round_up(H, 2). */
#include "internal.h"

#define KL_WTYPE uint16_t
#define KL_FTYPE float
#define KL_PANEL(H) (((H) + 1) / 2 * 32)
#define KL_W(wp, j, l) kl_bf16_to_f32((wp)[((j) / 2) * 32 + ((j) & 1) + (l) * 2])
#define KL_PROJ_UKERNEL kl_bf16_lstmproj_ukernel__scalar
#include "lstmproj-scalar.h"
