// The step path: the recurrence in one launch per step, any architecture.
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
