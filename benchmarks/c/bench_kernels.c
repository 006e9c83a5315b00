/* Micro-benchmark of every kernel in the kernel lists (src/kernels/<op>.inc)
 * that this CPU can run: `make bench-kernels`.
 *
 * Cases (Kokoro's LSTM: H = 256 hidden units, R = 256 recurrent inputs):
 *   cell   one recurrent step, all 16 blocks of 16 units, for B = 1, 4, 16 and 64 rows
 *          (the weights stay hot in cache: this is the kernel's own speed)
 *   proj   a projection H = 256 -> P = 128, B = 1
 *   sigmoid/tanh  1024 values;  rsum  1 MiB;  gemm  the input projection
 *          M = 256 rows, N = 2048 columns, K = 640 (plus rounding the input; the
 *          float32 six-product one plus splitting both operands)
 * Every kernel is timed once per round, rounds alternate over all kernels, and
 * the median and minimum over the rounds are printed in ns per call (per step
 * for the cell), so a neighbour's load spreads over every kernel alike.
 * Usage: bench_kernels [rounds] (default 21). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define H 256
#define R 256
#define NBLK (H / KL_NR)
#define MAXB 64

static double now_ns(void) { return (double)kl_now_ns(); }

static void* xalloc(size_t bytes) {
  void* p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) {
    fprintf(stderr, "bench_kernels: out of memory\n");
    exit(2);
  }
  memset(p, 0, (bytes + 63) / 64 * 64);
  return p;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(float lo, float hi) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return lo + (hi - lo) * (float)((g_rng * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

static size_t wsize(kl_wtype wt) { return wt == KL_W_F64 ? 8 : wt == KL_W_F32 ? 4 : 2; }
static const char* wname(kl_wtype wt) {
  return wt == KL_W_F64 ? "f64" : wt == KL_W_BF16 ? "bf16" : wt == KL_W_F16 ? "f16" : "f32";
}

/* Random weights of any type: bytes of small values (the f64 kernel reads
 * doubles; the others 16/32-bit patterns of floats in [-0.05, 0.05]). */
static void* random_weights(kl_wtype wt, size_t n) {
  void* w = xalloc(n * wsize(wt));
  for (size_t i = 0; i < n; i++) {
    const float v = frand(-0.05f, 0.05f);
    if (wt == KL_W_F64) ((double*)w)[i] = v;
    else if (wt == KL_W_F32) ((float*)w)[i] = v;
    else if (wt == KL_W_F16) ((uint16_t*)w)[i] = kl_f32_to_f16(v);
    else ((uint16_t*)w)[i] = kl_f32_to_bf16(v);
  }
  return w;
}

/* One benchmark case: a kernel and its inputs; run() does `reps` calls. */
typedef struct bcase {
  char list[16], name[64], what[40];
  int reps;
  double samples[256];
  int ns;
  /* the call */
  int kind; /* 0 cell, 1 proj, 2 vunary, 3 rsum, 4 gemm, 5 fingerprint, 6 f32 gemm, 7 pgemm, 8 x6 gemm */
  const void* fn;
  const void* fn2;
  kl_wtype wt;
  size_t nb;
  void* w;
} bcase;

static void* g_io; /* states, gates, vectors: one arena, float or double */
static size_t g_io_bytes;

