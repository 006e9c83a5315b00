// The cluster path: the whole recurrence in one launch (sm_90+), on ptx.cuh.
#if defined(KL_C) && __CUDA_ARCH__ >= 900

#define KL_HU (KL_H / KL_C)        // units per CTA
#define KL_ROWS (4 * KL_HU)        // gate rows per CTA
#define KL_KS (KL_NTW / KL_ROWS)   // k segments per row
#define KL_KPT (KL_R / KL_KS)      // weights per thread (in registers)
// KL_NTW: threads holding weights (KL_ROWS * KL_KS); KL_NT >= KL_NTW rounds up to warps

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
#if KL_KPT % 4 == 0
    if ((unsigned long long)wr % 16 == 0) {  // 16-byte loads: a quarter of the requests
#pragma unroll
      for (int k = 0; k < KL_KPT; k += 4) {
        const float4 v = holds ? *reinterpret_cast<const float4*>(wr + k) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        w[k] = kl_round_w(v.x), w[k + 1] = kl_round_w(v.y), w[k + 2] = kl_round_w(v.z), w[k + 3] = kl_round_w(v.w);
      }
    } else
#endif
    {
#pragma unroll
      for (int k = 0; k < KL_KPT; k++) w[k] = holds ? kl_round_w(wr[k]) : 0.0f;
    }
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
