/* AVX-512F float32 math shared by the AVX-512 kernels (header-only). */
#ifndef KL_AVX512F_MATH_H
#define KL_AVX512F_MATH_H

#include <immintrin.h>
#include <stddef.h>

#ifndef KL_INLINE
#define KL_INLINE static inline __attribute__((always_inline))
#endif

/* simd-math.h over __m512: kl_avx512f_exp, _clamp, _sigmoid, _tanh, _sinsq, _cell_update
 * (max/min return their second operand when either is NaN: x keeps its NaN). */
#define KL_VF __m512
#define KL_VNAME(name) kl_avx512f_##name
#define KL_VSET1 _mm512_set1_ps
#define KL_VADD _mm512_add_ps
#define KL_VSUB _mm512_sub_ps
#define KL_VMUL _mm512_mul_ps
#define KL_VDIV _mm512_div_ps
#define KL_VMIN _mm512_min_ps
#define KL_VMAX _mm512_max_ps
#define KL_VNEG(x) _mm512_sub_ps(_mm512_setzero_ps(), x)
#define KL_VFMADD _mm512_fmadd_ps
#define KL_VFNMADD _mm512_fnmadd_ps
#define KL_VROUND(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define KL_VSCALE _mm512_scalef_ps
#define KL_VLOADU _mm512_loadu_ps
#define KL_VSTOREU _mm512_storeu_ps
#include "simd-math.h"

/* Rows [0, total) in the fewest tiles of at most max rows, sizes as even as
 * possible (8 rows by 6: 4 + 4, not 6 + 2):
 *   for (KL_EVEN_TILES(e, n, total, max)) ... rows [e, e + n) ...
 * Used by the cells' batch tiles and f32-pgemm's row tiles. */
#define KL_EVEN_TILES(e, n, total, max)                            \
  size_t e = 0, n = 0, e##tiles_ = ((total) + (max) - 1) / (max); \
  e < (total) && (n = ((total) - e + e##tiles_ - 1) / e##tiles_, 1); e += n, e##tiles_--

#endif
