// kokoro_lstm CUDA kernels: torch.nn.LSTM's recurrence and input projection.
//
// Compiled at run time by NVRTC (src/cuda/module.c) with no headers; every
// size the loops depend on arrives as a -D option, so each (shape, dtype)
// gets its own module. Arithmetic is float32: fused multiply-adds in a fixed
// order (so every run gives the same bits), no TF32; activations through the
// special function unit's exp2 (kl_sigmoid, kl_tanh).
//
// Options common to all kernels:
//   KL_H, KL_R       hidden size and recurrent width (R = proj_size or H)
//   KL_WT            recurrent weights as stored for the math: 0 float32,
//                    1 rounded to bfloat16, 2 rounded to float16
//   KL_LCAP          capacity of the lengths array carried in the parameters
//                    (0: no lengths, every sequence runs T steps)
// Cluster recurrence (kl_lstm_cluster, sm_90+): KL_C CTAs per cluster own
// H / KL_C hidden units each, KL_NB batch rows per cluster, KL_NT threads;
// KL_XCHG 1 (default) exchanges h by mbarrier-counted st.async stores, 0 by
// stores and a cluster barrier per step.

#ifndef KL_LCAP
#define KL_LCAP 0
#endif
#ifndef KL_WT
#define KL_WT 0
#endif

typedef long long i64;

// ---- parameters -----------------------------------------------------------------

// Gate input rows: g + t*g_st + b*g_sb + dir*4H + gate*H + unit.
struct kl_gates_in {
  const float* g;
  i64 g_st, g_sb;
  const float* b_ih[2];  // [4H] per direction, stride sb_*; NULL: none
  const float* b_hh[2];
  i64 sb_ih[2], sb_hh[2];
  const float* gate_bias;  // [D, B, 4H] or NULL (layer 0 only)
};

struct kl_rec_args {
  kl_gates_in gi;
  const float* w_hh[2];  // [4H, R] rows of stride ld_hh, per direction
  i64 ld_hh[2];
  const float* w_hr[2];  // [R, H] rows of stride ld_hr (proj_size > 0)
  i64 ld_hr[2];
  const float* h0;  // [D, B, R] or NULL
  const float* c0;  // [D, B, H] or NULL
  float* y;         // y + t*y_st + b*y_sb + dir*R + j
  i64 y_st, y_sb;
  float* h_n;  // [D, B, R] or NULL
  float* c_n;  // [D, B, H] or NULL
  // step path state: h [2][D][B][R] (double buffer), c [D][B][H], m [D][B][H]
  float* hbuf;
  float* cbuf;
  float* mbuf;
  int T, B, reverse;  // reverse: a unidirectional LSTM run backwards
  int step;           // step path: the step this launch computes
  int len[KL_LCAP > 0 ? KL_LCAP : 1];
};

// ---- elementwise ----------------------------------------------------------------

// sigmoid and tanh from __expf (ex2.approx) and a fast reciprocal: within 3e-7 of
// the exact values, saturating at +-inf, NaN in -> NaN out.
__device__ __forceinline__ float kl_sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
__device__ __forceinline__ float kl_tanh(float x) { return 2.0f * kl_sigmoid(2.0f * x) - 1.0f; }

__device__ __forceinline__ float kl_round_w(float w) {
#if KL_WT == 1  // bfloat16, round to nearest even (NaN kept quiet)
  unsigned u = __float_as_uint(w);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) return __uint_as_float(u | 0x400000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return __uint_as_float(u & 0xffff0000u);
#elif KL_WT == 2  // float16, round to nearest even
  unsigned short b;
  float r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(w));
  asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(b));
  return r;
#else
  return w;
#endif
}

__device__ __forceinline__ int kl_len(const kl_rec_args& a, int b) {
#if KL_LCAP > 0
  return a.len[b];
#else
  (void)b;
  return a.T;
#endif
}

// Time index of step s for row b (-1: finished) and whether a reversed direction.
__device__ __forceinline__ int kl_time(const kl_rec_args& a, int dir, int b, int s) {
  const int L = kl_len(a, b);
  if (s >= L) return -1;
  return (dir == 1 || a.reverse) ? L - 1 - s : s;
}

