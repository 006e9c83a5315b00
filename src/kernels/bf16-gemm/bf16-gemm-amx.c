/* bfloat16 GEMM for the input projection with AMX (tdpbf16ps):
 * C[M, N] (ldc) = A[M, 2*Kp] * W[N, 2*Kp]^T, float32 accumulation.
 * Same operands as bf16-gemm-avx512bf16.c: A rows of Kp bfloat16 pairs
 * (uint32, row stride Kp); W in 64-column panels, W[((p*Kp + kp)*4 + j)*32 +
 * l*2 + q] is column p*64 + j*16 + l, k = 2*kp + q; N a multiple of 64.
 * That panel layout is already AMX's B-tile layout: the 16 columns of group j
 * at pair kp are 64 bytes, and pair kp+1 of the same group lies 256 bytes on.
 *
 * Per block: C0..C3 one 16-row block of a whole 64-column panel, A 16 rows x
 * 16 pairs, B alternating between two tiles (amx-tile.h). A row tail (M % 16)
 * runs with a tile configuration of that many rows; a pair tail (Kp % 16)
 * reads zero-padded copies, so no tile reads past its operand (and padding
 * never meets a NaN or an infinity of the next row). tdpbf16ps treats
 * bfloat16 denormal inputs as zero and flushes float32 denormal results, as
 * vdpbf16ps does, but rounds its pair sums differently (a few float32 ulp on
 * random data), so the avx512-amx and avx512-bf16 levels give different bits.
 * Each output row depends on its own A row only, whatever the tile rows. */
#include "internal.h"
#include "amx-tile.h"

/* one row block (rows <= 16, as configured) of one 64-column panel */
static void block(size_t Kp, const uint32_t* A, const uint16_t* wp, const uint8_t* btail,
                  int rows, float* C, size_t ldc) {
  kl_amx_zero_acc();
  const size_t kfull = Kp / KL_AMX_KB * KL_AMX_KB;
  for (size_t kb = 0; kb < kfull; kb += KL_AMX_KB) {
    _tile_loadd(4, A + kb, Kp * sizeof(uint32_t));
    kl_amx_panel_product((const uint8_t*)(wp + kb * 128), 64, 256);
  }
  if (kfull < Kp) {
    uint32_t at[16 * KL_AMX_KB];
    memset(at, 0, sizeof(at));
    for (int r = 0; r < rows; r++)
      memcpy(at + (size_t)r * KL_AMX_KB, A + (size_t)r * Kp + kfull, (Kp - kfull) * sizeof(uint32_t));
    KL_MEMORY_BARRIER();
    _tile_loadd(4, at, KL_AMX_KB * sizeof(uint32_t));
    kl_amx_panel_product(btail, 1024, 64);
  }
  kl_amx_store_acc(C, ldc);
}

void kl_bf16_gemm_ukernel__amx(size_t M, size_t N, size_t Kp, const uint32_t* A,
                               const uint16_t* W, float* C, size_t ldc) {
  const size_t mfull = M / 16 * 16, kfull = Kp / KL_AMX_KB * KL_AMX_KB;
  _Alignas(64) uint8_t btail[4 * 1024];
  for (size_t n0 = 0; n0 < N; n0 += 64) {
    const uint16_t* wp = W + (n0 / 64) * Kp * 128;
    if (kfull < Kp) kl_amx_panel_tail(wp, kfull, Kp, btail);
    if (mfull) {
      kl_amx_configure(16);
      for (size_t m = 0; m < mfull; m += 16)
        block(Kp, A + m * Kp, wp, btail, 16, C + m * ldc + n0, ldc);
    }
    if (mfull < M) {
      kl_amx_configure((int)(M - mfull));
      block(Kp, A + mfull * Kp, wp, btail, (int)(M - mfull), C + mfull * ldc + n0, ldc);
    }
  }
  _tile_release();
}
