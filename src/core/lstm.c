/* LSTM engine: weight packing and the per-layer run.
 *
 * Per layer: (1) one BLAS GEMM computes the input gates of every timestep and
 * both directions, G[T*B, D*4*Hp] = X W_ih^T; (2) the thread pool runs the
 * recurrence, one fused cell kernel per step (W_hh h + G + bias -> gates ->
 * c, h), directions in parallel, and within a direction either hidden-unit
 * blocks (small B, a spin barrier per step) or batch elements (large B) split
 * across threads. Every output element is computed by the same instruction
 * sequence whatever the thread count, so results are bitwise reproducible.
 *
 * Packed layouts (Hp = round_up(H, 16), Pp = round_up(P, 16)):
 *   W_ih  [D*4*Hp, I] io type, row d*4*Hp + g*Hp + u (zero rows for u >= H);
 *         not held at all when borrowed (kl_lstm_pack): the GEMM then reads the
 *         caller's W_ih in place on every run, gate block by gate block
 *   W_hh  f32/f64/f16: [(blk*R + k)*64 + g*16 + lane];  bf16: see bf16-lstmcell-scalar.c
 *   W_hr  f32/f64/f16: [(blk*H + j)*16 + lane];         bf16: see bf16-lstmcell-scalar.c
 *   bias  [4*Hp] = b_ih + b_hh
 *   W_ih as bfloat16 (dtype bfloat16 with AVX512_BF16): 64-column panels, see
 *         bf16-gemm-avx512bf16.c; the layer input is rounded to bfloat16 pairs per run
 *   W_ih in float32 panels (KL_PACK_WIH_PANELS, weights that cannot change behind
 *         the object): 32-column panels over the D*4*Hp gate columns, the layout of
 *         internal.h's KL_PGEMM_NR, besides the borrowed or packed W_ih above
 */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "internal.h"
#include "threads.h"

typedef struct kl_layer {
  size_t in_size; /* input features of this layer */
  void* w_ih;     /* packed, io type */
  uint16_t* w_ih_bf16; /* 64-column bfloat16 panels of w_ih, when kernels.gemm */
  float* w_ih_pan;     /* float32 W_ih in 32-column panels over all D*4*Hp gate
                          columns (internal.h's panel layout), with KL_PACK_WIH_PANELS */
  void* w_hh[2];  /* panels, weight type */
  void* bias[2];  /* io type */
  void* w_hr[2];  /* panels, weight type, or NULL */
} kl_layer;

struct kl_lstm {
  kl_lstm_desc desc;
  int D;
  size_t H, Hp, R, Rs, P, Pp;
  size_t esz;  /* io element size */
  size_t wesz; /* panel element size */
  kl_wtype wt;
  kl_kernels k;
  int borrowed; /* W_ih is read from the caller's memory on every run */
  size_t bytes; /* held by the packed weights */
  kl_layer* layers;
};

const char* kl_status_str(kl_status s) {
  switch (s) {
    case KL_OK: return "ok";
    case KL_ERR_ARG: return "invalid argument";
    case KL_ERR_NOMEM: return "out of memory";
    case KL_ERR_THREAD: return "could not start a thread";
    case KL_ERR_INTERRUPTED: return "interrupted";
    case KL_ERR_DEVICE: return "CUDA failure";
  }
  return "unknown status";
}

size_t kl_dtype_io_size(kl_dtype dt) { return dt == KL_F64 ? sizeof(double) : sizeof(float); }

const char* kl_blas_name(void) { return KL_BLAS_NAME; }

const kl_lstm_desc* kl_lstm_get_desc(const kl_lstm* m) { return &m->desc; }

static void* xalloc(size_t bytes) {
  if (bytes == 0) bytes = 64;
  void* p = aligned_alloc(64, kl_round_up(bytes, 64));
  if (p) memset(p, 0, kl_round_up(bytes, 64));
  return p;
}

/* xalloc, counted in m->bytes. */
static void* malloc_packed(kl_lstm* m, size_t bytes) {
  m->bytes += kl_round_up(bytes ? bytes : 64, 64);
  return xalloc(bytes);
}

size_t kl_lstm_packed_bytes(const kl_lstm* m) { return m->bytes; }

/* Reads element i of an io-typed array as double (packing is not hot). */
static double ld(const void* a, size_t i, size_t esz) {
  return esz == sizeof(double) ? ((const double*)a)[i] : (double)((const float*)a)[i];
}
static void st(void* a, size_t i, double v, size_t esz) {
  if (esz == sizeof(double)) ((double*)a)[i] = v;
  else ((float*)a)[i] = (float)v;
}
/* Copies element i of an io-typed array into a weight-typed panel slot. */
static void pack_one(void* dst, size_t di, kl_wtype wt, const void* src, size_t si) {
  switch (wt) {
    case KL_W_F64: ((double*)dst)[di] = ((const double*)src)[si]; break;
    case KL_W_BF16: ((uint16_t*)dst)[di] = kl_f32_to_bf16(((const float*)src)[si]); break;
    case KL_W_F16: ((uint16_t*)dst)[di] = kl_f32_to_f16(((const float*)src)[si]); break;
    default: ((float*)dst)[di] = ((const float*)src)[si]; break;
  }
}

/* W_hh [4H, R] (row stride ld) -> panels. */
static void* pack_whh(kl_lstm* m, const void* w, size_t ld) {
  const size_t H = m->H, R = m->R, nblk = m->Hp / KL_NR;
  if (m->wt == KL_W_BF16) {
    const size_t npair = (R + 1) / 2;
    uint16_t* p = malloc_packed(m, nblk * npair * 128 * sizeof(uint16_t));
    if (!p) return NULL;
    for (size_t blk = 0; blk < nblk; blk++)
      for (size_t k = 0; k < R; k++)
        for (size_t g = 0; g < 4; g++)
          for (size_t l = 0; l < KL_NR; l++) {
            const size_t u = blk * KL_NR + l;
            if (u < H)
              pack_one(p, ((blk * npair + k / 2) * 4 + g) * 32 + l * 2 + (k & 1), m->wt, w,
                       (g * H + u) * ld + k);
          }
    return p;
  }
  void* p = malloc_packed(m, nblk * R * 64 * m->wesz);
  if (!p) return NULL;
  for (size_t blk = 0; blk < nblk; blk++)
    for (size_t k = 0; k < R; k++)
      for (size_t g = 0; g < 4; g++)
        for (size_t l = 0; l < KL_NR; l++) {
          const size_t u = blk * KL_NR + l;
          if (u < H) pack_one(p, (blk * R + k) * 64 + g * 16 + l, m->wt, w, (g * H + u) * ld + k);
        }
  return p;
}

