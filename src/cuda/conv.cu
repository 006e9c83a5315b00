// 1-D convolutions (NCW, groups 1) as implicit GEMMs on tensor cores, float32 by
// 3xTF32: y[o, col] = bias[o] + sum over r = (channel, tap) of A[o, r] B[r, col],
// A the weights and B gathered from x as it is read (zeros outside x), never
// written out. Each operand is split into a TF32 head and a TF32 tail (a = hi + lo,
// |lo| <= 2^-11 |a|) and every product taken as lo*hi + hi*lo + hi*hi, so only the
// tails' product (2^-22 relative) is dropped: float32's accuracy, not TF32's. The
// MMAs run in a fixed order, so every output has the same bits for any grid.
//
// A CTA computes KL_CONV_BM channels by KL_CONV_BN columns, each of its four warps
// 32 x 32 as 2 x 4 m16n8k8 tiles; k slices of KL_CONV_BK are loaded into registers
// while the previous slice is multiplied out of shared memory (two buffers, one
// barrier per slice), split into heads and tails once as they are stored. Columns are output steps for kl_conv1d; for
// kl_conv1d_transpose the steps of one output phase, whose taps make a plain
// correlation (no zeros inserted).

#define KL_CONV_PAD 8   // B's rows 72 floats apart: a fragment's 32 reads hit 32 banks
#define KL_CONV_APAD 8  // A's rows 24 floats apart: a half warp's 64-bit reads hit 32 banks

typedef unsigned int u32;

// x as TF32 head and tail, x - hi exact: rounded to nearest, ties away from zero (as
// cvt.rna, whose sm_90 form costs a compare and a select more) by adding half of
// TF32's last place to the magnitude's bits and clearing the 13 bits below it. An
// infinite x meets the other operand's tail (often 0) and so gives NaN where it
// reaches; NaN stays NaN.
#define KL_TF32_MASK 0xffffe000u
#define KL_TF32_HALF 0x1000u
__device__ __forceinline__ u32 kl_tf32_round(float x) { return (__float_as_uint(x) + KL_TF32_HALF) & KL_TF32_MASK; }
__device__ __forceinline__ void kl_tf32_split(float x, u32& hi, u32& lo) {
  hi = kl_tf32_round(x);
  lo = kl_tf32_round(x - __uint_as_float(hi));
}

// four values' heads and tails, for one 16-byte store each
__device__ __forceinline__ void kl_tf32_split4(float a, float b, float c, float d, uint4& hi, uint4& lo) {
  kl_tf32_split(a, hi.x, lo.x);
  kl_tf32_split(b, hi.y, lo.y);
  kl_tf32_split(c, hi.z, lo.z);
  kl_tf32_split(d, hi.w, lo.w);
}

__device__ __forceinline__ void kl_zero(float (&v)[2][4][4]) {
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) v[i][j][r] = 0.0f;
}

// c = a b (c's old values not read)
__device__ __forceinline__ void kl_mma_tf32_set(float* c, const u32* a, const u32* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.0f));
}

