/* CPU feature detection and kernel dispatch, decided once.
 * KOKORO_LSTM_ISA=scalar|avx2|avx512 (x86-64) or scalar|neon|neon-bf16 (aarch64)
 * caps the ISA (tests run every path); a name this CPU lacks is ignored.
 * KL_FORCE_PORTABLE builds the non-Linux paths on Linux (no getauxval). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if defined(KL_HAVE_NEON) && defined(__linux__) && !defined(KL_FORCE_PORTABLE)
#include <sys/auxv.h>
#define KL_HWCAP_ASIMD (1ul << 1) /* asm/hwcap.h: HWCAP_ASIMD */
#define KL_HWCAP2_BF16 (1ul << 14) /* asm/hwcap.h: HWCAP2_BF16 (BFDOT, BFMMLA, BFCVT) */
#endif

static kl_isa g_detected = KL_ISA_SCALAR;
static unsigned g_supported = 1u << KL_ISA_SCALAR; /* bit per kl_isa */
static atomic_int g_active = KL_ISA_SCALAR;
static int g_bf16 = 0;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void support(kl_isa isa) {
  g_supported |= 1u << isa;
  g_detected = isa; /* callers go from the lowest ISA up */
}

static void detect(void) {
#if defined(KL_HAVE_X86)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    support(KL_ISA_AVX2);
    if (__builtin_cpu_supports("avx512f")) {
      support(KL_ISA_AVX512);
      g_bf16 = __builtin_cpu_supports("avx512bf16") != 0;
    }
  }
#elif defined(KL_HAVE_NEON)
#if defined(__linux__) && !defined(KL_FORCE_PORTABLE)
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  if (hw & KL_HWCAP_ASIMD) {
    support(KL_ISA_NEON);
    if (hw2 & KL_HWCAP2_BF16) support(KL_ISA_NEON_BF16);
  }
#else
  /* Advanced SIMD is part of every AArch64 CPU; BF16 is not probed off Linux. */
  support(KL_ISA_NEON);
#endif
#endif
  kl_isa active = g_detected;
  const char* env = getenv("KOKORO_LSTM_ISA");
  if (env && *env) {
    for (int i = 0; i < KL_ISA_COUNT; i++)
      if (strcmp(env, kl_isa_name((kl_isa)i)) == 0 && (g_supported >> i & 1u)) active = (kl_isa)i;
  }
  atomic_store(&g_active, (int)active);
}

const char* kl_isa_name(kl_isa isa) {
  switch (isa) {
    case KL_ISA_SCALAR: return "scalar";
    case KL_ISA_AVX2: return "avx2";
    case KL_ISA_AVX512: return "avx512";
    case KL_ISA_NEON: return "neon";
    case KL_ISA_NEON_BF16: return "neon-bf16";
  }
  return "unknown";
}

kl_isa kl_isa_detected(void) {
  pthread_once(&g_once, detect);
  return g_detected;
}