/* W_hr [P, H] (row stride ld) -> panels. */
static void* pack_whr(kl_lstm* m, const void* w, size_t ld) {
  const size_t H = m->H, P = m->P, nblk = m->Pp / KL_NR;
  if (m->wt == KL_W_BF16) {
    const size_t npair = (H + 1) / 2;
    uint16_t* p = malloc_packed(m, nblk * npair * 32 * sizeof(uint16_t));
    if (!p) return NULL;
    for (size_t blk = 0; blk < nblk; blk++)
      for (size_t j = 0; j < H; j++)
        for (size_t l = 0; l < KL_NR && blk * KL_NR + l < P; l++)
          pack_one(p, (blk * npair + j / 2) * 32 + l * 2 + (j & 1), m->wt, w,
                   (blk * KL_NR + l) * ld + j);
    return p;
  }
  void* p = malloc_packed(m, nblk * H * 16 * m->wesz);
  if (!p) return NULL;
  for (size_t blk = 0; blk < nblk; blk++)
    for (size_t j = 0; j < H; j++)
      for (size_t l = 0; l < KL_NR && blk * KL_NR + l < P; l++)
        pack_one(p, (blk * H + j) * 16 + l, m->wt, w, (blk * KL_NR + l) * ld + j);
  return p;
}

void kl_lstm_free(kl_lstm* m) {
  if (!m) return;
  if (m->layers) {
    for (int l = 0; l < m->desc.num_layers; l++) {
      kl_layer* L = &m->layers[l];
      free(L->w_ih);
      free(L->w_ih_bf16);
      free(L->w_ih_pan);
      for (int d = 0; d < 2; d++) {
        free(L->w_hh[d]);
        free(L->bias[d]);
        free(L->w_hr[d]);
      }
    }
    free(m->layers);
  }
  free(m);
}

static int desc_ok(const kl_lstm_desc* desc) {
  return desc->input_size >= 1 && desc->hidden_size >= 1 && desc->num_layers >= 1 &&
         (desc->bidirectional == 0 || desc->bidirectional == 1) && desc->proj_size >= 0 &&
         desc->proj_size < desc->hidden_size && desc->dtype >= KL_F32 && desc->dtype <= KL_F16 &&
         !(desc->reverse && desc->bidirectional);
}

static kl_wtype weight_type(kl_dtype dt) {
  return dt == KL_F64 ? KL_W_F64 : dt == KL_BF16 ? KL_W_BF16 : dt == KL_F16 ? KL_W_F16 : KL_W_F32;
}

int kl_lstm_can_borrow_wih(const kl_lstm_desc* desc) {
  return kl_select_kernels(weight_type(desc->dtype)).gemm == NULL;
}

kl_status kl_lstm_create(const kl_lstm_desc* desc, const kl_weights* weights, kl_lstm** out) {
  if (!desc || !weights || !out) return KL_ERR_ARG;
  *out = NULL;
  if (!desc_ok(desc)) return KL_ERR_ARG; /* before sizing the array below */
  const int D = desc->bidirectional ? 2 : 1, n = desc->num_layers * D;
  const int64_t R = desc->proj_size ? desc->proj_size : desc->hidden_size;
  kl_wsrc* w = calloc((size_t)n, sizeof(kl_wsrc));
  if (!w) return KL_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    w[i] = (kl_wsrc){weights[i].w_ih, weights[i].w_hh, weights[i].b_ih, weights[i].b_hh,
                     weights[i].w_hr, i < D ? desc->input_size : D * R, R, desc->hidden_size, 1, 1};
  }
  kl_status s = kl_lstm_pack(desc, w, 0, out);
  free(w);
  return s;
}

kl_status kl_lstm_pack(const kl_lstm_desc* desc, const kl_wsrc* weights, int flags,
                       kl_lstm** out) {
  if (!desc || !weights || !out) return KL_ERR_ARG;
  *out = NULL;
  if (!desc_ok(desc)) return KL_ERR_ARG;
  const int D = desc->bidirectional ? 2 : 1;
  for (int i = 0; i < desc->num_layers * D; i++) {
    if (!weights[i].w_ih || !weights[i].w_hh) return KL_ERR_ARG;
    if ((weights[i].w_hr != NULL) != (desc->proj_size > 0)) return KL_ERR_ARG;
  }
  kl_lstm* m = calloc(1, sizeof(*m));
  if (!m) return KL_ERR_NOMEM;
  m->desc = *desc;
  m->D = D;
  m->H = (size_t)desc->hidden_size;
  m->Hp = kl_round_up(m->H, KL_NR);
  m->P = (size_t)desc->proj_size;
  m->Pp = kl_round_up(m->P, KL_NR);
  m->R = m->P ? m->P : m->H;
  m->Rs = kl_round_up(m->R, KL_NR);
  m->esz = kl_dtype_io_size(desc->dtype);
  m->wt = weight_type(desc->dtype);
  m->wesz = m->wt == KL_W_F64 ? 8 : (m->wt == KL_W_BF16 || m->wt == KL_W_F16) ? 2 : 4;
  m->k = kl_select_kernels(m->wt);
  m->borrowed = (flags & KL_PACK_BORROW_WIH) && m->k.gemm == NULL;
  const int panels = (flags & KL_PACK_WIH_PANELS) && m->k.pgemm && !m->k.gemm; /* float32 W_ih */
  m->layers = calloc((size_t)desc->num_layers, sizeof(kl_layer));
  if (!m->layers) goto nomem;
  const size_t H = m->H, Hp = m->Hp;
  for (int l = 0; l < desc->num_layers; l++) {
    kl_layer* L = &m->layers[l];
    L->in_size = l == 0 ? (size_t)desc->input_size : (size_t)D * m->R;
    if (!m->borrowed) {
      L->w_ih = malloc_packed(m, (size_t)D * 4 * Hp * L->in_size * m->esz);
      if (!L->w_ih) goto nomem;
    }
    if (panels) { /* D*4*Hp is a multiple of 32: whole panels; zeroed (padding units) */
      L->w_ih_pan = malloc_packed(m, (size_t)D * 4 * Hp * L->in_size * sizeof(float));
      if (!L->w_ih_pan) goto nomem;
    }
    if (m->k.gemm) {
      const size_t Kp = (L->in_size + 1) / 2, N = (size_t)D * 4 * Hp;
      L->w_ih_bf16 = malloc_packed(m, N * Kp * 2 * sizeof(uint16_t));
      if (!L->w_ih_bf16) goto nomem;
    }
    for (int d = 0; d < D; d++) {
      const kl_wsrc* w = &weights[l * D + d];
      const size_t ld_ih = (size_t)w->ld_ih;
      if (L->w_ih)
        for (size_t g = 0; g < 4; g++)
          for (size_t u = 0; u < H; u++)
            memcpy((char*)L->w_ih + (((size_t)d * 4 * Hp + g * Hp + u) * L->in_size) * m->esz,
                   (const char*)w->w_ih + ((g * H + u) * ld_ih) * m->esz, L->in_size * m->esz);
      L->bias[d] = malloc_packed(m, 4 * Hp * m->esz);
      if (!L->bias[d]) goto nomem;
      for (size_t g = 0; g < 4; g++)
        for (size_t u = 0; u < H; u++) {
          const double bi = w->b_ih ? ld(w->b_ih, (g * H + u) * (size_t)w->s_bi, m->esz) : 0.0;
          const double bh = w->b_hh ? ld(w->b_hh, (g * H + u) * (size_t)w->s_bh, m->esz) : 0.0;
          st(L->bias[d], g * Hp + u, bi + bh, m->esz);
        }
      if (L->w_ih_pan) /* row n = d*4Hp + g*Hp + u of w_ih -> panel column n */
        for (size_t g = 0; g < 4; g++)
          for (size_t u = 0; u < H; u++) {
            const size_t n = (size_t)d * 4 * Hp + g * Hp + u;
            const float* row = (const float*)w->w_ih + (g * H + u) * ld_ih;
            float* col = L->w_ih_pan + (n / KL_PGEMM_NR) * L->in_size * KL_PGEMM_NR + n % KL_PGEMM_NR;
            for (size_t k = 0; k < L->in_size; k++) col[k * KL_PGEMM_NR] = row[k];
          }
      if (L->w_ih_bf16) { /* row n = d*4Hp + g*Hp + u of w_ih -> panel column n */
        const size_t Kp = (L->in_size + 1) / 2;
        for (size_t g = 0; g < 4; g++)
          for (size_t u = 0; u < H; u++) {
            const size_t n = (size_t)d * 4 * Hp + g * Hp + u;
            const float* row = (const float*)w->w_ih + (g * H + u) * ld_ih;
            for (size_t k = 0; k < L->in_size; k++)
              L->w_ih_bf16[(((n / 64) * Kp + k / 2) * 4 + (n % 64) / 16) * 32 + (n % 16) * 2 + (k & 1)] =
                  kl_f32_to_bf16(row[k]);
          }
      }
      L->w_hh[d] = pack_whh(m, w->w_hh, (size_t)w->ld_hh);
      if (!L->w_hh[d]) goto nomem;
      if (m->P) {
        L->w_hr[d] = pack_whr(m, w->w_hr, (size_t)w->ld_hr);
        if (!L->w_hr[d]) goto nomem;
      }
    }
  }
  *out = m;
  return KL_OK;
nomem:
  kl_lstm_free(m);
  return KL_ERR_NOMEM;
}

