/* IEEE half (float16) LSTM cell for AVX2 + FMA + F16C (lstmcell-avx2fma.h): 8
 * halves widened per vcvtph2ps, float32 accumulation in k order.
 * Layout: see f16-lstmcell-scalar.c. */
#include <immintrin.h>

#include "internal.h"
#include "avx2fma-math.h"

#define KL_WTYPE uint16_t
#define KL_LOAD_W(p) _mm256_cvtph_ps(_mm_load_si128((const __m128i*)(const void*)(p)))
#define KL_CELL_UKERNEL kl_f16_lstmcell_ukernel__avx2f16c
#include "lstmcell-avx2fma.h"