// The four gate inputs of (dir, b, unit) at time t, biases added.
__device__ __forceinline__ void kl_load_gates(const kl_gates_in& gi, int dir, int b, int unit,
                                              int t, int B, float out[4]) {
  const float* row = gi.g + t * gi.g_st + b * gi.g_sb + dir * 4 * KL_H + unit;
#pragma unroll
  for (int q = 0; q < 4; q++) {
    float v = row[q * KL_H];
    if (gi.gate_bias) v += gi.gate_bias[((i64)dir * B + b) * 4 * KL_H + q * KL_H + unit];
    if (gi.b_ih[dir]) v += gi.b_ih[dir][(i64)(q * KL_H + unit) * gi.sb_ih[dir]];
    if (gi.b_hh[dir]) v += gi.b_hh[dir][(i64)(q * KL_H + unit) * gi.sb_hh[dir]];
    out[q] = v;
  }
}

// ---- input projection: C[m, dir*N + n] = sum_k A[m, k] W_dir[n, k] ----------------
// A: rows of stride lda; W_dir: rows of stride ldw[dir]; C: [M, D*N] contiguous.
// 64x64 tiles, 256 threads of 4x4 outputs, each a single k-ordered FMA chain.

struct kl_gemm_args {
  const float* a;
  i64 lda;
  const float* w[2];
  i64 ldw[2];
  float* c;
  i64 ldc;
  int M, N, K;
};

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

// ---- step path: one launch per step, any architecture -------------------------------
// kl_lstm_step: CTA = (16 units x 4 gates) x 16 batch rows of one direction; the
// recurrent product as a small tiled GEMM (W_hh and h from L2), then the cell.
// With proj_size the cell writes m = o*tanh(c) and kl_lstm_proj finishes h = W_hr m.

#define KL_SU 16  // units per CTA
#define KL_SB 16  // batch rows per CTA
#define KL_SK 32  // k tile

__device__ __forceinline__ float* kl_hbuf(const kl_rec_args& a, int buf, int dir) {
  return a.hbuf + ((i64)buf * 2 + dir) * a.B * KL_R;
}

// Stores h (R features of row b) where the step's outputs go: the next state,
// y, and h_n at the row's last step.
__device__ __forceinline__ void kl_emit_h(const kl_rec_args& a, int dir, int b, int j, int t,
                                          int s, float h) {
  kl_hbuf(a, (s + 1) & 1, dir)[(i64)b * KL_R + j] = h;
  a.y[t * a.y_st + b * a.y_sb + dir * KL_R + j] = h;
  if (a.h_n && s == kl_len(a, b) - 1) a.h_n[((i64)dir * a.B + b) * KL_R + j] = h;
}

