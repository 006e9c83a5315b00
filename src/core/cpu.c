/* CPU feature detection and kernel dispatch, decided once.
 * KOKORO_LSTM_ISA=scalar|avx2|avx512 caps the ISA (tests run every path). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static kl_isa g_detected = KL_ISA_SCALAR;
static atomic_int g_active = KL_ISA_SCALAR;
static int g_bf16 = 0;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void detect(void) {
#ifdef KL_HAVE_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) g_detected = KL_ISA_AVX2;
  if (g_detected == KL_ISA_AVX2 && __builtin_cpu_supports("avx512f")) g_detected = KL_ISA_AVX512;
  g_bf16 = g_detected == KL_ISA_AVX512 && __builtin_cpu_supports("avx512bf16");
#endif
  kl_isa active = g_detected;
  const char* env = getenv("KOKORO_LSTM_ISA");
  if (env && *env) {
    for (int i = KL_ISA_SCALAR; i <= KL_ISA_AVX512; i++)
      if (strcmp(env, kl_isa_name((kl_isa)i)) == 0 && i <= (int)g_detected) active = (kl_isa)i;
  }
  atomic_store(&g_active, (int)active);
}

const char* kl_isa_name(kl_isa isa) {
  switch (isa) {
    case KL_ISA_SCALAR: return "scalar";
    case KL_ISA_AVX2: return "avx2";
    case KL_ISA_AVX512: return "avx512";
  }
  return "unknown";
}

kl_isa kl_isa_detected(void) {
  pthread_once(&g_once, detect);
  return g_detected;
}

kl_isa kl_isa_active(void) {
  pthread_once(&g_once, detect);
  return (kl_isa)atomic_load(&g_active);
}

kl_status kl_isa_set(kl_isa isa) {
  pthread_once(&g_once, detect);
  if ((int)isa < KL_ISA_SCALAR || isa > g_detected) return KL_ERR_ARG;
  atomic_store(&g_active, (int)isa);
  return KL_OK;
}

int kl_cpu_has_avx512bf16(void) {
  pthread_once(&g_once, detect);
  return g_bf16;
}

kl_kernels kl_select_kernels(kl_wtype wt) {
  const kl_isa isa = kl_isa_active();
  kl_kernels k = {NULL, NULL, NULL, NULL};
  switch (wt) {
    case KL_W_F64:
      k.cell = kl_f64_lstmcell_ukernel__scalar;
      k.proj = kl_f64_lstmproj_ukernel__scalar;
      return k;
    case KL_W_BF16:
      k.cell = kl_bf16_lstmcell_ukernel__scalar;
      k.proj = kl_bf16_lstmproj_ukernel__scalar;
#ifdef KL_HAVE_X86
      if (isa == KL_ISA_AVX512) {
        k.cell = g_bf16 ? kl_bf16_lstmcell_ukernel__avx512bf16 : kl_bf16_lstmcell_ukernel__avx512f;
        k.proj = kl_bf16_lstmproj_ukernel__avx512f;
        if (g_bf16) {
          k.gemm = kl_bf16_gemm_ukernel__avx512bf16;
          k.to_bf16 = kl_f32_to_bf16_pairs__avx512bf16;
        }
      }
#endif
      return k;
    case KL_W_F32:
    default:
      k.cell = kl_f32_lstmcell_ukernel__scalar;
      k.proj = kl_f32_lstmproj_ukernel__scalar;
#ifdef KL_HAVE_X86
      if (isa == KL_ISA_AVX2) {
        k.cell = kl_f32_lstmcell_ukernel__avx2fma;
        k.proj = kl_f32_lstmproj_ukernel__avx2fma;
      } else if (isa == KL_ISA_AVX512) {
        k.cell = kl_f32_lstmcell_ukernel__avx512f;
        k.proj = kl_f32_lstmproj_ukernel__avx512f;
      }
#endif
      return k;
  }
}

kl_f32_vunary_fn kl_select_vsigmoid(void) {
#ifdef KL_HAVE_X86
  switch (kl_isa_active()) {
    case KL_ISA_AVX512: return kl_f32_vsigmoid__avx512f;
    case KL_ISA_AVX2: return kl_f32_vsigmoid__avx2fma;
    default: break;
  }
#endif
  return kl_f32_vsigmoid__scalar;
}

kl_f32_vunary_fn kl_select_vtanh(void) {
#ifdef KL_HAVE_X86
  switch (kl_isa_active()) {
    case KL_ISA_AVX512: return kl_f32_vtanh__avx512f;
    case KL_ISA_AVX2: return kl_f32_vtanh__avx2fma;
    default: break;
  }
#endif
  return kl_f32_vtanh__scalar;
}

kl_f32_rsum_fn kl_select_rsum(void) {
#ifdef KL_HAVE_X86
  switch (kl_isa_active()) {
    case KL_ISA_AVX512: return kl_f32_rsum__avx512f;
    case KL_ISA_AVX2: return kl_f32_rsum__avx2fma;
    default: break;
  }
#endif
  return kl_f32_rsum__scalar;
}

kl_fp_ukernel_fn kl_select_fp(void) {
#ifdef KL_HAVE_X86
  if (kl_isa_active() >= KL_ISA_AVX2) return kl_u64_fingerprint__avx2fma;
#endif
  return kl_u64_fingerprint__scalar;
}

void kl_f32_activation(int kind, size_t n, const float* x, float* y) {
  (kind == 0 ? kl_select_vsigmoid() : kl_select_vtanh())(n, x, y);
}
