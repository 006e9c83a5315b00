/* The CUDA backend's plan (src/cuda/plan.c), with no GPU: the path, the cluster
 * geometry, the batch groups, shared memory, the -D options and the work memory. */
#include <stdint.h>
#include <string.h>

#include "cuda_plan.h"
#include "harness.h"
#include "kokoro_lstm.h"
#include "params.cuh" /* KL_LCAP_MAX */

static const kl_cuda_facts SM90 = {9, 1, 232448}, SM80 = {8, 0, 166912};

static kl_cuda_shape shape(int H, int R, int64_t B, int lengths) {
  return (kl_cuda_shape){.T = 8, .B = B, .L = 1, .D = 1, .H = H, .R = R, .wt = 0, .lengths = lengths};
}

/* p's options, joined by spaces. */
static const char* options(const kl_cuda_plan* p, char* out, size_t n) {
  char buf[KL_CUDA_NUM_DEFINES][32];
  const char* defs[KL_CUDA_NUM_DEFINES];
  const int nd = kl_cuda_plan_defines(p, buf, defs);
  out[0] = 0;
  for (int i = 0; i < nd; i++) {
    if (i) strncat(out, " ", n - strlen(out) - 1);
    strncat(out, defs[i], n - strlen(out) - 1);
  }
  return out;
}

static void test_paths(void) {
  int C = 0, ntw = 0;
  check(kl_cuda_cluster_shape(256, 256, &C, &ntw) && C == 8 && ntw == 512,
        "[cuda plan] H = 256: clusters of 8 CTAs, 512 threads hold W_hh (got %d, %d)", C, ntw);
  check(kl_cuda_cluster_shape(64, 64, &C, &ntw) && C == 1 && ntw == 256,
        "[cuda plan] H = 64: one CTA of 256 threads (got %d, %d)", C, ntw);
  check(!kl_cuda_cluster_shape(48, 20, &C, &ntw) && !kl_cuda_cluster_shape(7, 7, &C, &ntw),
        "[cuda plan] a projection or H %% 4 != 0: no cluster shape");
  char s[400];
  kl_cuda_plan p;
  kl_cuda_shape sh = shape(256, 256, 1, 0);
  kl_status st = kl_cuda_plan_path(&p, &sh, &SM90, KL_CUDA_AUTO, KL_CUDA_XCHG_MBARRIER);
  check(st == KL_OK && p.cluster && p.groups == 1 && p.smem == kl_cuda_cluster_smem(1, 256, 512) &&
            !strcmp(options(&p, s, sizeof(s)),
                    "-DKL_H=256 -DKL_R=256 -DKL_WT=0 -DKL_LCAP=0 -DKL_C=8 -DKL_NB=1 -DKL_NT=512 -DKL_NTW=512 -DKL_XCHG=1"),
        "[cuda plan] sm_90, H = 256: the cluster path with the mbarrier exchange (%s)", s);
  st = kl_cuda_plan_path(&p, &sh, &SM80, KL_CUDA_AUTO, KL_CUDA_XCHG_MBARRIER);
  check(st == KL_OK && !p.cluster && !strcmp(options(&p, s, sizeof(s)), "-DKL_H=256 -DKL_R=256 -DKL_WT=0 -DKL_LCAP=0"),
        "[cuda plan] sm_80: the step path, four options (%s)", s);
  st = kl_cuda_plan_path(&p, &sh, &SM80, KL_CUDA_CLUSTER, KL_CUDA_XCHG_MBARRIER);
  check(st == KL_ERR_ARG && strstr(kl_last_error(), "needs sm_90+"), "[cuda plan] the cluster path forced on sm_80: %s",
        kl_last_error());
  st = kl_cuda_plan_path(&p, &sh, &SM90, KL_CUDA_AUTO, -1);
  check(st == KL_ERR_ARG && strstr(kl_last_error(), "KOKORO_LSTM_CUDA_EXCHANGE"),
        "[cuda plan] an unknown exchange on the cluster path is refused");
  st = kl_cuda_plan_path(&p, &sh, &SM90, KL_CUDA_STEP, -1);
  check(st == KL_OK && !p.cluster, "[cuda plan] ... and not asked on the step path");
  sh = shape(64, 64, 1, 0);
  st = kl_cuda_plan_path(&p, &sh, &SM90, KL_CUDA_AUTO, KL_CUDA_XCHG_MBARRIER);
  check(st == KL_OK && p.cluster && p.defs.C == 1 && p.defs.XCHG == KL_CUDA_XCHG_BARRIER && p.nt == 256,
        "[cuda plan] one CTA per cluster: the barrier exchange (st.async needs a peer)");
  sh = shape(48, 20, 1, 0);
  sh.wt = 1;
  st = kl_cuda_plan_path(&p, &sh, &SM90, KL_CUDA_AUTO, KL_CUDA_XCHG_MBARRIER);
  check(st == KL_OK && !p.cluster && p.defs.WT == 1, "[cuda plan] a projection: the step path, bfloat16 weights");
}

