/* What a half-precision recurrent weight costs on an AVX-512 CPU: ns per 16
 * weights for a loop that streams them from a working set of a given size into
 * 8 accumulators, as the B = 1 LSTM cell does:
 *   f32        load 16 floats + FMA (float32 W_hh)
 *   f16        vcvtph2ps (16 halves -> floats) + FMA (float16 W_hh)
 *   f16 widen  vcvtph2ps alone (OR into the accumulators, no FMA)
 *   bf16       zero-extend + shift (bfloat16 widening) + FMA
 * Rounds alternate over the four loops; medians and minima over the rounds.
 * A standalone probe (not built by the Makefile):
 *   gcc -O2 -march=native benchmarks/c/probe_widen.c -o /tmp/probe_widen
 *   /tmp/probe_widen [KiB of float32 weights, default 1024: one direction of
 *                     Kokoro's W_hh] [rounds, default 15] */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOIPA __attribute__((noipa))
#define ACC8 __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0
#define SUM8                                                                                      \
  _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)), \
                                     _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7))))
#define UNROLL8(S) S(0) S(1) S(2) S(3) S(4) S(5) S(6) S(7)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static __m512 half16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)p)); }
static __m512 bf16x16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i*)p)), 16));
}

/* A loop over nv vectors of 16 weights of type T at w into 8 accumulators,
 * each vector used as S_name says. */
#define STREAM(name, T)                                    \
  NOIPA static float name(const T* w, size_t nv, float x) { \
    ACC8;                                                  \
    const __m512 h = _mm512_set1_ps(x);                    \
    (void)h;                                               \
    for (size_t i = 0; i < nv; i += 8) {                   \
      UNROLL8(S_##name)                                    \
    }                                                      \
    return SUM8;                                           \
  }
#define FMA(a, v, h) _mm512_fmadd_ps(v, h, a)
#define OR(a, v, h) _mm512_or_ps(a, v)
#define S_f32_fma(j) a##j = FMA(a##j, _mm512_load_ps(w + (i + j) * 16), h);
#define S_f16_fma(j) a##j = FMA(a##j, half16(w + (i + j) * 16), h);
#define S_f16_widen(j) a##j = OR(a##j, half16(w + (i + j) * 16), h);
#define S_bf16_fma(j) a##j = FMA(a##j, bf16x16(w + (i + j) * 16), h);
STREAM(f32_fma, float)
STREAM(f16_fma, uint16_t)
STREAM(f16_widen, uint16_t)
STREAM(bf16_fma, uint16_t)

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  const size_t kib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
  const int rounds = argc > 2 ? atoi(argv[2]) : 15;
  const size_t nv = kib * 1024 / 64 / 8 * 8; /* 16-float vectors, a multiple of 8 */
  if (nv == 0 || rounds < 1 || rounds > 1000) {
    fprintf(stderr, "usage: probe_widen [KiB >= 1] [rounds 1..1000]\n");
    return 2;
  }
  float* f = aligned_alloc(64, nv * 64);
  uint16_t* h = aligned_alloc(64, nv * 32);
  double* t = malloc(sizeof(double) * 4 * (size_t)rounds);
  if (!f || !h || !t) return 1;
  for (size_t i = 0; i < nv * 16; i++) f[i] = 1.0f, h[i] = 0x3c00; /* 1.0 in both formats */
  const size_t reps = (size_t)(1u << 27) / (nv * 16) + 1;
  static const char* names[4] = {"f32 load + FMA", "f16 vcvtph2ps + FMA", "f16 vcvtph2ps alone",
                                 "bf16 widen + FMA"};
  volatile float sink = 0.0f;
  for (int r = 0; r < rounds; r++)
    for (int v = 0; v < 4; v++) {
      const double t0 = now();
      for (size_t i = 0; i < reps; i++) {
        __asm__ volatile("" ::: "memory");
        sink += v == 0 ? f32_fma(f, nv, 1e-9f) : v == 1 ? f16_fma(h, nv, 1e-9f)
                : v == 2 ? f16_widen(h, nv, 0.0f) : bf16_fma(h, nv, 1e-9f);
      }
      t[v * rounds + r] = (now() - t0) / ((double)reps * (double)nv) * 1e9;
    }
  printf("working set: %zu KiB of float32 (%zu KiB as halves), %d rounds, ns per 16 weights\n", kib,
         kib / 2, rounds);
  for (int v = 0; v < 4; v++) {
    qsort(t + v * rounds, (size_t)rounds, sizeof(double), cmp);
    printf("  %-22s median %.3f  min %.3f\n", names[v], t[v * rounds + rounds / 2], t[v * rounds]);
  }
  free(f);
  free(h);
  free(t);
  return 0;
}
