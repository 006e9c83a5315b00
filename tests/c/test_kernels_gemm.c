/* The low-precision and float32 GEMM kernels against a double product. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels.h"

/* C[M, N] (ldc; columns from N on must still hold 777) against the double
 * product of X's rows and W's rows (NULL: a zero row), the values first rounded
 * to bfloat16 when round_bf16; within abs_tol + rel_tol * sum |x w|. */
static int gemm_vs_double(size_t M, size_t N, size_t K, const float* X, size_t ldx,
                          const float* const* wrows, int round_bf16, const float* C, size_t ldc,
                          double abs_tol, double rel_tol, char* why, size_t wn) {
  for (size_t m = 0; m < M; m++)
    for (size_t n = 0; n < ldc; n++) {
      if (n >= N) {
        if (C[m * ldc + n] != 777.0f) {
          snprintf(why, wn, " (wrote past N)");
          return 0;
        }
        continue;
      }
      double ref = 0.0, mag = 0.0;
      for (size_t kk = 0; wrows[n] && kk < K; kk++) {
        float a = X[m * ldx + kk], w = wrows[n][kk];
        if (round_bf16) {
          a = kl_bf16_to_f32(kl_f32_to_bf16(a));
          w = kl_bf16_to_f32(kl_f32_to_bf16(w));
        }
        const double t = (double)a * (double)w;
        ref += t;
        mag += fabs(t);
      }
      if (fabs((double)C[m * ldc + n] - ref) > abs_tol + rel_tol * mag) {
        snprintf(why, wn, " (M=%zu K=%zu N=%zu C[%zu,%zu] = %.9g, want %.9g, sum|aw| %.3g)", M, K, N, m,
                 n, (double)C[m * ldc + n], ref, mag);
        return 0;
      }
    }
  return 1;
}

/* A low-precision input projection against a double product of the same
 * rounded values: M around the row tile, odd K, one and two column panels. */
void test_gemm_kernel(const kl_gemm_entry* k) {
  const size_t Ms[] = {1, 6, 13, 16, 18, 35, 47}, Ks[] = {1, 37, 64}, Ns[] = {64, 192};
  char why[160] = "";
  int ok = 1;
  for (size_t mi = 0; mi < 7 && ok; mi++)
    for (size_t ki = 0; ki < 3 && ok; ki++)
      for (size_t ni = 0; ni < 2 && ok; ni++) {
        const size_t M = Ms[mi], K = Ks[ki], N = Ns[ni], Kp = (K + 1) / 2, ldx = K + 3, ldc = N + 5;
        float* X = xcalloc(M * ldx, sizeof(float));
        float* Wf = xcalloc(N * K, sizeof(float));
        float* C = xcalloc(M * ldc, sizeof(float));
        uint32_t* A = xcalloc(M * Kp, sizeof(uint32_t));
        uint16_t* W = aligned_alloc(64, (N / 64) * Kp * 128 * sizeof(uint16_t) + 64);
        if (!W) exit(2);
        memset(W, 0, (N / 64) * Kp * 128 * sizeof(uint16_t));
        for (size_t i = 0; i < M * ldx; i++) X[i] = (float)urand(-2.0, 2.0);
        for (size_t n = 0; n < N; n++)
          for (size_t kk = 0; kk < K; kk++) {
            Wf[n * K + kk] = (float)urand(-0.5, 0.5);
            W[(((n / 64) * Kp + kk / 2) * 4 + (n % 64) / 16) * 32 + (n % 16) * 2 + (kk & 1)] =
                kl_f32_to_bf16(Wf[n * K + kk]);
          }
        for (size_t i = 0; i < M * ldc; i++) C[i] = 777.0f;
        k->pack(M, K, X, ldx, A);
        k->gemm(M, N, Kp, A, W, C, ldc);
        const float** rows = xcalloc(N, sizeof(float*));
        for (size_t n = 0; n < N; n++) rows[n] = Wf + n * K;
        ok = gemm_vs_double(M, N, K, X, ldx, rows, 1, C, ldc, 1e-6, 1e-6, why, sizeof(why));
        free(rows);
        free(X);
        free(Wf);
        free(C);
        free(A);
        free(W);
      }
  check(ok, "[kernel %s] %s GEMM (with %s) vs a double product of the rounded values: M = 1, 6, "
        "13, 16, 18, 35, 47, K = 1, 37, 64, N = 64, 192%s", k->name, wtype_name(k->wt), k->isa, why);
}

