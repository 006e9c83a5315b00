/* CPU feature detection and kernel dispatch, decided once.
 * Kernels come from the lists in src/kernels/<op>.inc (best first); an ISA level
 * (kl_isa) allows a set of CPU features (KL_ARCH_*) and the dispatch takes the
 * first entry of a list whose features the active level allows.
 * KOKORO_LSTM_ISA=scalar|avx2|avx512|avx512-bf16|avx512-amx (x86-64) or scalar|neon|neon-bf16
 * (aarch64) caps the level (tests run every path); a name this CPU lacks is ignored.
 * KL_FORCE_PORTABLE builds the non-Linux paths on Linux (no getauxval). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if defined(KL_HAVE_X86)
#include <cpuid.h>
#if defined(__linux__) && !defined(KL_FORCE_PORTABLE)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif
#if defined(KL_HAVE_NEON) && defined(__linux__) && !defined(KL_FORCE_PORTABLE)
#include <sys/auxv.h>
#define KL_HWCAP_ASIMD (1ul << 1) /* asm/hwcap.h: HWCAP_ASIMD */
#define KL_HWCAP2_BF16 (1ul << 14) /* asm/hwcap.h: HWCAP2_BF16 (BFDOT, BFMMLA, BFCVT) */
#endif

static kl_isa g_detected = KL_ISA_SCALAR;
static unsigned g_arch = 0; /* KL_ARCH_* of this CPU */
static atomic_int g_active = KL_ISA_SCALAR;
static atomic_int g_f32_amx = 0; /* kl_f32_amx_set, KOKORO_LSTM_F32_AMX */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* What each ISA level allows (kernels needing other features are skipped) and
 * what it needs to be supported at all. */
static unsigned level_allows(kl_isa isa) {
  switch (isa) {
    case KL_ISA_SCALAR: return 0;
    case KL_ISA_AVX2: return KL_ARCH_AVX2FMA | KL_ARCH_F16C;
    case KL_ISA_AVX512: return KL_ARCH_AVX2FMA | KL_ARCH_F16C | KL_ARCH_AVX512F;
    case KL_ISA_AVX512_BF16:
      return KL_ARCH_AVX2FMA | KL_ARCH_F16C | KL_ARCH_AVX512F | KL_ARCH_AVX512BF16;
    case KL_ISA_AVX512_AMX:
      return KL_ARCH_AVX2FMA | KL_ARCH_F16C | KL_ARCH_AVX512F | KL_ARCH_AVX512BF16 | KL_ARCH_AVX512AMX;
    case KL_ISA_NEON: return KL_ARCH_NEON;
    case KL_ISA_NEON_BF16: return KL_ARCH_NEON | KL_ARCH_NEONBF16;
  }
  return 0;
}
static unsigned level_needs(kl_isa isa) { return level_allows(isa) & ~KL_ARCH_F16C; }

static int popcount(unsigned v) {
  int n = 0;
  for (; v; v &= v - 1) n++;
  return n;
}

static int supported(kl_isa isa) {
#if !defined(KL_HAVE_X86)
  if (isa == KL_ISA_AVX2 || isa == KL_ISA_AVX512 || isa == KL_ISA_AVX512_BF16 ||
      isa == KL_ISA_AVX512_AMX)
    return 0;
#endif
#if !defined(KL_HAVE_NEON)
  if (isa == KL_ISA_NEON || isa == KL_ISA_NEON_BF16) return 0;
#endif
  return (g_arch & level_needs(isa)) == level_needs(isa);
}

#if defined(KL_HAVE_X86)
/* AMX-TILE and AMX-BF16 (CPUID.(7,0):EDX bits 24, 22), tile state enabled by the
 * OS (XCR0 bits 17-18), and on Linux the per-process permission to use tile
 * data (arch_prctl ARCH_REQ_XCOMP_PERM, Linux >= 5.16): without it the first
 * tile instruction kills the process. Other systems: not probed, not used. */