__device__ __forceinline__ void kl_mma_tf32(float* c, const u32* a, const u32* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <bool TR>
__device__ __forceinline__ void kl_conv_tile(const kl_conv_params& p) {
#if __CUDA_ARCH__ >= KL_CONV_MIN_MAJOR * 100
  // the slices split once as they are stored, TF32 heads (h) and tails (l): A as
  // [m][k] with k and k + 4 of each 8 side by side (one 64-bit fragment read), B as [k][n]
  __shared__ __align__(16) u32 Ah[2][KL_CONV_BM][KL_CONV_BK + KL_CONV_APAD];
  __shared__ __align__(16) u32 Al[2][KL_CONV_BM][KL_CONV_BK + KL_CONV_APAD];
  __shared__ __align__(16) u32 Bh[2][KL_CONV_BK][KL_CONV_BN + KL_CONV_PAD];
  __shared__ __align__(16) u32 Bl[2][KL_CONV_BK][KL_CONV_BN + KL_CONV_PAD];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, tig = lane & 3;                // the MMA fragments' row group, column
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;  // the warp's 32 x 32 outputs
  const int run = blockIdx.z % p.splits, z = blockIdx.z / p.splits;
  const int n = TR ? z / p.stride : z;
  const int ph = TR ? z % p.stride : 0;
  const float* __restrict__ x = p.x + n * p.x_sn;
  float* __restrict__ y = (p.splits > 1 ? p.part + run * p.part_st : p.y) + n * p.y_sn;
  const int taps = TR ? p.taps : p.ksize;
  const int R = p.cin * taps;
  // this run's k slices [k_lo, k_hi)
  const int k_lo = run * p.kslices * KL_CONV_BK;
  const int k_hi = min(R, k_lo + p.kslices * KL_CONV_BK);
  const int m0 = blockIdx.y * KL_CONV_BM, c0 = blockIdx.x * KL_CONV_BN;
  // phase ph's first step u_lo: t = u stride + ph - pad >= 0 from there on
  const int u_lo = TR ? (p.pad - ph + p.stride - 1) / p.stride : 0;

  // A's loader: k rows kh .. kh + 7 of a slice for row lr
  const int lr = tid & 63, kh = (tid >> 6) * 8;
  const int co = m0 + lr;
  const bool a_ok = co < p.cout;
  const bool a_vec = !TR && R % 4 == 0 && ((unsigned long long)p.w & 15) == 0;
  // B's loader: k row kr, columns cb .. cb + 3 and 32 + cb .. 32 + cb + 3 (a quarter
  // warp's 16-byte stores cover 32 banks); the tile's column c reads x at position
  // pcol + c cstep shifted by the row's tap; columns past wout read what is in x (or
  // zero) and are not stored
  const int kr = tid >> 3, cb = (tid & 7) * 4;
  const int cstep = TR ? 1 : p.stride;
  const int pcol = TR ? u_lo + c0 : c0 * p.stride - p.pad;
  const bool x_dense = p.x_st == 1 && cstep == 1;  // a row's columns side by side in x
  float ra[8], rb[8];

  // (channel, tap) of k rows kb (A's first) and rk (B's), advanced a slice at a time
  const int q16 = KL_CONV_BK / taps, r16 = KL_CONV_BK % taps;
  int a_ci = (k_lo + kh) / taps, a_k = k_lo + kh - a_ci * taps;
  int b_ci = (k_lo + kr) / taps, b_k = k_lo + kr - b_ci * taps;
  auto next = [&](int& ci, int& k) {
    ci += q16;
    k += r16;
    if (k >= taps) {
      k -= taps;
      ++ci;
    }
  };

  auto load = [&](int k0) {
    const int kb = k0 + kh;
    if (a_vec && a_ok && kb + 8 <= k_hi) {
      const float4* w4 = reinterpret_cast<const float4*>(p.w + (long long)co * R + kb);
      const float4 u = w4[0], v = w4[1];
      ra[0] = u.x, ra[1] = u.y, ra[2] = u.z, ra[3] = u.w;
      ra[4] = v.x, ra[5] = v.y, ra[6] = v.z, ra[7] = v.w;
    } else {
      int ci = a_ci, k = a_k;
#pragma unroll
      for (int i = 0; i < 8; i++) {
        float av = 0.0f;
        if (a_ok && kb + i < k_hi) {
          const int tap = ph + k * p.stride;
          av = !TR ? p.w[(long long)co * R + kb + i]
               : tap < p.ksize ? p.w[((long long)ci * p.cout + co) * p.ksize + tap] : 0.0f;
        }
        ra[i] = av;
        if (++k == taps) {
          k = 0;
          ++ci;
        }
      }
    }
    next(a_ci, a_k);
    const bool row_ok = k0 + kr < k_hi;
    const float* __restrict__ xr = x + (long long)b_ci * p.x_sc;
    const int p0 = pcol + (TR ? -b_k : b_k * p.dilation) + cb * cstep;
    next(b_ci, b_k);
    if (x_dense) {  // positions p0 .. p0 + 3 and p0 + 32 .. p0 + 35
      const float* __restrict__ xp = xr + p0;
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const int d = (j & 3) + 32 * (j >> 2);
        rb[j] = row_ok && (unsigned)(p0 + d) < (unsigned)p.win ? xp[d] : 0.0f;
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const int pos = p0 + ((j & 3) + 32 * (j >> 2)) * cstep;
        rb[j] = row_ok && (unsigned)pos < (unsigned)p.win ? xr[(long long)pos * p.x_st] : 0.0f;
      }
    }
  };
  auto store = [&](int buf) {
    uint4 h, l;
#pragma unroll
    for (int q = 0; q < 2; q++) {  // A's k order 0 4 1 5 | 2 6 3 7
      kl_tf32_split4(ra[q * 2], ra[q * 2 + 4], ra[q * 2 + 1], ra[q * 2 + 5], h, l);
      *reinterpret_cast<uint4*>(&Ah[buf][lr][kh + 4 * q]) = h;
      *reinterpret_cast<uint4*>(&Al[buf][lr][kh + 4 * q]) = l;
      kl_tf32_split4(rb[4 * q], rb[4 * q + 1], rb[4 * q + 2], rb[4 * q + 3], h, l);
      *reinterpret_cast<uint4*>(&Bh[buf][kr][cb + 32 * q]) = h;
      *reinterpret_cast<uint4*>(&Bl[buf][kr][cb + 32 * q]) = l;
    }
  };

  float acc[2][4][4];
  kl_zero(acc);

  load(k_lo);
  store(0);
  __syncthreads();
  int buf = 0;
  for (int k0 = k_lo; k0 < k_hi; k0 += KL_CONV_BK) {
    const bool more = k0 + KL_CONV_BK < k_hi;
    if (more) load(k0 + KL_CONV_BK);
    // the slice's products summed apart, then added to acc: the MMAs' own additions
    // are not rounded to nearest, so each sums only one slice's few terms
    float sl[2][4][4];
#pragma unroll
    for (int ks = 0; ks < KL_CONV_BK; ks += 8) {
      u32 ahi[2][4], alo[2][4], bhi[4][2], blo[4][2];
#pragma unroll
      for (int i = 0; i < 2; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {  // fragments h, h + 2: row m + 8 h, k and k + 4
          const int m = wm + i * 16 + gid + 8 * h, kk = ks + 2 * tig;
          const uint2 vh = *reinterpret_cast<const uint2*>(&Ah[buf][m][kk]);
          const uint2 vl = *reinterpret_cast<const uint2*>(&Al[buf][m][kk]);
          ahi[i][h] = vh.x, ahi[i][h + 2] = vh.y;
          alo[i][h] = vl.x, alo[i][h + 2] = vl.y;
        }
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int c = wn + j * 8 + gid;
#pragma unroll
        for (int q = 0; q < 2; q++) {
          bhi[j][q] = Bh[buf][ks + tig + 4 * q][c];
          blo[j][q] = Bl[buf][ks + tig + 4 * q][c];
        }
      }
#pragma unroll
      for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          if (ks == 0)
            kl_mma_tf32_set(sl[i][j], alo[i], bhi[j]);
          else
            kl_mma_tf32(sl[i][j], alo[i], bhi[j]);
          kl_mma_tf32(sl[i][j], ahi[i], blo[j]);
          kl_mma_tf32(sl[i][j], ahi[i], bhi[j]);
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) acc[i][j][r] += sl[i][j][r];
    if (more) store(buf ^ 1);
    __syncthreads();
    buf ^= 1;
  }

  // acc[i][j][r]: row wm + 16 i + gid (+ 8 for r >= 2), column wn + 8 j + 2 tig + (r & 1)
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int o = m0 + wm + i * 16 + gid + 8 * h;
      if (o >= p.cout) continue;
      const float bo = p.bias && p.splits == 1 ? p.bias[o] : 0.0f;
      float* yrow = y + o * p.y_so;
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const int c = c0 + wn + j * 8 + 2 * tig + e;
          const long long t = TR ? (long long)(u_lo + c) * p.stride + ph - p.pad : c;
          if (t < p.wout) yrow[t * p.y_st] = acc[i][j][2 * h + e] + bo;
        }
    }
#else
  __trap();  // conv.c refuses devices below KL_CONV_MIN_MAJOR
#endif
}

// y as [rows, cols]: y[r, c] = part[0][r, c] + part[1][r, c] + ... in that order
// (kl_conv_params' runs), then the bias: bias[c] when per_col (a product), else
// bias[r % cout] (a convolution's channel)
extern "C" __global__ void kl_conv_reduce(const float* __restrict__ part, long long rows, int cols, int splits,
                                          const float* __restrict__ bias, int per_col, int cout,
                                          float* __restrict__ y) {
  const long long st = rows * cols;
  for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
    const float br = bias && !per_col ? bias[r % cout] : 0.0f;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
      const long long i = r * cols + c;
      float v = part[i];
      for (int s = 1; s < splits; s++) v += part[s * st + i];
      y[i] = bias ? v + (per_col ? bias[c] : br) : v;
    }
  }
}

extern "C" __global__ void __launch_bounds__(KL_CONV_THREADS) kl_conv1d(const kl_conv_params p) {
  kl_conv_tile<false>(p);
}

extern "C" __global__ void __launch_bounds__(KL_CONV_THREADS) kl_conv1d_transpose(const kl_conv_params p) {
  kl_conv_tile<true>(p);
}
