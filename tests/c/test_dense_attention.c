/* kl_f32_attention ([B, L, H, D] layout, broadcast mask with a fully masked row)
 * against float64; num_threads 1, 2, 3 bitwise identical. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "dense.h"
#include "threads.h"

void test_dense_attention(void) {
  const int64_t B = 2, H = 3, L = 600, S = 300, D = 9, HD = H * D;
  float* q = malloc(sizeof(float) * (size_t)(B * L * HD));
  float* kv = malloc(sizeof(float) * (size_t)(B * S * HD));
  float* mask = malloc(sizeof(float) * (size_t)(L * S));
  float* o[3];
  for (int i = 0; i < 3; i++) o[i] = malloc(sizeof(float) * (size_t)(B * L * HD));
  double* p = malloc(sizeof(double) * (size_t)S);
  if (!q || !kv || !mask || !o[0] || !o[1] || !o[2] || !p) {
    check(0, "[dense] attention: out of memory");
    goto done;
  }
  uint32_t st = 11;
  for (int64_t i = 0; i < B * L * HD; i++) q[i] = frand(&st);
  for (int64_t i = 0; i < B * S * HD; i++) kv[i] = frand(&st);
  for (int64_t i = 0; i < L * S; i++) mask[i] = (i % 5 == 0) ? -INFINITY : 0.0f;
  for (int64_t s2 = 0; s2 < S; s2++) mask[3 * S + s2] = -INFINITY; /* row 3: all masked */
  kl_status s = KL_OK;
  for (int t = 0; t < 3 && s == KL_OK; t++) {
    kl_attention_args a;
    memset(&a, 0, sizeof(a));
    a.batch = B, a.heads = H, a.L = L, a.S = S, a.D = D, a.scale = 0.4f;
    a.q = q, a.sqb = L * HD, a.sqh = D, a.sql = HD;
    a.k = kv, a.skb = S * HD, a.skh = D, a.sks = HD; /* v = k: one buffer */
    a.v = kv, a.svb = S * HD, a.svh = D, a.svs = HD;
    a.mask = mask, a.sml = S;
    a.o = o[t], a.sob = L * HD, a.soh = D, a.sol = HD;
    a.num_threads = t + 1;
    s = kl_f32_attention(&a);
  }
  double err = 0;
  int zeros = 1;
  for (int64_t b = 0; b < B && s == KL_OK; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t l = 0; l < L; l++) {
        const float* qr = q + b * L * HD + l * HD + h * D;
        const float* out = o[0] + b * L * HD + l * HD + h * D;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; j++) {
          const float* kr = kv + b * S * HD + j * HD + h * D;
          double dot = 0;
          for (int64_t d = 0; d < D; d++) dot += (double)qr[d] * kr[d];
          p[j] = 0.4 * dot + mask[l * S + j];
          mx = fmax(mx, p[j]);
        }
        if (mx == -INFINITY) {
          for (int64_t d = 0; d < D; d++) zeros &= out[d] == 0.0f;
          continue;
        }
        for (int64_t j = 0; j < S; j++) sum += p[j] = exp(p[j] - mx);
        for (int64_t d = 0; d < D; d++) {
          double r = 0;
          for (int64_t j = 0; j < S; j++) r += p[j] / sum * kv[b * S * HD + j * HD + h * D + d];
          err = fmax(err, fabs(r - out[d]));
        }
      }
  const size_t n = sizeof(float) * (size_t)(B * L * HD);
  const int last = kl_pool_last_threads(); /* 2 B H L S D multiply-adds: room for 3 threads */
  check(s == KL_OK && err < 2e-5 && zeros && !memcmp(o[0], o[1], n) && !memcmp(o[0], o[2], n) &&
            last == 3,
        "[dense] attention B2 H3 L600 S300 D9, [B, L, H, D], masked row: %s, max abs err %.2g, "
        "masked row zeros %d, threads 1/2/3 bitwise equal, the last on %d threads",
        kl_status_str(s), err, zeros, last);
done:
  free(q);
  free(kv);
  free(mask);
  for (int i = 0; i < 3; i++) free(o[i]);
  free(p);
}
