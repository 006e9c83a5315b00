/* Counter-based random numbers (src/ops/random.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "random.h"

/* Philox4x32-10 against Random123's known answers (kat_vectors, "philox4x32 10"
 * lines: counter, key, expected output), then the draw's rule: any thread count
 * and any start offset give the same elements, uniforms in [0, 1), normals finite. */
void test_random(void) {
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int v = 0; v < 3; v++) {
    uint32_t out[4];
    kl_philox4x32_10(kat[v], kat[v] + 4, out);
    check(memcmp(out, kat[v] + 6, sizeof(out)) == 0,
          "[random] philox4x32-10 known answer %d: %08x %08x %08x %08x", v, out[0], out[1], out[2],
          out[3]);
  }
  const int64_t n = 100003; /* several chunks and a partial block */
  float* a = xcalloc((size_t)n, sizeof(float));
  float* b = xcalloc((size_t)n, sizeof(float));
  for (int dist = 0; dist < 2; dist++) {
    const char* name = dist == KL_RANDOM_UNIFORM ? "uniform" : "normal";
    const uint64_t seed = 0x123456789abcdefULL, stream = 5;
    kl_status s = kl_f32_random(dist, seed, stream, 0, n, a, 1);
    int same = s == KL_OK;
    for (int nth = 2; nth <= 16 && same; nth *= 2) {
      same = kl_f32_random(dist, seed, stream, 0, n, b, nth) == KL_OK &&
             memcmp(a, b, (size_t)n * sizeof(float)) == 0;
    }
    /* elements 7.. alone, then 3 elements at 99998 */
    same = same && kl_f32_random(dist, seed, stream, 7, n - 7, b, 2) == KL_OK &&
           memcmp(a + 7, b, (size_t)(n - 7) * sizeof(float)) == 0;
    same = same && kl_f32_random(dist, seed, stream, 99998, 3, b, 1) == KL_OK &&
           memcmp(a + 99998, b, 3 * sizeof(float)) == 0;
    double mean = 0, sq = 0;
    int in_range = 1;
    for (int64_t i = 0; i < n; i++) {
      mean += a[i];
      sq += (double)a[i] * a[i];
      if (dist == KL_RANDOM_UNIFORM ? !(a[i] >= 0.0f && a[i] < 1.0f) : !isfinite(a[i])) in_range = 0;
    }
    mean /= (double)n;
    const double sd = sqrt(sq / (double)n - mean * mean);
    const double want_mean = dist == KL_RANDOM_UNIFORM ? 0.5 : 0.0;
    const double want_sd = dist == KL_RANDOM_UNIFORM ? sqrt(1.0 / 12.0) : 1.0;
    check(same && in_range && fabs(mean - want_mean) < 0.01 && fabs(sd - want_sd) < 0.01,
          "[random] %s: threads 1/2/4/8/16 and offsets bitwise equal, values in range, mean %.4f "
          "sd %.4f",
          name, mean, sd);
    s = kl_f32_random(dist, seed, stream + 1, 0, 64, b, 1);
    check(s == KL_OK && memcmp(a, b, 64 * sizeof(float)) != 0, "[random] %s: another stream differs",
          name);
    s = kl_f32_random(dist, seed + 1, stream, 0, 64, b, 1);
    check(s == KL_OK && memcmp(a, b, 64 * sizeof(float)) != 0, "[random] %s: another seed differs",
          name);
  }
  check(kl_f32_random(2, 1, 0, 0, 4, a, 1) == KL_ERR_ARG && kl_f32_random(0, 1, 0, -1, 4, a, 1) == KL_ERR_ARG &&
            kl_f32_random(0, 1, 0, 0, 4, NULL, 1) == KL_ERR_ARG &&
            kl_f32_random(0, 1, 0, 0, -1, a, 1) == KL_ERR_ARG && kl_f32_random(0, 1, 0, 0, 0, NULL, 1) == KL_OK,
        "[random] bad dist, start, output or count -> KL_ERR_ARG; n 0 -> KL_OK");
  free(a);
  free(b);
}