/* The six-product float32 GEMM against a double product of the float32 values:
 * M and N around the 32 x 32 block and the 128-column block, K around the
 * 32-value k-step, values over many binades, zero (NULL) columns, the operands
 * packed in two pieces each; the float32 bound for summing its 6K products ((6K + 1) 2^-24 of the sum of
 * |a w|); then the packers' report of values that cannot be split. */
void test_x6gemm_kernel(const kl_x6gemm_entry* k) {
  const size_t Ms[] = {1, 17, 32, 45, 70}, Ks[] = {1, 31, 32, 45, 100}, Ns[] = {32, 64, 160};
  char why[200] = "";
  int ok = 1;
  for (size_t mi = 0; mi < 5 && ok; mi++)
    for (size_t ki = 0; ki < 5 && ok; ki++)
      for (size_t ni = 0; ni < 3 && ok; ni++) {
        const size_t M = Ms[mi], K = Ks[ki], N = Ns[ni], ldx = K + 3, ldc = N + 5;
        const size_t sa = kl_x6_split_bytes(M, K), sw = kl_x6_split_bytes(N, K);
        float* X = xcalloc(M * ldx, sizeof(float));
        float* Wf = xcalloc(N * K, sizeof(float));
        float* C = xcalloc(M * ldc, sizeof(float));
        const float** rows = xcalloc(N, sizeof(float*));
        uint8_t* A = aligned_alloc(64, 3 * sa);
        uint8_t* W = aligned_alloc(64, 3 * sw);
        if (!A || !W) exit(2);
        for (size_t i = 0; i < M * ldx; i++) X[i] = (float)(urand(-2.0, 2.0) * pow(2.0, (double)(i % 23) - 11.0));
        for (size_t i = 0; i < N * K; i++) Wf[i] = (float)urand(-0.5, 0.5);
        for (size_t n = 0; n < N; n++) rows[n] = n % 7 == 3 ? NULL : Wf + n * K;
        for (size_t i = 0; i < M * ldc; i++) C[i] = 777.0f;
        const size_t mb = kl_round_up(M, 32), split_m = mb > 32 ? 32 : mb;
        int bad = k->pack_a(M, K, X, ldx, 0, split_m, A, sa);
        bad |= k->pack_a(M, K, X, ldx, split_m, mb, A, sa);
        bad |= k->pack_w(K, rows, 0, 32, W, sw);
        bad |= k->pack_w(K, rows, 32, N, W, sw);
        if (bad) { ok = 0; snprintf(why, sizeof(why), " (finite values reported as unsplittable)"); }
        k->gemm(M, N, (K + 31) / 32, A, sa, W, sw, C, ldc);
        ok = ok && gemm_vs_double(M, N, K, X, ldx, rows, 0, C, ldc, 1e-30, (6.0 * (double)K + 1.0) * 0x1p-24,
                                  why, sizeof(why));
        free(X);
        free(Wf);
        free(C);
        free(rows);
        free(A);
        free(W);
      }
  check(ok, "[kernel %s] six-product float32 GEMM (with %s) vs a double product: M = 1, 17, 32, 45, "
        "70, K = 1, 31, 32, 45, 100, N = 32, 64, 160, zero columns, two-piece packing%s", k->name, k->isa, why);

  /* values the split cannot carry: inf, NaN, and float32 beyond bfloat16's largest (rounds to inf) */
  const float specials[] = {INFINITY, -INFINITY, NAN, 3.4e38f, -3.4e38f};
  const size_t K = 40;
  float x[40];
  const float* rows[32];
  uint8_t* A = aligned_alloc(64, 3 * kl_x6_split_bytes(32, K));
  uint8_t* W = aligned_alloc(64, 3 * kl_x6_split_bytes(32, K));
  if (!A || !W) exit(2);
  for (size_t i = 0; i < K; i++) x[i] = (float)urand(-1e38, 1e38);
  for (size_t n = 0; n < 32; n++) rows[n] = x;
  int flags_ok = !k->pack_a(1, K, x, K, 0, 32, A, kl_x6_split_bytes(32, K)) &&
                 !k->pack_w(K, rows, 0, 32, W, kl_x6_split_bytes(32, K));
  for (size_t s = 0; s < 5; s++)
    for (size_t pos = 0; pos < K; pos += 13) {
      const float keep = x[pos];
      x[pos] = specials[s];
      flags_ok = flags_ok && k->pack_a(1, K, x, K, 0, 32, A, kl_x6_split_bytes(32, K)) &&
                 k->pack_w(K, rows, 0, 32, W, kl_x6_split_bytes(32, K));
      x[pos] = keep;
    }
  free(A);
  free(W);
  check(flags_ok, "[kernel %s] packers report inf, NaN and +-3.4e38 at k = 0, 13, 26, 39 (and "
        "not finite values up to 1e38)", k->name);
}

