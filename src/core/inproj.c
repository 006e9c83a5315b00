/* The input projection of a layer: its gates G[T*B, D*4*Hp] = X W_ih^T
 * (+ gate_bias), or layer 0's gates as the caller gave them (x_gates).
 *
 * One table of strategies (kl_inproj_list), in order of preference; a layer
 * takes the first that applies. Tiles are dealt to all threads of the layer's
 * job and depend on the problem's shape only, never on the thread count, so
 * neither do the results. Each BLAS call repacks its A rows, so few rows
 * (M < GEMM_SPLIT_M) are split by columns, many by rows and columns. Columns
 * are tiled within each (direction, gate) block of H units, so W_ih can be
 * read where it lies (the caller's [4H, I] or the packed copy); the padding
 * columns [H, Hp) of each block are zeroed. Every thread polls for an
 * interrupt (kl_plan_poll) before each tile: a stop is seen within one tile
 * of work, and the tiles that are computed are those of an unstopped run. */
#include <string.h>

#include "blas.h"
#include "engine.h"

#define GEMM_SPLIT_M 1024
#define GEMM_MC 512       /* rows per tile when M >= GEMM_SPLIT_M */
#define GEMM_NC_SMALL 128 /* columns per tile when M < GEMM_SPLIT_M */
#define GEMM_NC_LARGE 512 /* columns per tile when M >= GEMM_SPLIT_M */
#define GATES_ROWS 256    /* rows of given gates copied between two interrupt polls */

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

/* The batch element of gate row r (row (t, b) = t*gt + b*gb). */
static int64_t row_batch(const kl_plan* x, int64_t r) {
  return x->gb == 0 ? 0 : x->gb == 1 ? r % x->B : r / x->gb;
}

/* Gw[r, n] += gate_bias[d, b(r), g*H + u] for rows [r0, r0+mr) and the columns
 * [n0, n0+nc) of D*4*Hp (n = d*4*Hp + g*Hp + u; padding columns u >= H stay 0). */
