/* Portable C float64 LSTM projection (lstmproj-scalar.h). */
#include "internal.h"

#define KL_WTYPE double
#define KL_FTYPE double
#define KL_PANEL(H) ((H) * 16)
#define KL_W(wp, j, l) (wp)[(j) * 16 + (l)]
#define KL_PROJ_UKERNEL kl_f64_lstmproj_ukernel__scalar
#include "lstmproj-scalar.h"
