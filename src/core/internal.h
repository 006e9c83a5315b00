/* Internal declarations shared by the core and the kernels (not installed):
 * the kernels' types and lists, the thread pool, the weights as the caller holds
 * them. The CPU engine's own types are in engine.h. */
#ifndef KL_INTERNAL_H
#define KL_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "call.h" /* kl_wsrc, the layout rule */
#include "error.h"
#include "kokoro_lstm.h"
#include "kokoro_lstm_testing.h" /* implemented by the core (cpu.c, threadpool.c) */

/* Recurrent weights are packed in panels of KL_NR hidden units. Each gate
 * block of the input-projection output is padded to Hp = round_up(H, KL_NR). */
#define KL_NR 16

static inline size_t kl_round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* One batch element's view of a recurrent step.
 *   gx:    precomputed input gates of this direction, [4][Hp] (i, f, g, o)
 *   h:     h_{t-1}, R values
 *   c:     cell state [Hp], updated in place for the kernel's units
 *   h_out: o * tanh(c) [Hp], written for the kernel's units                 */
typedef struct kl_cell_row {
  const void* gx;
  const void* h;
  void* c;
  void* h_out;
} kl_cell_row;

/* Cell micro-kernel: units [blk0*KL_NR, blk1*KL_NR) for nb batch elements.
 * w: packed W_hh panels (layout depends on the weight type, see engine.h);
 * bias: [4][Hp] b_ih + b_hh. */
typedef void (*kl_lstmcell_ukernel_fn)(size_t R, size_t Hp, size_t blk0, size_t blk1,
                                       const void* w, const void* bias, size_t nb,
                                       const kl_cell_row* rows);

/* Projection micro-kernel: h_out[p] = sum_j W_hr[p, j] * h_in[j] for output
 * rows [blk0*KL_NR, blk1*KL_NR); h_in has H values, h_out is [Pp]. */
typedef void (*kl_lstmproj_ukernel_fn)(size_t H, size_t blk0, size_t blk1, const void* w,
                                       size_t nb, const void* const* h_in, void* const* h_out);

/* Vector activation over n floats. */
typedef void (*kl_f32_vunary_fn)(size_t n, const float* x, float* y);
/* y = z + c sin(a z)^2 with z = (x - m) g + off (Snake after instance norm's affine
 * step; y may be x) */
typedef void (*kl_f32_vsnake_fn)(size_t n, const float* x, float m, float g, float off, float a,
                                 float c, float* y);
/* *mean and *var (biased) of n >= 1 floats in float64 (f32-rmoments.inc's tree) */
typedef void (*kl_f32_rmoments_fn)(size_t n, const float* x, double* mean, double* var);
/* |a x| bound of the vector Snake kernels' sin^2 (simd-math.h's _sinsq: the multiple
 * of pi, q < 2^15, times pi's leading part 3.140625 is exact); libm's sinf beyond it. */
#define KL_SINSQ_RANGE 65536.0f

/* Kernel table: one entry per weight type, filled once per ISA. */
/* bfloat16 input projection (AVX512_BF16 only): C[M, N] = A * W^T, A in
 * bfloat16 pairs [M][Kp], W in 64-column panels (bf16-gemm-avx512bf16.c). */
typedef void (*kl_bf16_gemm_ukernel_fn)(size_t M, size_t N, size_t Kp, const uint32_t* A,
                                        const uint16_t* W, float* C, size_t ldc);
typedef void (*kl_f32_to_bf16_pairs_fn)(size_t M, size_t K, const float* X, size_t ldx,
                                        uint32_t* out);

/* float32 products on AMX tiles, six bfloat16 products per element
 * (f32-x6gemm-avx512amx.c: operand layout, accuracy): the packers split float32 rows
 * into three bfloat16 tile blocks each (split s at + s*stride bytes) and return
 * 1 when a value cannot be split (non-finite); the GEMM takes M rows of the A
 * blocks, N (a multiple of 32) columns of the W blocks and nks = ceil(K / 32). */
