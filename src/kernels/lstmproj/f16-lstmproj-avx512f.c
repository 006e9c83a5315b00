/* IEEE half (float16) LSTM projection for AVX-512F (lstmproj-avx512f.h): 16
 * halves widened per vcvtph2ps, float32 accumulation in j order. */
#include <immintrin.h>

#include "internal.h"
#include "avx512f-math.h"

#define KL_WTYPE uint16_t
#define KL_LOAD_W(p) _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(const void*)(p)))
#define KL_PROJ_UKERNEL kl_f16_lstmproj_ukernel__avx512f
#include "lstmproj-avx512f.h"
