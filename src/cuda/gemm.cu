// The input projection, one launch per layer: C[m, dir*N + n] = sum_k A[m, k] W_dir[n, k].
// A: rows of stride lda; W_dir: rows of stride ldw[dir]; C: [M, D*N] contiguous.
// 64x64 tiles, 256 threads of 4x4 outputs, each a single k-ordered FMA chain.

#define KL_GBM 64
#define KL_GBN 64
#define KL_GBK 16

extern "C" __global__ void __launch_bounds__(256) kl_gemm_nt(const __grid_constant__ kl_gemm_args p) {
  __shared__ float As[KL_GBK][KL_GBM + 4];
  __shared__ float Ws[KL_GBK][KL_GBN + 4];
  const int dir = blockIdx.z;
  const float* __restrict__ W = p.w[dir];
  const i64 ldw = p.ldw[dir];
  const int m0 = blockIdx.y * KL_GBM, n0 = blockIdx.x * KL_GBN;
  const int tid = threadIdx.x, tm = tid / 16, tn = tid % 16;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  // loader: thread -> (row lr, k columns lk..lk+3) of a 64x16 tile
  const int lr = tid / 4, lk = (tid % 4) * 4;
  for (int k0 = 0; k0 < p.K; k0 += KL_GBK) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int k = k0 + lk + j, m = m0 + lr, n = n0 + lr;
      As[lk + j][lr] = (m < p.M && k < p.K) ? p.a[m * p.lda + k] : 0.0f;
      Ws[lk + j][lr] = (n < p.N && k < p.K) ? W[n * ldw + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < KL_GBK; kk++) {
      float av[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; i++) av[i] = As[kk][tm * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; j++) wv[j] = Ws[kk][tn * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], wv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int m = m0 + tm * 4 + i;
    if (m >= p.M) continue;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int n = n0 + tn * 4 + j;
      if (n < p.N) p.c[m * p.ldc + (i64)dir * p.N + n] = acc[i][j];
    }
  }
}

// kl_gemm_nt128: the same products for large calls, 128x128 tiles of 8x8 outputs
// per thread with 16-byte loads (A's and W's rows 16-byte aligned, lda and ldw
// multiples of 4); each output is the same k-ordered FMA chain, so the same bits.
#define KL_BM 128
#define KL_BN 128
#define KL_BK 8

extern "C" __global__ void __launch_bounds__(256) kl_gemm_nt128(const __grid_constant__ kl_gemm_args p) {
  __shared__ __align__(16) float As[KL_BK][KL_BM];
  __shared__ __align__(16) float Ws[KL_BK][KL_BN];
  const int dir = blockIdx.z;
  const float* __restrict__ W = p.w[dir];
  const i64 ldw = p.ldw[dir];
  const int m0 = blockIdx.y * KL_BM, n0 = blockIdx.x * KL_BN;
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
  // loader: thread -> row lr (of 128), k columns lk..lk+3 (of 8)
  const int lr = tid / 2, lk = (tid % 2) * 4;
  const float* arow = p.a + (i64)(m0 + lr) * p.lda;
  const float* wrow = W + (i64)(n0 + lr) * ldw;
  const bool am = m0 + lr < p.M, wn = n0 + lr < p.N;
  for (int k0 = 0; k0 < p.K; k0 += KL_BK) {
    const int k = k0 + lk;
    float4 av = make_float4(0.0f, 0.0f, 0.0f, 0.0f), wv = av;
    if (k + 3 < p.K) {
      if (am) av = *reinterpret_cast<const float4*>(arow + k);
      if (wn) wv = *reinterpret_cast<const float4*>(wrow + k);
    } else {
      float* ap = &av.x;
      float* wp = &wv.x;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        ap[j] = (am && k + j < p.K) ? arow[k + j] : 0.0f;
        wp[j] = (wn && k + j < p.K) ? wrow[k + j] : 0.0f;
      }
    }
    As[lk][lr] = av.x, As[lk + 1][lr] = av.y, As[lk + 2][lr] = av.z, As[lk + 3][lr] = av.w;
    Ws[lk][lr] = wv.x, Ws[lk + 1][lr] = wv.y, Ws[lk + 2][lr] = wv.z, Ws[lk + 3][lr] = wv.w;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < KL_BK; kk++) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[kk][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[kk][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Ws[kk][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Ws[kk][64 + tx * 4]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  // thread (ty, tx) holds rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, columns likewise
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const int m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
    if (m >= p.M) continue;
    float* crow = p.c + (i64)m * p.ldc + (i64)dir * p.N;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
      if (n < p.N) crow[n] = acc[i][j];
    }
  }
}