typedef void (*kl_f32_x6gemm_ukernel_fn)(size_t M, size_t N, size_t nks, const uint8_t* A, size_t sa,
                                         const uint8_t* W, size_t sw, float* C, size_t ldc);
typedef int (*kl_f32_x6pack_a_fn)(size_t M, size_t K, const float* X, size_t ldx, size_t m0,
                                  size_t m1, uint8_t* A, size_t sa);
typedef int (*kl_f32_x6pack_w_fn)(size_t K, const float* const* rows, size_t c0, size_t c1,
                                  uint8_t* W, size_t sw);
/* bytes of one split of the packed A (rows) or W (columns) */
static inline size_t kl_x6_split_bytes(size_t rows, size_t K) {
  return kl_round_up(rows, 32) * ((K + 31) / 32) * 16 * sizeof(uint32_t);
}

/* float32 input projection for few rows: C[M, N] (ldc) = A[M, K] (lda) * W[N, K]^T (ldw). */
typedef void (*kl_f32_gemm_ukernel_fn)(size_t M, size_t N, size_t K, const float* A, size_t lda,
                                       const float* W, size_t ldw, float* C, size_t ldc);

/* float32 GEMM on one panel of a pre-packed B (src/ops/matmul.c): C[M, n] (ldc)
 * = init + A[M, K] (lda) * P with P = [K][KL_PGEMM_NR] (columns n.. of the panel
 * zero, n <= KL_PGEMM_NR); init: n start values, or NULL to add to C (C += A P:
 * a later block of K). Each element is one fused multiply-add per k in k order,
 * from init or from zero, then added to C: every ISA gives the same bits. A block
 * summed from zero and then added keeps each rounding chain to one block, which
 * is more accurate than continuing from C. */
#define KL_PGEMM_NR 32
typedef void (*kl_f32_pgemm_ukernel_fn)(size_t M, size_t n, size_t K, const float* A, size_t lda,
                                        const float* P, const float* init, float* C, size_t ldc);
/* B packed for the kernels: P[ceil(N / 32)][K][32], P[p][k][j] = B[k][32 p + j],
 * zeros past N (packed by the TVM lowering, kokoro_lstm.tvm._dense.pack_panels,
 * and by inproj.c for W_ih). */
/* C[m, 32 p0 .. min(32 p1, N)) (ldc) = init + A[m, K] (lda) op(B) for the panels
 * [p0, p1) of a packed B; init: bias (N values of stride sbias) or zeros; K in
 * blocks of KL_PGEMM_KC (a panel's block, 32 KiB, stays in L1 for all m rows),
 * the first from init, the others added to C; accumulate: every block is added
 * to C (C += A op(B); bias unused). */
#define KL_PGEMM_KC 256
void kl_pgemm_panels(kl_f32_pgemm_ukernel_fn kern, int64_t m, int64_t N, int64_t K,
                     const float* A, int64_t lda, const float* P, const float* bias, int64_t sbias,
                     float* C, int64_t ldc, int64_t p0, int64_t p1, int accumulate);

typedef struct kl_kernels {
  kl_lstmcell_ukernel_fn cell;
  /* for calls of at least KL_CELL_BATCH_MIN rows when it differs from cell
   * (AMX tiles), else NULL; chosen per call, so never by thread count */
  kl_lstmcell_ukernel_fn cell_batch;
  kl_lstmproj_ukernel_fn proj;
  kl_bf16_gemm_ukernel_fn gemm; /* NULL: the input projection uses BLAS sgemm/dgemm */
  kl_f32_gemm_ukernel_fn gemm_f32; /* float32 W_ih, fewer than KL_F32_GEMM_MAX_M rows, or NULL */
  /* float32: the first vector entry of f32-pgemm.inc the level allows, else NULL
   * (the scalar entry is no match for OpenBLAS) */
  kl_f32_pgemm_ukernel_fn pgemm;
  kl_f32_to_bf16_pairs_fn to_bf16;
  /* float32 with AMX: the six-product GEMM and its packers, else NULL */
  kl_f32_x6gemm_ukernel_fn x6gemm;
  kl_f32_x6pack_a_fn x6pack_a;
  kl_f32_x6pack_w_fn x6pack_w;
} kl_kernels;