static int amx_usable(void) {
#if defined(__linux__) && !defined(KL_FORCE_PORTABLE)
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1u) || !(d >> 22 & 1u)) return 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1u)) return 0; /* OSXSAVE */
  unsigned xlo, xhi;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  if ((xlo & (3u << 17)) != (3u << 17)) return 0;
  return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
  return 0;
#endif
}
#endif

static void detect(void) {
#if defined(KL_HAVE_X86)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    g_arch |= KL_ARCH_AVX2FMA;
    unsigned a, b, c, d; /* F16C: CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports lacks "f16c") */
    if (__get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u)) g_arch |= KL_ARCH_F16C;
    if (__builtin_cpu_supports("avx512f")) {
      g_arch |= KL_ARCH_AVX512F;
      if (__builtin_cpu_supports("avx512bf16")) g_arch |= KL_ARCH_AVX512BF16;
      if (amx_usable()) g_arch |= KL_ARCH_AVX512AMX;
    }
  }
#elif defined(KL_HAVE_NEON)
#if defined(__linux__) && !defined(KL_FORCE_PORTABLE)
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  if (hw & KL_HWCAP_ASIMD) {
    g_arch |= KL_ARCH_NEON;
    if (hw2 & KL_HWCAP2_BF16) g_arch |= KL_ARCH_NEONBF16;
  }
#else
  /* Advanced SIMD is part of every AArch64 CPU; BF16 is not probed off Linux. */
  g_arch |= KL_ARCH_NEON;
#endif
#endif
  /* the best level: the supported one that allows the most */
  for (int i = 0; i < KL_ISA_COUNT; i++)
    if (supported((kl_isa)i) && popcount(level_allows((kl_isa)i)) > popcount(level_allows(g_detected)))
      g_detected = (kl_isa)i;
  kl_isa active = g_detected;
  const char* env = getenv("KOKORO_LSTM_ISA");
  if (env && *env) {
    for (int i = 0; i < KL_ISA_COUNT; i++)
      if (strcmp(env, kl_isa_name((kl_isa)i)) == 0 && supported((kl_isa)i)) active = (kl_isa)i;
  }
  atomic_store(&g_active, (int)active);
  const char* f32_amx = getenv("KOKORO_LSTM_F32_AMX");
  atomic_store(&g_f32_amx, f32_amx && strcmp(f32_amx, "1") == 0);
}

void kl_f32_amx_set(int on) {
  pthread_once(&g_once, detect);
  atomic_store(&g_f32_amx, on != 0);
}

int kl_f32_amx_enabled(void) {
  pthread_once(&g_once, detect);
  return atomic_load(&g_f32_amx);
}

/* ---- float16 single rows: the list's KL_ARCH_F16_NARROW entry or not ----
 * Both give the same bits; CPUs that split 512-bit conversions in two prefer 8
 * halves per instruction. Decided once per process: KOKORO_LSTM_F16_WIDEN=256|512,
 * else the narrow entry when it runs one row through a block of R = 128 in at
 * most 95% of the other's time (each timed 9 times, on zeros in L1). */
static atomic_int g_f16_narrow = 0;
static pthread_once_t g_f16_once = PTHREAD_ONCE_INIT;

static int64_t f16_time(kl_lstmcell_ukernel_fn fn, size_t reps) {
  enum { PR = 128 };
  static uint16_t w[PR * 64] __attribute__((aligned(64)));
  static float h[PR], gx[4 * KL_NR], bias[4 * KL_NR], c[KL_NR], h_out[KL_NR];
  const kl_cell_row row = {gx, h, c, h_out};
  const int64_t t0 = kl_now_ns();
  for (size_t r = 0; r < reps; r++) fn(PR, KL_NR, 0, 1, w, bias, 1, &row);
  return kl_now_ns() - t0;
}

