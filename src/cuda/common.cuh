// kokoro_lstm CUDA kernels: torch.nn.LSTM's recurrence and input projection;
// this file: what every kernel shares (rounding, activations, gate inputs).
//
// Compiled at run time by NVRTC (src/cuda/module.c) as one text, the files of
// kl_build.py's CUDA_SOURCES in order, with no headers; every
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

#ifndef KL_WT
#define KL_WT 0
#endif

typedef long long i64;

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
  if (a.len_dev) { /* in a CUDA graph: read at each replay, clamped (nothing checks them) */
    const long long v = a.len_dev[(long long)b * a.len_st];
    return v < 1 ? 1 : v > a.T ? a.T : (int)v;
  }
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
