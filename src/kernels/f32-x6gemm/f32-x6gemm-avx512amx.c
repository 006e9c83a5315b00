/* float32 GEMM on AMX bfloat16 tiles, six products per element (XLA's
 * BF16_BF16_F32_X6): each float32 x is split exactly into three bfloat16,
 * x = x0 + x1 + x2 (x0 = bf16(x), x1 = bf16(x - x0), x2 = x - x0 - x1, each
 * rounded to nearest even; 3 x 8 significant bits hold float32's 24), and
 *   a . w ~ a0 w0 + a0 w1 + a1 w0 + a0 w2 + a1 w1 + a2 w0,
 * leaving out a1 w2 + a2 w1 + a2 w2 (below 2^-16 of |a w|, i.e. within float32
 * rounding of the sum); every product of bfloat16 values is exact in float32 and
 * tdpbf16ps accumulates in float32, so the result is as accurate as a float32
 * GEMM (the kernel test bounds it against a double product). bfloat16 has
 * float32's exponent range; tdpbf16ps treats bfloat16 denormals (|x2| below
 * 2^-126, i.e. |x| below ~2^-110) as zero.
 *
 * A non-finite x (or one whose rounding overflows) cannot be split (x - x0 would
 * be NaN or inf and meet every w): the packers report it and the caller uses its
 * float32 path instead for the whole product.
 *
 * Operands packed in whole tiles, each tile 1 KiB contiguous, so every tile load
 * reads 16 consecutive lines:
 *   A: per split s (at A + s*sa bytes), per 32-row block b, per k-step ks (16
 *      pairs): two tiles (rows 16h .. 16h+15 of the block, 16 pairs each):
 *      byte offset ((b*nks + ks)*2 + h)*1024 + r*64 + p*4, pair p = (k even, k odd);
 *   W: per split s (at W + s*sw bytes), per 32-column block c, per k-step: two
 *      B tiles (columns 16h .. 16h+15): offset ((c*nks + ks)*2 + h)*1024 + p*64 +
 *      l*4 for column l, pair p.
 * Rows past M, columns past N and pairs past K are zero. */
#include "internal.h"
#include "avx512amx-tile.h"

#define X6_TILE 1024
#define X6_BLOCK(nks) ((size_t)(nks) * 2 * X6_TILE) /* one 32-row (32-column) block of one split */

/* C[M, N] (ldc) = A W^T for M rows of the A blocks at A (block 0 = row 0) and N
 * (a multiple of 32) columns of the W blocks at W; nks k-steps. */
void kl_f32_x6gemm_ukernel__avx512amx(size_t M, size_t N, size_t nks, const uint8_t* A,
                                      size_t sa, const uint8_t* W, size_t sw, float* C,
                                      size_t ldc) {
  /* (A split, W split): the small products first */
  static const int ta[6] = {2, 1, 0, 1, 0, 0}, tw[6] = {0, 1, 2, 0, 1, 0};
  const size_t blk = X6_BLOCK(nks), ldcb = ldc * sizeof(float);
  kl_avx512amx_configure2(16, 16);
  for (size_t nb = 0; nb < N; nb += 128) {
    const size_t ne = nb + 128 < N ? nb + 128 : N;
    for (size_t m = 0; m < M; m += 32) {
      for (size_t n = nb; n < ne; n += 32) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int t = 0; t < 6; t++)
          kl_avx512amx_2x2_ksteps(nks, A + (size_t)ta[t] * sa + (m / 32) * blk, 64, X6_TILE, 2 * X6_TILE,
                                  W + (size_t)tw[t] * sw + (n / 32) * blk, 64, X6_TILE, 2 * X6_TILE, 1);
        float* c = C + m * ldc + n;
        if (M - m >= 32) {
          _tile_stored(0, c, ldcb);
          _tile_stored(1, c + 16, ldcb);
          _tile_stored(2, c + 16 * ldc, ldcb);
          _tile_stored(3, c + 16 * ldc + 16, ldcb);
        } else { /* a row tail: through a buffer, only rows < M */
          _Alignas(64) float t32[32 * 32];
          _tile_stored(0, t32, 128);
          _tile_stored(1, t32 + 16, 128);
          _tile_stored(2, t32 + 512, 128);
          _tile_stored(3, t32 + 528, 128);
          KL_MEMORY_BARRIER();
          for (size_t r = 0; r < M - m; r++) memcpy(c + r * ldc, t32 + r * 32, 32 * sizeof(float));
        }
      }
    }
  }
  KL_MEMORY_BARRIER();
  _tile_release();
}

/* e[i], o[i] -> pairs (bf16(e[i]), bf16(o[i])) (even k low), and the two
 * rounded vectors back in float32 */
static inline __m512i to_pairs(__m512 e, __m512 o, __m512* fe, __m512* fo) {
  const __m512i ie = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(e));
  const __m512i io = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(o));
  *fe = _mm512_castsi512_ps(_mm512_slli_epi32(ie, 16));
  *fo = _mm512_castsi512_ps(_mm512_slli_epi32(io, 16));
  return _mm512_or_si512(ie, _mm512_slli_epi32(io, 16));
}