/* ---- run ---------------------------------------------------------------- */

typedef struct run_ctx {
  const kl_lstm* m;
  const kl_layer* L;
  const kl_wih_view* wv; /* [D]: this layer's W_ih, as the GEMM reads it */
  int64_t T, B;
  const int64_t* len; /* [B] */
  const int32_t* ord; /* [B], batch indices by decreasing length */
  /* layer input rows: row (t, b) = t*gt + b*gb, row stride lda */
  const char* in;
  int64_t lda;
  uint32_t* xb; /* the input rows in bfloat16 pairs [T*B][Kp], bf16 GEMM only */
  /* float32 input projection on AMX tiles (x6, this layer): its operands split
   * into bfloat16 (3 splits of sa / sw bytes at x6a / x6w), W_ih's columns as
   * rows (x6rows[n], NULL for padding units); x6_bad: some value could not be
   * split, the layer takes the float32 path */
  int x6;
  uint8_t *x6a, *x6w;
  size_t x6_sa, x6_sw;
  const float** x6rows;
  atomic_int* x6_bad;
  /* input gates: read at G (row stride ldg); computed into Gw by input_gates,
   * or, for a layer 0 whose gates the caller gave as they are, read from x
   * itself (Gw NULL) */
  const char* G;
  char* Gw;
  size_t ldg;
  int in_gates;          /* this layer's input rows are its gates (x_gates, layer 0) */
  const char* gate_bias; /* [D][B][4H] added to this layer's gates, or NULL */
  int64_t gt, gb; /* row of (t, b) = t*gt + b*gb */
  /* layer output */
  char* out;
  int64_t out_st, out_sb;
  /* per-direction state, io type */
  char* hbuf[2];  /* [2][B][Rs] */
  char* c[2];     /* [B][Hp] */
  char* hfull[2]; /* [B][Hp], projection only */
  kl_barrier* bar;  /* [D][cg] per-step barrier of each (direction, chunk group) */
  kl_barrier* gbar; /* all threads, after the input GEMM */
  /* per-thread scratch */
  kl_cell_row* rows;   /* [nth][B] */
  const void** ptrs;   /* [nth][3B] */
  int32_t* mine;       /* [nth][B] */
  /* stopping early (kl_run_args.interrupt): the caller's thread asks the
   * callback and sets stop; each chunk group's unit thread 0 copies stop to
   * gstop[its barrier] before the step's last barrier, so that all its
   * threads leave after the same step (a thread that left alone would leave
   * the others waiting at the next barrier) */
  int (*interrupt)(void*);
  void* interrupt_ctx;
  pthread_t caller;
  atomic_int* stop;
  int* gstop; /* [D][cg] */
} run_ctx;

/* One single-threaded BLAS call: C[M, N] (ldc) = A[M, K] (lda) * B[N, K]^T (ldb). */
static void gemm(const kl_lstm* m, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
                 const void* Bm, int64_t ldb, void* C, int64_t ldc) {
  if (m->esz == sizeof(double))
    kl_cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0, A,
                   (int)lda, Bm, (int)ldb, 0.0, C, (int)ldc);
  else
    kl_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, A,
                   (int)lda, Bm, (int)ldb, 0.0f, C, (int)ldc);
}

static void split(size_t n, int i, int p, size_t* lo, size_t* hi) {
  *lo = n * (size_t)i / (size_t)p;
  *hi = n * (size_t)(i + 1) / (size_t)p;
}

/* A direction group of p threads is a grid of cg chunk groups x u unit
 * threads (plan_split): batch elements go in chunks of CHUNK (in
 * decreasing-length order), chunk c to chunk group c % cg, and the u threads of
 * a chunk group split its hidden units, with a barrier per step. The cell
 * kernel computes each element with the same instruction sequence whatever its
 * tile or thread, so results never depend on the thread count. A thread's
 * active rows of all its chunks go to the kernel in one call per step, which
 * loads each 16-unit block of W_hh once for all of them, not once per chunk
 * (same bits; on the Zen 4 level within the noise at B = 16-64, T = 256: paired
 * 0.97-1.02 over 2 x 31 rounds). (A per-step
 * BLAS GEMM for large chunks was measured slower than the register-blocked
 * kernel at every batch size: B=16 51.7 vs 33.4 ms, B=64 252 vs 182 ms,
 * T=128, H=256, 1 thread.) */