/* AMX tiles pay for the recurrence only with several rows per tile product. */
#define KL_CELL_BATCH_MIN 4

/* Weight types of the packed recurrent panels. */
typedef enum kl_wtype { KL_W_F32 = 0, KL_W_F64 = 1, KL_W_BF16 = 2, KL_W_F16 = 3 } kl_wtype;

/* Picks the kernels for a weight type under the active ISA. */
kl_kernels kl_select_kernels(kl_wtype wt);
/* The active ISA's float32 activations. */
kl_f32_vunary_fn kl_select_vsigmoid(void);
kl_f32_vunary_fn kl_select_vtanh(void);
kl_f32_vunary_fn kl_select_vgelu(void);
kl_f32_vsnake_fn kl_select_vsnake(void);
kl_f32_rmoments_fn kl_select_rmoments(void);
/* The active ISA's read-bandwidth probe (sum of n floats). */
typedef float (*kl_f32_rsum_fn)(size_t n, const float* x);
kl_f32_rsum_fn kl_select_rsum(void);

/* The bytes a DLTensor of esz-byte elements may touch, [*lo, *hi), from its shape
 * and strides (dimensions of size 1 do not move); 0 when it is empty, else 1. A
 * span that overflows gives the whole address space, which overlaps everything.
 * Outputs are checked against inputs with it (call.c, src/ops/check.c). */
static inline int kl_dl_extent(const DLTensor* t, int64_t esz, uintptr_t* lo, uintptr_t* hi) {
  int64_t a = 0, b = 0, compact = 1;
  int ovf = 0;
  for (int i = t->ndim - 1; i >= 0; i--) {
    const int64_t n = t->shape[i], s = t->strides ? t->strides[i] : compact;
    if (n == 0) return 0;
    ovf |= n < 0 || __builtin_mul_overflow(compact, n, &compact);
    if (n == 1) continue;
    int64_t span;
    ovf |= __builtin_mul_overflow(n - 1, s, &span);
    ovf |= span < 0 ? __builtin_add_overflow(a, span, &a) : __builtin_add_overflow(b, span, &b);
  }
  int64_t lo_b, hi_b;
  ovf |= __builtin_mul_overflow(a, esz, &lo_b) | __builtin_add_overflow(b, 1, &b) |
         __builtin_mul_overflow(b, esz, &hi_b);
  const uintptr_t base = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
  if (ovf || lo_b == INT64_MIN || (uintptr_t)-lo_b > base || (uintptr_t)hi_b > UINTPTR_MAX - base) {
    *lo = 0;
    *hi = UINTPTR_MAX;
    return 1;
  }
  *lo = base - (uintptr_t)-lo_b;
  *hi = base + (uintptr_t)hi_b;
  return 1;
}

/* 128-bit fingerprint of strided rows of bytes (the weight cache's staleness
 * check; fingerprint.c). Deterministic: independent of the thread count. */
typedef struct kl_region {
  const void* p;
  int64_t rows, row_bytes, stride_bytes;
} kl_region;
typedef struct kl_fp128 { uint64_t lo, hi; } kl_fp128;
kl_status kl_fingerprint(const kl_region* regions, int n, int nth, kl_fp128* result);
/* The same fingerprint, taken of a copy: region k's rows are copied back to back
 * into copy (kl_fingerprint_bytes of them), after region k-1's, and the copy's
 * bytes are the ones digested. */
kl_status kl_fingerprint_copy(const kl_region* regions, int n, int nth, void* copy, kl_fp128* result);
size_t kl_fingerprint_bytes(const kl_region* regions, int n);
/* The fingerprint kernel: folds n bytes (n % 32 == 0) into acc[8]. */
typedef void (*kl_fp_ukernel_fn)(const void* p, size_t n, uint64_t* acc);
kl_fp_ukernel_fn kl_select_fp(void);
/* The active level's row softmax (src/ops/softmax.c). */
kl_f32_vunary_fn kl_select_softmax(void);
/* The active level's pre-packed-panel GEMM (src/ops/matmul.c). */
kl_f32_pgemm_ukernel_fn kl_select_f32_pgemm(void);