/* A float32 few-row projection against a double product: odd M, N and K around
 * the tiles (6 rows, 4 columns, 16 k), strided operands, W read in place, no
 * write past N; an infinity and a NaN in A reach exactly their row. */
void test_f32_gemm_kernel(const kl_f32_gemm_entry* k) {
  const size_t Ms[] = {1, 5, 6, 13, 31}, Ns[] = {1, 3, 4, 7, 64}, Ks[] = {1, 15, 16, 37};
  char why[200] = "";
  int ok = 1;
  for (size_t mi = 0; mi < 5 && ok; mi++)
    for (size_t ni = 0; ni < 5 && ok; ni++)
      for (size_t ki = 0; ki < 4 && ok; ki++) {
        const size_t M = Ms[mi], N = Ns[ni], K = Ks[ki], lda = K + 3, ldw = K + 5, ldc = N + 2;
        float* A = xcalloc(M * lda, sizeof(float));
        float* W = xcalloc(N * ldw, sizeof(float));
        float* C = xcalloc(M * ldc, sizeof(float));
        for (size_t i = 0; i < M * lda; i++) A[i] = (float)urand(-2.0, 2.0);
        for (size_t i = 0; i < N * ldw; i++) W[i] = (float)urand(-0.5, 0.5);
        const size_t inf_row = M > 2 ? 1 : M, nan_row = M > 2 ? M - 1 : M; /* M <= 2: none */
        if (inf_row < M) A[inf_row * lda + K / 2] = INFINITY;
        if (nan_row < M) A[nan_row * lda] = NAN;
        for (size_t i = 0; i < M * ldc; i++) C[i] = 777.0f;
        k->fn(M, N, K, A, lda, W, ldw, C, ldc);
        for (size_t m = 0; m < M && ok; m++)
          for (size_t n = 0; n < ldc && ok; n++) {
            const float got = C[m * ldc + n];
            if (n >= N) {
              if (got != 777.0f) { ok = 0; snprintf(why, sizeof(why), " (wrote past N)"); }
              continue;
            }
            double ref = 0.0, mag = 0.0;
            for (size_t kk = 0; kk < K; kk++) {
              ref += (double)A[m * lda + kk] * (double)W[n * ldw + kk];
              mag += fabs((double)A[m * lda + kk] * (double)W[n * ldw + kk]);
            }
            const int bad = m == nan_row ? !isnan(got)
                          : isinf(ref) || isnan(ref) ? !(isnan(got) && isnan(ref)) && got != (float)ref
                          : !(fabs((double)got - ref) <= 1e-6 * (1.0 + mag));
            if (bad) {
              ok = 0;
              snprintf(why, sizeof(why), " (M=%zu N=%zu K=%zu C[%zu,%zu] = %.9g, want %.9g)", M, N, K,
                       m, n, (double)got, ref);
            }
          }
        free(A);
        free(W);
        free(C);
      }
  check(ok, "[kernel %s] f32 few-row GEMM vs a double product: M = 1, 5, 6, 13, 31, N = 1, 3, 4, "
        "7, 64, K = 1, 15, 16, 37, strided, +inf and NaN rows%s", k->name, why);
}

/* A pre-packed-panel GEMM entry against the scalar entry (the same bits: one
 * fused multiply-add per k in k order, from init or from zero and then added to
 * C; NaN where it has NaN) and the scalar one against a double product: M around
 * the tiles (12 and 2 rows), partial panels (n < 32), a second K block added to C
 * (init NULL), strided A and C, no write past n; an infinity and a NaN in A reach
 * exactly their row. */