/* x[0..32) (lo: 0..15, hi: 16..31) -> its three bfloat16 parts as 16 pairs
 * each; returns 1 if some x cannot be split. */
static inline int split32(__m512 lo, __m512 hi, __m512i* s0, __m512i* s1, __m512i* s2) {
  const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
  __m512 e = _mm512_permutex2var_ps(lo, ev, hi), o = _mm512_permutex2var_ps(lo, od, hi), fe, fo;
  *s0 = to_pairs(e, o, &fe, &fo);
  e = _mm512_sub_ps(e, fe); /* exact */
  o = _mm512_sub_ps(o, fo);
  /* NaN or inf here (0 * it is NaN): x was non-finite, or rounded to inf */
  const __m512 z = _mm512_setzero_ps();
  const int bad = (_mm512_cmp_ps_mask(_mm512_mul_ps(e, z), z, _CMP_NEQ_UQ) |
                   _mm512_cmp_ps_mask(_mm512_mul_ps(o, z), z, _CMP_NEQ_UQ)) != 0;
  *s1 = to_pairs(e, o, &fe, &fo);
  *s2 = to_pairs(_mm512_sub_ps(e, fe), _mm512_sub_ps(o, fo), &fe, &fo);
  return bad;
}

/* x[k .. k+32) as lo (16) and hi (16), zeros past K or for x NULL */
static inline void load32(const float* x, size_t k, size_t K, __m512* lo, __m512* hi) {
  if (!x) {
    *lo = *hi = _mm512_setzero_ps();
  } else if (k + 32 <= K) {
    *lo = _mm512_loadu_ps(x + k);
    *hi = _mm512_loadu_ps(x + k + 16);
  } else {
    const size_t n = K - k;
    *lo = _mm512_maskz_loadu_ps((__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1u), x + k);
    *hi = _mm512_maskz_loadu_ps((__mmask16)(n > 16 ? (1u << (n - 16)) - 1u : 0u), x + k + 16);
  }
}

/* Rows [m0, m1) of X (K floats, row stride ldx) into the A blocks (m0 a
 * multiple of 32; rows from M on are written as zeros, so m1 = M rounded up to
 * 32 completes the last block); returns 1 if some x cannot be split. */
int kl_f32_x6pack_a__avx512amx(size_t M, size_t K, const float* X, size_t ldx, size_t m0,
                               size_t m1, uint8_t* A, size_t sa) {
  const size_t nks = (K + 31) / 32, blk = X6_BLOCK(nks);
  int bad = 0;
  for (size_t m = m0; m < m1; m++) {
    const float* x = m < M ? X + m * ldx : NULL;
    const size_t off = (m / 32) * blk + ((m % 32) / 16) * X6_TILE + (m % 16) * 64;
    for (size_t ks = 0; ks < nks; ks++) {
      __m512 lo, hi;
      load32(x, ks * 32, K, &lo, &hi);
      __m512i s0, s1, s2;
      bad |= split32(lo, hi, &s0, &s1, &s2);
      uint8_t* o = A + off + ks * 2 * X6_TILE;
      _mm512_storeu_si512((void*)o, s0);
      _mm512_storeu_si512((void*)(o + sa), s1);
      _mm512_storeu_si512((void*)(o + 2 * sa), s2);
    }
  }
  return bad != 0;
}

/* Columns [c0, c1) (multiples of 32) of W^T into the W blocks: column n is
 * rows[n] (K floats) or zero (rows[n] NULL); returns 1 if some w cannot be
 * split. */
int kl_f32_x6pack_w__avx512amx(size_t K, const float* const* rows, size_t c0, size_t c1,
                               uint8_t* W, size_t sw) {
  const size_t nks = (K + 31) / 32, blk = X6_BLOCK(nks);
  const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                         _mm512_set1_epi32(16));
  int bad = 0;
  for (size_t n = c0; n < c1; n++) {
    const float* x = rows[n];
    /* column l of its 16-column tile: pair p at p*64 + l*4 */
    const size_t off = (n / 32) * blk + ((n % 32) / 16) * X6_TILE + (n % 16) * 4;
    for (size_t ks = 0; ks < nks; ks++) {
      __m512 lo, hi;
      load32(x, ks * 32, K, &lo, &hi);
      __m512i s0, s1, s2;
      bad |= split32(lo, hi, &s0, &s1, &s2);
      uint8_t* o = W + off + ks * 2 * X6_TILE;
      _mm512_i32scatter_epi32((void*)o, idx, s0, 4);
      _mm512_i32scatter_epi32((void*)(o + sw), idx, s1, 4);
      _mm512_i32scatter_epi32((void*)(o + 2 * sw), idx, s2, 4);
    }
  }
  return bad != 0;
}