/* ---- thread pool (threadpool.c) ---- */
typedef void (*kl_task_fn)(void* ctx, int ith, int nth);
/* Runs fn(ctx, i, nth) for i in [0, nth) on the persistent pool; the caller
 * runs i == 0. Returns KL_ERR_THREAD if workers could not be started. */
#define KL_MAX_THREADS 512 /* kl_pool_run clamps nth to it; < 1024: nth travels in the low bits of gen */
kl_status kl_pool_run(int nth, kl_task_fn fn, void* ctx);
/* The next of ntasks tasks handed out dynamically by the counter *next, or -1 when
 * none is left (the dense ops' pool tasks). */
static inline int64_t kl_take_task(atomic_llong* next, int64_t ntasks) {
  const int64_t t = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
  return t < ntasks ? t : -1;
}
/* n in 1..kl_max_threads(): every count that enters the engine (an argument,
 * the default, a config value) is capped with it once, where it enters, before
 * any plan is made from it; kl_pool_run runs the count it is given. */
int kl_threads_cap(int n);

/* Barrier for a fixed group of n threads, each with its own index i < n: a
 * member announces its arrival in its own cache line (slot i) and waits until
 * every slot has arrived as often, so no line is fought over by read-modify-
 * writes. Spins briefly, then sleeps (futex on Linux), so a descheduled member
 * costs its group the wait and not a core each. */
typedef struct kl_barrier_slot {
  _Alignas(64) atomic_uint arrived;
} kl_barrier_slot;
typedef struct kl_barrier {
  _Alignas(64) atomic_int sleepers;
  atomic_int wake;
  int n;
  kl_barrier_slot* slot; /* n slots, the caller's memory */
} kl_barrier;
void kl_barrier_init(kl_barrier* b, int n, kl_barrier_slot* slots);
void kl_barrier_wait(kl_barrier* b, int i);


/* ---- kernels: declared by their lists (src/kernels/<op>.inc) ---- */
#if defined(__x86_64__) || defined(_M_X64)
#define KL_HAVE_X86 1
#elif defined(__aarch64__) || defined(_M_ARM64)
#define KL_HAVE_NEON 1
#endif

/* CPU features a kernel needs: the first argument of each list line, named as
 * the kernel file suffixes (avx2fma, avx512amx, ...). cpu.c detects them once;
 * an ISA level (kl_isa) allows a subset of them. */
#define KL_ARCH_AVX2FMA 0x01u    /* AVX2 + FMA */
#define KL_ARCH_F16C 0x02u       /* half <-> float conversion (vcvtph2ps) */
#define KL_ARCH_AVX512F 0x04u
#define KL_ARCH_AVX512BF16 0x08u /* AVX512_BF16 (vdpbf16ps) */
#define KL_ARCH_NEON 0x10u       /* AArch64 Advanced SIMD (FCVTL half conversion included) */
#define KL_ARCH_NEONBF16 0x20u   /* FEAT_BF16 (BFDOT) */
#define KL_ARCH_AVX512AMX 0x40u  /* AMX-TILE + AMX-BF16 (tdpbf16ps), and the OS lets us use them */
/* Not a CPU feature: float16 single rows widened 8 halves at a time are chosen
 * for this process (kl_f16_narrow_rows); the dispatch adds it for float16. */
#define KL_ARCH_F16_NARROW 0x80u
int64_t kl_now_ns(void); /* CLOCK_MONOTONIC in ns (threadpool.c) */
unsigned kl_arch_detected(void); /* the features of this CPU (and build) */
unsigned kl_arch_active(void);   /* those the active ISA level allows */

#define KL_KERNEL(arch, wt, isa, fn) \
  void fn(size_t, size_t, size_t, size_t, const void*, const void*, size_t, const kl_cell_row*);
#include "lstmcell.inc"
#undef KL_KERNEL
#define KL_KERNEL(arch, wt, isa, fn) \
  void fn(size_t, size_t, size_t, const void*, size_t, const void* const*, void* const*);