extern "C" __global__ void __launch_bounds__(256) kl_lstm_step(const __grid_constant__ kl_rec_args a) {
  __shared__ float Ws[KL_SK][4 * KL_SU + 1];
  __shared__ float Hs[KL_SK][KL_SB + 1];
  __shared__ float Gs[KL_SB][4 * KL_SU + 1];
  const int dir = blockIdx.z, u0 = blockIdx.x * KL_SU, b0 = blockIdx.y * KL_SB;
  const int tid = threadIdx.x, s = a.step;
  const float* __restrict__ W = a.w_hh[dir];
  const float* __restrict__ hprev = kl_hbuf(a, s & 1, dir);
  // product: thread -> gate row r (of 64) and 4 batch rows
  const int r = tid % 64, bq = (tid / 64) * 4;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < KL_R; k0 += KL_SK) {
    for (int i = tid; i < 64 * KL_SK; i += 256) {  // W tile, k fastest
      const int rr = i / KL_SK, kk = i % KL_SK, k = k0 + kk;
      const int wr = (rr / KL_SU) * KL_H + u0 + rr % KL_SU;
      Ws[kk][rr] = (u0 + rr % KL_SU < KL_H && k < KL_R) ? kl_round_w(W[wr * a.ld_hh[dir] + k]) : 0.0f;
    }
    for (int i = tid; i < KL_SB * KL_SK; i += 256) {
      const int bb = i / KL_SK, kk = i % KL_SK, k = k0 + kk;
      Hs[kk][bb] = (b0 + bb < a.B && k < KL_R) ? hprev[(i64)(b0 + bb) * KL_R + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < KL_SK; kk++) {
      const float w = Ws[kk][r];
#pragma unroll
      for (int j = 0; j < 4; j++) acc[j] = fmaf(w, Hs[kk][bq + j], acc[j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; j++) Gs[bq + j][r] = acc[j];
  __syncthreads();
  // cell: thread -> (unit, batch row)
  const int ul = tid % KL_SU, bl = tid / KL_SU, u = u0 + ul, b = b0 + bl;
  if (u >= KL_H || b >= a.B) return;
  const int t = kl_time(a, dir, b, s);
  if (t < 0) {  // finished: its output position s is padding
#if KL_R == KL_H
    a.y[s * a.y_st + b * a.y_sb + dir * KL_R + u] = 0.0f;
#endif
    return;
  }
  float g[4];
  kl_load_gates(a.gi, dir, b, u, t, a.B, g);
  const i64 ci = ((i64)dir * a.B + b) * KL_H + u;
  const float c_prev = a.cbuf[ci];
  const float ig = kl_sigmoid(g[0] + Gs[bl][ul]), fg = kl_sigmoid(g[1] + Gs[bl][KL_SU + ul]);
  const float gg = kl_tanh(g[2] + Gs[bl][2 * KL_SU + ul]), og = kl_sigmoid(g[3] + Gs[bl][3 * KL_SU + ul]);
  const float c = fg * c_prev + ig * gg;
  const float m = og * kl_tanh(c);
  a.cbuf[ci] = c;
  if (a.c_n && s == kl_len(a, b) - 1) a.c_n[ci] = c;
#if KL_R == KL_H
  kl_emit_h(a, dir, b, u, t, s, m);
#else
  a.mbuf[ci] = m;
#endif
}

// h[b, p] = sum_j W_hr[p, j] m[b, j]: CTA = 64 outputs x 16 batch rows.
extern "C" __global__ void __launch_bounds__(256) kl_lstm_proj(const __grid_constant__ kl_rec_args a) {
  __shared__ float Ws[KL_SK][64 + 1];
  __shared__ float Ms[KL_SK][KL_SB + 1];
  const int dir = blockIdx.z, p0 = blockIdx.x * 64, b0 = blockIdx.y * KL_SB;
  const int tid = threadIdx.x, s = a.step;
  const float* __restrict__ W = a.w_hr[dir];
  const float* __restrict__ m = a.mbuf + (i64)dir * a.B * KL_H;
  const int r = tid % 64, bq = (tid / 64) * 4;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < KL_H; k0 += KL_SK) {
    for (int i = tid; i < 64 * KL_SK; i += 256) {
      const int rr = i / KL_SK, kk = i % KL_SK, k = k0 + kk;
      Ws[kk][rr] = (p0 + rr < KL_R && k < KL_H) ? kl_round_w(W[(p0 + rr) * a.ld_hr[dir] + k]) : 0.0f;
    }
    for (int i = tid; i < KL_SB * KL_SK; i += 256) {
      const int bb = i / KL_SK, kk = i % KL_SK, k = k0 + kk;
      Ms[kk][bb] = (b0 + bb < a.B && k < KL_H) ? m[(i64)(b0 + bb) * KL_H + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < KL_SK; kk++) {
      const float w = Ws[kk][r];
#pragma unroll
      for (int j = 0; j < 4; j++) acc[j] = fmaf(w, Ms[kk][bq + j], acc[j]);
    }
    __syncthreads();
  }
  const int p = p0 + r;
  if (p >= KL_R) return;
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const int b = b0 + bq + j;
    if (b >= a.B) continue;
    const int t = kl_time(a, dir, b, s);
    if (t < 0)
      a.y[s * a.y_st + b * a.y_sb + dir * KL_R + p] = 0.0f;
    else
      kl_emit_h(a, dir, b, p, t, s, acc[j]);
  }
}

// Initial state of the step path: h0 (or zeros) into buffer 0, c0 (or zeros) into c.
extern "C" __global__ void kl_lstm_state_init(const __grid_constant__ kl_rec_args a, int D) {
  const i64 nh = (i64)D * a.B * KL_R, nc = (i64)D * a.B * KL_H;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < nh + nc; i += (i64)gridDim.x * blockDim.x) {
    if (i < nh)
      a.hbuf[i] = a.h0 ? a.h0[i] : 0.0f;  // buffer 0 of each direction: [D][B][R] from 0
    else
      a.cbuf[i - nh] = a.c0 ? a.c0[i - nh] : 0.0f;
  }
}

// ---- cluster path: the whole recurrence in one launch (sm_90+) ------------------
#if defined(KL_C) && __CUDA_ARCH__ >= 900

#define KL_HU (KL_H / KL_C)        // units per CTA
#define KL_ROWS (4 * KL_HU)        // gate rows per CTA
#define KL_KS (KL_NTW / KL_ROWS)   // k segments per row
#define KL_KPT (KL_R / KL_KS)      // weights per thread (in registers)
// KL_NTW: threads holding weights (KL_ROWS * KL_KS); KL_NT >= KL_NTW rounds up to warps

__device__ __forceinline__ unsigned kl_smem_addr(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

__device__ __forceinline__ unsigned kl_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ unsigned kl_map_rank(unsigned addr, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}

__device__ __forceinline__ void kl_st_cluster(unsigned addr, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

// Point-to-point exchange (KL_XCHG 1): each CTA's mbarrier counts the bytes its
// peers' st.async stores deliver into its h buffer.
__device__ __forceinline__ void kl_mbar_init(unsigned addr) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(addr) : "memory");
}

__device__ __forceinline__ void kl_mbar_expect(unsigned addr, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(addr), "r"(bytes) : "memory");
}