int kl_isa_supported(kl_isa isa) {
  pthread_once(&g_once, detect);
  return (int)isa >= 0 && (int)isa < KL_ISA_COUNT && (g_supported >> (int)isa & 1u);
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

int kl_cpu_has_avx512bf16(void) {
  pthread_once(&g_once, detect);
  return g_bf16;
}

kl_kernels kl_select_kernels(kl_wtype wt) {
  const kl_isa isa = kl_isa_active();
  (void)isa; /* unused where no SIMD kernels are built */
  kl_kernels k = {NULL, NULL, NULL, NULL};
  switch (wt) {
    case KL_W_F64:
      k.cell = kl_f64_lstmcell_ukernel__scalar;
      k.proj = kl_f64_lstmproj_ukernel__scalar;
      return k;
    case KL_W_BF16:
      k.cell = kl_bf16_lstmcell_ukernel__scalar;
      k.proj = kl_bf16_lstmproj_ukernel__scalar;
#if defined(KL_HAVE_X86)
      if (isa == KL_ISA_AVX512) {
        k.cell = g_bf16 ? kl_bf16_lstmcell_ukernel__avx512bf16 : kl_bf16_lstmcell_ukernel__avx512f;
        k.proj = kl_bf16_lstmproj_ukernel__avx512f;
        if (g_bf16) {
          k.gemm = kl_bf16_gemm_ukernel__avx512bf16;
          k.to_bf16 = kl_f32_to_bf16_pairs__avx512bf16;
        }
      }
#elif defined(KL_HAVE_NEON)
      if (isa == KL_ISA_NEON || isa == KL_ISA_NEON_BF16) {
        k.cell = isa == KL_ISA_NEON_BF16 ? kl_bf16_lstmcell_ukernel__neonbf16
                                         : kl_bf16_lstmcell_ukernel__neon;
        k.proj = kl_bf16_lstmproj_ukernel__neon;
      }
#endif
      return k;
    case KL_W_F32:
    default:
      k.cell = kl_f32_lstmcell_ukernel__scalar;
      k.proj = kl_f32_lstmproj_ukernel__scalar;
#if defined(KL_HAVE_X86)
      if (isa == KL_ISA_AVX2) {
        k.cell = kl_f32_lstmcell_ukernel__avx2fma;
        k.proj = kl_f32_lstmproj_ukernel__avx2fma;
      } else if (isa == KL_ISA_AVX512) {
        k.cell = kl_f32_lstmcell_ukernel__avx512f;
        k.proj = kl_f32_lstmproj_ukernel__avx512f;
      }
#elif defined(KL_HAVE_NEON)
      if (isa == KL_ISA_NEON || isa == KL_ISA_NEON_BF16) {
        k.cell = kl_f32_lstmcell_ukernel__neon;
        k.proj = kl_f32_lstmproj_ukernel__neon;
      }
#endif
      return k;
  }
}

kl_f32_vunary_fn kl_select_vsigmoid(void) {
  switch (kl_isa_active()) {
#if defined(KL_HAVE_X86)
    case KL_ISA_AVX512: return kl_f32_vsigmoid__avx512f;
    case KL_ISA_AVX2: return kl_f32_vsigmoid__avx2fma;
#elif defined(KL_HAVE_NEON)
    case KL_ISA_NEON:
    case KL_ISA_NEON_BF16: return kl_f32_vsigmoid__neon;
#endif
    default: break;
  }
  return kl_f32_vsigmoid__scalar;
}

kl_f32_vunary_fn kl_select_vtanh(void) {
  switch (kl_isa_active()) {
#if defined(KL_HAVE_X86)
    case KL_ISA_AVX512: return kl_f32_vtanh__avx512f;
    case KL_ISA_AVX2: return kl_f32_vtanh__avx2fma;
#elif defined(KL_HAVE_NEON)
    case KL_ISA_NEON:
    case KL_ISA_NEON_BF16: return kl_f32_vtanh__neon;
#endif
    default: break;
  }
  return kl_f32_vtanh__scalar;
}

kl_f32_rsum_fn kl_select_rsum(void) {
  switch (kl_isa_active()) {
#if defined(KL_HAVE_X86)
    case KL_ISA_AVX512: return kl_f32_rsum__avx512f;
    case KL_ISA_AVX2: return kl_f32_rsum__avx2fma;
#elif defined(KL_HAVE_NEON)
    case KL_ISA_NEON:
    case KL_ISA_NEON_BF16: return kl_f32_rsum__neon;
#endif
    default: break;
  }
  return kl_f32_rsum__scalar;
}

kl_fp_ukernel_fn kl_select_fp(void) {
#ifdef KL_HAVE_X86
  const kl_isa isa = kl_isa_active();
  if (isa == KL_ISA_AVX512) return kl_u64_fingerprint__avx512f;
  if (isa == KL_ISA_AVX2) return kl_u64_fingerprint__avx2fma;
#endif
  return kl_u64_fingerprint__scalar;
}

void kl_f32_activation(int kind, size_t n, const float* x, float* y) {
  (kind == 0 ? kl_select_vsigmoid() : kl_select_vtanh())(n, x, y);
}
