/* Portable C LSTM projection with IEEE half (float16) weights, float32
 * accumulation (lstmproj-scalar.h): w[(blk*H + j)*16 + lane], 16-bit elements. */
#include "internal.h"

#define KL_WTYPE uint16_t
#define KL_FTYPE float
#define KL_PANEL(H) ((H) * 16)
#define KL_W(wp, j, l) kl_f16_to_f32((wp)[(j) * 16 + (l)])
#define KL_PROJ_UKERNEL kl_f16_lstmproj_ukernel__scalar
#include "lstmproj-scalar.h"
