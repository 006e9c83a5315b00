/* float32 LSTM cell for AVX-512F (lstmcell-avx512f.h). */
#include <immintrin.h>

#include "internal.h"
#include "avx512f-math.h"

#define KL_WTYPE float
#define KL_LOAD_W(p) _mm512_load_ps(p)
#define KL_CELL_UKERNEL kl_f32_lstmcell_ukernel__avx512f
#include "lstmcell-avx512f.h"
