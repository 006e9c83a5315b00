/* Every entry of every kernel list (src/kernels/<op>.inc) this CPU can run,
 * whatever the ISA level, against the scalar one; the dispatch per level; the
 * portable half conversions. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "kernels.h"
#include "kokoro_lstm_testing.h"

/* 1 if this CPU has what a list entry needs (else the entry is skipped). */
static int cpu_has(unsigned arch, const char* name) {
  if ((arch & ~(kl_arch_detected() | KL_ARCH_F16_NARROW)) == 0) return 1; /* a preference: run it */
  printf("SKIP [kernel %s] this CPU lacks its features (0x%x)\n", name, arch);
  return 0;
}

/* The portable half conversions: every half widens exactly and narrows back to
 * itself; floats round to nearest even (midpoints between neighbouring halves),
 * overflow to inf, NaN stays NaN. */
static void test_f16_conversion(void) {
  int ok = 1;
  char why[160] = "";
  for (uint32_t u = 0; u < 65536 && ok; u++) {
    const uint16_t h = (uint16_t)u;
    const float f = kl_f16_to_f32(h);
    const int nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
    if (nan) {
      ok = isnan(f) && (kl_f32_to_f16(f) & 0x7fffu) > 0x7c00u;
      if (!ok) snprintf(why, sizeof(why), " (NaN 0x%04x)", (unsigned)h);
      continue;
    }
    /* the value: sign, exponent, mantissa in double */
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double want = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
    if (h & 0x8000u) want = -want;
    if ((double)f != want || kl_f32_to_f16(f) != h) {
      ok = 0;
      snprintf(why, sizeof(why), " (0x%04x -> %.9g, want %.9g, back 0x%04x)", (unsigned)h, (double)f,
               want, (unsigned)kl_f32_to_f16(f));
    }
    /* the midpoint to the next half up rounds to the even one of the two */
    if (ok && e < 31 && (h & 0x7fffu) < 0x7bffu) {
      const float next = kl_f16_to_f32((uint16_t)(h + 1));
      const float mid = (float)(((double)f + (double)next) / 2.0); /* exact in float */
      const uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : h;
      if (kl_f32_to_f16(mid) != even) {
        ok = 0;
        snprintf(why, sizeof(why), " (midpoint after 0x%04x -> 0x%04x, want 0x%04x)", (unsigned)h,
                 (unsigned)kl_f32_to_f16(mid), (unsigned)even);
      }
    }
  }
  ok = ok && kl_f32_to_f16(65519.0f) == 0x7bffu && kl_f32_to_f16(65520.0f) == 0x7c00u &&
       kl_f32_to_f16(-1e30f) == 0xfc00u && kl_f32_to_f16(INFINITY) == 0x7c00u &&
       kl_f32_to_f16(1e-9f) == 0 && kl_f32_to_f16(-0.0f) == 0x8000u;
  check(ok, "[f16] half <-> float: all 65536 halves exact and back, midpoints to even, "
        "overflow to inf, NaN kept%s", why);
}