#include "lstmproj.inc"
#undef KL_KERNEL
#define KL_KERNEL(arch, wt, isa, fn) void fn(size_t, const float*, float*);
#include "f32-vsigmoid.inc"
#include "f32-vtanh.inc"
#include "f32-vgelu.inc"
#include "f32-softmax.inc"
#undef KL_KERNEL
#define KL_KERNEL(arch, wt, isa, fn) \
  void fn(size_t, const float*, float, float, float, float, float, float*);
#include "f32-vsnake.inc"
#undef KL_KERNEL
#define KL_KERNEL(arch, wt, isa, fn) void fn(size_t, const float*, double*, double*);
#include "f32-rmoments.inc"
#undef KL_KERNEL
#define KL_KERNEL(arch, wt, isa, fn) float fn(size_t, const float*);
#include "f32-rsum.inc"
#undef KL_KERNEL
#define KL_KERNEL(arch, wt, isa, fn) void fn(const void*, size_t, uint64_t*);
#include "u64-fingerprint.inc"
#undef KL_KERNEL
#define KL_KERNEL(arch, wt, isa, fn) \
  void fn(size_t, size_t, size_t, const float*, size_t, const float*, size_t, float*, size_t);
#include "f32-gemm.inc"
#undef KL_KERNEL
#define KL_KERNEL(arch, wt, isa, fn)                                                         \
  void fn(size_t, size_t, size_t, const float*, size_t, const float*, const float*, float*, size_t);
#include "f32-pgemm.inc"
#undef KL_KERNEL
#define KL_GEMM(arch, wt, isa, gemm, pack)                                                  \
  void gemm(size_t, size_t, size_t, const uint32_t*, const uint16_t*, float*, size_t);      \
  void pack(size_t, size_t, const float*, size_t, uint32_t*);
#include "bf16-gemm.inc"
#undef KL_GEMM
#define KL_X6GEMM(arch, isa, gemm, pack_a, pack_w)                                                 \
  void gemm(size_t, size_t, size_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, size_t); \
  int pack_a(size_t, size_t, const float*, size_t, size_t, size_t, uint8_t*, size_t);               \
  int pack_w(size_t, const float* const*, size_t, size_t, uint8_t*, size_t);
#include "f32-x6gemm.inc"
#undef KL_X6GEMM

/* The lists as tables (cpu.c), each named after its .inc (f32-vtanh.inc:
 * kl_f32_vtanh_list), in list order, for the dispatch, the tests and the benchmarks. */
#define KL_KERNEL_ENTRY(fn_type)                                                           \
  struct {                                                                                 \
    unsigned arch;    /* KL_ARCH_* it needs */                                             \
    kl_wtype wt;      /* the weight (or data) type it serves */                            \
    const char* isa;  /* its file suffix: avx512f, neon, scalar, ... */                    \
    const char* name; /* the function's name */                                            \
    fn_type fn;                                                                            \
  }
typedef KL_KERNEL_ENTRY(kl_lstmcell_ukernel_fn) kl_lstmcell_entry;
typedef KL_KERNEL_ENTRY(kl_lstmproj_ukernel_fn) kl_lstmproj_entry;
typedef KL_KERNEL_ENTRY(kl_f32_vunary_fn) kl_vunary_entry;
typedef KL_KERNEL_ENTRY(kl_f32_vsnake_fn) kl_vsnake_entry;
typedef KL_KERNEL_ENTRY(kl_f32_rmoments_fn) kl_rmoments_entry;
typedef KL_KERNEL_ENTRY(kl_f32_rsum_fn) kl_rsum_entry;
typedef KL_KERNEL_ENTRY(kl_fp_ukernel_fn) kl_fp_entry;
typedef KL_KERNEL_ENTRY(kl_f32_gemm_ukernel_fn) kl_f32_gemm_entry;
typedef KL_KERNEL_ENTRY(kl_f32_pgemm_ukernel_fn) kl_f32_pgemm_entry;
typedef struct kl_gemm_entry {
  unsigned arch;
  kl_wtype wt;
  const char* isa;
  const char* name;
  kl_bf16_gemm_ukernel_fn gemm;
  kl_f32_to_bf16_pairs_fn pack;
} kl_gemm_entry;
typedef struct kl_x6gemm_entry {
  unsigned arch;
  const char* isa;
  const char* name;
  kl_f32_x6gemm_ukernel_fn gemm;
  kl_f32_x6pack_a_fn pack_a;
  kl_f32_x6pack_w_fn pack_w;
} kl_x6gemm_entry;
extern const kl_lstmcell_entry kl_lstmcell_list[];
extern const kl_lstmproj_entry kl_lstmproj_list[];
extern const kl_vunary_entry kl_f32_vsigmoid_list[], kl_f32_vtanh_list[], kl_f32_vgelu_list[],
    kl_f32_softmax_list[];
