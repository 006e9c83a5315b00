/* The dense matmul (src/ops): tiles, panels, aliased rows, the split for more
 * threads, against float64 or OpenBLAS. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "dense.h"
#include "threads.h"

/* kl_f32_matmul on shapes cut into several uneven tiles, against a float64
 * product; num_threads 1, 2, 3 bitwise identical. */
void test_dense_matmul(void) {
  const int64_t M = 530, N = 1100, K = 37;
  float* A = malloc(sizeof(float) * (size_t)(M * K));
  float* B = malloc(sizeof(float) * (size_t)(N * K));
  float* C[3];
  for (int i = 0; i < 3; i++) C[i] = malloc(sizeof(float) * (size_t)(M * N));
  if (!A || !B || !C[0] || !C[1] || !C[2]) {
    check(0, "[dense] matmul: out of memory");
    goto done;
  }
  uint32_t st = 7;
  for (int64_t i = 0; i < M * K; i++) A[i] = frand(&st);
  for (int64_t i = 0; i < N * K; i++) B[i] = frand(&st);
  kl_status s = KL_OK;
  for (int t = 0; t < 3 && s == KL_OK; t++) {
    kl_matmul_args m;
    memset(&m, 0, sizeof(m));
    m.batch = 1, m.M = M, m.N = N, m.K = K, m.a = A, m.lda = K, m.b = B, m.ldb = K, m.trans_b = 1;
    m.c = C[t], m.ldc = N, m.num_threads = t + 1;
    s = kl_f32_matmul(&m);
  }
  double err = 0;
  for (int64_t i = 0; i < M && s == KL_OK; i += 7)
    for (int64_t j = 0; j < N; j++) {
      double r = 0;
      for (int64_t k = 0; k < K; k++) r += (double)A[i * K + k] * B[j * K + k];
      err = fmax(err, fabs(r - C[0][i * N + j]));
    }
  check(s == KL_OK && err < 1e-4 && !memcmp(C[0], C[1], sizeof(float) * (size_t)(M * N)) &&
            !memcmp(C[0], C[2], sizeof(float) * (size_t)(M * N)),
        "[dense] matmul 530x37 @ (1100x37)^T: %s, max abs err %.2g, threads 1/2/3 bitwise equal",
        kl_status_str(s), err);
  /* the GELU epilogue: gelu of the plain product (C[0]), within 1e-5 */
  for (int t = 1; t < 3 && s == KL_OK; t++) {
    kl_matmul_args m;
    memset(&m, 0, sizeof(m));
    m.batch = 1, m.M = M, m.N = N, m.K = K, m.a = A, m.lda = K, m.b = B, m.ldb = K, m.trans_b = 1;
    m.c = C[t], m.ldc = N, m.num_threads = t, m.act = KL_ACT_GELU_TANH;
    s = kl_f32_matmul(&m);
  }
  err = 0;
  for (int64_t i = 0; i < M * N && s == KL_OK; i++) {
    const double x = C[0][i];
    const double g = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    err = fmax(err, fabs(g - C[1][i]));
  }
  check(s == KL_OK && err < 1e-5 && !memcmp(C[1], C[2], sizeof(float) * (size_t)(M * N)),
        "[dense] matmul with the GELU (tanh) epilogue: %s, max abs err %.2g, threads 1/2 bitwise "
        "equal", kl_status_str(s), err);
done:
  free(A);
  free(B);
  for (int i = 0; i < 3; i++) free(C[i]);
}

/* Five runs of one product: C[0] by OpenBLAS, C[1..4] on panels. Raises *err to
 * max |C[0] - C[1]| over n values; whether C[2..4] have C[1]'s bits. Not inlined:
 * gcc 12 for aarch64 fails (internal error) vectorizing its fmax reduction there. */
__attribute__((noinline)) static int runs_agree(float* const C[5], int64_t n, double* err) {
  for (int64_t i = 0; i < n; i++) *err = fmax(*err, fabs(C[0][i] - C[1][i]));
  int same = 1;
  for (int t = 2; t < 5; t++) same = same && !memcmp(C[1], C[t], sizeof(float) * (size_t)n);
  return same;
}

/* P = W^T in panels (the b_panels layout): W is N rows of K, P [ceil(N / 32)][K][32],
 * zeros past N. */
