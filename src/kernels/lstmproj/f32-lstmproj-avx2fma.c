/* float32 LSTM projection for AVX2 + FMA (lstmproj-avx2fma.h). */
#include <immintrin.h>

#include "internal.h"
#include "avx2fma-math.h"

#define KL_WTYPE float
#define KL_LOAD_W(p) _mm256_load_ps(p)
#define KL_PROJ_UKERNEL kl_f32_lstmproj_ukernel__avx2fma
#include "lstmproj-avx2fma.h"