static void add_gate_bias(const kl_plan* x, int64_t r0, int64_t mr, size_t n0, size_t nc) {
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

/* ---- gates: layer 0's gates given by the caller (x_gates) ---- */

static int gates_applies(const kl_lstm* m, const kl_layer* L, size_t M, int in_gates) {
  (void)m; (void)L; (void)M;
  return in_gates;
}

/* Layer 0's gates come as rows of D*4*H; spread them to the padded D*4*Hp rows
 * (padding columns zeroed), adding gate_bias, rows dealt to threads. */
static void gates_run(const kl_plan* x, int ith, int nth) {
  const kl_lstm* m = x->m;
  const size_t esz = m->esz, Hp = m->Hp, H = m->H, nblk = (size_t)m->D * 4;
  size_t r0, r1;
  kl_share((size_t)(x->T * x->B), ith, nth, &r0, &r1);
  for (size_t q0 = r0; q0 < r1; q0 += GATES_ROWS) {
    if (kl_plan_poll(x)) return;
    const size_t q1 = r1 - q0 < GATES_ROWS ? r1 : q0 + GATES_ROWS;
    for (size_t r = q0; r < q1; r++) {
      const char* src = x->in + r * (size_t)x->lda * esz;
      char* dst = x->Gw + r * x->ldg * esz;
      for (size_t blk = 0; blk < nblk; blk++) {
        memcpy(dst + blk * Hp * esz, src + blk * H * esz, H * esz);
        if (Hp > H) memset(dst + (blk * Hp + H) * esz, 0, (Hp - H) * esz);
      }
    }
    if (x->gate_bias) add_gate_bias(x, (int64_t)q0, (int64_t)(q1 - q0), 0, nblk * Hp);
  }
}

/* ---- bf16 and x6: a GEMM over all D*4*Hp columns of a prepared operand ---- */

/* bfloat16 panels, or float32 on AMX tiles, over all D*4*Hp columns (padding
 * rows are zero; row tiles of GEMM_MC rows are whole 32-row AMX blocks). */
static void whole_tiles(const kl_plan* x, int ith, int nth, int x6) {
  const kl_lstm* m = x->m;
  const size_t K = x->L->in_size, Hp = m->Hp;
  const int64_t M = x->T * x->B;
  const int64_t mc = M < GEMM_SPLIT_M ? M : GEMM_MC;
  const int64_t nm = (M + mc - 1) / mc;
  const size_t N = (size_t)m->D * 4 * Hp, Kp = (K + 1) / 2;
  const int64_t ncol = M < GEMM_SPLIT_M ? GEMM_NC_SMALL : GEMM_NC_LARGE;
  const int64_t nn = ((int64_t)N + ncol - 1) / ncol;
  const uint16_t* w_bf16 = x->L->w_ih_form[KL_WIH_BF16];
  for (int64_t task = ith; task < nm * nn; task += nth) {
    if (kl_plan_poll(x)) return;
    const int64_t r0 = (task / nn) * mc, c0 = (task % nn) * ncol;
    const int64_t mr = M - r0 < mc ? M - r0 : mc;
    const int64_t nc = (int64_t)N - c0 < ncol ? (int64_t)N - c0 : ncol;
    float* C = (float*)x->Gw + (size_t)r0 * x->ldg + (size_t)c0;
    if (x6)
      m->k.x6gemm((size_t)mr, (size_t)nc, (K + 31) / 32, x->x6a + kl_x6_split_bytes((size_t)r0, K),
                  x->x6_sa, x->x6w + kl_x6_split_bytes((size_t)c0, K), x->x6_sw, C, x->ldg);
    else
      m->k.gemm((size_t)mr, (size_t)nc, Kp, x->xb + (size_t)r0 * Kp, w_bf16 + ((size_t)c0 / 64) * Kp * 128,
                C, x->ldg);
    if (x->gate_bias) add_gate_bias(x, r0, mr, (size_t)c0, (size_t)nc);
  }
}

/* x6: float32 on AMX tiles, both operands split into three bfloat16 each per call. */
static int x6_applies(const kl_lstm* m, const kl_layer* L, size_t M, int in_gates) {
  (void)L;
  return !in_gates && m->k.x6gemm != NULL && M >= KL_X6_MIN_M;
}

/* The split A and W, then W_ih's columns as rows. */
static size_t x6_ws_bytes(const kl_lstm* m, const kl_layer* L, size_t M) {
  const size_t K = L->in_size, N6 = (size_t)m->D * 4 * m->Hp;
  return 3 * (kl_x6_split_bytes(M, K) + kl_x6_split_bytes(N6, K)) + N6 * sizeof(float*);
}

static void x6_begin(kl_plan* x) {
  const size_t K = x->L->in_size, Hp = x->m->Hp, H = x->m->H, N6 = (size_t)x->m->D * 4 * Hp;
  x->x6_sa = kl_x6_split_bytes((size_t)(x->T * x->B), K);
  x->x6_sw = kl_x6_split_bytes(N6, K);
  x->x6a = x->ws;
  x->x6w = x->ws + 3 * x->x6_sa;
  const float** rows = (const float**)(void*)(x->x6w + 3 * x->x6_sw);
  for (size_t n = 0; n < N6; n++) { /* column n = d*4Hp + g*Hp + u: row u of gate g, or padding */
    const size_t d = n / (4 * Hp), g = (n / Hp) % 4, u = n % Hp;
    rows[n] = u < H ? (const float*)x->wv[d].w + ((int64_t)g * x->wv[d].gstride + (int64_t)u) * x->wv[d].ld
                    : NULL;
  }
  x->x6rows = rows;
  x->x6_bad = &x->x6_bad_flag;
  atomic_store(x->x6_bad, 0);
}

/* Splits this thread's 32-row blocks of A and 32-column blocks of W_ih. */
static void x6_prepare(const kl_plan* x, int ith, int nth) {
  const size_t M = (size_t)(x->T * x->B), K = x->L->in_size, N = (size_t)x->m->D * 4 * x->m->Hp;
  size_t b0, b1, c0, c1;
  kl_share((M + 31) / 32, ith, nth, &b0, &b1);
  kl_share(N / 32, ith, nth, &c0, &c1);
  int bad = 0;
  if (b1 > b0)
    bad |= x->m->k.x6pack_a(M, K, (const float*)x->in, (size_t)x->lda, b0 * 32, b1 * 32, x->x6a, x->x6_sa);
  if (c1 > c0) bad |= x->m->k.x6pack_w(K, x->x6rows, c0 * 32, c1 * 32, x->x6w, x->x6_sw);
  if (bad) atomic_store_explicit(x->x6_bad, 1, memory_order_relaxed); /* the barrier orders it */
}

/* A value that could not be split sends the layer to the next strategy that applies. */
static void x6_run(const kl_plan* x, int ith, int nth) {
  if (atomic_load_explicit(x->x6_bad, memory_order_relaxed)) {
    x->ip_next->run(x, ith, nth);
    return;
  }
  whole_tiles(x, ith, nth, 1);
}

/* bf16: bfloat16 W_ih panels, the layer input rounded to bfloat16 pairs per call. */
static int bf16_holds(const kl_lstm* m, int flags) {
  (void)flags;
  return m->k.gemm != NULL;
}

static size_t bf16_form_bytes(const kl_lstm* m, size_t K) {
  return (size_t)m->D * 4 * m->Hp * ((K + 1) / 2) * 2 * sizeof(uint16_t);
}

/* Row n = d*4Hp + g*Hp + u of W_ih -> panel column n. */
static void bf16_pack(const kl_lstm* m, kl_layer* L, int d, const kl_wsrc* w) {
  const size_t H = m->H, Hp = m->Hp, Kp = (L->in_size + 1) / 2;
  uint16_t* p = L->w_ih_form[KL_WIH_BF16];
  for (size_t g = 0; g < 4; g++)
    for (size_t u = 0; u < H; u++) {
      const size_t n = (size_t)d * 4 * Hp + g * Hp + u;
      const float* row = (const float*)w->w_ih + (g * H + u) * (size_t)w->ld_ih;
      for (size_t k = 0; k < L->in_size; k++)
        p[(((n / 64) * Kp + k / 2) * 4 + (n % 64) / 16) * 32 + (n % 16) * 2 + (k & 1)] = kl_f32_to_bf16(row[k]);
    }
}

static int bf16_applies(const kl_lstm* m, const kl_layer* L, size_t M, int in_gates) {
  (void)L; (void)M;
  return !in_gates && m->k.gemm != NULL;
}

static size_t bf16_ws_bytes(const kl_lstm* m, const kl_layer* L, size_t M) {
  (void)m;
  return M * ((L->in_size + 1) / 2) * sizeof(uint32_t);
}

static void bf16_begin(kl_plan* x) { x->xb = (uint32_t*)(void*)x->ws; }

/* Rounds this thread's input rows to bfloat16 pairs. */
static void bf16_prepare(const kl_plan* x, int ith, int nth) {
  const size_t M = (size_t)(x->T * x->B), K = x->L->in_size, Kp = (K + 1) / 2;
  size_t r0, r1;
  kl_share(M, ith, nth, &r0, &r1);
  if (r1 > r0)
    x->m->k.to_bf16(r1 - r0, K, (const float*)x->in + r0 * (size_t)x->lda, (size_t)x->lda, x->xb + r0 * Kp);
}

static void bf16_run(const kl_plan* x, int ith, int nth) { whole_tiles(x, ith, nth, 0); }

/* ---- panels: float32 W_ih in 32-column panels (f32-pgemm kernels) ---- */

static int panels_holds(const kl_lstm* m, int flags) {
  return (flags & KL_PACK_WIH_PANELS) && m->k.pgemm && !m->k.gemm;
}

/* D*4*Hp is a multiple of 32: whole panels. */
static size_t panels_form_bytes(const kl_lstm* m, size_t K) {
  return (size_t)m->D * 4 * m->Hp * K * sizeof(float);
}

/* Row n = d*4Hp + g*Hp + u of W_ih -> panel column n. */
static void panels_pack(const kl_lstm* m, kl_layer* L, int d, const kl_wsrc* w) {
  const size_t H = m->H, Hp = m->Hp;
  float* p = L->w_ih_form[KL_WIH_PANELS];
  for (size_t g = 0; g < 4; g++)
    for (size_t u = 0; u < H; u++) {
      const size_t n = (size_t)d * 4 * Hp + g * Hp + u;
      const float* row = (const float*)w->w_ih + (g * H + u) * (size_t)w->ld_ih;
      float* col = p + (n / KL_PGEMM_NR) * L->in_size * KL_PGEMM_NR + n % KL_PGEMM_NR;
      for (size_t k = 0; k < L->in_size; k++) col[k * KL_PGEMM_NR] = row[k];
    }
}

/* Runs of any length read W_ih's float32 panels when the object holds them
 * (KL_PACK_WIH_PANELS). */
static int panels_applies(const kl_lstm* m, const kl_layer* L, size_t M, int in_gates) {
  (void)m;
  (void)M;
  return !in_gates && L->w_ih_form[KL_WIH_PANELS];
}

/* Tasks: the row tiles by 512 columns when rows are many (a task reads its rows
 * of A from memory once for 16 panels), narrower while that leaves under 2
 * tasks per thread, down to 128; the split never changes a result (each element
 * is one kernel's k-ordered sum over the same K blocks). */
static void panels_run(const kl_plan* x, int ith, int nth) {
  const kl_lstm* m = x->m;
  const size_t K = x->L->in_size;
  const int64_t M = x->T * x->B;
  const int64_t mc = M < GEMM_SPLIT_M ? M : GEMM_MC;
  const int64_t nm = (M + mc - 1) / mc;
  const int64_t N = (int64_t)m->D * 4 * (int64_t)m->Hp, np = N / KL_PGEMM_NR;
  int64_t pchunk = (M < GEMM_SPLIT_M ? GEMM_NC_SMALL : GEMM_NC_LARGE) / KL_PGEMM_NR;
  while (pchunk > GEMM_NC_SMALL / KL_PGEMM_NR && nm * ((np + pchunk - 1) / pchunk) < 2 * nth) pchunk /= 2;
  const int64_t nn = (np + pchunk - 1) / pchunk;
  for (int64_t task = ith; task < nm * nn; task += nth) {
    if (kl_plan_poll(x)) return;
    const int64_t r0 = (task / nn) * mc, p0 = (task % nn) * pchunk;
    const int64_t mr = M - r0 < mc ? M - r0 : mc, p1 = p0 + pchunk < np ? p0 + pchunk : np;
    kl_pgemm_panels(m->k.pgemm, mr, N, (int64_t)K, (const float*)x->in + (size_t)(r0 * x->lda),
                    x->lda, x->L->w_ih_form[KL_WIH_PANELS], NULL, 0, (float*)x->Gw + (size_t)r0 * x->ldg,
                    (int64_t)x->ldg, p0, p1, 0);
    if (x->gate_bias)
      add_gate_bias(x, r0, mr, (size_t)(p0 * KL_PGEMM_NR), (size_t)((p1 - p0) * KL_PGEMM_NR));
  }
}

/* ---- f32-gemm and blas: W_ih where it lies, by (direction, gate) blocks ---- */

static void block_tiles(const kl_plan* x, int ith, int nth, int f32_kernel) {
  const kl_lstm* m = x->m;
  const size_t esz = m->esz, K = x->L->in_size, Hp = m->Hp, H = m->H;
  const int64_t M = x->T * x->B;
  const int64_t mc = M < GEMM_SPLIT_M ? M : GEMM_MC;
  const int64_t nm = (M + mc - 1) / mc;
  const int64_t ncol = M < GEMM_SPLIT_M ? GEMM_NC_SMALL : GEMM_NC_LARGE;
  const int64_t tpb = ((int64_t)H + ncol - 1) / ncol; /* column tiles per gate block */
  const int64_t nn = (int64_t)m->D * 4 * tpb;
  for (int64_t task = ith; task < nm * nn; task += nth) {
    if (kl_plan_poll(x)) return;
    const int64_t r0 = (task / nn) * mc, ct = task % nn;
    const int64_t blk = ct / tpb, c0 = (ct % tpb) * ncol, d = blk / 4, g = blk % 4;
    const int64_t mr = M - r0 < mc ? M - r0 : mc;
    const int64_t nc = (int64_t)H - c0 < ncol ? (int64_t)H - c0 : ncol;
    const kl_wih_view* v = &x->wv[d];
    char* C = x->Gw + ((size_t)r0 * x->ldg + (size_t)blk * Hp + (size_t)c0) * esz;
    const char* A = x->in + (size_t)(r0 * x->lda) * esz;
    const char* W = (const char*)v->w + (size_t)((g * v->gstride + c0) * v->ld) * esz;
    if (f32_kernel)
      m->k.gemm_f32((size_t)mr, (size_t)nc, K, (const float*)A, (size_t)x->lda, (const float*)W,
                    (size_t)v->ld, (float*)C, x->ldg);
    else
      gemm(m, mr, nc, (int64_t)K, A, x->lda, W, v->ld, C, (int64_t)x->ldg);
    if (c0 + nc == (int64_t)H && Hp > H)
      for (int64_t r = 0; r < mr; r++) memset(C + ((size_t)r * x->ldg + (size_t)nc) * esz, 0, (Hp - H) * esz);
    if (x->gate_bias) add_gate_bias(x, r0, mr, (size_t)(blk * (int64_t)Hp + c0), (size_t)nc);
  }
}

static int f32_gemm_applies(const kl_lstm* m, const kl_layer* L, size_t M, int in_gates) {
  (void)L;
  return !in_gates && m->k.gemm_f32 && M < KL_F32_GEMM_MAX_M;
}

static void f32_gemm_run(const kl_plan* x, int ith, int nth) { block_tiles(x, ith, nth, 1); }

static int blas_applies(const kl_lstm* m, const kl_layer* L, size_t M, int in_gates) {
  (void)m; (void)L; (void)M;
  return !in_gates;
}

static void blas_run(const kl_plan* x, int ith, int nth) { block_tiles(x, ith, nth, 0); }

const kl_inproj kl_inproj_list[] = {
    /* name, form, holds, form_bytes, pack, applies, ws_bytes, begin, prepare, run */
    {"gates", -1, NULL, NULL, NULL, gates_applies, NULL, NULL, NULL, gates_run},
    {"x6", -1, NULL, NULL, NULL, x6_applies, x6_ws_bytes, x6_begin, x6_prepare, x6_run},
    {"bf16", KL_WIH_BF16, bf16_holds, bf16_form_bytes, bf16_pack, bf16_applies, bf16_ws_bytes,
     bf16_begin, bf16_prepare, bf16_run},
    {"panels", KL_WIH_PANELS, panels_holds, panels_form_bytes, panels_pack, panels_applies, NULL,
     NULL, NULL, panels_run},
    {"f32-gemm", -1, NULL, NULL, NULL, f32_gemm_applies, NULL, NULL, NULL, f32_gemm_run},
    {"blas", -1, NULL, NULL, NULL, blas_applies, NULL, NULL, NULL, blas_run},
};
const size_t kl_inproj_count = sizeof(kl_inproj_list) / sizeof(kl_inproj_list[0]);

const kl_inproj* kl_inproj_choose(const kl_lstm* m, const kl_layer* L, size_t M, int in_gates,
                                  size_t from) {
  for (size_t i = from; i < kl_inproj_count; i++)
    if (kl_inproj_list[i].applies(m, L, M, in_gates)) return &kl_inproj_list[i];
  return NULL;
}
