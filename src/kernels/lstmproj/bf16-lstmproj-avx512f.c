/* bfloat16 LSTM projection on AVX-512F without AVX512_BF16: each 32-bit lane
 * holds a (j even, j odd) weight pair, widened to float32 with one shift / one
 * mask. Layout: see bf16-lstmproj-scalar.c. */
#include <immintrin.h>

#include "internal.h"
#include "avx512f-math.h"

KL_INLINE __m512 even_ps(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
KL_INLINE __m512 odd_ps(__m512i v) {
  return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}

void kl_bf16_lstmproj_ukernel__avx512f(size_t H, size_t blk0, size_t blk1, const void* w,
                                       size_t nb, const void* const* h_in, void* const* h_out) {
  const size_t npair = (H + 1) / 2;
  for (size_t blk = blk0; blk < blk1; blk++) {
    const uint16_t* wp = (const uint16_t*)w + blk * npair * 32;
    for (size_t e = 0; e < nb; e++) {
      const float* h = (const float*)h_in[e];
      __m512 acc = _mm512_setzero_ps();
      for (size_t j = 0; j < H; j++) {
        const __m512i v = _mm512_load_si512((const void*)(wp + (j / 2) * 32));
        acc = _mm512_fmadd_ps((j & 1) ? odd_ps(v) : even_ps(v), _mm512_set1_ps(h[j]), acc);
      }
      _mm512_storeu_ps((float*)h_out[e] + blk * 16, acc);
    }
  }
}
