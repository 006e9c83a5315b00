/* C test of the kokoro_lstm core through its public header, without Python.
 *
 * Every case is checked against a double-precision LSTM written here (the
 * torch.nn.LSTM semantics: gate order i, f, g, o; y[t] = h_t; the reverse
 * direction starts at each sequence's last valid step; outputs past a
 * sequence's length are 0; h_n / c_n are the states after each sequence's
 * last valid step), for every ISA the CPU supports and every dtype:
 *   float32 within 2e-6, bfloat16 within 1e-2, float64 within 1e-12.
 * Results must be bitwise identical for 1, 2, 4 and 16 threads, bad arguments
 * must give KL_ERR_ARG.
 *
 * Every kernel of every kernel list (src/kernels/<op>.inc) that this CPU can
 * run, whatever the ISA level, is also compared directly with the scalar kernel
 * of its type (through internal.h): cells, projections, activations, the
 * read-sum probe at odd sizes and with +-inf and NaN; low-precision GEMMs with a
 * double product. Per ISA level, the dispatch must pick the first list entry the
 * level allows. KOKORO_LSTM_ISA=name restricts the ISA loop to that ISA and
 * checks that the environment variable selected it.
 *
 * Prints one line per check and finishes with "N passed, M failed"; exits
 * non-zero on any failure. One file per concern (tests.h); this one runs them. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "kokoro_lstm_testing.h"
#include "internal.h"
#include "threads.h"

int main(void) {
  const kl_isa best = kl_isa_detected();
  printf("kokoro_lstm core test: blas=%s, isa detected=%s, active=%s, avx512_bf16=%d\n",
         kl_blas_name(), kl_isa_name(best), kl_isa_name(kl_isa_active()), kl_cpu_has_avx512bf16());
  check(kl_dtype_io_size(KL_F32) == 4 && kl_dtype_io_size(KL_BF16) == 4 &&
            kl_dtype_io_size(KL_F16) == 4 && kl_dtype_io_size(KL_F64) == 8,
        "[api] kl_dtype_io_size: float32 4, bfloat16 4, float16 4, float64 8");

  /* the tests run up to 16 threads whatever the machine's cores (results never
   * depend on the count) */
  setenv("KOKORO_LSTM_MAX_THREADS", "64", 0);
  test_thread_cap();
  test_interrupt();
  test_bad_args();
  test_gate_args();
  test_scratch();
  test_kernel_lists();
  test_dense_matmul();
  test_dense_matmul_split();
  test_dense_matmul_panels();
  test_dense_matmul_panels_aliased_rows();
  test_dense_conv1d_panels();
  test_dense_conv_phases();
  test_dense_attention();
  test_dense_forward();
  test_dense_threads_for_work();
  test_random();
  test_instance_norm();
  test_cuda_plan();

  const char* forced = getenv("KOKORO_LSTM_ISA");
  if (forced && *forced)
    check(strcmp(kl_isa_name(kl_isa_active()), forced) == 0,
          "[env] KOKORO_LSTM_ISA=%s selects it (active %s)", forced, kl_isa_name(kl_isa_active()));
  for (int isa = 0; isa < KL_ISA_COUNT; isa++) {
    const char* name = kl_isa_name((kl_isa)isa);
    if (forced && *forced && strcmp(forced, name) != 0) continue;
    const kl_status st = kl_isa_set((kl_isa)isa);
    if (!kl_isa_supported((kl_isa)isa)) {
      check(st == KL_ERR_ARG, "[%s] kl_isa_set for an ISA this CPU lacks -> %s (want KL_ERR_ARG)",
            name, kl_status_str(st));
      printf("SKIP [%s] not supported by this CPU (or build)\n", name);
      continue;
    }
    check(st == KL_OK && kl_isa_active() == (kl_isa)isa, "[%s] kl_isa_set -> %s, active %s", name,
          kl_status_str(st), kl_isa_name(kl_isa_active()));
    if (st != KL_OK) continue;
    test_activations(name);
    test_dispatch(name);
    /* the large float32 cases take the AMX tiles where the level has them; the
     * default (off) path is the float32 one every other level runs */
    kl_f32_amx_set(1);
    const kl_dtype dts[4] = {KL_F32, KL_BF16, KL_F16, KL_F64};
    for (int di = 0; di < 4; di++)
      for (int ci = 0; ci < NCASES; ci++) test_case(&CASES[ci], dts[di], name);
    test_concurrent(name);
  }
  kl_isa_set(best);

  /* Which threads ran the parallel jobs (libgomp's team when it is loaded, e.g.
   * with LD_PRELOAD: `make test` runs this program both ways).
   * KL_TEST_POOL=openmp|own says which one must have. */
  long jobs_own, jobs_omp, jobs_tvm;
  kl_pool_jobs(&jobs_own, &jobs_omp, &jobs_tvm);
  const char* omp = kl_pool_openmp();
  printf("parallel jobs: %ld on the own pool, %ld on OpenMP (%s)\n", jobs_own, jobs_omp,
         omp ? omp : "not loaded");
  const char* want = getenv("KL_TEST_POOL");
  if (want && strcmp(want, "openmp") == 0)
    check(omp && jobs_omp > 0 && jobs_own == 0, "KL_TEST_POOL=openmp: every job on libgomp's team");
  else if (want && strcmp(want, "own") == 0)
    check(!omp && jobs_own > 0 && jobs_omp == 0, "KL_TEST_POOL=own: every job on the own pool");

  return harness_summary();
}