static void f16_decide(void) {
  const char* env = getenv("KOKORO_LSTM_F16_WIDEN");
  if (env && (strcmp(env, "256") == 0 || strcmp(env, "512") == 0)) {
    atomic_store(&g_f16_narrow, strcmp(env, "256") == 0);
    return;
  }
  /* the first float16 entry this CPU runs with the narrow bit, and without */
  kl_lstmcell_ukernel_fn fn[2] = {NULL, NULL}; /* wide, narrow */
  const unsigned cpu = kl_arch_detected() | KL_ARCH_F16_NARROW;
  for (size_t i = 0; i < kl_lstmcell_count; i++) {
    const kl_lstmcell_entry* e = &kl_lstmcell_list[i];
    const int narrow = (e->arch & KL_ARCH_F16_NARROW) != 0;
    if (e->wt == KL_W_F16 && (e->arch & ~cpu) == 0 && !fn[narrow]) fn[narrow] = e->fn;
  }
  if (!fn[1] || !fn[0]) return;
  int64_t best[2] = {INT64_MAX, INT64_MAX};
  (void)f16_time(fn[0], 4); /* warm-up */
  (void)f16_time(fn[1], 4);
  for (int round = 0; round < 9; round++)
    for (int narrow = 0; narrow < 2; narrow++) {
      const int64_t t = f16_time(fn[narrow], 32);
      if (t < best[narrow]) best[narrow] = t;
    }
  atomic_store(&g_f16_narrow, 20 * best[1] < 19 * best[0]); /* 5% faster */
}

int kl_f16_narrow_rows(void) {
  pthread_once(&g_f16_once, f16_decide);
  return atomic_load_explicit(&g_f16_narrow, memory_order_relaxed);
}

void kl_f16_narrow_rows_set(int on) {
  pthread_once(&g_f16_once, f16_decide);
  atomic_store(&g_f16_narrow, on != 0);
}

const char* kl_isa_name(kl_isa isa) {
  switch (isa) {
    case KL_ISA_SCALAR: return "scalar";
    case KL_ISA_AVX2: return "avx2";
    case KL_ISA_AVX512: return "avx512";
    case KL_ISA_NEON: return "neon";
    case KL_ISA_NEON_BF16: return "neon-bf16";
    case KL_ISA_AVX512_BF16: return "avx512-bf16";
    case KL_ISA_AVX512_AMX: return "avx512-amx";
  }
  return "unknown";
}

kl_isa kl_isa_detected(void) {
  pthread_once(&g_once, detect);
  return g_detected;
}

int kl_isa_supported(kl_isa isa) {
  pthread_once(&g_once, detect);
  return (int)isa >= 0 && (int)isa < KL_ISA_COUNT && supported(isa);
}

kl_isa kl_isa_active(void) {
  pthread_once(&g_once, detect);
  return (kl_isa)atomic_load(&g_active);
}

kl_status kl_isa_set(kl_isa isa) {
  if (!kl_isa_supported(isa)) return KL_ERR_ARG;
  atomic_store(&g_active, (int)isa);
  return KL_OK;
}

unsigned kl_arch_detected(void) {
  pthread_once(&g_once, detect);
  return g_arch;
}

unsigned kl_arch_active(void) { return kl_arch_detected() & level_allows(kl_isa_active()); }

int kl_cpu_has_avx512bf16(void) { return (kl_arch_active() & KL_ARCH_AVX512BF16) != 0; }