static void run_case(bcase* c) {
  char* io = g_io;
  const int dbl = c->wt == KL_W_F64;
  const size_t esz = dbl ? 8 : 4;
  switch (c->kind) {
    case 0: {
      kl_cell_row rows[MAXB];
      for (size_t e = 0; e < c->nb; e++) {
        char* base = io + e * (4 * H + 4 * H) * esz;
        rows[e] = (kl_cell_row){base, base + 4 * H * esz, base + 5 * H * esz, base + 6 * H * esz};
      }
      const float* bias = (const float*)(io + MAXB * 8 * H * esz);
      for (int r = 0; r < c->reps; r++)
        ((kl_lstmcell_ukernel_fn)c->fn)(R, H, 0, NBLK, c->w, bias, c->nb, rows);
      break;
    }
    case 1: {
      const void* hin[1] = {io};
      void* hout[1] = {io + H * esz};
      for (int r = 0; r < c->reps; r++) ((kl_lstmproj_ukernel_fn)c->fn)(H, 0, 128 / KL_NR, c->w, 1, hin, hout);
      break;
    }
    case 2:
      for (int r = 0; r < c->reps; r++) ((kl_f32_vunary_fn)c->fn)(1024, (const float*)io, (float*)io + 1024);
      break;
    case 3: {
      volatile float sink = 0.0f;
      for (int r = 0; r < c->reps; r++) sink += ((kl_f32_rsum_fn)c->fn)((1u << 20) / 4, (const float*)c->w);
      (void)sink;
      break;
    }
    case 6: { /* T = 16 rows of Kokoro's projection: W_ih read in place */
      const size_t M = 16, N = 2048, K = 640;
      ((kl_f32_gemm_ukernel_fn)c->fn)(M, N, K, (const float*)io, K, (const float*)c->w, K,
                                      (float*)io + M * K, N);
      break;
    }
    case 7: { /* bert's 64 x 768 x 768 linear on one 32-column panel at a time, K in one block */
      const size_t M = 64, N = 768, K = 768;
      for (size_t p = 0; p < N / KL_PGEMM_NR; p++)
        ((kl_f32_pgemm_ukernel_fn)c->fn)(M, KL_PGEMM_NR, K, (const float*)io, K,
                                         (const float*)c->w + p * K * KL_PGEMM_NR, (const float*)io,
                                         (float*)io + M * K + p * KL_PGEMM_NR, N);
      break;
    }
    case 8: { /* Kokoro's float32 input projection, both operands split and packed each call */
      const size_t M = 256, N = 2048, K = 640, sa = kl_x6_split_bytes(M, K), sw = kl_x6_split_bytes(N, K);
      const kl_x6gemm_entry* e = c->fn2;
      const float* X = (const float*)(io + M * K * 4 + M * N * 4);
      const float* rows[2048];
      for (size_t n = 0; n < N; n++) rows[n] = (const float*)c->w + n * K;
      uint8_t* A = (uint8_t*)c->w + N * K * 4; /* after W: 3 * (sa + sw) bytes */
      for (int r = 0; r < c->reps; r++) {
        e->pack_a(M, K, X, K, 0, M, A, sa);
        e->pack_w(K, rows, 0, N, A + 3 * sa, sw);
        e->gemm(M, N, (K + 31) / 32, A, sa, A + 3 * sa, sw, (float*)io, N);
      }
      break;
    }
    case 5: {
      uint64_t acc[8] = {0};
      for (int r = 0; r < c->reps; r++) ((kl_fp_ukernel_fn)c->fn)(c->w, 1u << 20, acc);
      volatile uint64_t sink = acc[0];
      (void)sink;
      break;
    }
    case 4: {
      const size_t M = 256, N = 2048, K = 640, Kp = K / 2;
      uint32_t* A = (uint32_t*)io;
      float* C = (float*)(io + M * Kp * 4);
      const float* X = (const float*)(io + M * Kp * 4 + M * N * 4);
      for (int r = 0; r < c->reps; r++) {
        ((kl_f32_to_bf16_pairs_fn)c->fn2)(M, K, X, K, A);
        for (size_t n0 = 0; n0 < N; n0 += 128)
          ((kl_bf16_gemm_ukernel_fn)c->fn)(M, 128, Kp, A, (const uint16_t*)c->w + (n0 / 64) * Kp * 128,
                                           C + n0, N);
      }
      break;
    }
  }
}

