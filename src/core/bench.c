/* Machine-limit probes for benchmarks/: the throughput of the BLAS the engine
 * uses (same tiling, one single-threaded call per tile) and the time to read a
 * cached buffer once, i.e. the floor of a recurrent step that streams W_hh. */
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "internal.h"
#include "kokoro_lstm_testing.h"

static double now(void) { return 1e-9 * (double)kl_now_ns(); }

typedef struct {
  int M, N, K;
  const float *A, *B;
  float* C;
} sgemm_job;

#define TILE_M 512
#define TILE_N 256

static void sgemm_task(void* ctx, int ith, int nth) {
  const sgemm_job* j = ctx;
  const int nm = (j->M + TILE_M - 1) / TILE_M, nn = (j->N + TILE_N - 1) / TILE_N;
  for (int t = ith; t < nm * nn; t += nth) {
    const int r0 = (t / nn) * TILE_M, c0 = (t % nn) * TILE_N;
    const int mr = j->M - r0 < TILE_M ? j->M - r0 : TILE_M;
    const int nc = j->N - c0 < TILE_N ? j->N - c0 : TILE_N;
    kl_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mr, nc, j->K, 1.0f,
                   j->A + (size_t)r0 * (size_t)j->K, j->K, j->B + (size_t)c0 * (size_t)j->K, j->K,
                   0.0f, j->C + (size_t)r0 * (size_t)j->N + c0, j->N);
  }
}

double kl_bench_sgemm(int M, int N, int K, int nth, int reps) {
  if (M < 1 || N < 1 || K < 1 || nth < 1 || reps < 1) return -1.0;
  nth = kl_threads_cap(nth);
  float* A = calloc((size_t)M * (size_t)K, sizeof(float));
  float* B = calloc((size_t)N * (size_t)K, sizeof(float));
  float* C = calloc((size_t)M * (size_t)N, sizeof(float));
  double best = -1.0;
  if (A && B && C) {
    for (size_t i = 0; i < (size_t)M * (size_t)K; i++) A[i] = (float)(i % 97) * 0.01f;
    for (size_t i = 0; i < (size_t)N * (size_t)K; i++) B[i] = (float)(i % 89) * 0.01f;
    sgemm_job j = {M, N, K, A, B, C};
    const int prev = kl_blas_get_num_threads();
    if (prev != 1) kl_blas_set_num_threads(1);
    for (int r = 0; r < reps + 1; r++) {
      const double t0 = now();
      if (kl_pool_run(nth, sgemm_task, &j) != KL_OK) break;
      const double dt = now() - t0;
      if (r > 0 && (best < 0 || dt < best)) best = dt; /* r == 0 warms up */
    }
    if (prev != 1) kl_blas_set_num_threads(prev);
  }
  free(A);
  free(B);
  free(C);
  return best;
}

double kl_bench_stream(size_t nbytes, int reps) {
  if (nbytes < 64 || reps < 1) return -1.0;
  const size_t n = nbytes / sizeof(float);
  float* buf = aligned_alloc(64, kl_round_up(n * sizeof(float), 64));
  if (!buf) return -1.0;
  for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
  const kl_f32_rsum_fn rsum = kl_select_rsum();
  volatile float sink = 0.0f;
  double best = -1.0;
  for (int r = 0; r < reps + 1; r++) {
    const double t0 = now();
    sink += rsum(n, buf);
    const double dt = now() - t0;
    if (r > 0 && (best < 0 || dt < best)) best = dt; /* r == 0 brings it into cache */
  }
  (void)sink;
  free(buf);
  return best;
}

double kl_bench_fingerprint(size_t nbytes, int nth, int reps) {
  if (nbytes < 64 || nth < 1 || reps < 1) return -1.0;
  nth = kl_threads_cap(nth);
  unsigned char* buf = aligned_alloc(64, kl_round_up(nbytes, 64));
  if (!buf) return -1.0;
  for (size_t i = 0; i < nbytes; i++) buf[i] = (unsigned char)(i * 131u);
  const kl_region r = {buf, 1, (int64_t)nbytes, (int64_t)nbytes};
  double best = -1.0;
  for (int k = 0; k < reps + 1; k++) {
    kl_fp128 fp;
    const double t0 = now();
    const kl_status s = kl_fingerprint(&r, 1, nth, &fp);
    const double dt = now() - t0;
    if (s != KL_OK) {
      best = -1.0;
      break;
    }
    if (k > 0 && (best < 0 || dt < best)) best = dt; /* k == 0 warms up */
  }
  free(buf);
  return best;
}