void test_pgemm_kernel(const kl_f32_pgemm_entry* k, const kl_f32_pgemm_entry* ref) {
  /* rows: avx512f tiles of up to 14 rows, split evenly (15 = 8 + 7, 29 = 10 + 10 + 9) */
  const size_t Ms[] = {1, 2, 3, 11, 12, 13, 14, 15, 25, 29}, ns[] = {1, 5, 16, 17, 31, 32},
               Ks[] = {1, 7, 40};
  char why[200] = "";
  int ok = 1;
  for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0] && ok; mi++)
    for (size_t ni = 0; ni < 6 && ok; ni++)
      for (size_t ki = 0; ki < 3 && ok; ki++) {
        const size_t M = Ms[mi], n = ns[ni], K = Ks[ki], lda = K + 3, ldc = n + 2, k1 = K / 2;
        float* A = xcalloc(M * lda, sizeof(float));
        float* P = xcalloc(K * KL_PGEMM_NR, sizeof(float));
        float* C = xcalloc(M * ldc, sizeof(float));
        float* R = xcalloc(M * ldc, sizeof(float));
        float init[KL_PGEMM_NR];
        for (size_t i = 0; i < M * lda; i++) A[i] = (float)urand(-2.0, 2.0);
        for (size_t kk = 0; kk < K; kk++)
          for (size_t j = 0; j < n; j++) P[kk * KL_PGEMM_NR + j] = (float)urand(-0.5, 0.5);
        for (size_t j = 0; j < n; j++) init[j] = (float)urand(-1.0, 1.0);
        const size_t inf_row = M > 2 ? 1 : M, nan_row = M > 2 ? M - 1 : M; /* M <= 2: none */
        if (inf_row < M) A[inf_row * lda + K / 2] = INFINITY;
        if (nan_row < M) A[nan_row * lda] = NAN;
        for (size_t i = 0; i < M * ldc; i++) C[i] = R[i] = 777.0f;
        /* two K blocks: [0, k1) from init, [k1, K) added to C */
        k->fn(M, n, k1, A, lda, P, init, C, ldc);
        k->fn(M, n, K - k1, A + k1, lda, P + k1 * KL_PGEMM_NR, NULL, C, ldc);
        ref->fn(M, n, k1, A, lda, P, init, R, ldc);
        ref->fn(M, n, K - k1, A + k1, lda, P + k1 * KL_PGEMM_NR, NULL, R, ldc);
        for (size_t m = 0; m < M && ok; m++)
          for (size_t j = 0; j < ldc && ok; j++) {
            const float got = C[m * ldc + j], want = R[m * ldc + j];
            if (j >= n) {
              if (got != 777.0f || want != 777.0f) { ok = 0; snprintf(why, sizeof(why), " (wrote past n)"); }
              continue;
            }
            double dref = init[j], mag = fabs(dref);
            for (size_t kk = 0; kk < K; kk++) {
              dref += (double)A[m * lda + kk] * (double)P[kk * KL_PGEMM_NR + j];
              mag += fabs((double)A[m * lda + kk] * (double)P[kk * KL_PGEMM_NR + j]);
            }
            const int same = (isnan(got) && isnan(want)) || memcmp(&got, &want, sizeof got) == 0;
            const int bad = !same || (m == nan_row ? !isnan(want)
                          : isinf(dref) || isnan(dref) ? !(isnan(want) && isnan(dref)) && want != (float)dref
                          : !(fabs((double)want - dref) <= 1e-6 * (1.0 + mag)));
            if (bad) {
              ok = 0;
              snprintf(why, sizeof(why), " (M=%zu n=%zu K=%zu C[%zu,%zu] = %.9g, scalar %.9g, double %.9g)",
                       M, n, K, m, j, (double)got, (double)want, dref);
            }
          }
        free(A);
        free(P);
        free(C);
        free(R);
      }
  check(ok, "[kernel %s] f32 packed-panel GEMM bitwise = %s, which is within 1e-6 of a double "
        "product: M = 1..25, n = 1..32, K = 1, 7, 40 in two blocks, strided, +inf and NaN rows%s",
        k->name, ref->name, why);
}
