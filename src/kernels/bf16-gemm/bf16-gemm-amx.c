/* bfloat16 GEMM for the input projection with AMX (tdpbf16ps):
 * C[M, N] (ldc) = A[M, 2*Kp] * W[N, 2*Kp]^T, float32 accumulation.
 * Same operands as bf16-gemm-avx512bf16.c: A rows of Kp bfloat16 pairs
 * (uint32, row stride Kp); W in 64-column panels, W[((p*Kp + kp)*4 + j)*32 +
 * l*2 + q] is column p*64 + j*16 + l, k = 2*kp + q; N a multiple of 64.
 * That panel layout is already AMX's B-tile layout: the 16 columns of group j
 * at pair kp are 64 bytes, and pair kp+1 of the same group lies 256 bytes on.
 *
 * The 2 x 2 tile blocks of amx-tile.h (kl_amx_gemm_terms, one term).
 * tdpbf16ps treats
 * bfloat16 denormal inputs as zero and flushes float32 denormal results, as
 * vdpbf16ps does, but rounds its pair sums differently (a few float32 ulp on
 * random data), so the avx512-amx and avx512-bf16 levels give different bits.
 * Each output row depends on its own A row only, whatever the tile rows. */
#include "internal.h"
#include "amx-tile.h"

void kl_bf16_gemm_ukernel__amx(size_t M, size_t N, size_t Kp, const uint32_t* A,
                               const uint16_t* W, float* C, size_t ldc) {
  const kl_amx_term t = {A, W};
  kl_amx_gemm_terms(M, N, Kp, 1, &t, C, ldc);
}