#define CHUNK 16
/* Unit splitting runs in lockstep (a barrier per step), so every step waits
 * for the slowest thread of a chunk group. A group of fewer than CHUNK rows
 * (B < CHUNK) uses at most UNIT_SPLIT_SMALL threads. At B = 1, H = 256 a
 * thread's step is streaming its share of W_hh from its L2 (16-core Xeon:
 * 4.0 us for 1/4 of it, 2.2 us for 1/8), so more threads help as long as the
 * barrier stays cheap: with a per-member arrival slot (kl_barrier) and the
 * caller pinned during the job (threadpool.c), 8 threads per direction beat 4
 * (own builds alternated, medians: T = 256 B = 1 1.55-1.68 vs 1.89-2.09 ms,
 * T = 32 0.19-0.22 vs 0.28-0.38, B = 4 4.36-4.63 vs 5.26-5.98). With the
 * shared-counter barrier and a roaming caller 4 had been best, and B = 4 at 8
 * doubled the median (7.4 -> 17.4 ms). A full chunk splits down to one
 * block of KL_NR units per thread: B = 16, 16 threads (8 per direction)
 * 48.1 -> 25.2 ms against dealing whole chunks (where only one thread per
 * direction had work), B = 64 109.8 -> 93.5 ms, B = 16 at 4 threads
 * 72.8 -> 58.6 ms (T = 256, I = 640, H = 256, medians of 21 alternated rounds). */
#define UNIT_SPLIT_SMALL 8
typedef struct split_plan {
  int cg, u; /* chunk groups, unit threads per chunk group; cg * u <= p */
} split_plan;

static split_plan plan_split(int p, int64_t B, size_t Hp) {
  const int64_t nch = (B + CHUNK - 1) / CHUNK;
  split_plan s = {p < nch ? p : (int)nch, 1};
  int64_t u = p / s.cg, umax = (int64_t)(Hp / KL_NR);
  if (B < CHUNK && umax > UNIT_SPLIT_SMALL) umax = UNIT_SPLIT_SMALL;
  if (u > umax) u = umax;
  s.u = u < 1 ? 1 : (int)u;
  return s;
}

/* One step for n active elements: gates, then c and h. W_hh is streamed
 * forwards on even steps and backwards on odd ones, so the panels used last
 * are reused first: at H = 256 the fp32 W_hh (1 MiB) fills a whole L2, and a
 * plain cyclic sweep would miss on every line once the step's other data
 * (gate rows, states) pushes part of it out. */
static void cell_step(const run_ctx* x, int d, int64_t s, size_t n, kl_cell_row* rows,
                      size_t blk0, size_t blk1) {
  const kl_lstm* m = x->m;
  const void *w = x->L->w_hh[d], *bias = x->L->bias[d];
  const kl_lstmcell_ukernel_fn cell =
      m->k.cell_batch && x->B >= KL_CELL_BATCH_MIN ? m->k.cell_batch : m->k.cell;
  if (!(s & 1)) {
    cell(m->R, m->Hp, blk0, blk1, w, bias, n, rows);
    return;
  }
  for (size_t blk = blk1; blk > blk0; blk--) cell(m->R, m->Hp, blk - 1, blk, w, bias, n, rows);
}

static void run_direction(const run_ctx* x, int d, int gi, split_plan sp, int ith) {
  const kl_lstm* m = x->m;
  const size_t esz = m->esz, R = m->R, Rs = m->Rs, Hp = m->Hp;
  const int cgi = gi / sp.u, ui = gi % sp.u, by_units = sp.u > 1;
  if (cgi >= sp.cg) return; /* a leftover thread */
  kl_cell_row* rows = x->rows + (size_t)ith * (size_t)x->B;
  const void** hin = x->ptrs + (size_t)ith * 3 * (size_t)x->B;
  void** hout = (void**)(hin + x->B);
  char** dst = (char**)(hin + 2 * x->B); /* where each active row's h goes in the output */
  int32_t* mine = x->mine + (size_t)ith * (size_t)x->B;
  /* my elements: my chunk group's chunks, each in decreasing-length order */
  int64_t n_mine = 0;
  for (int64_t i = 0; i < x->B; i++)
    if ((i / CHUNK) % sp.cg == cgi) mine[n_mine++] = x->ord[i];
  if (n_mine == 0) return;
  size_t blk0 = 0, blk1 = Hp / KL_NR, pb0 = 0, pb1 = m->Pp / KL_NR;
  if (by_units) {
    split(Hp / KL_NR, ui, sp.u, &blk0, &blk1);
    split(m->Pp / KL_NR, ui, sp.u, &pb0, &pb1);
  }
  /* the slice of h (R values) this thread copies to the output */
  size_t o0 = (m->P ? pb0 : blk0) * KL_NR, o1 = (m->P ? pb1 : blk1) * KL_NR;
  if (o1 > R) o1 = R;
  if (o0 > o1) o0 = o1;
  kl_barrier* bar = &x->bar[(size_t)d * (size_t)sp.cg + (size_t)cgi];
  const int reverse = d == 1 || m->desc.reverse;
  int64_t steps = 0;
  for (int64_t i = 0; i < n_mine; i++)
    if (x->len[mine[i]] > steps) steps = x->len[mine[i]];
  for (int64_t s = 0; s < steps; s++) {
    const int cur = (int)(s & 1), nxt = cur ^ 1;
    size_t nb = 0; /* my rows still running at step s */
    for (int64_t i = 0; i < n_mine; i++) {
      const int64_t b = mine[i];
      if (x->len[b] <= s) continue;
      const int64_t t = reverse ? x->len[b] - 1 - s : s;
      rows[nb].gx = x->G + ((size_t)(t * x->gt + b * x->gb) * x->ldg + (size_t)d * 4 * Hp) * esz;
      rows[nb].h = x->hbuf[d] + ((size_t)cur * (size_t)x->B + (size_t)b) * Rs * esz;
      rows[nb].c = x->c[d] + (size_t)b * Hp * esz;
      char* hn = x->hbuf[d] + ((size_t)nxt * (size_t)x->B + (size_t)b) * Rs * esz;
      rows[nb].h_out = m->P ? x->hfull[d] + (size_t)b * Hp * esz : hn;
      hin[nb] = rows[nb].h_out;
      hout[nb] = hn;
      dst[nb] = x->out + ((size_t)(t * x->out_st + b * x->out_sb) + (size_t)d * R + o0) * esz;
      nb++;
    }
    if (nb) cell_step(x, d, s, nb, rows, blk0, blk1);
    /* The next step's input-gate rows (my units of them) towards L2: G is
     * T*B rows of D*4*Hp (128 MiB at B = 64, T = 256, H = 256), long out of
     * cache, and its rows are B apart, which the hardware prefetchers do not
     * follow. Measured B = 64, 1 thread, I = 16 (recurrence only): 350 -> 330 ms
     * median of alternated rounds on a shared 2-vCPU Xeon; results unchanged. */
    for (int64_t i = 0; i < n_mine; i++) {
      const int64_t b = mine[i];
      if (x->len[b] <= s + 1) continue;
      const int64_t t = reverse ? x->len[b] - 2 - s : s + 1;
      const char* g = x->G + ((size_t)(t * x->gt + b * x->gb) * x->ldg + (size_t)d * 4 * Hp) * esz;
      for (size_t gg = 0; gg < 4; gg++)
        for (size_t o = blk0 * KL_NR * esz; o < blk1 * KL_NR * esz; o += 64)
          __builtin_prefetch(g + gg * Hp * esz + o, 0, 2);
    }
    if (nb == 0) break;
    if (m->P) {
      if (by_units) kl_barrier_wait(bar, ui);
      m->k.proj(m->H, pb0, pb1, x->L->w_hr[d], nb, hin, hout);
    }
    const int poll = s % KL_INTERRUPT_STEPS == KL_INTERRUPT_STEPS - 1;
    if (poll) {
      if (x->interrupt && !atomic_load(x->stop) && pthread_equal(pthread_self(), x->caller) &&
          x->interrupt(x->interrupt_ctx))
        atomic_store(x->stop, 1);
      if (ui == 0) x->gstop[bar - x->bar] = atomic_load(x->stop);
    }
    if (by_units) kl_barrier_wait(bar, ui);
    for (size_t i = 0; i < nb; i++) memcpy(dst[i], (const char*)hout[i] + o0 * esz, (o1 - o0) * esz);
    if (poll && x->gstop[bar - x->bar]) break; /* read after the barrier: the same for all */
  }
}

