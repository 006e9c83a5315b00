/* AMX tile setup shared by the AMX kernels (compiled with -mamx-tile -mamx-bf16).
 * Tiles: tmm0-3 accumulators (rows x 16 float32), tmm4 the A operand (rows x 16
 * bfloat16 pairs), tmm5/tmm6 B operands (16 pairs x 16 columns). The tile
 * state is per thread: a kernel configures on entry and releases on exit.
 * GCC's tile intrinsics are asm statements that do not tell the compiler they
 * read or write memory: a buffer written in C must be followed by
 * KL_MEMORY_BARRIER() before a tile load reads it, and a tile store by one
 * before C code reads what it wrote. */
#ifndef KL_AMX_TILE_H
#define KL_AMX_TILE_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KL_MEMORY_BARRIER() __asm__ volatile("" ::: "memory")
#define KL_AMX_KB 16 /* bfloat16 pairs per A/B tile */

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} kl_amx_config;

/* rows (1..16) for the accumulators and A; B always 16 pairs */
static inline void kl_amx_configure(int rows) {
  _Alignas(64) kl_amx_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.palette = 1;
  for (int t = 0; t < 7; t++) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = (uint8_t)(t <= 4 ? rows : 16);
  }
  KL_MEMORY_BARRIER();
  _tile_loadconfig(&cfg);
}

/* The pair tail [kfull, npair) of the four 16-column groups of a 64-column
 * panel (pair kp of group j at panel + (kp*4 + j)*32), zero-padded to 16
 * pairs each: out[j*1024 bytes ...], read with a 64-byte stride. */
static inline void kl_amx_panel_tail(const uint16_t* panel, size_t kfull, size_t npair,
                                     uint8_t out[4 * 1024]) {
  memset(out, 0, 4 * 1024);
  for (size_t kp = kfull; kp < npair; kp++)
    for (int j = 0; j < 4; j++)
      memcpy(out + (size_t)j * 1024 + (kp - kfull) * 64, panel + (kp * 4 + (size_t)j) * 32, 64);
  KL_MEMORY_BARRIER();
}

#endif
