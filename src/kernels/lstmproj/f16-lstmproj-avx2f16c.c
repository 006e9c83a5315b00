/* IEEE half (float16) LSTM projection for AVX2 + FMA + F16C (lstmproj-avx2fma.h):
 * 8 halves widened per vcvtph2ps, float32 accumulation in j order. */
#include <immintrin.h>

#include "internal.h"
#include "avx2fma-math.h"

#define KL_WTYPE uint16_t
#define KL_LOAD_W(p) _mm256_cvtph_ps(_mm_load_si128((const __m128i*)(const void*)(p)))
#define KL_PROJ_UKERNEL kl_f16_lstmproj_ukernel__avx2f16c
#include "lstmproj-avx2fma.h"