static void input_gates(const run_ctx* x, int ith, int nth);

/* Threads per direction for the recurrence: all of them, split by plan_split. */
static int threads_per_direction(int nth, int D) { return nth >= D ? nth / D : 1; }

/* One layer on the pool: all threads compute the input gates, then each
 * direction group runs its recurrence (leftover threads are done). */
static void layer_task(void* ctx, int ith, int nth) {
  const run_ctx* x = ctx;
  const int D = x->m->D;
  if (x->m->k.gemm && !x->in_gates) { /* bfloat16 input projection: round this thread's rows first */
    const size_t M = (size_t)(x->T * x->B), K = x->L->in_size, Kp = (K + 1) / 2;
    size_t r0, r1;
    split(M, ith, nth, &r0, &r1);
    if (r1 > r0)
      x->m->k.to_bf16(r1 - r0, K, (const float*)x->in + r0 * (size_t)x->lda, (size_t)x->lda,
                      x->xb + r0 * Kp);
    if (nth > 1) kl_barrier_wait(x->gbar, ith);
  }
  if (x->x6) { /* float32 on AMX tiles: split this thread's 32-row blocks and W_ih's 32-column blocks */
    const size_t M = (size_t)(x->T * x->B), K = x->L->in_size, N = (size_t)D * 4 * x->m->Hp;
    size_t b0, b1, c0, c1;
    split((M + 31) / 32, ith, nth, &b0, &b1);
    split(N / 32, ith, nth, &c0, &c1);
    int bad = 0;
    if (b1 > b0)
      bad |= x->m->k.x6pack_a(M, K, (const float*)x->in, (size_t)x->lda, b0 * 32, b1 * 32, x->x6a, x->x6_sa);
    if (c1 > c0) bad |= x->m->k.x6pack_w(K, x->x6rows, c0 * 32, c1 * 32, x->x6w, x->x6_sw);
    if (bad) atomic_store_explicit(x->x6_bad, 1, memory_order_relaxed); /* the barrier orders it */
    if (nth > 1) kl_barrier_wait(x->gbar, ith);
  }
  if (x->Gw) input_gates(x, ith, nth);
  if (nth < D) { /* one thread: directions one after the other */
    for (int d = 0; d < D && !atomic_load(x->stop); d++) run_direction(x, d, 0, (split_plan){1, 1}, ith);
    return;
  }
  kl_barrier_wait(x->gbar, ith);
  const int p = threads_per_direction(nth, D), d = ith / p;
  if (d >= D) return;
  run_direction(x, d, ith % p, plan_split(p, x->B, x->m->Hp), ith);
}

/* Finds how the (t, b) rows of a [T, B, K] strided array form one strided
 * sequence for the GEMM: row (t, b) = t*gt + b*gb, row stride *ld. */
static int row_layout(int64_t T, int64_t B, int64_t s_t, int64_t s_b, int64_t K, int64_t* ld,
                      int64_t* gt, int64_t* gb) {
  if (T == 1 && B == 1) { *ld = K; *gt = 0; *gb = 0; }
  else if (B == 1) { *ld = s_t; *gt = 1; *gb = 0; }
  else if (T == 1) { *ld = s_b; *gt = 0; *gb = 1; }
  else if (s_t == B * s_b) { *ld = s_b; *gt = B; *gb = 1; }
  else if (s_b == T * s_t) { *ld = s_t; *gt = 1; *gb = T; }
  else return 0;
  return *ld >= K && *ld <= INT_MAX;
}

int kl_row_layout(int64_t T, int64_t B, int64_t s_t, int64_t s_b, int64_t K, int64_t* ld, int64_t* gt,
                  int64_t* gb) {
  return row_layout(T, B, s_t, s_b, K, ld, gt, gb);
}

int kl_input_layout_ok(int64_t T, int64_t B, int64_t x_st, int64_t x_sb, int64_t input_size) {
  int64_t ld, gt, gb;
  return T >= 1 && B >= 0 && row_layout(T, B, x_st, x_sb, input_size, &ld, &gt, &gb);
}

/* Input gates of every direction, in tiles dealt to all nth threads. Tiles
 * depend on the problem's shape only, never on the thread count, so neither
 * do the results. Each BLAS call repacks its A rows, so few rows
 * (M < GEMM_SPLIT_M) are split by columns, many by rows and columns. Columns
 * are tiled within each (direction, gate) block of H units, so W_ih can be
 * read where it lies (the caller's [4H, I] or the packed copy); the padding
 * columns [H, Hp) of each block are zeroed. */
#define GEMM_SPLIT_M 1024
#define GEMM_MC 512       /* rows per tile when M >= GEMM_SPLIT_M */
#define GEMM_NC_SMALL 128 /* columns per tile when M < GEMM_SPLIT_M */
#define GEMM_NC_LARGE 512 /* columns per tile when M >= GEMM_SPLIT_M */
/* The batch element of gate row r (row (t, b) = t*gt + b*gb). */
static int64_t row_batch(const run_ctx* x, int64_t r) {
  return x->gb == 0 ? 0 : x->gb == 1 ? r % x->B : r / x->gb;
}

/* Gw[r, n] += gate_bias[d, b(r), g*H + u] for rows [r0, r0+mr) and the columns
 * [n0, n0+nc) of D*4*Hp (n = d*4*Hp + g*Hp + u; padding columns u >= H stay 0). */