static int cmp_d(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* The next case: kernel `name` of list `list`; the caller sets what it times. */
static bcase* add_case(bcase* cs, int* n, const char* list, const char* name, int kind,
                       const void* fn, kl_wtype wt, int reps) {
  bcase* c = &cs[(*n)++];
  snprintf(c->list, sizeof(c->list), "%s", list);
  snprintf(c->name, sizeof(c->name), "%s", name);
  c->kind = kind, c->fn = fn, c->wt = wt, c->reps = reps;
  return c;
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 21;
  if (rounds < 1) rounds = 1;
  if (rounds > 256) rounds = 256;
  const unsigned cpu = kl_arch_detected() | KL_ARCH_F16_NARROW; /* a preference: time both */
  g_io_bytes = 256 * 640 * 4 + 256 * 2048 * 4 + 256 * 640 * 4 + MAXB * 8 * H * 8 + 4 * H * 8;
  g_io = xalloc(g_io_bytes);
  for (size_t i = 0; i < g_io_bytes / 4; i++) ((float*)g_io)[i] = frand(-1.0f, 1.0f);
  bcase* cs = calloc(256, sizeof(bcase));
  int n = 0;
  for (size_t i = 0; i < kl_lstmcell_count; i++) {
    const kl_lstmcell_entry* k = &kl_lstmcell_list[i];
    if (k->arch & ~cpu) continue;
    static const size_t nbs[] = {1, 4, 16, MAXB};
    for (size_t j = 0; j < sizeof(nbs) / sizeof(nbs[0]); j++) {
      const size_t nb = nbs[j];
      bcase* c = add_case(cs, &n, "lstmcell", k->name, 0, (const void*)k->fn, k->wt,
                          k->arch ? (nb > 4 ? 4 : 20) : 1);
      snprintf(c->what, sizeof(c->what), "%s H=R=256 B=%zu, per step", wname(k->wt), nb);
      c->nb = nb;
      c->w = random_weights(k->wt, NBLK * ((R + 1) / 2 * 2) * 64);
    }
  }
  for (size_t i = 0; i < kl_lstmproj_count; i++) {
    const kl_lstmproj_entry* k = &kl_lstmproj_list[i];
    if (k->arch & ~cpu) continue;
    bcase* c = add_case(cs, &n, "lstmproj", k->name, 1, (const void*)k->fn, k->wt, 50);
    snprintf(c->what, sizeof(c->what), "%s 256->128 B=1", wname(k->wt));
    c->nb = 1;
    c->w = random_weights(k->wt, 8 * H * 16);
  }
  for (int v = 0; v < 3; v++) {
    const kl_vunary_entry* list =
        v == 2 ? kl_f32_vgelu_list : v ? kl_f32_vtanh_list : kl_f32_vsigmoid_list;
    const size_t cnt = v == 2 ? kl_f32_vgelu_count : v ? kl_f32_vtanh_count : kl_f32_vsigmoid_count;
    for (size_t i = 0; i < cnt; i++) {
      if (list[i].arch & ~cpu) continue;
      bcase* c = add_case(cs, &n, v == 2 ? "f32-vgelu" : v ? "f32-vtanh" : "f32-vsigmoid", list[i].name, 2,
                          (const void*)list[i].fn, KL_W_F32, 100);
      snprintf(c->what, sizeof(c->what), "n=1024");
    }
  }
  for (size_t i = 0; i < kl_f32_rsum_count; i++) {
    if (kl_f32_rsum_list[i].arch & ~cpu) continue;
    bcase* c = add_case(cs, &n, "f32-rsum", kl_f32_rsum_list[i].name, 3,
                        (const void*)kl_f32_rsum_list[i].fn, KL_W_F32, 20);
    snprintf(c->what, sizeof(c->what), "1 MiB");
    c->w = random_weights(KL_W_F32, (1u << 20) / 4);
  }
  for (size_t i = 0; i < kl_u64_fingerprint_count; i++) {
    if (kl_u64_fingerprint_list[i].arch & ~cpu) continue;
    bcase* c = add_case(cs, &n, "u64-fingerprint", kl_u64_fingerprint_list[i].name, 5,
                        (const void*)kl_u64_fingerprint_list[i].fn, KL_W_F32, 20);
    snprintf(c->what, sizeof(c->what), "1 MiB");
    c->w = random_weights(KL_W_F32, (1u << 20) / 4);
  }
  for (size_t i = 0; i < kl_bf16_gemm_count; i++) {
    if (kl_bf16_gemm_list[i].arch & ~cpu) continue;
    bcase* c = add_case(cs, &n, "bf16-gemm", kl_bf16_gemm_list[i].name, 4,
                        (const void*)kl_bf16_gemm_list[i].gemm, kl_bf16_gemm_list[i].wt, 1);
    snprintf(c->what, sizeof(c->what), "%s 256x2048x640 + rounding", wname(kl_bf16_gemm_list[i].wt));
    c->fn2 = (const void*)kl_bf16_gemm_list[i].pack;
    c->w = random_weights(KL_W_BF16, 2048 * 640);
  }
  for (size_t i = 0; i < kl_f32_x6gemm_count; i++) {
    if (kl_f32_x6gemm_list[i].arch & ~cpu) continue;
    bcase* c = add_case(cs, &n, "f32-x6gemm", kl_f32_x6gemm_list[i].name, 8,
                        (const void*)kl_f32_x6gemm_list[i].gemm, KL_W_F32, 1);
    snprintf(c->what, sizeof(c->what), "256x2048x640 + packing A, W");
    c->fn2 = (const void*)&kl_f32_x6gemm_list[i];
    c->w = xalloc(2048 * 640 * 4 + 3 * (kl_x6_split_bytes(256, 640) + kl_x6_split_bytes(2048, 640)));
    for (size_t j = 0; j < 2048 * 640; j++) ((float*)c->w)[j] = frand(-0.05f, 0.05f);
  }
  for (size_t i = 0; i < kl_f32_gemm_count; i++) {
    if (kl_f32_gemm_list[i].arch & ~cpu) continue;
    bcase* c = add_case(cs, &n, "f32-gemm", kl_f32_gemm_list[i].name, 6,
                        (const void*)kl_f32_gemm_list[i].fn, KL_W_F32, 1);
    snprintf(c->what, sizeof(c->what), "16x2048x640, W in place");
    c->w = random_weights(KL_W_F32, 2048 * 640);
  }
  for (size_t i = 0; i < kl_f32_pgemm_count; i++) {
    if (kl_f32_pgemm_list[i].arch & ~cpu) continue;
    bcase* c = add_case(cs, &n, "f32-pgemm", kl_f32_pgemm_list[i].name, 7,
                        (const void*)kl_f32_pgemm_list[i].fn, KL_W_F32, 1);
    snprintf(c->what, sizeof(c->what), "64x768x768, B in panels");
    c->w = random_weights(KL_W_F32, 768 * 768);
  }
  for (int i = 0; i < n; i++) run_case(&cs[i]); /* warm up */
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < n; i++) {
      const double t0 = now_ns();
      run_case(&cs[i]);
      cs[i].samples[cs[i].ns++] = (now_ns() - t0) / cs[i].reps;
    }
  printf("kokoro_lstm kernels: %d rounds, CPU features 0x%x, float16 dispatch %s the narrow entry, "
         "ns per call (median, min, spread = (p75 - p25) / median)\n", rounds, kl_arch_detected(),
         kl_f16_narrow_rows() ? "takes" : "skips");
  printf("%-13s %-42s %-30s %12s %12s %7s\n", "list", "kernel", "case", "median ns", "min ns", "spread");
  for (int i = 0; i < n; i++) {
    bcase* c = &cs[i];
    qsort(c->samples, (size_t)c->ns, sizeof(double), cmp_d);
    const double med = c->samples[c->ns / 2];
    const double iqr = c->samples[(3 * c->ns) / 4] - c->samples[c->ns / 4];
    printf("%-13s %-42s %-30s %12.0f %12.0f %6.1f%%\n", c->list, c->name, c->what, med, c->samples[0],
           100.0 * iqr / med);
    free(c->w);
  }
  free(cs);
  free(g_io);
  return 0;
}
