/* Philox4x32-10 uniform and normal draws (see random.h), in fixed chunks of
 * elements dealt to the engine's pool. */
#include "random.h"

#include <math.h>
#include <stdatomic.h>

#include "internal.h"
#include "threads.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* Elements per task (a multiple of 4: whole blocks); a call uses at most one
 * thread per KL_RANDOM_SERIAL elements (kl_threads_for_work). */
#define KL_RANDOM_CHUNK 16384
#define KL_RANDOM_SERIAL 32768

void kl_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r > 0) { /* the key is bumped before every round but the first */
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    const uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

#define TWO_M24 (1.0 / 16777216.0)
#define TWO_PI 6.283185307179586476925286766559

/* The four values of block `block` of the draw. */
static void block_values(int dist, const uint32_t key[2], uint64_t stream, uint64_t block, float v[4]) {
  const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                           (uint32_t)(stream >> 32)};
  uint32_t w[4];
  kl_philox4x32_10(ctr, key, w);
  if (dist == KL_RANDOM_UNIFORM) {
    for (int k = 0; k < 4; k++) v[k] = (float)((double)(w[k] >> 8) * TWO_M24);
    return;
  }
  for (int p = 0; p < 2; p++) {
    const double a = ((double)(w[2 * p] >> 8) + 1.0) * TWO_M24;
    const double b = (double)(w[2 * p + 1] >> 8) * TWO_M24;
    const double r = sqrt(-2.0 * log(a));
    v[2 * p] = (float)(r * cos(TWO_PI * b));
    v[2 * p + 1] = (float)(r * sin(TWO_PI * b));
  }
}

/* Elements [i0, i1) of the draw into y[0 .. i1 - i0). */
static void fill(int dist, const uint32_t key[2], uint64_t stream, int64_t i0, int64_t i1, float* y) {
  float v[4];
  int64_t i = i0;
  while (i < i1) {
    const int64_t b = i >> 2, end = (b + 1) << 2 < i1 ? (b + 1) << 2 : i1;
    block_values(dist, key, stream, (uint64_t)b, v);
    for (; i < end; i++) y[i - i0] = v[i & 3];
  }
}

typedef struct rand_job {
  int dist;
  uint32_t key[2];
  uint64_t stream;
  int64_t start, n, nchunks;
  float* y;
  atomic_llong next;
} rand_job;

static void rand_task(void* ctx, int ith, int nth) {
  (void)ith;
  (void)nth;
  rand_job* j = ctx;
  for (int64_t c; (c = kl_take_task(&j->next, j->nchunks)) >= 0;) {
    const int64_t k0 = c * KL_RANDOM_CHUNK, k1 = k0 + KL_RANDOM_CHUNK < j->n ? k0 + KL_RANDOM_CHUNK : j->n;
    fill(j->dist, j->key, j->stream, j->start + k0, j->start + k1, j->y + k0);
  }
}

kl_status kl_f32_random(int dist, uint64_t seed, uint64_t stream, int64_t start, int64_t n,
                        float* y, int num_threads) {
  if (dist != KL_RANDOM_UNIFORM && dist != KL_RANDOM_NORMAL) {
    kl_set_error("random: dist must be KL_RANDOM_UNIFORM or KL_RANDOM_NORMAL");
    return KL_ERR_ARG;
  }
  if (start < 0 || n < 0 || n > ((int64_t)1 << 62) - start || (n > 0 && !y) || num_threads < 0) {
    kl_set_error("random: need 0 <= start, 0 <= n, start + n <= 2^62, an output and num_threads >= 0");
    return KL_ERR_ARG;
  }
  if (n == 0) return KL_OK;
  rand_job j;
  j.dist = dist;
  j.key[0] = (uint32_t)seed;
  j.key[1] = (uint32_t)(seed >> 32);
  j.stream = stream;
  j.start = start;
  j.n = n;
  j.y = y;
  j.nchunks = (n + KL_RANDOM_CHUNK - 1) / KL_RANDOM_CHUNK;
  int nth = kl_threads_for_work(kl_threads_resolve(num_threads), (double)n, KL_RANDOM_SERIAL);
  if (nth > j.nchunks) nth = (int)j.nchunks;
  if (nth <= 1) {
    fill(dist, j.key, stream, start, start + n, y);
    return KL_OK;
  }
  atomic_init(&j.next, 0);
  return kl_pool_run(nth, rand_task, &j);
}