__device__ __forceinline__ void kl_mbar_wait(unsigned addr, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
        "selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
}

__device__ __forceinline__ void kl_st_async(unsigned addr, float v, unsigned mbar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr),
               "r"(__float_as_uint(v)), "r"(mbar)
               : "memory");
}

__device__ __forceinline__ void kl_cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

__device__ __forceinline__ void kl_cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The biases of (dir, b, unit)'s four gates summed once (b_ih + b_hh + gate_bias):
// the recurrence then loads only the gate inputs each step.
__device__ __forceinline__ void kl_gate_biases(const kl_gates_in& gi, int dir, int b, int unit, int B,
                                               float out[4]) {
#pragma unroll
  for (int q = 0; q < 4; q++) {
    float v = 0.0f;
    if (gi.b_ih[dir]) v = gi.b_ih[dir][(i64)(q * KL_H + unit) * gi.sb_ih[dir]];
    if (gi.b_hh[dir]) v += gi.b_hh[dir][(i64)(q * KL_H + unit) * gi.sb_hh[dir]];
    if (gi.gate_bias) v += gi.gate_bias[((i64)dir * B + b) * 4 * KL_H + q * KL_H + unit];
    out[q] = v;
  }
}

__device__ __forceinline__ void kl_load_gates_plus(const kl_gates_in& gi, int dir, int b, int unit, int t,
                                                   const float bias[4], float out[4]) {
  const float* row = gi.g + t * gi.g_st + b * gi.g_sb + dir * 4 * KL_H + unit;
#pragma unroll
  for (int q = 0; q < 4; q++) out[q] = row[q * KL_H] + bias[q];
}

#ifndef KL_XCHG
#define KL_XCHG 1  // 1: mbarrier-counted st.async; 0: one cluster barrier per step
#endif