/* Every entry of every kernel list the CPU can run, whatever the ISA level. */
void test_kernel_lists(void) {
  test_f16_conversion();
  for (size_t i = 0; i < kl_lstmcell_count; i++) {
    const kl_lstmcell_entry* k = &kl_lstmcell_list[i];
    if (k->arch && cpu_has(k->arch, k->name)) test_cell_kernel(k);
  }
  for (size_t i = 0; i < kl_lstmproj_count; i++)
    if (kl_lstmproj_list[i].arch && cpu_has(kl_lstmproj_list[i].arch, kl_lstmproj_list[i].name))
      test_proj_kernel(&kl_lstmproj_list[i]);
  for (int kind = 0; kind < 3; kind++) {
    const kl_vunary_entry* list =
        kind == 0 ? kl_f32_vsigmoid_list : kind == 1 ? kl_f32_vtanh_list : kl_f32_vgelu_list;
    const size_t n =
        kind == 0 ? kl_f32_vsigmoid_count : kind == 1 ? kl_f32_vtanh_count : kl_f32_vgelu_count;
    for (size_t i = 0; i + 1 < n; i++) /* the last entry is the scalar one */
      if (cpu_has(list[i].arch, list[i].name))
        test_vunary_kernel(&list[i], &list[n - 1], kind == 0 ? "sigmoid" : kind == 1 ? "tanh" : "gelu");
  }
  for (size_t i = 0; i < kl_f32_vsnake_count; i++) /* the scalar entry too: against double */
    if (cpu_has(kl_f32_vsnake_list[i].arch, kl_f32_vsnake_list[i].name))
      test_vsnake_kernel(&kl_f32_vsnake_list[i]);
  for (size_t i = 0; i < kl_f32_rmoments_count; i++)
    if (cpu_has(kl_f32_rmoments_list[i].arch, kl_f32_rmoments_list[i].name))
      test_rmoments_kernel(&kl_f32_rmoments_list[i], &kl_f32_rmoments_list[kl_f32_rmoments_count - 1]);
  for (size_t i = 0; i + 1 < kl_f32_rsum_count; i++)
    if (cpu_has(kl_f32_rsum_list[i].arch, kl_f32_rsum_list[i].name))
      test_rsum_kernel(&kl_f32_rsum_list[i], &kl_f32_rsum_list[kl_f32_rsum_count - 1]);
  for (size_t i = 0; i + 1 < kl_f32_softmax_count; i++)
    if (cpu_has(kl_f32_softmax_list[i].arch, kl_f32_softmax_list[i].name))
      test_softmax_kernel(&kl_f32_softmax_list[i], &kl_f32_softmax_list[kl_f32_softmax_count - 1]);
  for (size_t i = 0; i + 1 < kl_u64_fingerprint_count; i++)
    if (cpu_has(kl_u64_fingerprint_list[i].arch, kl_u64_fingerprint_list[i].name))
      test_fp_kernel(&kl_u64_fingerprint_list[i]);
  for (size_t i = 0; i < kl_bf16_gemm_count; i++)
    if (cpu_has(kl_bf16_gemm_list[i].arch, kl_bf16_gemm_list[i].name))
      test_gemm_kernel(&kl_bf16_gemm_list[i]);
  for (size_t i = 0; i < kl_f32_x6gemm_count; i++)
    if (cpu_has(kl_f32_x6gemm_list[i].arch, kl_f32_x6gemm_list[i].name))
      test_x6gemm_kernel(&kl_f32_x6gemm_list[i]);
  for (size_t i = 0; i < kl_f32_gemm_count; i++)
    if (cpu_has(kl_f32_gemm_list[i].arch, kl_f32_gemm_list[i].name))
      test_f32_gemm_kernel(&kl_f32_gemm_list[i]);
  for (size_t i = 0; i < kl_f32_pgemm_count; i++) /* the scalar entry too: against double */
    if (cpu_has(kl_f32_pgemm_list[i].arch, kl_f32_pgemm_list[i].name))
      test_pgemm_kernel(&kl_f32_pgemm_list[i], &kl_f32_pgemm_list[kl_f32_pgemm_count - 1]);
  /* every weight type has a scalar kernel, so the dispatch never comes back empty */
  const kl_wtype wts[] = {KL_W_F32, KL_W_F64, KL_W_BF16, KL_W_F16};
  int ok = 1;
  for (size_t i = 0; i < sizeof(wts) / sizeof(wts[0]); i++) ok = ok && scalar_cell(wts[i]) && scalar_proj(wts[i]);
  check(ok && kl_f32_vsigmoid_list[kl_f32_vsigmoid_count - 1].arch == 0 &&
            kl_f32_vtanh_list[kl_f32_vtanh_count - 1].arch == 0 &&
            kl_f32_vgelu_list[kl_f32_vgelu_count - 1].arch == 0 &&
            kl_f32_vsnake_list[kl_f32_vsnake_count - 1].arch == 0 &&
            kl_f32_rmoments_list[kl_f32_rmoments_count - 1].arch == 0 &&
            kl_f32_rsum_list[kl_f32_rsum_count - 1].arch == 0 &&
            kl_u64_fingerprint_list[kl_u64_fingerprint_count - 1].arch == 0 &&
            kl_f32_pgemm_list[kl_f32_pgemm_count - 1].arch == 0,
        "[lists] every weight type has a scalar cell and projection; vector lists end with scalar");
}

/* The kernels the active level picks: per weight type, the first list entry it
 * allows; float16 both with and without KL_ARCH_F16_NARROW. */
void test_dispatch(const char* name) {
  const kl_wtype wts[] = {KL_W_F32, KL_W_F64, KL_W_BF16, KL_W_F16, KL_W_F16};
  const int f16_narrow = kl_f16_narrow_rows();
  int ok = 1;
  char why[300] = "";
  for (size_t t = 0; t < sizeof(wts) / sizeof(wts[0]); t++) {
    const int narrow = t == 4 ? !f16_narrow : f16_narrow; /* the second float16: the other way */
    kl_f16_narrow_rows_set(narrow);
    const kl_kernels k = kl_select_kernels(wts[t]);
    const unsigned arch = kl_arch_active() | (wts[t] == KL_W_F16 && narrow ? KL_ARCH_F16_NARROW : 0);
    /* the first allowed entry for batches; without AMX tiles for small calls */
    const kl_lstmcell_entry *want = NULL, *small = NULL;
    for (size_t i = 0; i < kl_lstmcell_count && !want; i++)
      if (kl_lstmcell_list[i].wt == wts[t] && (kl_lstmcell_list[i].arch & ~arch) == 0) want = &kl_lstmcell_list[i];
    for (size_t i = 0; i < kl_lstmcell_count && !small; i++)
      if (kl_lstmcell_list[i].wt == wts[t] && (kl_lstmcell_list[i].arch & ~(arch & ~KL_ARCH_AVX512AMX)) == 0)
        small = &kl_lstmcell_list[i];
    if (!want || !small || k.cell != small->fn || (k.cell_batch ? k.cell_batch : k.cell) != want->fn) {
      ok = 0;
      snprintf(why, sizeof(why), " (%s)", wtype_name(wts[t]));
    } else {
      snprintf(why + strlen(why), sizeof(why) - strlen(why), " %s=%s", wtype_name(wts[t]), want->name);
    }
  }
  kl_f16_narrow_rows_set(f16_narrow);
  check(ok, "[%s] dispatch picks the first allowed list entry per type (without AMX below %d rows; "
        "float16 with and without the narrow preference):%s", name, KL_CELL_BATCH_MIN, why);
}
