/* AVX2+FMA float32 math shared by the AVX2 kernels (header-only). */
#ifndef KL_AVX2FMA_MATH_H
#define KL_AVX2FMA_MATH_H

#include <immintrin.h>
#include <stddef.h>

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

/* simd-math.h over __m256: kl_avx2fma_exp, _clamp, _sigmoid, _tanh, _sinsq, _cell_update
 * (max/min return their second operand when either is NaN: x keeps its NaN). */
#define KL_VF __m256
#define KL_VNAME(name) kl_avx2fma_##name
#define KL_VSET1 _mm256_set1_ps
#define KL_VADD _mm256_add_ps
#define KL_VSUB _mm256_sub_ps
#define KL_VMUL _mm256_mul_ps
#define KL_VDIV _mm256_div_ps
#define KL_VMIN _mm256_min_ps
#define KL_VMAX _mm256_max_ps
#define KL_VNEG(x) _mm256_sub_ps(_mm256_setzero_ps(), x)
#define KL_VFMADD _mm256_fmadd_ps
#define KL_VFNMADD _mm256_fnmadd_ps
#define KL_VROUND(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* 2^n built in the exponent field (2^128 encodes inf: exp overflows where expf does) */
#define KL_VSCALE(p, n) \
  _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32( \
                       _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)))
#define KL_VLOADU _mm256_loadu_ps
#define KL_VSTOREU _mm256_storeu_ps
#include "simd-math.h"

#endif
