/* The thread rule: the cap on every count, kl_threads_for_work and the dense
 * calls' counts by it; the kept work buffers. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "dense.h"
#include "scratch.h"
#include "threads.h"
#include "kokoro_lstm_testing.h"

/* kl_threads_for_work, and the dense calls' thread counts by it: a call of
 * 2.5 KL_DENSE_MIN_MACS runs 2 of 4 threads, one under KL_DENSE_MIN_SOFTMAX
 * elements none but the caller, with the same bits at 1, 2 and 4 threads. */
void test_dense_threads_for_work(void) {
  const double mw = 1000.0;
  check(kl_threads_for_work(4, 0, mw) == 1 && kl_threads_for_work(4, mw - 1, mw) == 1 &&
            kl_threads_for_work(4, mw, mw) == 1 && kl_threads_for_work(4, 2 * mw, mw) == 2 &&
            kl_threads_for_work(4, 3.5 * mw, mw) == 3 && kl_threads_for_work(4, 1e9, mw) == 4 &&
            kl_threads_for_work(1, 1e9, mw) == 1 && kl_threads_for_work(4, NAN, mw) == 1,
        "[threads] kl_threads_for_work: one thread per min_work, 1 .. nth");
  const int64_t M = 256, N = 160, K = 255; /* M N (K + 1) = 2.5 KL_DENSE_MIN_MACS */
  float* A = malloc(sizeof(float) * (size_t)(M * K));
  float* B = malloc(sizeof(float) * (size_t)(K * N));
  float* C[3];
  for (int i = 0; i < 3; i++) C[i] = malloc(sizeof(float) * (size_t)(M * N));
  kl_status s = KL_ERR_NOMEM;
  int last[3] = {0, 0, 0}, same = 1;
  if (A && B && C[0] && C[1] && C[2]) {
    uint32_t st = 5;
    for (int64_t i = 0; i < M * K; i++) A[i] = frand(&st);
    for (int64_t i = 0; i < K * N; i++) B[i] = frand(&st);
    const int threads[3] = {1, 2, 4};
    s = KL_OK;
    for (int t = 0; t < 3 && s == KL_OK; t++) {
      kl_matmul_args a;
      memset(&a, 0, sizeof(a));
      a.batch = 1, a.M = M, a.N = N, a.K = K;
      a.a = A, a.lda = K, a.b = B, a.ldb = N, a.c = C[t], a.ldc = N;
      a.num_threads = threads[t];
      s = kl_f32_matmul(&a);
      last[t] = kl_pool_last_threads();
      if (t) same &= !memcmp(C[0], C[t], sizeof(float) * (size_t)(M * N));
    }
    /* 40000 elements, fewer than KL_DENSE_MIN_SOFTMAX: no parallel job */
    if (s == KL_OK) s = kl_f32_softmax(40, 1000, A, C[1], 4);
  }
  check(s == KL_OK && same && last[2] == 2 && kl_pool_last_threads() == 2,
        "[dense] matmul of 2.5 KL_DENSE_MIN_MACS: %s, 2 of 4 threads (%d), bits equal at 1/2/4 "
        "threads; a small softmax on the caller alone (last job %d threads)",
        kl_status_str(s), last[2], kl_pool_last_threads());
  free(A);
  free(B);
  for (int i = 0; i < 3; i++) free(C[i]);
}

/* Every count is capped at kl_max_threads(): KOKORO_LSTM_MAX_THREADS, else the
 * usable CPUs; the environment's default and kl_set_num_threads's value too. */
void test_thread_cap(void) {
  setenv("KOKORO_LSTM_MAX_THREADS", "3", 1);
  setenv("KOKORO_LSTM_NUM_THREADS", "64", 1);
  check(kl_max_threads() == 3 && kl_get_num_threads() == 3,
        "[threads] KOKORO_LSTM_NUM_THREADS=64 capped at KOKORO_LSTM_MAX_THREADS=3 (got %d)",
        kl_get_num_threads());
  kl_set_num_threads(500);
  check(kl_get_num_threads() == 3, "[threads] kl_set_num_threads(500) capped at 3 (got %d)",
        kl_get_num_threads());
  kl_set_num_threads(0);
  setenv("KOKORO_LSTM_NUM_THREADS", "abc", 1);
  unsetenv("KOKORO_LSTM_MAX_THREADS");
  const int cap = kl_max_threads();
  check(cap >= 1 && cap <= 512 && kl_get_num_threads() == cap,
        "[threads] without KOKORO_LSTM_MAX_THREADS the cap is the usable CPUs (%d), an invalid "
        "KOKORO_LSTM_NUM_THREADS is ignored", cap);
  unsetenv("KOKORO_LSTM_NUM_THREADS");
  setenv("KOKORO_LSTM_MAX_THREADS", "64", 1); /* the other tests run up to 16 threads */
}

/* The kept work buffers: best fit, at most KL_SCRATCH_KEEP kept, all freed by
 * kl_cache_clear (ASan checks that nothing leaks or is freed twice). */
void test_scratch(void) {
  kl_cache_clear();
  size_t cap[5];
  void* p[5];
  const size_t sizes[5] = {1000, 4096, 100000, 64, 0};
  for (int i = 0; i < 5; i++) {
    p[i] = kl_scratch_take(sizes[i], &cap[i]);
    check(p[i] && cap[i] >= sizes[i] && cap[i] % 64 == 0 && ((uintptr_t)p[i] & 63) == 0,
          "[scratch] take(%zu): 64-aligned, cap %zu", sizes[i], cap[i]);
    if (p[i]) memset(p[i], 0x5a, cap[i]);
  }
  for (int i = 0; i < 5; i++) kl_scratch_give(p[i], cap[i]); /* 4 slots: the 64-byte one goes */
  const kl_cache_stats s = kl_cache_get_stats();
  check(s.scratch_bytes == (int64_t)(cap[0] + cap[1] + cap[2] + cap[4]) ||
            s.scratch_bytes == (int64_t)(cap[0] + cap[1] + cap[2] + cap[3]),
        "[scratch] four largest kept: %lld bytes", (long long)s.scratch_bytes);
  size_t c;
  void* q = kl_scratch_take(3000, &c);
  check(q == p[1] && c == cap[1], "[scratch] take(3000) returns the kept 4096-byte buffer (best fit)");
  kl_scratch_give(q, c);
  /* a buffer beyond the keep limit is freed, not kept (its size as given) */
  void* big = malloc(64);
  kl_scratch_give(big, KL_SCRATCH_KEEP + 64);
  check(kl_cache_get_stats().scratch_bytes == s.scratch_bytes, "[scratch] one beyond the limit is not kept");
  kl_cache_clear();
  check(kl_cache_get_stats().scratch_bytes == 0, "[scratch] kl_cache_clear frees the kept buffers");
  kl_scratch_give(NULL, 64);
}