static void add_gate_bias(const run_ctx* x, int64_t r0, int64_t mr, size_t n0, size_t nc) {
  const kl_lstm* m = x->m;
  const size_t esz = m->esz, Hp = m->Hp, H = m->H;
  for (int64_t r = r0; r < r0 + mr; r++) {
    const size_t b = (size_t)row_batch(x, r);
    char* row = x->Gw + (size_t)r * x->ldg * esz;
    for (size_t n = n0; n < n0 + nc;) {
      const size_t blk = n / Hp, u = n % Hp;
      if (u >= H) {
        n = (blk + 1) * Hp;
        continue;
      }
      const size_t cnt = H - u < n0 + nc - n ? H - u : n0 + nc - n;
      const size_t d = blk / 4, g = blk % 4;
      const size_t si = ((d * (size_t)x->B + b) * 4 + g) * H + u;
      if (esz == sizeof(double)) {
        double* dst = (double*)row + n;
        const double* src = (const double*)x->gate_bias + si;
        for (size_t j = 0; j < cnt; j++) dst[j] += src[j];
      } else {
        float* dst = (float*)row + n;
        const float* src = (const float*)x->gate_bias + si;
        for (size_t j = 0; j < cnt; j++) dst[j] += src[j];
      }
      n += cnt;
    }
  }
}

/* x_gates: layer 0's gates come as rows of D*4*H; spread them to the padded
 * D*4*Hp rows (padding columns zeroed), adding gate_bias, rows dealt to threads. */
static void copy_gates(const run_ctx* x, int ith, int nth) {
  const kl_lstm* m = x->m;
  const size_t esz = m->esz, Hp = m->Hp, H = m->H, nblk = (size_t)m->D * 4;
  size_t r0, r1;
  split((size_t)(x->T * x->B), ith, nth, &r0, &r1);
  for (size_t r = r0; r < r1; r++) {
    const char* src = x->in + r * (size_t)x->lda * esz;
    char* dst = x->Gw + r * x->ldg * esz;
    for (size_t blk = 0; blk < nblk; blk++) {
      memcpy(dst + blk * Hp * esz, src + blk * H * esz, H * esz);
      if (Hp > H) memset(dst + (blk * Hp + H) * esz, 0, (Hp - H) * esz);
    }
  }
  if (x->gate_bias && r1 > r0) add_gate_bias(x, (int64_t)r0, (int64_t)(r1 - r0), 0, nblk * Hp);
}

static void input_gates(const run_ctx* x, int ith, int nth) {
  const kl_lstm* m = x->m;
  const size_t esz = m->esz, K = x->L->in_size, Hp = m->Hp, H = m->H;
  const int64_t M = x->T * x->B;
  const int64_t mc = M < GEMM_SPLIT_M ? M : GEMM_MC;
  const int64_t nm = (M + mc - 1) / mc;
  if (x->in_gates) {
    copy_gates(x, ith, nth);
    return;
  }
  /* bfloat16 panels, or float32 on AMX tiles, over all D*4*Hp columns (padding
   * rows are zero; row tiles of GEMM_MC rows are whole 32-row AMX blocks) */
  const int x6 = x->x6 && !atomic_load_explicit(x->x6_bad, memory_order_relaxed);
  if (m->k.gemm || x6) {
    const size_t N = (size_t)m->D * 4 * Hp, Kp = (K + 1) / 2;
    const int64_t ncol = M < GEMM_SPLIT_M ? GEMM_NC_SMALL : GEMM_NC_LARGE;
    const int64_t nn = ((int64_t)N + ncol - 1) / ncol;
    for (int64_t task = ith; task < nm * nn; task += nth) {
      const int64_t r0 = (task / nn) * mc, c0 = (task % nn) * ncol;
      const int64_t mr = M - r0 < mc ? M - r0 : mc;
      const int64_t nc = (int64_t)N - c0 < ncol ? (int64_t)N - c0 : ncol;
      float* C = (float*)x->Gw + (size_t)r0 * x->ldg + (size_t)c0;
      if (x6)
        m->k.x6gemm((size_t)mr, (size_t)nc, (K + 31) / 32, x->x6a + kl_x6_split_bytes((size_t)r0, K),
                    x->x6_sa, x->x6w + kl_x6_split_bytes((size_t)c0, K), x->x6_sw, C, x->ldg);
      else
        m->k.gemm((size_t)mr, (size_t)nc, Kp, x->xb + (size_t)r0 * Kp,
                  x->L->w_ih_bf16 + ((size_t)c0 / 64) * Kp * 128, C, x->ldg);
      if (x->gate_bias) add_gate_bias(x, r0, mr, (size_t)c0, (size_t)nc);
    }
    return;
  }
  /* W_ih's panels, when the object holds them, for runs of at most
   * KL_LSTM_PANEL_MAX_M rows (by the shape only). Tasks: the row tiles above by
   * 512 columns when rows are many (a task reads its rows of A from memory once
   * for 16 panels), narrower while that leaves under 2 tasks per thread, down to
   * 128; the split never changes a result (each element is one kernel's k-ordered
   * sum over the same K blocks) */
  if (x->L->w_ih_pan && M <= KL_LSTM_PANEL_MAX_M) {
    const int64_t N = (int64_t)m->D * 4 * (int64_t)Hp, np = N / KL_PGEMM_NR;
    int64_t pchunk = (M < GEMM_SPLIT_M ? GEMM_NC_SMALL : GEMM_NC_LARGE) / KL_PGEMM_NR;
    while (pchunk > GEMM_NC_SMALL / KL_PGEMM_NR && nm * ((np + pchunk - 1) / pchunk) < 2 * nth) pchunk /= 2;
    const int64_t nn = (np + pchunk - 1) / pchunk;
    for (int64_t task = ith; task < nm * nn; task += nth) {
      const int64_t r0 = (task / nn) * mc, p0 = (task % nn) * pchunk;
      const int64_t mr = M - r0 < mc ? M - r0 : mc, p1 = p0 + pchunk < np ? p0 + pchunk : np;
      kl_pgemm_panels(m->k.pgemm, mr, N, (int64_t)K, (const float*)x->in + (size_t)(r0 * x->lda),
                      x->lda, x->L->w_ih_pan, NULL, 0, (float*)x->Gw + (size_t)r0 * x->ldg,
                      (int64_t)x->ldg, p0, p1, 0);
      if (x->gate_bias)
        add_gate_bias(x, r0, mr, (size_t)(p0 * KL_PGEMM_NR), (size_t)((p1 - p0) * KL_PGEMM_NR));
    }
    return;
  }
  const int64_t ncol = M < GEMM_SPLIT_M ? GEMM_NC_SMALL : GEMM_NC_LARGE;
  const int64_t tpb = ((int64_t)H + ncol - 1) / ncol; /* column tiles per gate block */
  const int64_t nn = (int64_t)m->D * 4 * tpb;
  for (int64_t task = ith; task < nm * nn; task += nth) {
    const int64_t r0 = (task / nn) * mc, ct = task % nn;
    const int64_t blk = ct / tpb, c0 = (ct % tpb) * ncol, d = blk / 4, g = blk % 4;
    const int64_t mr = M - r0 < mc ? M - r0 : mc;
    const int64_t nc = (int64_t)H - c0 < ncol ? (int64_t)H - c0 : ncol;
    const kl_wih_view* v = &x->wv[d];
    char* C = x->Gw + ((size_t)r0 * x->ldg + (size_t)blk * Hp + (size_t)c0) * esz;
    const char* A = x->in + (size_t)(r0 * x->lda) * esz;
    const char* W = (const char*)v->w + (size_t)((g * v->gstride + c0) * v->ld) * esz;
    if (m->k.gemm_f32 && M < KL_F32_GEMM_MAX_M) /* by the shape only, never the thread count */
      m->k.gemm_f32((size_t)mr, (size_t)nc, K, (const float*)A, (size_t)x->lda, (const float*)W,
                    (size_t)v->ld, (float*)C, x->ldg);
    else
      gemm(m, mr, nc, (int64_t)K, A, x->lda, W, v->ld, C, (int64_t)x->ldg);
    if (c0 + nc == (int64_t)H && Hp > H)
      for (int64_t r = 0; r < mr; r++) memset(C + ((size_t)r * x->ldg + (size_t)nc) * esz, 0, (Hp - H) * esz);
    if (x->gate_bias) add_gate_bias(x, r0, mr, (size_t)(blk * (int64_t)Hp + c0), (size_t)nc);
  }
}