/* ---- the kernel lists as tables ---- */
#define KL_KERNEL(arch, wt, isa, fn) {arch, wt, #isa, #fn, fn},
const kl_lstmcell_entry kl_lstmcell_list[] = {
#include "lstmcell.inc"
};
const kl_lstmproj_entry kl_lstmproj_list[] = {
#include "lstmproj.inc"
};
const kl_vunary_entry kl_f32_vsigmoid_list[] = {
#include "f32-vsigmoid.inc"
};
const kl_vunary_entry kl_f32_vtanh_list[] = {
#include "f32-vtanh.inc"
};
const kl_vunary_entry kl_f32_vgelu_list[] = {
#include "f32-vgelu.inc"
};
const kl_vsnake_entry kl_f32_vsnake_list[] = {
#include "f32-vsnake.inc"
};
const kl_rmoments_entry kl_f32_rmoments_list[] = {
#include "f32-rmoments.inc"
};
const kl_rsum_entry kl_f32_rsum_list[] = {
#include "f32-rsum.inc"
};
const kl_fp_entry kl_u64_fingerprint_list[] = {
#include "u64-fingerprint.inc"
};
const kl_vunary_entry kl_f32_softmax_list[] = {
#include "f32-softmax.inc"
};
const kl_f32_pgemm_entry kl_f32_pgemm_list[] = {
#include "f32-pgemm.inc"
};
const kl_f32_gemm_entry kl_f32_gemm_list[] = {
#include "f32-gemm.inc"
    {0, KL_W_F32, NULL, NULL, NULL} /* end (the list may be empty) */
};
#undef KL_KERNEL
#define KL_GEMM(arch, wt, isa, gemm, pack) {arch, wt, #isa, #gemm, gemm, pack},
const kl_gemm_entry kl_bf16_gemm_list[] = {
#include "bf16-gemm.inc"
    {0, KL_W_F32, NULL, NULL, NULL, NULL} /* end (the list may be empty) */
};
#undef KL_GEMM
#define KL_X6GEMM(arch, isa, gemm, pack_a, pack_w) {arch, #isa, #gemm, gemm, pack_a, pack_w},
const kl_x6gemm_entry kl_f32_x6gemm_list[] = {
#include "f32-x6gemm.inc"
    {0, NULL, NULL, NULL, NULL, NULL} /* end (the list may be empty) */
};
#undef KL_X6GEMM
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
const size_t kl_lstmcell_count = COUNT(kl_lstmcell_list);
const size_t kl_lstmproj_count = COUNT(kl_lstmproj_list);
const size_t kl_f32_vsigmoid_count = COUNT(kl_f32_vsigmoid_list);
const size_t kl_f32_vtanh_count = COUNT(kl_f32_vtanh_list);
const size_t kl_f32_vgelu_count = COUNT(kl_f32_vgelu_list);
const size_t kl_f32_vsnake_count = COUNT(kl_f32_vsnake_list);
const size_t kl_f32_rmoments_count = COUNT(kl_f32_rmoments_list);
const size_t kl_f32_rsum_count = COUNT(kl_f32_rsum_list);
const size_t kl_u64_fingerprint_count = COUNT(kl_u64_fingerprint_list);
const size_t kl_f32_softmax_count = COUNT(kl_f32_softmax_list);
const size_t kl_bf16_gemm_count = COUNT(kl_bf16_gemm_list) - 1;
const size_t kl_f32_gemm_count = COUNT(kl_f32_gemm_list) - 1;
const size_t kl_f32_pgemm_count = COUNT(kl_f32_pgemm_list);
const size_t kl_f32_x6gemm_count = COUNT(kl_f32_x6gemm_list) - 1;

/* The first entry of a list for type wt whose features the active level allows
 * (NULL if none: lists end with a scalar entry per type, except the GEMM's). */
#define FIRST(list, count, wt_, arch_, field)                                                \
  do {                                                                                       \
    for (size_t i_ = 0; i_ < (count); i_++)                                                  \
      if ((list)[i_].wt == (wt_) && ((list)[i_].arch & ~(arch_)) == 0) return (list)[i_].field; \
    return NULL;                                                                             \
  } while (0)

static kl_lstmcell_ukernel_fn first_cell(kl_wtype wt, unsigned arch) {
  FIRST(kl_lstmcell_list, kl_lstmcell_count, wt, arch, fn);
}
static kl_lstmproj_ukernel_fn first_proj(kl_wtype wt, unsigned arch) {
  FIRST(kl_lstmproj_list, kl_lstmproj_count, wt, arch, fn);
}
static kl_f32_gemm_ukernel_fn first_f32_gemm(kl_wtype wt, unsigned arch) {
  FIRST(kl_f32_gemm_list, kl_f32_gemm_count, wt, arch, fn);
}
static const kl_gemm_entry* first_gemm(kl_wtype wt, unsigned arch) {
  for (size_t i = 0; i < kl_bf16_gemm_count; i++)
    if (kl_bf16_gemm_list[i].wt == wt && (kl_bf16_gemm_list[i].arch & ~arch) == 0)
      return &kl_bf16_gemm_list[i];
  return NULL;
}

