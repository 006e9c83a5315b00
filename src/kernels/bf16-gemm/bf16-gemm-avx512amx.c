/* bfloat16 GEMM for the input projection with AMX (tdpbf16ps):
 * C[M, N] (ldc) = A[M, 2*Kp] * W[N, 2*Kp]^T, float32 accumulation.
 * Same operands as bf16-gemm-avx512bf16.c: A rows of Kp bfloat16 pairs
 * (uint32, row stride Kp); W in 64-column panels, W[((p*Kp + kp)*4 + j)*32 +
 * l*2 + q] is column p*64 + j*16 + l, k = 2*kp + q; N a multiple of 64.
 * That panel layout is already AMX's B-tile layout: the 16 columns of group j
 * at pair kp are 64 bytes, and pair kp+1 of the same group lies 256 bytes on.
 *
 * The 2 x 2 tile blocks of avx512amx-tile.h, columns in blocks of 128 (B's block,
 * 128 * Kp * 4 bytes, stays in L2 while the 32-row blocks of A pass). Each
 * C element adds the 16-pair sums of k-blocks in k order. A row tail runs with
 * 16 + r or r tile rows; a pair tail (Kp % 16) reads zero-padded copies, so no
 * tile reads past its operand. tdpbf16ps treats
 * bfloat16 denormal inputs as zero and flushes float32 denormal results, as
 * vdpbf16ps does, but rounds its pair sums differently (a few float32 ulp on
 * random data), so the avx512-amx and avx512-bf16 levels give different bits.
 * Each output row depends on its own A row only, whatever the tile rows. */
#include "internal.h"
#include "avx512amx-tile.h"

void kl_bf16_gemm_ukernel__avx512amx(size_t M, size_t N, size_t Kp, const uint32_t* A,
                                     const uint16_t* W, float* C, size_t ldc) {
  const size_t kfull = Kp / KL_AMX_KB * KL_AMX_KB;
  const size_t lda = Kp * sizeof(uint32_t), ldcb = ldc * sizeof(float);
  int cfg0 = -1, cfg1 = -1;
  for (size_t nb = 0; nb < N; nb += 128) {
    const size_t ne = nb + 128 < N ? nb + 128 : N;
    for (size_t m = 0; m < M; m += 32) {
      const int r0 = M - m < 16 ? (int)(M - m) : 16;
      const int r1 = M - m <= 16 ? 0 : M - m < 32 ? (int)(M - m - 16) : 16;
      if (r0 != cfg0 || r1 != cfg1) {
        kl_avx512amx_configure2(r0, r1);
        cfg0 = r0;
        cfg1 = r1;
      }
      const uint32_t* a = A + m * Kp;
      for (size_t n = nb; n < ne; n += 32) {
        /* group j = (n % 64) / 16 of the panel: pair kp at + kp*256 bytes */
        const uint8_t* b = (const uint8_t*)(W + (n / 64) * Kp * 128) + ((n % 64) / 16) * 64;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        kl_avx512amx_2x2_ksteps(kfull / KL_AMX_KB, (const uint8_t*)a, lda, 16 * lda, KL_AMX_KB * sizeof(uint32_t), b,
                                256, 64, KL_AMX_KB * 256, r1 != 0);
        if (kfull < Kp) {
          _Alignas(64) uint32_t at[32 * KL_AMX_KB];
          _Alignas(64) uint8_t bt[2 * 1024];
          memset(at, 0, sizeof(at));
          memset(bt, 0, sizeof(bt));
          for (int r = 0; r < r0 + r1; r++)
            memcpy(at + (size_t)r * KL_AMX_KB, a + (size_t)r * Kp + kfull, (Kp - kfull) * sizeof(uint32_t));
          for (size_t kp = kfull; kp < Kp; kp++)
            for (int j = 0; j < 2; j++)
              memcpy(bt + (size_t)j * 1024 + (kp - kfull) * 64, b + kp * 256 + (size_t)j * 64, 64);
          KL_MEMORY_BARRIER();
          kl_avx512amx_2x2_ksteps(1, (const uint8_t*)at, KL_AMX_KB * sizeof(uint32_t), 16 * KL_AMX_KB * sizeof(uint32_t),
                                  0, bt, 64, 1024, 0, r1 != 0);
        }
        float* c = C + m * ldc + n;
        _tile_stored(0, c, ldcb);
        _tile_stored(1, c + 16, ldcb);
        if (r1) {
          _tile_stored(2, c + 16 * ldc, ldcb);
          _tile_stored(3, c + 16 * ldc + 16, ldcb);
        }
      }
    }
  }
  KL_MEMORY_BARRIER();
  _tile_release();
}
