/* Portable C float32 LSTM projection (lstmproj-scalar.h): the reference for the
 * SIMD kernels. */
#include "internal.h"

#define KL_WTYPE float
#define KL_FTYPE float
#define KL_PANEL(H) ((H) * 16)
#define KL_W(wp, j, l) (wp)[(j) * 16 + (l)]
#define KL_PROJ_UKERNEL kl_f32_lstmproj_ukernel__scalar
#include "lstmproj-scalar.h"
