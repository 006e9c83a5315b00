/* Fingerprint accumulation, AVX2: the scalar kernel's integers, four lanes per
 * vector (vpmuludq multiplies the low and high 32 bits of each lane). */
#include <immintrin.h>
#include <stdint.h>

#include "fingerprint.h"

void kl_u64_fingerprint__avx2fma(const void* p, size_t n, uint64_t* acc) {
  const unsigned char* b = p;
  __m256i a0 = _mm256_loadu_si256((const __m256i*)acc);
  __m256i a1 = _mm256_loadu_si256((const __m256i*)(acc + 4));
  __m256i k0 = _mm256_loadu_si256((const __m256i*)KL_FP_KEY);
  __m256i k1 = _mm256_loadu_si256((const __m256i*)(KL_FP_KEY + 4));
  const __m256i step = _mm256_set1_epi64x((long long)KL_FP_STEP);
  for (size_t off = 0; off < n; off += 64) {
    const __m256i w0 = _mm256_loadu_si256((const __m256i*)(b + off));
    const __m256i w1 = _mm256_loadu_si256((const __m256i*)(b + off + 32));
    const __m256i v0 = _mm256_xor_si256(w0, k0), v1 = _mm256_xor_si256(w1, k1);
    /* w[i ^ 1]: swap the 64-bit halves of each 128-bit lane */
    const __m256i s0 = _mm256_shuffle_epi32(w0, _MM_SHUFFLE(1, 0, 3, 2));
    const __m256i s1 = _mm256_shuffle_epi32(w1, _MM_SHUFFLE(1, 0, 3, 2));
    a0 = _mm256_add_epi64(a0, _mm256_add_epi64(_mm256_mul_epu32(v0, _mm256_srli_epi64(v0, 32)), s0));
    a1 = _mm256_add_epi64(a1, _mm256_add_epi64(_mm256_mul_epu32(v1, _mm256_srli_epi64(v1, 32)), s1));
    k0 = _mm256_add_epi64(k0, step);
    k1 = _mm256_add_epi64(k1, step);
  }
  _mm256_storeu_si256((__m256i*)acc, a0);
  _mm256_storeu_si256((__m256i*)(acc + 4), a1);
}