/* ord = the batch indices by decreasing length, equal lengths in index order
 * (a stable bottom-up merge sort, O(B log B) whatever the lengths' order);
 * tmp: B more indices. */
static void order_by_length(const int64_t* len, int64_t B, int32_t* ord, int32_t* tmp) {
  int32_t *src = ord, *dst = tmp;
  for (int64_t b = 0; b < B; b++) ord[b] = (int32_t)b;
  for (int64_t w = 1; w < B; w *= 2) {
    for (int64_t lo = 0; lo < B; lo += 2 * w) {
      const int64_t mid = lo + w < B ? lo + w : B, hi = lo + 2 * w < B ? lo + 2 * w : B;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) dst[k++] = len[src[j]] > len[src[i]] ? src[j++] : src[i++];
      while (i < mid) dst[k++] = src[i++];
      while (j < hi) dst[k++] = src[j++];
    }
    int32_t* t = src;
    src = dst;
    dst = t;
  }
  if (src != ord) memcpy(ord, src, (size_t)B * sizeof(int32_t));
}

kl_status kl_lstm_run(const kl_lstm* m, const kl_run_args* a) {
  return m && m->borrowed ? KL_ERR_ARG : kl_lstm_run_views(m, a, NULL);
}

kl_status kl_lstm_run_views(const kl_lstm* m, const kl_run_args* a, const kl_wih_view* wih) {
  if (!m || !a || a->T < 1 || a->B < 0 || !a->x || !a->y || a->num_threads < 1) return KL_ERR_ARG;
  if (m->borrowed && !wih) return KL_ERR_ARG;
  if (a->B == 0) return KL_OK;
  const int64_t T = a->T, B = a->B;
  const int D = m->D, nl = m->desc.num_layers;
  const size_t esz = m->esz, R = m->R, Rs = m->Rs, H = m->H, Hp = m->Hp;
  const size_t DR = (size_t)D * R, ldg = (size_t)D * 4 * Hp;
  /* the plan below is made for this count (threads.h: the rule, the short-call cap) */
  const int nth = kl_threads_short_call(kl_threads_cap(a->num_threads), T * B, B < CHUNK,
                                        D * UNIT_SPLIT_SMALL);
  if (a->lengths)
    for (int64_t b = 0; b < B; b++)
      if (a->lengths[b] < 1 || a->lengths[b] > T) return KL_ERR_ARG;
  /* layer 0 reads x as its input rows, or (x_gates) as its gates: read in place
   * when they already have the padded layout and nothing is added */
  const int64_t K0 = a->x_gates ? (int64_t)D * 4 * (int64_t)H : (int64_t)m->layers[0].in_size;
  int64_t ld0, gt, gb;
  if (!row_layout(T, B, a->x_st, a->x_sb, K0, &ld0, &gt, &gb)) return KL_ERR_ARG;
  const int gates_in_place = a->x_gates && !a->gate_bias && Hp == H;
  if ((double)T * (double)B > (double)INT_MAX || (double)ldg * (double)T * (double)B > 1e15)
    return KL_ERR_ARG;

  kl_status status = KL_ERR_NOMEM;
  const size_t TB = (size_t)T * (size_t)B;
  /* fully written by the GEMM (or copy_gates); not needed when layer 0 reads
   * its gates in place and is the only layer */
  size_t G_cap = 0, xb_cap = 0, x6_cap = 0;
  uint8_t* x6buf = NULL; /* float32 on AMX tiles: split operands, W_ih's columns */
  const float** x6rows = NULL;
  atomic_int x6_bad;
  char* G = gates_in_place && nl == 1 ? NULL : kl_scratch_take(TB * ldg * esz, &G_cap);
  char* inter[2] = {NULL, NULL};
  size_t inter_cap[2] = {0, 0};
  char* state = xalloc((size_t)D * (size_t)B * (2 * Rs + 2 * Hp) * esz);
  int64_t* len = malloc((size_t)B * sizeof(int64_t));
  int32_t* ord = malloc(2 * (size_t)B * sizeof(int32_t)); /* the order, then order_by_length's buffer */
  /* a per-step barrier per (direction, chunk group), then one for all threads */
  const split_plan sp = plan_split(threads_per_direction(nth, D), B, Hp);
  const size_t nbar = (size_t)D * (size_t)sp.cg + 1;
  kl_barrier* bar = aligned_alloc(64, kl_round_up(nbar * sizeof(kl_barrier), 64));
  const size_t nslot = (nbar - 1) * (size_t)sp.u + (size_t)nth;
  kl_barrier_slot* slots = aligned_alloc(64, nslot * sizeof(kl_barrier_slot));
  kl_cell_row* rows = malloc((size_t)nth * (size_t)B * sizeof(kl_cell_row));
  const void** ptrs = malloc((size_t)nth * 3 * (size_t)B * sizeof(void*));
  int32_t* mine = malloc((size_t)nth * (size_t)B * sizeof(int32_t));
  int* gstop = calloc(nbar, sizeof(int));
  atomic_int stop;
  atomic_init(&stop, 0);
  uint32_t* xb = NULL;
  if (m->k.gemm) {
    size_t kmax = 0;
    for (int l = 0; l < nl; l++)
      if (m->layers[l].in_size > kmax) kmax = m->layers[l].in_size;
    xb = kl_scratch_take(TB * ((kmax + 1) / 2) * sizeof(uint32_t), &xb_cap);
    if (!xb) goto done;
  }
  /* float32 input projections on AMX tiles for calls of KL_X6_MIN_M rows or more
   * (by the shape only, never the thread count) */
  const int x6 = m->k.x6gemm != NULL && TB >= KL_X6_MIN_M;
  const size_t N6 = (size_t)D * 4 * Hp;
  if (x6) {
    size_t bytes = 0;
    for (int l = a->x_gates ? 1 : 0; l < nl; l++) {
      const size_t K = m->layers[l].in_size;
      const size_t b = 3 * (kl_x6_split_bytes(TB, K) + kl_x6_split_bytes(N6, K));
      if (b > bytes) bytes = b;
    }
    if (bytes && (!(x6buf = kl_scratch_take(bytes, &x6_cap)) || !(x6rows = malloc(N6 * sizeof(float*)))))
      goto done;
  }
  if ((!G && !(gates_in_place && nl == 1)) || !state || !len || !ord || !bar || !slots || !rows || !ptrs || !mine || !gstop) goto done;
  /* layer outputs between layers: every row is written (zeros past a length) */
  for (int i = 0; i < (nl > 2 ? 2 : nl - 1); i++)
    if (!(inter[i] = kl_scratch_take(TB * DR * esz, &inter_cap[i]))) goto done;

  for (int64_t b = 0; b < B; b++) len[b] = a->lengths ? a->lengths[b] : T;
  order_by_length(len, B, ord, ord + B);

  run_ctx x = {.m = m, .T = T, .B = B, .len = len, .ord = ord, .xb = xb,
               .bar = bar, .gbar = bar + nbar - 1, .rows = rows, .ptrs = ptrs, .mine = mine,
               .interrupt = a->interrupt, .interrupt_ctx = a->interrupt_ctx,
               .caller = pthread_self(), .stop = &stop, .gstop = gstop};
  for (int d = 0; d < D; d++) {
    char* s = state + (size_t)d * (size_t)B * (2 * Rs + 2 * Hp) * esz;
    x.hbuf[d] = s;
    x.c[d] = s + 2 * (size_t)B * Rs * esz;
    x.hfull[d] = x.c[d] + (size_t)B * Hp * esz;
  }

  kl_wih_view own[2];
  for (int l = 0; l < nl; l++) {
    if (a->interrupt && a->interrupt(a->interrupt_ctx)) {
      status = KL_ERR_INTERRUPTED;
      goto done;
    }
    const kl_layer* L = &m->layers[l];
    if (m->borrowed) {
      x.wv = wih + (size_t)l * (size_t)D;
    } else {
      for (int d = 0; d < D; d++)
        own[d] = (kl_wih_view){(const char*)L->w_ih + (size_t)d * 4 * Hp * L->in_size * esz,
                               (int64_t)L->in_size, (int64_t)Hp};
      x.wv = own;
    }
    if (l == 0) {
      x.in = a->x;
      x.lda = ld0;
    } else {
      x.in = inter[(l - 1) & 1];
      x.lda = (int64_t)DR; /* seq-major [T, B, DR] */
      gt = B;
      gb = 1;
    }
    if (l == nl - 1) {
      x.out = a->y;
      x.out_st = a->y_st;
      x.out_sb = a->y_sb;
    } else {
      x.out = inter[l & 1];
      x.out_st = B * (int64_t)DR;
      x.out_sb = (int64_t)DR;
    }
    x.L = L;
    x.gt = gt;
    x.gb = gb;
    x.in_gates = l == 0 && a->x_gates;
    x.gate_bias = l == 0 ? (const char*)a->gate_bias : NULL;
    x.x6 = x6 && !x.in_gates;
    if (x.x6) {
      const size_t K = L->in_size;
      x.x6_sa = kl_x6_split_bytes(TB, K);
      x.x6_sw = kl_x6_split_bytes(N6, K);
      x.x6a = x6buf;
      x.x6w = x6buf + 3 * x.x6_sa;
      for (size_t n = 0; n < N6; n++) { /* column n = d*4Hp + g*Hp + u: row u of gate g, or padding */
        const size_t d = n / (4 * Hp), g = (n / Hp) % 4, u = n % Hp;
        x6rows[n] = u < H ? (const float*)x.wv[d].w + ((int64_t)g * x.wv[d].gstride + (int64_t)u) * x.wv[d].ld
                          : NULL;
      }
      x.x6rows = x6rows;
      x.x6_bad = &x6_bad;
      atomic_store(&x6_bad, 0);
    }
    if (l == 0 && gates_in_place) { /* the caller's gates are read where they lie */
      x.G = (const char*)a->x;
      x.Gw = NULL;
      x.ldg = (size_t)ld0;
    } else {
      x.G = x.Gw = G;
      x.ldg = ldg;
    }

    /* initial states; padded lanes stay zero */
    memset(state, 0, (size_t)D * (size_t)B * (2 * Rs + 2 * Hp) * esz);
    for (int d = 0; d < D; d++)
      for (int64_t b = 0; b < B; b++) {
        const size_t sl = ((size_t)(l * D + d) * (size_t)B + (size_t)b);
        if (a->h0) memcpy(x.hbuf[d] + (size_t)b * Rs * esz, (const char*)a->h0 + sl * R * esz, R * esz);
        if (a->c0) memcpy(x.c[d] + (size_t)b * Hp * esz, (const char*)a->c0 + sl * H * esz, H * esz);
      }
    /* outputs past each sequence's length are zero */
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = len[b]; t < T; t++)
        memset(x.out + (size_t)(t * x.out_st + b * x.out_sb) * esz, 0, DR * esz);
    for (size_t i = 0; i + 1 < nbar; i++) kl_barrier_init(&x.bar[i], sp.u, slots + i * (size_t)sp.u);
    kl_barrier_init(x.gbar, nth, slots + (nbar - 1) * (size_t)sp.u);
    /* BLAS runs single-threaded inside our threads (never oversubscribed). */
    const int blas_prev = kl_blas_get_num_threads();
    if (blas_prev != 1) kl_blas_set_num_threads(1);
    status = kl_pool_run(nth, layer_task, &x);
    if (blas_prev != 1) kl_blas_set_num_threads(blas_prev);
    if (status == KL_OK && atomic_load(&stop)) status = KL_ERR_INTERRUPTED;
    if (status != KL_OK) goto done;

    for (int d = 0; d < D; d++)
      for (int64_t b = 0; b < B; b++) {
        const size_t sl = ((size_t)(l * D + d) * (size_t)B + (size_t)b);
        if (a->h_n)
          memcpy((char*)a->h_n + sl * R * esz,
                 x.hbuf[d] + ((size_t)(len[b] & 1) * (size_t)B + (size_t)b) * Rs * esz, R * esz);
        if (a->c_n) memcpy((char*)a->c_n + sl * H * esz, x.c[d] + (size_t)b * Hp * esz, H * esz);
      }
  }
  status = KL_OK;
done:
  kl_scratch_give(G, G_cap);
  kl_scratch_give(inter[0], inter_cap[0]);
  kl_scratch_give(inter[1], inter_cap[1]);
  free(state);
  free(len);
  free(ord);
  free(bar);
  free(slots);
  free(rows);
  free(ptrs);
  free(mine);
  free(gstop);
  kl_scratch_give(xb, xb_cap);
  kl_scratch_give(x6buf, x6_cap);
  free(x6rows);
  return status;
}