static kl_f32_pgemm_ukernel_fn first_vector_pgemm(kl_wtype wt, unsigned arch) {
  for (size_t i = 0; i < kl_f32_pgemm_count; i++)
    if (kl_f32_pgemm_list[i].arch && kl_f32_pgemm_list[i].wt == wt && (kl_f32_pgemm_list[i].arch & ~arch) == 0)
      return kl_f32_pgemm_list[i].fn;
  return NULL;
}

kl_kernels kl_select_kernels(kl_wtype wt) {
  unsigned arch = kl_arch_active();
  if (wt == KL_W_F16 && kl_f16_narrow_rows()) arch |= KL_ARCH_F16_NARROW; /* decided here, once */
  const kl_gemm_entry* g = first_gemm(wt, arch);
  /* Without a low-precision GEMM entry, a bfloat16 or float16 layer projects
   * its input with float32 W_ih: the float32 kernels serve it as they serve float32. */
  const kl_wtype wx = g ? wt : wt == KL_W_F64 ? KL_W_F64 : KL_W_F32;
  kl_kernels k = {.cell = first_cell(wt, arch & ~KL_ARCH_AVX512AMX),
                  .cell_batch = first_cell(wt, arch),
                  .proj = first_proj(wt, arch),
                  .gemm = g ? g->gemm : NULL,
                  .gemm_f32 = first_f32_gemm(wx, arch),
                  .pgemm = first_vector_pgemm(wx, arch),
                  .to_bf16 = g ? g->pack : NULL};
  if (k.cell_batch == k.cell) k.cell_batch = NULL;
  for (size_t i = 0; wx == KL_W_F32 && kl_f32_amx_enabled() && i < kl_f32_x6gemm_count; i++)
    if ((kl_f32_x6gemm_list[i].arch & ~arch) == 0) {
      k.x6gemm = kl_f32_x6gemm_list[i].gemm;
      k.x6pack_a = kl_f32_x6gemm_list[i].pack_a;
      k.x6pack_w = kl_f32_x6gemm_list[i].pack_w;
      break;
    }
  return k;
}

static kl_f32_vunary_fn first_vunary(const kl_vunary_entry* list, size_t count) {
  FIRST(list, count, KL_W_F32, kl_arch_active(), fn);
}
kl_f32_vunary_fn kl_select_vsigmoid(void) { return first_vunary(kl_f32_vsigmoid_list, kl_f32_vsigmoid_count); }
kl_f32_vunary_fn kl_select_vtanh(void) { return first_vunary(kl_f32_vtanh_list, kl_f32_vtanh_count); }
kl_f32_vunary_fn kl_select_vgelu(void) { return first_vunary(kl_f32_vgelu_list, kl_f32_vgelu_count); }
kl_f32_vsnake_fn kl_select_vsnake(void) {
  FIRST(kl_f32_vsnake_list, kl_f32_vsnake_count, KL_W_F32, kl_arch_active(), fn);
}
kl_f32_rmoments_fn kl_select_rmoments(void) {
  FIRST(kl_f32_rmoments_list, kl_f32_rmoments_count, KL_W_F32, kl_arch_active(), fn);
}
kl_f32_rsum_fn kl_select_rsum(void) {
  FIRST(kl_f32_rsum_list, kl_f32_rsum_count, KL_W_F32, kl_arch_active(), fn);
}

kl_f32_vunary_fn kl_select_softmax(void) { return first_vunary(kl_f32_softmax_list, kl_f32_softmax_count); }
kl_f32_pgemm_ukernel_fn kl_select_f32_pgemm(void) {
  FIRST(kl_f32_pgemm_list, kl_f32_pgemm_count, KL_W_F32, kl_arch_active(), fn);
}
kl_fp_ukernel_fn kl_select_fp(void) {
  FIRST(kl_u64_fingerprint_list, kl_u64_fingerprint_count, KL_W_F32, kl_arch_active(), fn);
}

void kl_f32_activation(int kind, size_t n, const float* x, float* y) {
  (kind == 0 ? kl_select_vsigmoid() : kl_select_vtanh())(n, x, y);
}
