/* AMX tile setup shared by the AMX kernels (compiled with -mamx-tile -mamx-bf16).
 * Tiles: tmm0-3 accumulators (rows x 16 float32), tmm4 the A operand (rows x 16
 * bfloat16 pairs), tmm5/tmm6 B operands (16 pairs x 16 columns). The tile
 * state is per thread: a kernel configures on entry and releases on exit.
 * GCC's tile intrinsics are asm statements that do not tell the compiler they
 * read or write memory: a buffer written in C must be followed by
 * KL_MEMORY_BARRIER() before a tile load reads it, and a tile store by one
 * before C code reads what it wrote. */
#ifndef KL_AVX512AMX_TILE_H
#define KL_AVX512AMX_TILE_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KL_MEMORY_BARRIER() __asm__ volatile("" ::: "memory")
#define KL_AMX_KB 16 /* bfloat16 pairs per A/B tile */

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} kl_avx512amx_config;

/* rows (1..16) for the accumulators and A; B always 16 pairs */
static inline void kl_avx512amx_configure(int rows) {
  _Alignas(64) kl_avx512amx_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.palette = 1;
  for (int t = 0; t < 7; t++) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = (uint8_t)(t <= 4 ? rows : 16);
  }
  KL_MEMORY_BARRIER();
  _tile_loadconfig(&cfg);
}

static inline void kl_avx512amx_zero_acc(void) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

/* C0..C3 += A (tmm4) x the four 16-column groups of a 64-column panel: group j
 * starts at b + j*group_bytes, its pair rows lie stride bytes apart. */
static inline void kl_avx512amx_panel_product(const uint8_t* b, size_t group_bytes, size_t stride) {
  _tile_loadd(5, b, stride);
  _tile_dpbf16ps(0, 4, 5);
  _tile_loadd(6, b + group_bytes, stride);
  _tile_dpbf16ps(1, 4, 6);
  _tile_loadd(5, b + 2 * group_bytes, stride);
  _tile_dpbf16ps(2, 4, 5);
  _tile_loadd(6, b + 3 * group_bytes, stride);
  _tile_dpbf16ps(3, 4, 6);
}

/* C0..C3 to 64 float32 columns at c (row stride ldc floats), readable after. */
static inline void kl_avx512amx_store_acc(float* c, size_t ldc) {
  _tile_stored(0, c, ldc * sizeof(float));
  _tile_stored(1, c + 16, ldc * sizeof(float));
  _tile_stored(2, c + 32, ldc * sizeof(float));
  _tile_stored(3, c + 48, ldc * sizeof(float));
  KL_MEMORY_BARRIER();
}

/* The panel's main part (pairs kb, kb+16, ...) is read in place: pair kp of
 * group j at panel + (kp*4 + j)*32 bfloat16, so groups are 64 bytes apart and
 * pair rows 256. The pair tail [kfull, npair) of the four 16-column groups of a 64-column
 * panel (pair kp of group j at panel + (kp*4 + j)*32), zero-padded to 16
 * pairs each: out[j*1024 bytes ...], read with a 64-byte stride. */
static inline void kl_avx512amx_panel_tail(const uint16_t* panel, size_t kfull, size_t npair,
                                           uint8_t out[4 * 1024]) {
  memset(out, 0, 4 * 1024);
  for (size_t kp = kfull; kp < npair; kp++)
    for (int j = 0; j < 4; j++)
      memcpy(out + (size_t)j * 1024 + (kp - kfull) * 64, panel + (kp * 4 + (size_t)j) * 32, 64);
  KL_MEMORY_BARRIER();
}

/* ---- 2 x 2 tile blocks for the GEMMs (bf16-gemm-avx512amx.c, f32-x6gemm-avx512amx.c) ----
 * tmm0..3 accumulate a 32 x 32 block of C: rows [0,16) x columns [0,16),
 * [0,16) x [16,32), [16,32) x [0,16), [16,32) x [16,32); tmm4/tmm5 hold A's
 * two 16-row halves, tmm6/tmm7 B's two 16-column groups. Each loaded tile
 * serves two products (the 1 x 4 blocking above loads five tiles per four). */
static inline void kl_avx512amx_configure2(int rows0, int rows1) {
  _Alignas(64) kl_avx512amx_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64;
  cfg.rows[0] = cfg.rows[1] = cfg.rows[4] = (uint8_t)rows0;
  cfg.rows[2] = cfg.rows[3] = cfg.rows[5] = (uint8_t)(rows1 ? rows1 : 1);
  cfg.rows[6] = cfg.rows[7] = 16;
  KL_MEMORY_BARRIER();
  _tile_loadconfig(&cfg);
}

/* C0..C3 += nks k-steps of the 2 x 2 products: A's rows 0-15 at a + ks*a_step
 * (row stride a_ld bytes), rows 16-31 a_half bytes on (skipped when !both);
 * W's columns 0-15 at b + ks*b_step (pair stride b_ld), columns 16-31 b_half on. */
static inline void kl_avx512amx_2x2_ksteps(size_t nks, const uint8_t* a, size_t a_ld, size_t a_half,
                                           size_t a_step, const uint8_t* b, size_t b_ld, size_t b_half,
                                           size_t b_step, int both) {
  for (size_t ks = 0; ks < nks; ks++, a += a_step, b += b_step) {
    _tile_loadd(4, a, a_ld);
    _tile_loadd(6, b, b_ld);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b + b_half, b_ld);
    _tile_dpbf16ps(1, 4, 7);
    if (both) {
      _tile_loadd(5, a + a_half, a_ld);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
}

#endif
