/* Fingerprint accumulation (the weight cache's staleness check), portable C.
 * For each 64-byte stripe s and lane i (eight 64-bit words w[i]):
 *   v = w[i] ^ (KEY[i] + s * STEP),  acc[i] += lo32(v) * hi32(v) + w[i ^ 1]
 * (XXH3's accumulate with a position-dependent key). Any single-word change
 * changes acc exactly (the w[i ^ 1] term); the caller finalizes. Every ISA
 * variant computes the same integers. n is a multiple of 64. */
#include <stdint.h>
#include <string.h>

#include "fingerprint.h"

void kl_u64_fingerprint__scalar(const void* p, size_t n, uint64_t* acc) {
  const unsigned char* b = p;
  uint64_t key[8];
  for (int i = 0; i < 8; i++) key[i] = KL_FP_KEY[i];
  for (size_t off = 0; off < n; off += 64) {
    uint64_t w[8];
    memcpy(w, b + off, 64);
    for (int i = 0; i < 8; i++) {
      const uint64_t v = w[i] ^ key[i];
      acc[i] += (v & 0xffffffffu) * (v >> 32) + w[i ^ 1];
      key[i] += KL_FP_STEP;
    }
  }
}