// Dynamic shared memory: two mbarriers (16 bytes), hs[2][NB][R] (h of the previous
// step, written by every CTA of the cluster), red[2][KS][NB][ROWS] (partial sums;
// two buffers by step parity: with the mbarrier exchange no CTA-wide barrier
// separates a step's cell reads from the next step's writes, only the step after's).
extern "C" __global__ void __launch_bounds__(KL_NT, 1) kl_lstm_cluster(const __grid_constant__ kl_rec_args a) {
  extern __shared__ __align__(16) float smem[];
  unsigned long long* mbar = reinterpret_cast<unsigned long long*>(smem);
  float* hs = smem + 4;
  float* red = hs + 2 * KL_NB * KL_R;
  const int tid = threadIdx.x;
  const unsigned rank = kl_cluster_rank();
  const int dir = blockIdx.z, b0 = blockIdx.y * KL_NB;
  const int nb = min(KL_NB, a.B - b0);
  // weights: thread -> gate row `row` (gate q, unit u), k segment ks
  const int row = tid % KL_ROWS, ks = tid / KL_ROWS;
  const bool holds = tid < KL_NTW;
  float w[KL_KPT];
  {
    const int q = row / KL_HU, u = rank * KL_HU + row % KL_HU;
    const float* wr = a.w_hh[dir] + (i64)(q * KL_H + u) * a.ld_hh[dir] + ks * KL_KPT;
#pragma unroll
    for (int k = 0; k < KL_KPT; k++) w[k] = holds ? kl_round_w(wr[k]) : 0.0f;
  }
  // h0 into hs[0]; with the barrier exchange hs[1] is zeroed too (rows that never
  // send are read, then ignored), with st.async every row of it is sent before use
  for (int i = tid; i < (KL_XCHG ? 1 : 2) * KL_NB * KL_R; i += KL_NT) {
    const int bl = (i / KL_R) % KL_NB, j = i % KL_R;
    hs[i] = (i < KL_NB * KL_R && bl < nb && a.h0) ? a.h0[((i64)dir * a.B + b0 + bl) * KL_R + j] : 0.0f;
  }
  // cell threads: (unit ul, row bl)
  const bool cell = tid < KL_HU * KL_NB;
  const int ul = tid % KL_HU, bl = tid / KL_HU, b = b0 + bl, u = rank * KL_HU + ul;
  const bool live = cell && bl < nb;
  const int len = live ? kl_len(a, b) : 0;
  // gate inputs two steps ahead, in two register sets used on alternate steps:
  // a load is issued a whole step before its use
  float ga[4] = {0.0f, 0.0f, 0.0f, 0.0f}, gb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float c = 0.0f, h = 0.0f, bias[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  unsigned dst[KL_C];
#if KL_XCHG
  unsigned dstm[KL_C];
  const unsigned xbytes = KL_C * KL_HU * KL_NB * sizeof(float);  // one phase: every peer's slice
  const unsigned mb = kl_smem_addr(mbar);
  if (tid == 0) {
    kl_mbar_init(mb);
    kl_mbar_init(mb + 8);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    // phase 0 of each: step 0's slices land in hs[1], step 1's in hs[0]; step s
    // re-arms the one it waited on for step s+1's slices
    if (a.T > 1) kl_mbar_expect(mb + 8, xbytes);
    if (a.T > 2) kl_mbar_expect(mb, xbytes);
  }
#endif
  if (live) {
    if (a.c0) c = a.c0[((i64)dir * a.B + b) * KL_H + u];
    if (a.h0) h = a.h0[((i64)dir * a.B + b) * KL_R + u];
    kl_gate_biases(a.gi, dir, b, u, a.B, bias);
    int t = kl_time(a, dir, b, 0);
    if (t >= 0) kl_load_gates_plus(a.gi, dir, b, u, t, bias, ga);
    t = kl_time(a, dir, b, 1);
    if (t >= 0) kl_load_gates_plus(a.gi, dir, b, u, t, bias, gb);
  }
  if (cell) {
    const unsigned base = kl_smem_addr(hs + bl * KL_R + u);
#pragma unroll
    for (int r = 0; r < KL_C; r++) dst[r] = kl_map_rank(base, r);
#if KL_XCHG
#pragma unroll
    for (int r = 0; r < KL_C; r++) dstm[r] = kl_map_rank(mb, r);
#endif
  }
  kl_cluster_arrive();  // every CTA of the cluster has started and set its state
  kl_cluster_wait();

  auto step = [&](int s, float (&g)[4]) {
    const int cur = s & 1;
#if KL_XCHG
    if (s > 0) {  // every peer's slice of step s-1 has arrived in hs[cur]
      kl_mbar_wait(mb + 8 * cur, ((s - 1) >> 1) & 1);
      if (tid == 0 && s + 2 < a.T) kl_mbar_expect(mb + 8 * cur, xbytes);  // step s+1's slices
    }
#endif
    if (holds) {
      float acc[KL_NB];
      const float* hk = hs + cur * KL_NB * KL_R + ks * KL_KPT;
      // FMA chains: four interleaved per row when few rows give little parallelism
#define KL_CHAINS (KL_NB < 4 ? 4 : 1)
#pragma unroll
      for (int r = 0; r < KL_NB; r++) {
        float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < KL_KPT; k += 4) {
          const float4 hv = *reinterpret_cast<const float4*>(hk + r * KL_R + k);
          s4[0] = fmaf(w[k], hv.x, s4[0]);
          s4[1 % KL_CHAINS] = fmaf(w[k + 1], hv.y, s4[1 % KL_CHAINS]);
          s4[2 % KL_CHAINS] = fmaf(w[k + 2], hv.z, s4[2 % KL_CHAINS]);
          s4[3 % KL_CHAINS] = fmaf(w[k + 3], hv.w, s4[3 % KL_CHAINS]);
        }
        acc[r] = (s4[0] + s4[1]) + (s4[2] + s4[3]);
      }
#pragma unroll
      for (int r = 0; r < KL_NB; r++) red[((cur * KL_KS + ks) * KL_NB + r) * KL_ROWS + row] = acc[r];
    }
    __syncthreads();
    int ty = s;  // y's position this step: the row's time, or s as padding
    if (live && s < len) {
      ty = kl_time(a, dir, b, s);
      float v[4];
#pragma unroll
      for (int q = 0; q < 4; q++) {
        float sum = g[q];
#pragma unroll
        for (int j = 0; j < KL_KS; j++) sum += red[((cur * KL_KS + j) * KL_NB + bl) * KL_ROWS + q * KL_HU + ul];
        v[q] = sum;
      }
      const float ig = kl_sigmoid(v[0]), fg = kl_sigmoid(v[1]), gg = kl_tanh(v[2]), og = kl_sigmoid(v[3]);
      c = fg * c + ig * gg;
      h = og * kl_tanh(c);
#if !KL_XCHG
      const unsigned off = (unsigned)(((cur ^ 1) * KL_NB * KL_R) * sizeof(float));
#pragma unroll
      for (int r = 0; r < KL_C; r++) kl_st_cluster(dst[r] + off, h);
#endif
    }
#if KL_XCHG
    // every cell thread sends every step but the last (finished and padding rows
    // too: each phase expects a fixed byte count)
    if (cell && s + 1 < a.T) {
      const unsigned off = (unsigned)(((cur ^ 1) * KL_NB * KL_R) * sizeof(float));
#pragma unroll
      for (int r = 0; r < KL_C; r++) kl_st_async(dst[r] + off, h, dstm[r] + 8 * (cur ^ 1));
    }
#else
    // The barrier's release orders only the exchange above; global memory
    // traffic goes between arrive and wait, off the step's critical path.
    kl_cluster_arrive();
#endif
    if (live) {
      a.y[ty * a.y_st + b * a.y_sb + dir * KL_R + u] = s < len ? h : 0.0f;
      const int tn = kl_time(a, dir, b, s + 2);
      if (tn >= 0) kl_load_gates_plus(a.gi, dir, b, u, tn, bias, g);
    }
#if !KL_XCHG
    kl_cluster_wait();
#endif
  };
  for (int s = 0; s < a.T; s += 2) {
    step(s, ga);
    if (s + 1 < a.T) step(s + 1, gb);
  }
  if (live) {
    if (a.h_n) a.h_n[((i64)dir * a.B + b) * KL_R + u] = h;
    if (a.c_n) a.c_n[((i64)dir * a.B + b) * KL_H + u] = c;
  }
}
#endif
