/* float32 LSTM cell for AVX2 + FMA (lstmcell-avx2fma.h). */
#include <immintrin.h>

#include "internal.h"
#include "avx2fma-math.h"

#define KL_WTYPE float
#define KL_LOAD_W(p) _mm256_load_ps(p)
#define KL_CELL_UKERNEL kl_f32_lstmcell_ukernel__avx2fma
#include "lstmcell-avx2fma.h"