extern const kl_vsnake_entry kl_f32_vsnake_list[];
extern const kl_rmoments_entry kl_f32_rmoments_list[];
extern const kl_rsum_entry kl_f32_rsum_list[];
extern const kl_fp_entry kl_u64_fingerprint_list[];
extern const kl_gemm_entry kl_bf16_gemm_list[];
extern const kl_x6gemm_entry kl_f32_x6gemm_list[];
extern const kl_f32_gemm_entry kl_f32_gemm_list[];
extern const kl_f32_pgemm_entry kl_f32_pgemm_list[];
extern const size_t kl_lstmcell_count, kl_lstmproj_count, kl_f32_vsigmoid_count, kl_f32_vtanh_count,
    kl_f32_vgelu_count, kl_f32_vsnake_count, kl_f32_rmoments_count, kl_f32_rsum_count,
    kl_u64_fingerprint_count, kl_f32_softmax_count, kl_bf16_gemm_count, kl_f32_gemm_count,
    kl_f32_pgemm_count, kl_f32_x6gemm_count;

/* bfloat16 helpers (round to nearest even; NaN stays NaN). */
static inline uint16_t kl_f32_to_bf16(float f) {
  union { float f; uint32_t u; } v = {f};
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);
  v.u += 0x7fffu + ((v.u >> 16) & 1u);
  return (uint16_t)(v.u >> 16);
}
static inline float kl_bf16_to_f32(uint16_t h) {
  union { uint32_t u; float f; } v = {(uint32_t)h << 16};
  return v.f;
}

/* IEEE half helpers, portable (the SIMD kernels convert with vcvtph2ps / FCVTL,
 * which give the same floats). float -> half rounds to nearest even; beyond
 * the half range (|x| >= 65520) gives +-inf, NaN a quiet NaN; below 2^-14 it
 * rounds to a subnormal half (F. Giesen's float_to_half_fast3_rtne). */
static inline uint16_t kl_f32_to_f16(float f) {
  union { float f; uint32_t u; } v = {f}, magic = {0.5f}; /* 0.5f: (127 - 1) << 23 */
  const uint32_t sign = v.u & 0x80000000u;
  uint32_t o;
  v.u ^= sign;
  if (v.u >= (127u + 16u) << 23) { /* >= 65536, inf or NaN */
    o = v.u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (v.u < 113u << 23) { /* below 2^-14: a subnormal half or zero */
    v.f += magic.f;
    o = v.u - magic.u;
  } else {
    const uint32_t mant_odd = (v.u >> 13) & 1u;
    v.u += 0xc8000fffu + mant_odd; /* ((15 - 127) << 23) + 0xfff, mod 2^32 */
    o = v.u >> 13;
  }
  return (uint16_t)(o | (sign >> 16));
}
static inline float kl_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  union { uint32_t u; float f; } v;
  if (e == 0x1fu) {
    v.u = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) { /* zero or subnormal: m * 2^-24, exact */
    v.f = (float)m * 5.9604644775390625e-8f;
    v.u |= sign;
  } else {
    v.u = sign | ((e + 112u) << 23) | (m << 13);
  }
  return v.f;
}

#endif
