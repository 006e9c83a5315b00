// Counter-based noise on the GPU: element i of the draw (seed, stream), the same bits
// as the C engine's (src/ops/random.h, random.c): the same Philox4x32-10 block, the
// uniform exactly, the normal by Box-Muller in double rounded once to float.
//
// Part of the ops program (kl_build.py's CUDA_OPS_SOURCES, src/cuda/ops.c): it takes
// no -D option, so one module per device serves every draw. It is compiled with
// --fmad=false (no multiply-add is contracted), --ftz=false and IEEE division and
// square root; the products below are __dmul_rn besides, which never contract.
//
// The only difference from the CPU is the math library: CUDA's double log, sin and
// cos are within 1-2 ulp, glibc's almost always correctly rounded, and the last bits
// of a double only change the float it rounds to when it lies within a few ulp of
// a float midpoint. There kl_exact recomputes log, cos and sin in double-double and
// rounds them once, as a correctly rounded library does.

typedef unsigned int u32;
typedef unsigned long long u64;

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define TWO_M24 (1.0 / 16777216.0)
#define TWO_PI 6.283185307179586476925286766559
// Double ulps around a float midpoint within which the double-double path decides the
// rounding: far more than the error of CUDA's log, cos and sin and one product.
#define KL_RANDOM_GUARD 64