static void pack_wt_panels(const float* W, int64_t N, int64_t K, float* P) {
  for (int64_t q = 0; q < (N + KL_PGEMM_NR - 1) / KL_PGEMM_NR; q++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < KL_PGEMM_NR; j++)
        P[(q * K + k) * KL_PGEMM_NR + j] = q * KL_PGEMM_NR + j < N ? W[(q * KL_PGEMM_NR + j) * K + k] : 0.0f;
}

/* B packed in panels (b_panels): against the same product on OpenBLAS (1e-4:
 * sums of 600 products of up to ~20 in other orders),
 * with a strided bias and the GELU epilogue, batched A over one B; 1, 2, 3 and 8
 * threads bitwise equal. K spans several KL_PGEMM_KC blocks, N a partial panel. */
void test_dense_matmul_panels(void) {
  const int64_t batch = 2, M = 67, N = 100, K = 600, np = (N + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL;
  float* A = malloc(sizeof(float) * (size_t)(batch * M * K));
  float* W = malloc(sizeof(float) * (size_t)(N * K));
  float* P = malloc(sizeof(float) * (size_t)(np * K * KL_DENSE_PANEL));
  float* bias = malloc(sizeof(float) * (size_t)(2 * N));
  float* C[5];
  for (int i = 0; i < 5; i++) C[i] = malloc(sizeof(float) * (size_t)(batch * M * N));
  kl_status s = KL_ERR_NOMEM;
  double err = 0;
  int same = 1;
  if (A && W && P && bias && C[0] && C[1] && C[2] && C[3] && C[4]) {
    uint32_t st = 13;
    for (int64_t i = 0; i < batch * M * K; i++) A[i] = frand(&st);
    for (int64_t i = 0; i < N * K; i++) W[i] = frand(&st);
    for (int64_t i = 0; i < 2 * N; i++) bias[i] = frand(&st);
    pack_wt_panels(W, N, K, P);
    const int threads[5] = {1, 1, 2, 3, 8};
    s = KL_OK;
    for (int act = 0; act < 2 && s == KL_OK; act++) {
      for (int t = 0; t < 5 && s == KL_OK; t++) {
        kl_matmul_args m;
        memset(&m, 0, sizeof(m));
        m.batch = batch, m.M = M, m.N = N, m.K = K, m.a = A, m.lda = K, m.sa = M * K;
        m.b = t == 0 ? W : P, m.ldb = K, m.trans_b = 1, m.b_panels = t > 0;
        m.bias = bias, m.sbias = 2, m.c = C[t], m.ldc = N, m.sc = M * N, m.act = act;
        m.num_threads = threads[t];
        s = kl_f32_matmul(&m);
      }
      if (s == KL_OK) same = runs_agree(C, batch * M * N, &err) && same;
    }
  }
  check(s == KL_OK && err < 1e-4 && same,
        "[dense] matmul on B packed in panels, 2 x 67x600 @ (100x600)^T, bias, GELU: %s, max abs "
        "diff from OpenBLAS %.2g, threads 1/2/3/8 bitwise equal", kl_status_str(s), err);
  free(A);
  free(W);
  free(P);
  free(bias);
  for (int i = 0; i < 5; i++) free(C[i]);
}

/* An A whose rows are a multiple of 4 KiB apart (KL_PGEMM_ALIAS) is read from a
 * copy with rows K + 16 apart: the same bits as that A read in place from rows 2080 apart
 * (batch 2, 1 and 2 threads), and within 1e-4 of OpenBLAS. */
void test_dense_matmul_panels_aliased_rows(void) {
  const int64_t batch = 2, M = 45, N = 40, K = 1030, np = (N + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL;
  const int64_t lds[2] = {2048, 2080}; /* rows 8 KiB apart (aliasing), 8320 B (not) */
  float* A[2];
  for (int i = 0; i < 2; i++) A[i] = malloc(sizeof(float) * (size_t)(batch * M * lds[i]));
  float* W = malloc(sizeof(float) * (size_t)(N * K));
  float* P = malloc(sizeof(float) * (size_t)(np * K * KL_DENSE_PANEL));
  float* C[5];
  for (int i = 0; i < 5; i++) C[i] = malloc(sizeof(float) * (size_t)(batch * M * N));
  kl_status s = KL_ERR_NOMEM;
  double err = 0;
  int same = 1;
  if (A[0] && A[1] && W && P && C[0] && C[1] && C[2] && C[3] && C[4]) {
    uint32_t st = 29;
    for (int64_t i = 0; i < batch * M * lds[0]; i++) A[0][i] = frand(&st);
    for (int64_t r = 0; r < batch * M; r++)
      for (int64_t k = 0; k < lds[1]; k++) A[1][r * lds[1] + k] = k < K ? A[0][r * lds[0] + k] : NAN;
    for (int64_t i = 0; i < N * K; i++) W[i] = frand(&st);
    pack_wt_panels(W, N, K, P);
    s = KL_OK;
    for (int t = 0; t < 5 && s == KL_OK; t++) { /* OpenBLAS; lds[0] at 1, 2 threads; lds[1] likewise */
      kl_matmul_args m;
      memset(&m, 0, sizeof(m));
      const int which = t < 3 ? 0 : 1;
      m.batch = batch, m.M = M, m.N = N, m.K = K, m.a = A[which], m.lda = lds[which];
      m.sa = M * lds[which];
      m.b = t == 0 ? W : P, m.ldb = K, m.trans_b = 1, m.b_panels = t > 0;
      m.c = C[t], m.ldc = N, m.sc = M * N, m.num_threads = t == 0 ? 1 : 1 + (t + 1) % 2;
      s = kl_f32_matmul(&m);
    }
    if (s == KL_OK) same = runs_agree(C, batch * M * N, &err);
  }
  check(s == KL_OK && err < 1e-4 && same,
        "[dense] matmul on panels, A rows 8 KiB apart (copied) vs 8320 B apart (in place): %s, "
        "same bits at 1 and 2 threads, max abs diff from OpenBLAS %.2g", kl_status_str(s), err);
  for (int i = 0; i < 2; i++) free(A[i]);
  free(W);
  free(P);
  for (int i = 0; i < 5; i++) free(C[i]);
}


/* Tiles split for more threads than the shape's: 256x512 (K = 256) is 2 tiles,
 * split for 8 (kl_dense_set_split_threads) into 8 (rows first), which 1, 2 and 8
 * threads all run, bitwise equal (OpenBLAS's bits for a tile depend on its M/N
 * extent on some CPUs, so the tiles must not follow num_threads). */
void test_dense_matmul_split(void) {
  const int64_t M = 256, N = 512, K = 256;
  float* A = malloc(sizeof(float) * (size_t)(M * K));
  float* B = malloc(sizeof(float) * (size_t)(K * N));
  float* C[3];
  for (int i = 0; i < 3; i++) C[i] = malloc(sizeof(float) * (size_t)(M * N));
  kl_status s = KL_ERR_NOMEM;
  int ran8 = 0;
  if (A && B && C[0] && C[1] && C[2]) {
    uint32_t st = 11;
    for (int64_t i = 0; i < M * K; i++) A[i] = frand(&st);
    for (int64_t i = 0; i < K * N; i++) B[i] = frand(&st);
    const int threads[3] = {1, 2, 8};
    kl_dense_set_split_threads(8);
    s = KL_OK;
    for (int t = 0; t < 3 && s == KL_OK; t++) {
      kl_matmul_args m;
      memset(&m, 0, sizeof(m));
      m.batch = 1, m.M = M, m.N = N, m.K = K, m.a = A, m.lda = K, m.b = B, m.ldb = N;
      m.c = C[t], m.ldc = N, m.num_threads = threads[t];
      s = kl_f32_matmul(&m);
      if (threads[t] == 8) ran8 = kl_pool_last_threads();
    }
    kl_dense_set_split_threads(0);
  }
  check(s == KL_OK && ran8 == 8 && !memcmp(C[0], C[1], sizeof(float) * (size_t)(M * N)) &&
            !memcmp(C[0], C[2], sizeof(float) * (size_t)(M * N)),
        "[dense] matmul 256x512x256 split for 8 threads: %s, 8 threads ran %d (want "
        "8), threads 1/2/8 bitwise equal",
        kl_status_str(s), ran8);
  free(A);
  free(B);
  for (int i = 0; i < 3; i++) free(C[i]);
}
