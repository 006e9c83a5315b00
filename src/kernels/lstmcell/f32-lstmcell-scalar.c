/* Portable C float32 LSTM cell (lstmcell-scalar.h): the reference for the SIMD
 * kernels; always built, selectable with KOKORO_LSTM_ISA=scalar. */
#include <math.h>

#include "internal.h"
#include "scalar-math.h"

#define KL_WTYPE float
#define KL_FTYPE float
#define KL_PANEL(R) ((R) * 64)
#define KL_W(wp, k, j) (wp)[(k) * 64 + (j)]
#define KL_CELL_UPDATE kl_scalar_cell_update
#define KL_CELL_UKERNEL kl_f32_lstmcell_ukernel__scalar
#include "lstmcell-scalar.h"