__device__ __forceinline__ uint4 kl_philox(uint4 c, u32 k0, u32 k1) {
#pragma unroll
  for (int r = 0; r < 10; r++) {
    if (r > 0) {  // the key is bumped before every round but the first
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    const u32 hi0 = __umulhi(PHILOX_M0, c.x), lo0 = PHILOX_M0 * c.x;
    const u32 hi1 = __umulhi(PHILOX_M1, c.z), lo1 = PHILOX_M1 * c.z;
    c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
  }
  return c;
}

// ---- double-double (hi + lo, |lo| <= ulp(hi) / 2), for kl_exact only ---------------

struct kl_dd {
  double hi, lo;
};

__device__ kl_dd kl_fast_two_sum(double a, double b) {  // |a| >= |b|
  const double s = a + b;
  return {s, b - (s - a)};
}

__device__ kl_dd kl_two_sum(double a, double b) {
  const double s = a + b, bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}

__device__ kl_dd kl_dd_add(kl_dd a, kl_dd b) {
  kl_dd s = kl_two_sum(a.hi, b.hi);
  const kl_dd t = kl_two_sum(a.lo, b.lo);
  s = kl_fast_two_sum(s.hi, s.lo + t.hi);
  return kl_fast_two_sum(s.hi, s.lo + t.lo);
}

__device__ kl_dd kl_dd_mul(kl_dd a, kl_dd b) {
  const double p = __dmul_rn(a.hi, b.hi);
  const double e = __fma_rn(a.hi, b.hi, -p) + (__dmul_rn(a.hi, b.lo) + __dmul_rn(a.lo, b.hi));
  return kl_fast_two_sum(p, e);
}

__device__ kl_dd kl_dd_div_d(kl_dd a, double b) {
  const double q1 = a.hi / b;
  const double p = __dmul_rn(q1, b);
  const double r = ((a.hi - p) - __fma_rn(q1, b, -p)) + a.lo;
  return kl_fast_two_sum(q1, r / b);
}

// log(a) for a = m 2^-24, m in 1..2^24: e ln 2 + 2 atanh(s), s = (f - 1) / (f + 1),
// a = f 2^e with f in [sqrt(1/2), sqrt(2)); f - 1 and f + 1 are exact.
__device__ kl_dd kl_dd_log(double a) {
  int e;
  double f = frexp(a, &e);
  if (f < 0.70710678118654752440) {
    f *= 2.0;
    e--;
  }
  const kl_dd s = kl_dd_div_d({f - 1.0, 0.0}, f + 1.0);
  const kl_dd z = kl_dd_mul(s, s);  // <= 0.0295: 22 terms reach 2^-110
  kl_dd p = kl_dd_div_d({1.0, 0.0}, 43.0);
  for (int k = 20; k >= 0; k--) p = kl_dd_add(kl_dd_mul(p, z), kl_dd_div_d({1.0, 0.0}, 2.0 * k + 1.0));
  const kl_dd lf = kl_dd_mul(s, {2.0 * p.hi, 2.0 * p.lo});
  const kl_dd ln2 = {0x1.62e42fefa39efp-1, 0x1.abc9e3b39803fp-56};
  return kl_dd_add(kl_dd_mul(ln2, {(double)e, 0.0}), lf);
}

// cos(x) and sin(x) for x in [0, 2 pi]: y = x - k pi/2 with pi/2 in three doubles,
// then the Taylor series of cos y and sin y (|y| <= pi/4 + rounding, 16 terms).
__device__ void kl_dd_cos_sin(double x, kl_dd* c, kl_dd* s) {
  const double k = rint(x * 0.63661977236758134308);
  const double p1 = 0x1.921fb54442d18p0, p2 = 0x1.1a62633145c07p-54, p3 = -0x1.f1976b7ed8fbcp-110;
  kl_dd y = {x, 0.0};
  y = kl_dd_add(y, {-__dmul_rn(k, p1), -__fma_rn(k, p1, -__dmul_rn(k, p1))});
  y = kl_dd_add(y, {-__dmul_rn(k, p2), -__fma_rn(k, p2, -__dmul_rn(k, p2))});
  y = kl_dd_add(y, {-__dmul_rn(k, p3), 0.0});
  const kl_dd z = kl_dd_mul(y, y);
  kl_dd cy = {1.0, 0.0}, sy = {1.0, 0.0};
  for (int j = 16; j >= 1; j--) {  // cos: 1 - z/((2j-1)2j) (...); sin: y (1 - z/(2j(2j+1)) (...))
    const kl_dd tc = kl_dd_div_d(kl_dd_mul(z, cy), (2.0 * j - 1.0) * (2.0 * j));
    const kl_dd ts = kl_dd_div_d(kl_dd_mul(z, sy), (2.0 * j) * (2.0 * j + 1.0));
    cy = kl_dd_add({1.0, 0.0}, {-tc.hi, -tc.lo});
    sy = kl_dd_add({1.0, 0.0}, {-ts.hi, -ts.lo});
  }
  sy = kl_dd_mul(y, sy);
  const int q = (int)k & 3;
  const kl_dd ncy = {-cy.hi, -cy.lo}, nsy = {-sy.hi, -sy.lo};
  *c = q == 0 ? cy : q == 1 ? nsy : q == 2 ? ncy : sy;
  *s = q == 0 ? sy : q == 1 ? cy : q == 2 ? nsy : ncy;
}

// Whether v's rounding to float is within KL_RANDOM_GUARD double ulps of a tie (the
// low 29 of the 52 fraction bits, 2^28 at the midpoint of two floats).
__device__ __forceinline__ bool kl_near_tie(double v) {
  const long long d = (__double_as_longlong(v) & ((1ll << 29) - 1)) - (1ll << 28);
  return d > -KL_RANDOM_GUARD && d < KL_RANDOM_GUARD;
}

// (r cos t, r sin t) from log, cos and sin each rounded once to double.
__device__ __noinline__ double2 kl_exact(double a, double t) {
  const double r = sqrt(__dmul_rn(-2.0, kl_dd_log(a).hi));
  kl_dd c, s;
  kl_dd_cos_sin(t, &c, &s);
  return make_double2(__dmul_rn(r, c.hi), __dmul_rn(r, s.hi));
}

// The four values of Philox block `block` of the draw.
__device__ __forceinline__ void kl_block_values(int dist, u32 k0, u32 k1, u64 stream, u64 block,
                                                float v[4]) {
  const uint4 w = kl_philox(make_uint4((u32)block, (u32)(block >> 32), (u32)stream, (u32)(stream >> 32)),
                            k0, k1);
  const u32 ws[4] = {w.x, w.y, w.z, w.w};
  if (dist == 0) {
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = __double2float_rn(__dmul_rn((double)(ws[k] >> 8), TWO_M24));
    return;
  }
#pragma unroll
  for (int p = 0; p < 2; p++) {
    const double a = __dmul_rn((double)(ws[2 * p] >> 8) + 1.0, TWO_M24);
    const double t = __dmul_rn(TWO_PI, __dmul_rn((double)(ws[2 * p + 1] >> 8), TWO_M24));
    const double r = sqrt(__dmul_rn(-2.0, log(a)));
    double sn, cs;
    sincos(t, &sn, &cs);
    double2 z = make_double2(__dmul_rn(r, cs), __dmul_rn(r, sn));
    if (kl_near_tie(z.x) || kl_near_tie(z.y)) z = kl_exact(a, t);
    v[2 * p] = __double2float_rn(z.x);
    v[2 * p + 1] = __double2float_rn(z.y);
  }
}

// y[i] = element i of the draw (*seed, stream) of dist (0 uniform, 1 normal), i < n; a
// thread per Philox block, the grid striding over them. The seed is read here, so a
// captured graph draws with the value the seed holds at each replay.
extern "C" __global__ void kl_random(int dist, const long long* seed, u64 stream, long long n, float* y) {
  const u64 s = (u64)*seed;
  const u32 k0 = (u32)s, k1 = (u32)(s >> 32);
  const u64 blocks = ((u64)n + 3) / 4;
  for (u64 b = (u64)blockIdx.x * blockDim.x + threadIdx.x; b < blocks; b += (u64)gridDim.x * blockDim.x) {
    float v[4];
    kl_block_values(dist, k0, k1, stream, b, v);
#pragma unroll
    for (int k = 0; k < 4; k++)
      if (b * 4 + k < (u64)n) y[b * 4 + k] = v[k];
  }
}

// kl_fresh_seed_v1's draw on the device: splitmix64's finalizer of base + the device's
// call counter, which this kernel advances (so each replay of a captured graph gets
// the next seed).
extern "C" __global__ void kl_fresh_seed(long long* out, u64 base, unsigned long long* counter) {
  u64 z = base + atomicAdd(counter, 1ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  out[0] = (long long)(z ^ (z >> 31));
}