static void test_lengths_and_limits(void) {
  const struct {
    int64_t B;
    int lengths, lcap;
  } cases[] = {{8, 0, 0}, {64, 1, 64}, {65, 1, 1024}, {1024, 1, 1024}, {1025, 1, KL_LCAP_MAX}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    kl_cuda_plan p;
    const kl_cuda_shape sh = shape(32, 32, cases[i].B, cases[i].lengths);
    kl_cuda_plan_path(&p, &sh, &SM80, KL_CUDA_AUTO, KL_CUDA_XCHG_MBARRIER);
    check(p.defs.LCAP == cases[i].lcap, "[cuda plan] B = %lld%s: KL_LCAP %d (want %d)", (long long)cases[i].B,
          cases[i].lengths ? " with lengths" : "", p.defs.LCAP, cases[i].lcap);
  }
  kl_cuda_shape sh = shape(32, 32, KL_LCAP_MAX + 1, 1);
  check(kl_cuda_plan_check(&sh) == KL_ERR_ARG, "[cuda plan] lengths for more than %d rows are refused", KL_LCAP_MAX);
  sh = shape(32, 32, 2, 0);
  sh.T = (int64_t)INT32_MAX + 1;
  check(kl_cuda_plan_check(&sh) == KL_ERR_ARG, "[cuda plan] T >= 2^31 is refused");
  sh.T = 8;
  check(kl_cuda_plan_check(&sh) == KL_OK, "[cuda plan] a small call passes the limits");
}

static void test_batch_groups(void) {
  kl_cuda_plan p;
  kl_cuda_shape sh = shape(256, 256, 64, 0);
  sh.D = 2;
  kl_cuda_plan_path(&p, &sh, &SM90, KL_CUDA_AUTO, KL_CUDA_XCHG_MBARRIER);
  kl_cuda_plan_batch(&p, &sh, 132, SM90.smem_optin);
  check(p.defs.NB == 1 && p.groups == 64, "[cuda plan] 66 clusters per direction for 64 rows: one row each (NB %d)",
        p.defs.NB);
  sh.D = 1;
  kl_cuda_plan_path(&p, &sh, &SM90, KL_CUDA_AUTO, KL_CUDA_XCHG_MBARRIER);
  kl_cuda_plan_batch(&p, &sh, 15, SM90.smem_optin);
  check(p.defs.NB == 5 && p.groups == 13 && p.smem == kl_cuda_cluster_smem(5, 256, 512),
        "[cuda plan] 15 clusters for 64 rows: 5 rows each, 13 groups (NB %d, groups %u)", p.defs.NB, p.groups);
  kl_cuda_plan_batch(&p, &sh, 1, (int)kl_cuda_cluster_smem(3, 256, 512));
  check(p.defs.NB == 3, "[cuda plan] the rows per cluster stay within the shared memory (NB %d)", p.defs.NB);
  kl_cuda_plan_batch(&p, &sh, 1, SM90.smem_optin);
  check(p.defs.NB == 16 && p.groups == 4, "[cuda plan] at most 16 rows per cluster (NB %d)", p.defs.NB);
}

static void test_workspace_and_tiles(void) {
  kl_cuda_plan p;
  kl_cuda_shape sh = {.T = 3, .B = 2, .L = 2, .D = 2, .H = 5, .R = 5};
  kl_cuda_plan_path(&p, &sh, &SM80, KL_CUDA_AUTO, KL_CUDA_XCHG_MBARRIER);
  check(p.off_out[0] == 256 && p.off_out[1] == 320 && p.off_h == 384 && p.off_c == 448 && p.off_m == 512 &&
            p.ws_floats == 576,
        "[cuda plan] work memory: gates, two layer outputs, h, c, m in 64-float parts (%zu %zu %zu %zu %zu %zu)",
        p.off_out[0], p.off_out[1], p.off_h, p.off_c, p.off_m, p.ws_floats);
  sh.L = 1;
  sh.x_gates = 1;
  kl_cuda_plan_path(&p, &sh, &SM80, KL_CUDA_AUTO, KL_CUDA_XCHG_MBARRIER);
  check(p.off_out[0] == 0 && p.off_h == 0 && p.ws_floats == 192,
        "[cuda plan] one layer with x_gates: no gates, no layer outputs");
  check(kl_cuda_gemm_tile(16384, 1024, 1, 132, 1) == 128 && kl_cuda_gemm_tile(16384, 1024, 1, 132, 0) == 64 &&
            kl_cuda_gemm_tile(256, 1024, 1, 132, 1) == 64,
        "[cuda plan] 128x128 tiles when they fill the GPU and the rows are aligned, else 64x64");
}

void test_cuda_plan(void) {
  test_paths();
  test_lengths_and_limits();
  test_batch_groups();
  test_workspace_and_tiles();
}
