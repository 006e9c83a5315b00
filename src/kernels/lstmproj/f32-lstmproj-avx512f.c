/* float32 LSTM projection for AVX-512F (lstmproj-avx512f.h). */
#include <immintrin.h>

#include "internal.h"
#include "avx512f-math.h"

#define KL_WTYPE float
#define KL_LOAD_W(p) _mm512_load_ps(p)
#define KL_PROJ_UKERNEL kl_f32_lstmproj_ukernel__avx512f
#include "lstmproj-avx512f.h"
