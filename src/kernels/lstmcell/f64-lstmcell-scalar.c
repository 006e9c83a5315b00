/* Portable C float64 LSTM cell (lstmcell-scalar.h): the float64 end-to-end path.
 * Same panel layout as float32 with double elements. */
#include <math.h>

#include "internal.h"

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static void cell_update(const double acc[64], const double* gx, const double* bias, size_t Hp,
                        size_t blk, double* c, double* h_out) {
  for (int l = 0; l < KL_NR; l++) {
    const size_t u = blk * KL_NR + (size_t)l;
    double pre[4];
    for (int g = 0; g < 4; g++) pre[g] = acc[g * 16 + l] + gx[g * Hp + u] + bias[g * Hp + u];
    const double cn = sigmoid(pre[1]) * c[u] + sigmoid(pre[0]) * tanh(pre[2]);
    c[u] = cn;
    h_out[u] = sigmoid(pre[3]) * tanh(cn);
  }
}

#define KL_WTYPE double
#define KL_FTYPE double
#define KL_PANEL(R) ((R) * 64)
#define KL_W(wp, k, j) (wp)[(k) * 64 + (j)]
#define KL_CELL_UPDATE cell_update
#define KL_CELL_UKERNEL kl_f64_lstmcell_ukernel__scalar
#include "lstmcell-scalar.h"
