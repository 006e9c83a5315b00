/* Fingerprint accumulation, AVX-512: the scalar kernel's integers, one 64-byte
 * stripe (all eight lanes) per vector: half the instructions of the AVX2 kernel. */
#include <immintrin.h>
#include <stdint.h>

#include "fingerprint.h"

void kl_u64_fingerprint__avx512f(const void* p, size_t n, uint64_t* acc) {
  const unsigned char* b = p;
  __m512i a = _mm512_loadu_si512(acc);
  __m512i k = _mm512_loadu_si512(KL_FP_KEY);
  const __m512i step = _mm512_set1_epi64((long long)KL_FP_STEP);
  for (size_t off = 0; off < n; off += 64) {
    const __m512i w = _mm512_loadu_si512(b + off);
    const __m512i v = _mm512_xor_si512(w, k);
    /* w[i ^ 1]: swap the 64-bit halves of each 128-bit lane */
    const __m512i s = _mm512_shuffle_epi32(w, _MM_PERM_BADC);
    a = _mm512_add_epi64(a, _mm512_add_epi64(_mm512_mul_epu32(v, _mm512_srli_epi64(v, 32)), s));
    k = _mm512_add_epi64(k, step);
  }
  _mm512_storeu_si512(acc, a);
}
