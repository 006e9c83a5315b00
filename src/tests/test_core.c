/* C test of the kokoro_lstm core through its public header, without Python.
 *
 * Every case is checked against a double-precision LSTM written here (the
 * torch.nn.LSTM semantics: gate order i, f, g, o; y[t] = h_t; the reverse
 * direction starts at each sequence's last valid step; outputs past a
 * sequence's length are 0; h_n / c_n are the states after each sequence's
 * last valid step), for every ISA the CPU supports and every dtype:
 *   float32 within 2e-6, bfloat16 within 1e-2, float64 within 1e-12.
 * Results must be bitwise identical for 1, 2, 4 and 16 threads, bad arguments
 * must give KL_ERR_ARG.
 *
 * Every kernel of every kernel list (src/kernels/<op>.inc) that this CPU can
 * run, whatever the ISA level, is also compared directly with the scalar kernel
 * of its type (through internal.h): cells, projections, activations, the
 * read-sum probe at odd sizes and with +-inf and NaN; low-precision GEMMs with a
 * double product. Per ISA level, the dispatch must pick the first list entry the
 * level allows. KOKORO_LSTM_ISA=name restricts the ISA loop to that ISA and
 * checks that the environment variable selected it.
 *
 * Prints one line per check and finishes with "N passed, M failed"; exits
 * non-zero on any failure.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kokoro_lstm.h"
#include "kokoro_lstm_testing.h"
#include "engine.h"   /* the handle API (kl_lstm_create / run) */
#include "internal.h" /* kernel-level comparisons only */
#include "scratch.h"
#include "threads.h"  /* the thread rule (kl_threads_for_work, kl_pool_last_threads) */
#include "dense.h"   /* the dense operators (src/ops) */
#include "norm.h"    /* instance norm (src/ops) */
#include "random.h"  /* counter-based random numbers (src/ops) */

/* ---- bookkeeping ------------------------------------------------------- */

static int g_passed = 0, g_failed = 0;

/* KL_TEST_QUIET=1 (`make test`): FAIL lines only, then the summary; KL_TEST_VERBOSE=1
 * prints every PASS line again. */
static int quiet(void) {
  static int q = -1;
  if (q < 0) {
    const char* qe = getenv("KL_TEST_QUIET");
    const char* ve = getenv("KL_TEST_VERBOSE");
    q = qe && *qe && strcmp(qe, "0") != 0 && !(ve && *ve && strcmp(ve, "0") != 0);
  }
  return q;
}

static void check(int ok, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char* fmt, ...) {
  if (ok) g_passed++;
  else g_failed++;
  if (ok && quiet()) return;
  va_list ap;
  va_start(ap, fmt);
  printf("%s ", ok ? "PASS" : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
}

static void* xcalloc(size_t n, size_t sz) {
  void* p = calloc(n ? n : 1, sz ? sz : 1);
  if (!p) {
    fprintf(stderr, "test_core: out of memory\n");
    exit(2);
  }
  return p;
}

/* xorshift64*: uniform doubles in [lo, hi). */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(double lo, double hi) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  const uint64_t r = g_rng * 0x2545F4914F6CDD1Dull;
  return lo + (hi - lo) * ((double)(r >> 11) * (1.0 / 9007199254740992.0));
}

/* ---- test cases -------------------------------------------------------- */

enum { LAYOUT_SEQ = 0, LAYOUT_BATCH = 1, LAYOUT_SEQ_PADDED = 2 };
static const char* layout_name[] = {"seq-major", "batch-major", "seq-major-padded"};

typedef struct tcase {
  const char* name;
  int I, H, L, bidir, P, reverse;
  int64_t T, B;
  int lengths; /* 0: all T; 1: varying lengths (some T); 2: varying, all < T */
  int state;   /* h0/c0 given */
  int bias;    /* b_ih/b_hh given */
  int layout;
} tcase;

static const tcase CASES[] = {
    /* name              I   H  L bi P rev  T  B len st bias layout */
    {"uni-h7", 5, 7, 1, 0, 0, 0, 6, 3, 0, 0, 1, LAYOUT_SEQ},
    {"uni-h33", 5, 33, 1, 0, 0, 0, 7, 3, 0, 1, 1, LAYOUT_SEQ},
    {"uni-h33-lengths", 5, 33, 1, 0, 0, 0, 7, 5, 1, 1, 1, LAYOUT_SEQ},
    {"uni-h33-wide-batch", 5, 33, 1, 0, 0, 0, 5, 11, 1, 0, 1, LAYOUT_SEQ},
    {"uni-h33-reverse", 5, 33, 1, 0, 0, 1, 6, 4, 1, 1, 1, LAYOUT_BATCH},
    {"uni-h33-proj", 5, 33, 1, 0, 20, 0, 6, 3, 1, 1, 1, LAYOUT_SEQ},
    {"uni-h7-nobias", 5, 7, 1, 0, 0, 0, 4, 2, 0, 0, 0, LAYOUT_SEQ},
    {"bi-h7", 5, 7, 1, 1, 0, 0, 6, 3, 0, 0, 1, LAYOUT_SEQ},
    {"bi-h7-proj", 5, 7, 1, 1, 3, 0, 6, 3, 1, 1, 1, LAYOUT_BATCH},
    {"bi-h33-lengths", 5, 33, 1, 1, 0, 0, 7, 6, 1, 1, 1, LAYOUT_SEQ},
    {"bi-h33-short", 5, 33, 1, 1, 0, 0, 6, 5, 2, 0, 1, LAYOUT_SEQ_PADDED},
    {"bi-h33-proj-lengths", 5, 33, 1, 1, 17, 0, 6, 9, 1, 1, 1, LAYOUT_SEQ_PADDED},
    {"bi-h33-proj-2layer", 5, 33, 2, 1, 16, 0, 5, 4, 1, 1, 1, LAYOUT_SEQ},
    {"uni-h33-3layer", 5, 33, 3, 0, 0, 0, 5, 3, 1, 1, 1, LAYOUT_BATCH},
    {"uni-h33-T1", 5, 33, 1, 0, 0, 0, 1, 3, 0, 1, 1, LAYOUT_SEQ},
    {"bi-h33-B1", 5, 33, 1, 1, 0, 0, 6, 1, 0, 1, 1, LAYOUT_SEQ_PADDED},
    {"bi-h7-T1-B1", 5, 7, 1, 1, 0, 0, 1, 1, 0, 1, 1, LAYOUT_SEQ},
    /* H a multiple of 16: given gates (x_gates) are read in place */
    {"bi-h16-lengths", 5, 16, 1, 1, 0, 0, 6, 3, 1, 0, 1, LAYOUT_SEQ},
    {"bi-h16-2layer", 5, 16, 2, 1, 0, 0, 5, 2, 1, 1, 1, LAYOUT_BATCH},
    /* B >= 16: threads share out whole batch chunks instead of hidden units */
    {"uni-h7-B16", 5, 7, 1, 0, 0, 0, 4, 16, 0, 1, 1, LAYOUT_SEQ_PADDED},
    {"uni-h33-B37-lengths", 5, 33, 1, 0, 0, 0, 5, 37, 1, 1, 1, LAYOUT_SEQ},
    {"bi-h33-proj-B20-short", 5, 33, 1, 1, 17, 0, 4, 20, 2, 0, 1, LAYOUT_BATCH},
    {"bi-h33-proj-2layer-B35", 5, 33, 2, 1, 9, 0, 4, 35, 1, 1, 1, LAYOUT_SEQ},
    /* T * B >= KL_X6_MIN_M: float32 input projections on AMX tiles at avx512-amx
     * (kl_f32_amx_set(1) below); odd I, a row tail of the 32-row blocks */
    {"bi-h17-2layer-T32-B32", 9, 17, 2, 1, 0, 0, 32, 32, 1, 1, 1, LAYOUT_SEQ},
    {"uni-h20-proj-T33-B33", 37, 20, 1, 0, 7, 1, 33, 33, 2, 0, 1, LAYOUT_BATCH},
};
#define NCASES ((int)(sizeof(CASES) / sizeof(CASES[0])))

#define MAXW 16 /* num_layers * D */

/* One model's parameters in double (already rounded to float for float32
 * and bfloat16 runs, whose reference then sees the same values). */
typedef struct model {
  const tcase* c;
  int D, R;
  int in_size[MAXW];
  double *w_ih[MAXW], *w_hh[MAXW], *b_ih[MAXW], *b_hh[MAXW], *w_hr[MAXW];
} model;

static double round_if(double v, int to_float) { return to_float ? (double)(float)v : v; }

static double* rand_array(size_t n, double scale, int to_float) {
  double* a = xcalloc(n, sizeof(double));
  for (size_t i = 0; i < n; i++) a[i] = round_if(urand(-scale, scale), to_float);
  return a;
}

static void model_init(model* m, const tcase* c, int to_float) {
  memset(m, 0, sizeof(*m));
  m->c = c;
  m->D = c->bidir ? 2 : 1;
  m->R = c->P ? c->P : c->H;
  const double k = 1.0 / sqrt((double)c->H); /* torch's init range */
  const size_t H = (size_t)c->H, R = (size_t)m->R;
  for (int l = 0; l < c->L; l++)
    for (int d = 0; d < m->D; d++) {
      const int w = l * m->D + d;
      m->in_size[w] = l == 0 ? c->I : m->D * m->R;
      m->w_ih[w] = rand_array(4 * H * (size_t)m->in_size[w], k, to_float);
      m->w_hh[w] = rand_array(4 * H * R, k, to_float);
      if (c->bias) {
        m->b_ih[w] = rand_array(4 * H, k, to_float);
        m->b_hh[w] = rand_array(4 * H, k, to_float);
      }
      if (c->P) m->w_hr[w] = rand_array((size_t)c->P * H, k, to_float);
    }
}

static void model_free(model* m) {
  for (int w = 0; w < MAXW; w++) {
    free(m->w_ih[w]);
    free(m->w_hh[w]);
    free(m->b_ih[w]);
    free(m->b_hh[w]);
    free(m->w_hr[w]);
  }
}

/* ---- the double-precision reference ------------------------------------ */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* x [T][B][I], y [T][B][D*R], h0/hn [L*D][B][R], c0/cn [L*D][B][H]. */
static void ref_lstm(const model* m, int64_t T, int64_t B, const double* x, const int64_t* len,
                     const double* h0, const double* c0, double* y, double* hn, double* cn) {
  const tcase* c = m->c;
  const int D = m->D, R = m->R, H = c->H, DR = D * R;
  double* in = xcalloc((size_t)(T * B) * (size_t)(c->I > DR ? c->I : DR), sizeof(double));
  double* out = xcalloc((size_t)(T * B * DR), sizeof(double));
  double* h = xcalloc((size_t)R, sizeof(double));
  double* hf = xcalloc((size_t)H, sizeof(double));
  double* cc = xcalloc((size_t)H, sizeof(double));
  double* gates = xcalloc(4 * (size_t)H, sizeof(double));
  memcpy(in, x, (size_t)(T * B * c->I) * sizeof(double));
  for (int l = 0; l < c->L; l++) {
    const int Il = l == 0 ? c->I : DR;
    memset(out, 0, (size_t)(T * B * DR) * sizeof(double));
    for (int d = 0; d < D; d++) {
      const int w = l * D + d;
      const int rev = d == 1 || c->reverse;
      for (int64_t b = 0; b < B; b++) {
        const size_t sl = (size_t)w * (size_t)B + (size_t)b;
        for (int j = 0; j < R; j++) h[j] = h0 ? h0[sl * (size_t)R + (size_t)j] : 0.0;
        for (int j = 0; j < H; j++) cc[j] = c0 ? c0[sl * (size_t)H + (size_t)j] : 0.0;
        for (int64_t s = 0; s < len[b]; s++) {
          const int64_t t = rev ? len[b] - 1 - s : s;
          const double* xt = in + (size_t)(t * B + b) * (size_t)Il;
          for (int r = 0; r < 4 * H; r++) {
            double acc = 0.0;
            if (m->b_ih[w]) acc += m->b_ih[w][r] + m->b_hh[w][r];
            for (int i = 0; i < Il; i++) acc += m->w_ih[w][(size_t)r * (size_t)Il + (size_t)i] * xt[i];
            for (int k = 0; k < R; k++) acc += m->w_hh[w][(size_t)r * (size_t)R + (size_t)k] * h[k];
            gates[r] = acc;
          }
          for (int u = 0; u < H; u++) {
            const double ig = sigm(gates[u]), fg = sigm(gates[H + u]);
            const double gg = tanh(gates[2 * H + u]), og = sigm(gates[3 * H + u]);
            cc[u] = fg * cc[u] + ig * gg;
            hf[u] = og * tanh(cc[u]);
          }
          if (c->P) {
            for (int p = 0; p < c->P; p++) {
              double acc = 0.0;
              for (int u = 0; u < H; u++) acc += m->w_hr[w][(size_t)p * (size_t)H + (size_t)u] * hf[u];
              h[p] = acc;
            }
          } else {
            memcpy(h, hf, (size_t)H * sizeof(double));
          }
          memcpy(out + (size_t)(t * B + b) * (size_t)DR + (size_t)d * (size_t)R, h,
                 (size_t)R * sizeof(double));
        }
        memcpy(hn + sl * (size_t)R, h, (size_t)R * sizeof(double));
        memcpy(cn + sl * (size_t)H, cc, (size_t)H * sizeof(double));
      }
    }
    memcpy(in, out, (size_t)(T * B * DR) * sizeof(double));
  }
  memcpy(y, out, (size_t)(T * B * DR) * sizeof(double));
  free(in);
  free(out);
  free(h);
  free(hf);
  free(cc);
  free(gates);
}

/* ---- the engine under test ---------------------------------------------- */

static size_t io_size(kl_dtype dt) { return dt == KL_F64 ? sizeof(double) : sizeof(float); }

static void* to_io(const double* a, size_t n, kl_dtype dt) {
  if (!a) return NULL;
  void* p = xcalloc(n, io_size(dt));
  for (size_t i = 0; i < n; i++) {
    if (dt == KL_F64) ((double*)p)[i] = a[i];
    else ((float*)p)[i] = (float)a[i];
  }
  return p;
}

static double io_get(const void* p, size_t i, kl_dtype dt) {
  return dt == KL_F64 ? ((const double*)p)[i] : (double)((const float*)p)[i];
}

static kl_status create_engine(const model* m, kl_dtype dt, kl_lstm** out) {
  const tcase* c = m->c;
  kl_weights w[MAXW];
  memset(w, 0, sizeof(w));
  void* owned[MAXW * 5];
  int n_owned = 0;
  const size_t H = (size_t)c->H, R = (size_t)m->R;
  for (int i = 0; i < c->L * m->D; i++) {
    owned[n_owned++] = (void*)(w[i].w_ih = to_io(m->w_ih[i], 4 * H * (size_t)m->in_size[i], dt));
    owned[n_owned++] = (void*)(w[i].w_hh = to_io(m->w_hh[i], 4 * H * R, dt));
    owned[n_owned++] = (void*)(w[i].b_ih = to_io(m->b_ih[i], 4 * H, dt));
    owned[n_owned++] = (void*)(w[i].b_hh = to_io(m->b_hh[i], 4 * H, dt));
    owned[n_owned++] = (void*)(w[i].w_hr = to_io(m->w_hr[i], (size_t)c->P * H, dt));
  }
  kl_lstm_desc desc = {c->I, c->H, c->L, c->bidir, c->P, c->reverse, dt};
  const kl_status st = kl_lstm_create(&desc, w, out);
  /* the packed object must not depend on the caller's arrays */
  for (int i = 0; i < n_owned; i++) {
    if (owned[i]) memset(owned[i], 0xA5, 1); /* scribble before freeing */
    free(owned[i]);
  }
  return st;
}

/* The model's weights as DLTensors for kl_lstm_forward, with padded row strides
 * (and every-other-element biases), so the entry's strided reads are tested. */
typedef struct dl_model {
  int n, per;
  void* buf[MAXW * 5];
  DLTensor t[MAXW * 5];
  int64_t shape[MAXW * 5][2], strides[MAXW * 5][2];
  const DLTensor* ptrs[MAXW * 5];
} dl_model;

static void dl_add(dl_model* f, kl_dtype dt, const double* a, int64_t rows, int64_t cols,
                   int64_t ld, int one_d) {
  const size_t esz = io_size(dt), n = (size_t)(rows * ld);
  void* b = xcalloc(n, esz);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < ld; c++) {
      const double v = c < cols ? a[r * cols + c] : 1e30; /* padding: never read */
      if (dt == KL_F64) ((double*)b)[r * ld + c] = v;
      else ((float*)b)[r * ld + c] = (float)v;
    }
  const int k = f->n++;
  f->buf[k] = b;
  DLTensor* t = &f->t[k];
  memset(t, 0, sizeof(*t));
  t->data = b;
  t->device.device_type = kDLCPU;
  t->dtype = (DLDataType){kDLFloat, (uint8_t)(esz * 8), 1};
  if (one_d) { /* a vector of rows elements with stride ld */
    t->ndim = 1;
    f->shape[k][0] = rows * cols;
    f->strides[k][0] = ld;
  } else {
    t->ndim = 2;
    f->shape[k][0] = rows;
    f->shape[k][1] = cols;
    f->strides[k][0] = ld;
    f->strides[k][1] = 1;
  }
  t->shape = f->shape[k];
  t->strides = f->strides[k];
  f->ptrs[k] = t;
}

static void dl_model_init(dl_model* f, const model* m, kl_dtype dt) {
  const tcase* c = m->c;
  memset(f, 0, sizeof(*f));
  const int64_t H = c->H, R = m->R;
  for (int i = 0; i < c->L * m->D; i++) {
    dl_add(f, dt, m->w_ih[i], 4 * H, m->in_size[i], m->in_size[i] + 3, 0);
    dl_add(f, dt, m->w_hh[i], 4 * H, R, R + 1, 0);
    if (c->bias) {
      dl_add(f, dt, m->b_ih[i], 4 * H, 1, 2, 1);
      dl_add(f, dt, m->b_hh[i], 4 * H, 1, 3, 1);
    }
    if (c->P) dl_add(f, dt, m->w_hr[i], c->P, H, H + 2, 0);
  }
}

static void dl_model_free(dl_model* f) {
  for (int i = 0; i < f->n; i++) free(f->buf[i]);
}

/* kl_lstm_forward's constant_weights for run_forward (1: a trusted entry, which
 * holds float32 W_ih in panels too). */
static int g_fwd_constant;

/* kl_lstm_forward on the same buffers as a kl_lstm_run call (seq-first tensors). */
static kl_status run_forward(const dl_model* f, const model* m, kl_dtype dt, const kl_run_args* a) {
  const tcase* c = m->c;
  const int64_t LD = (int64_t)c->L * m->D, DR = (int64_t)m->D * m->R;
  const DLDataType io = {kDLFloat, (uint8_t)(io_size(dt) * 8), 1};
  const DLDevice cpu = {kDLCPU, 0};
  int64_t sx[3] = {a->T, a->B, c->I}, stx[3] = {a->x_st, a->x_sb, 1};
  int64_t sy[3] = {a->T, a->B, DR}, sty[3] = {a->y_st, a->y_sb, 1};
  int64_t sh[3] = {LD, a->B, m->R}, sc[3] = {LD, a->B, c->H}, sl[1] = {a->B};
  DLTensor x = {(void*)a->x, cpu, 3, io, sx, stx, 0}, y = {a->y, cpu, 3, io, sy, sty, 0};
  DLTensor h0 = {(void*)a->h0, cpu, 3, io, sh, NULL, 0}, c0 = {(void*)a->c0, cpu, 3, io, sc, NULL, 0};
  DLTensor hn = {a->h_n, cpu, 3, io, sh, NULL, 0}, cn = {a->c_n, cpu, 3, io, sc, NULL, 0};
  DLTensor len = {(void*)a->lengths, cpu, 1, {kDLInt, 64, 1}, sl, NULL, 0};
  kl_forward_args fa;
  memset(&fa, 0, sizeof(fa));
  fa.num_layers = c->L;
  fa.bidirectional = c->bidir;
  fa.reverse = c->reverse;
  fa.has_bias = c->bias != 0;
  fa.proj_size = c->P;
  fa.dtype = dt;
  fa.num_threads = a->num_threads;
  fa.constant_weights = g_fwd_constant;
  fa.x = &x;
  fa.lengths = a->lengths ? &len : NULL;
  fa.h0 = a->h0 ? &h0 : NULL;
  fa.c0 = a->c0 ? &c0 : NULL;
  fa.weights = f->ptrs;
  fa.num_weights = f->n;
  fa.y = &y;
  fa.h_n = &hn;
  fa.c_n = &cn;
  return kl_lstm_forward(&fa);
}

#define SENTINEL 777.0

/* The raw output of one run and its double copies. */
typedef struct result {
  kl_status st;
  void *ybuf, *hn, *cn; /* engine arrays */
  size_t ybytes, hnbytes, cnbytes;
  double *y, *hnd, *cnd; /* [T][B][DR], [LD][B][R], [LD][B][H] */
  int pad_ok;            /* the padding of padded rows kept its sentinel */
} result;

typedef struct run_input {
  const model* m;
  kl_dtype dt;
  int64_t T, B;
  const double* x; /* [T][B][I] */
  const int64_t* lengths;
  const double *h0, *c0;
} run_input;

static void result_free(result* r) {
  free(r->ybuf);
  free(r->hn);
  free(r->cn);
  free(r->y);
  free(r->hnd);
  free(r->cnd);
  memset(r, 0, sizeof(*r));
}

/* One run through kl_lstm_run on lm, or through kl_lstm_forward on f when lm is NULL. */
static void run_engine(const kl_lstm* lm, const dl_model* f, const run_input* in, int nth,
                       result* r) {
  const model* m = in->m;
  const tcase* c = m->c;
  const kl_dtype dt = in->dt;
  const size_t esz = io_size(dt);
  const int64_t T = in->T, B = in->B, I = c->I, DR = (int64_t)m->D * m->R;
  const int64_t LD = (int64_t)c->L * m->D;
  memset(r, 0, sizeof(*r));
  int64_t xld = I, yld = DR, x_st, x_sb, y_st, y_sb;
  if (c->layout == LAYOUT_SEQ_PADDED) {
    xld = I + 3;
    yld = DR + 5;
  }
  if (c->layout == LAYOUT_BATCH) {
    x_st = xld; x_sb = T * xld;
    y_st = yld; y_sb = T * yld;
  } else {
    x_sb = xld; x_st = B * xld;
    y_sb = yld; y_st = B * yld;
  }
  void* x = xcalloc((size_t)(T * B * xld), esz);
  for (int64_t t = 0; t < T; t++)
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < xld; i++) {
        const double v = i < I ? in->x[(size_t)((t * B + b) * I + i)] : 1e30; /* padding unused */
        const size_t at = (size_t)(t * x_st + b * x_sb + i);
        if (dt == KL_F64) ((double*)x)[at] = v;
        else ((float*)x)[at] = (float)v;
      }
  const size_t ny = (size_t)(T * B * yld);
  r->ybytes = ny * esz;
  r->ybuf = xcalloc(ny, esz);
  for (size_t i = 0; i < ny; i++) {
    if (dt == KL_F64) ((double*)r->ybuf)[i] = SENTINEL;
    else ((float*)r->ybuf)[i] = (float)SENTINEL;
  }
  const size_t nh = (size_t)(LD * B * m->R), nc = (size_t)(LD * B * c->H);
  r->hnbytes = nh * esz;
  r->cnbytes = nc * esz;
  r->hn = xcalloc(nh, esz);
  r->cn = xcalloc(nc, esz);
  void* h0 = to_io(in->h0, nh, dt);
  void* c0 = to_io(in->c0, nc, dt);
  kl_run_args a;
  memset(&a, 0, sizeof(a));
  a.T = T;
  a.B = B;
  a.x = x;
  a.x_st = x_st;
  a.x_sb = x_sb;
  a.y = r->ybuf;
  a.y_st = y_st;
  a.y_sb = y_sb;
  a.h0 = h0;
  a.c0 = c0;
  a.h_n = r->hn;
  a.c_n = r->cn;
  a.lengths = in->lengths;
  a.num_threads = nth;
  r->st = lm ? kl_lstm_run(lm, &a) : run_forward(f, m, dt, &a);
  r->y = xcalloc((size_t)(T * B * DR), sizeof(double));
  r->hnd = xcalloc(nh, sizeof(double));
  r->cnd = xcalloc(nc, sizeof(double));
  r->pad_ok = 1;
  for (int64_t t = 0; t < T; t++)
    for (int64_t b = 0; b < B; b++)
      for (int64_t j = 0; j < yld; j++) {
        const double v = io_get(r->ybuf, (size_t)(t * y_st + b * y_sb + j), dt);
        if (j < DR) r->y[(size_t)((t * B + b) * DR + j)] = v;
        else if (v != SENTINEL) r->pad_ok = 0;
      }
  for (size_t i = 0; i < nh; i++) r->hnd[i] = io_get(r->hn, i, dt);
  for (size_t i = 0; i < nc; i++) r->cnd[i] = io_get(r->cn, i, dt);
  free(x);
  free(h0);
  free(c0);
}

/* Largest |a - b|; NaN or Inf gives Inf. */
static double max_err(const double* a, const double* b, size_t n) {
  double e = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double d = fabs(a[i] - b[i]);
    if (!(d <= e)) e = isfinite(d) ? d : INFINITY;
  }
  return e;
}

static const char* dtype_name(kl_dtype dt) {
  return dt == KL_F64 ? "float64" : dt == KL_BF16 ? "bfloat16" : dt == KL_F16 ? "float16" : "float32";
}

static double tolerance(kl_dtype dt) {
  return dt == KL_F64 ? 1e-12 : dt == KL_BF16 ? 1e-2 : dt == KL_F16 ? 1e-3 : 2e-6;
}

/* A writer racing with a cache miss: one weight holds `other` from just after its
 * bytes were read for the fingerprint until just after packing, `orig` before and
 * after (kl_cache_set_fingerprint_hook, kl_cache_set_pack_hook). */
typedef struct race_ctx {
  char* at;
  char orig[sizeof(double)], other[sizeof(double)];
  size_t esz;
  int flips;
} race_ctx;
static void race_flip(void* ctx) {
  race_ctx* c = ctx;
  memcpy(c->at, c->other, c->esz);
  c->flips++;
}
static void race_restore(void* ctx) {
  race_ctx* c = ctx;
  memcpy(c->at, c->orig, c->esz);
}

/* The one entry on strided weights gives the packed object's exact results; the
 * cache serves the second call and repacks after a weight changes in place, and
 * never keeps a packing of other bytes than its fingerprint's. */
static void test_forward_entry(const model* m, const run_input* in, const result* r1,
                               const char* tag) {
  dl_model f;
  dl_model_init(&f, m, in->dt);
  kl_cache_clear();
  result r;
  int ok = 1;
  for (int call = 0; call < 2 && ok; call++) {
    run_engine(NULL, &f, in, 1 + call, &r);
    ok = r.st == KL_OK && memcmp(r.ybuf, r1->ybuf, r1->ybytes) == 0 &&
         memcmp(r.hn, r1->hn, r1->hnbytes) == 0 && memcmp(r.cn, r1->cn, r1->cnbytes) == 0;
    if (!ok) printf("  kl_lstm_forward: %s %s\n", kl_status_str(r.st), kl_last_error());
    result_free(&r);
  }
  kl_cache_stats st = kl_cache_get_stats();
  check(ok && st.misses == 1 && st.hits == 1 && st.entries == 1,
        "%s kl_lstm_forward (strided weights) == kl_lstm_run bitwise; cache: 1 miss, 1 hit "
        "(got %lld, %lld)", tag, (long long)st.misses, (long long)st.hits);
  /* change one recurrent weight in place: the next call repacks and differs */
  char* w = f.buf[1];
  char saved[sizeof(double)];
  memcpy(saved, w + io_size(in->dt), io_size(in->dt));
  if (in->dt == KL_F64) ((double*)w)[1] += 0.5;
  else ((float*)w)[1] += 0.5f;
  run_engine(NULL, &f, in, 2, &r);
  st = kl_cache_get_stats();
  check(r.st == KL_OK && st.repacks == 1 && st.entries == 1 &&
            memcmp(r.hn, r1->hn, r1->hnbytes) != 0,
        "%s kl_lstm_forward after an in-place weight change: repacked, new result", tag);
  result_free(&r);
  memcpy(w + io_size(in->dt), saved, io_size(in->dt)); /* the weights of r1 again */
  /* W_hh changed between the fingerprint and the packing, restored after: the
   * racing call may see either value, but the entry it leaves must hold what its
   * fingerprint saw, so the calls after it give r1's bits (a packing of the
   * changed value would pass every check and serve it until kl_cache_clear) */
  kl_cache_clear();
  race_ctx rc = {w + io_size(in->dt), {0}, {0}, io_size(in->dt), 0};
  memcpy(rc.orig, saved, rc.esz);
  if (in->dt == KL_F64) *(double*)(void*)rc.other = *(const double*)(const void*)saved + 0.5;
  else *(float*)(void*)rc.other = *(const float*)(const void*)saved + 0.5f;
  kl_cache_set_fingerprint_hook(race_flip, &rc);
  kl_cache_set_pack_hook(race_restore, &rc);
  run_engine(NULL, &f, in, 1, &r);
  kl_cache_set_fingerprint_hook(NULL, NULL);
  kl_cache_set_pack_hook(NULL, NULL);
  int race_ok = r.st == KL_OK && rc.flips == 1;
  result_free(&r);
  for (int call = 0; call < 2 && race_ok; call++) {
    run_engine(NULL, &f, in, 1 + call, &r);
    race_ok = r.st == KL_OK && memcmp(r.ybuf, r1->ybuf, r1->ybytes) == 0 &&
              memcmp(r.hn, r1->hn, r1->hnbytes) == 0 && memcmp(r.cn, r1->cn, r1->cnbytes) == 0;
    result_free(&r);
  }
  check(race_ok, "%s kl_lstm_forward after W_hh changed between fingerprint and packing, then "
        "restored: the next calls give the unchanged weights' bits", tag);
  /* a trusted entry (constant_weights): float32 W_ih in panels, the f32-pgemm
   * kernels for a float32 input projection (other bits than OpenBLAS's): within the
   * dtype's tolerance of the packed object, the same bits for 1, 2 and 5 threads */
  kl_cache_clear();
  g_fwd_constant = 1;
  result t[3];
  const int nths[3] = {1, 2, 5};
  int same = 1;
  double err = 0.0;
  const size_t nyd = (size_t)(in->T * in->B * m->D * m->R);
  for (int i = 0; i < 3; i++) {
    run_engine(NULL, &f, in, nths[i], &t[i]);
    same = same && t[i].st == KL_OK;
  }
  if (same) {
    err = fmax(max_err(t[0].y, r1->y, nyd), max_err(t[0].hnd, r1->hnd, r1->hnbytes / io_size(in->dt)));
    for (int i = 1; i < 3; i++)
      same = same && memcmp(t[i].ybuf, t[0].ybuf, r1->ybytes) == 0 &&
             memcmp(t[i].hn, t[0].hn, r1->hnbytes) == 0 && memcmp(t[i].cn, t[0].cn, r1->cnbytes) == 0;
  }
  g_fwd_constant = 0;
  /* W_ih panels where the input projection is float32 (float32; bfloat16 and
   * float16 without a bfloat16 GEMM entry) and the level has a vector pgemm;
   * otherwise the same bits */
  const kl_kernels kk = kl_select_kernels(in->dt == KL_BF16 ? KL_W_BF16 : in->dt == KL_F16 ? KL_W_F16 : KL_W_F32);
  const int panels = in->dt != KL_F64 && kk.pgemm != NULL && kk.gemm == NULL;
  check(same && (panels ? err <= tolerance(in->dt) : err == 0.0),
        "%s kl_lstm_forward on a trusted entry%s: max|d| vs kl_lstm_run %.3g (%s), threads "
        "1/2/5 bitwise equal", tag, panels ? " (W_ih panels)" : "", err,
        panels ? "within the tolerance" : "must be 0");
  for (int i = 0; i < 3; i++) result_free(&t[i]);
  kl_cache_clear();
  dl_model_free(&f);
  kl_cache_clear();
}

/* ---- layer 0's gate input given or augmented by the caller ----------------- */

/* kl_lstm_forward, seq-major x of feat features (row stride ldx), contiguous
 * outputs; gate_bias and x_gates as given. */
static kl_status gate_forward(const dl_model* f, const model* m, kl_dtype dt, int64_t T,
                              int64_t B, const void* x, int64_t feat, int64_t ldx, int x_gates,
                              const void* gb, const void* h0, const void* c0,
                              const int64_t* len, void* y, void* hn, void* cn, int nth) {
  const tcase* c = m->c;
  const int64_t LD = (int64_t)c->L * m->D, DR = (int64_t)m->D * m->R;
  const DLDataType io = {kDLFloat, (uint8_t)(io_size(dt) * 8), 1};
  const DLDevice cpu = {kDLCPU, 0};
  int64_t sx[3] = {T, B, feat}, stx[3] = {B * ldx, ldx, 1}, sy[3] = {T, B, DR};
  int64_t sh[3] = {LD, B, m->R}, sc[3] = {LD, B, c->H}, sl[1] = {B};
  int64_t sg[3] = {m->D, B, 4 * (int64_t)c->H};
  DLTensor tx = {(void*)x, cpu, 3, io, sx, stx, 0}, ty = {y, cpu, 3, io, sy, NULL, 0};
  DLTensor th0 = {(void*)h0, cpu, 3, io, sh, NULL, 0}, tc0 = {(void*)c0, cpu, 3, io, sc, NULL, 0};
  DLTensor thn = {hn, cpu, 3, io, sh, NULL, 0}, tcn = {cn, cpu, 3, io, sc, NULL, 0};
  DLTensor tl = {(void*)len, cpu, 1, {kDLInt, 64, 1}, sl, NULL, 0};
  DLTensor tg = {(void*)gb, cpu, 3, io, sg, NULL, 0};
  kl_forward_args fa;
  memset(&fa, 0, sizeof(fa));
  fa.num_layers = c->L;
  fa.bidirectional = c->bidir;
  fa.reverse = c->reverse;
  fa.has_bias = c->bias != 0;
  fa.proj_size = c->P;
  fa.dtype = dt;
  fa.num_threads = nth;
  fa.constant_weights = g_fwd_constant;
  fa.x = &tx;
  fa.lengths = len ? &tl : NULL;
  fa.h0 = h0 ? &th0 : NULL;
  fa.c0 = c0 ? &tc0 : NULL;
  fa.weights = f->ptrs;
  fa.num_weights = f->n;
  fa.y = &ty;
  fa.h_n = &thn;
  fa.c_n = &tcn;
  fa.gate_bias = gb ? &tg : NULL;
  fa.x_gates = x_gates;
  return kl_lstm_forward(&fa);
}

/* The last NS input features made constant over time (Kokoro's style at batch
 * 1): the reference on that input against the entry on the other features with
 * W_ih's style columns folded into gate_bias; then the same given as gates
 * (x_gates), with and without the bias; threads bitwise. */
#define NS 2
static void test_gate_input(const model* m, kl_dtype dt, const double* x, const int64_t* len,
                            int use_len, const double* h0, const double* c0, const char* tag) {
  const tcase* c = m->c;
  const int64_t T = c->T, B = c->B, I = c->I, IX = I - NS, H = c->H, D = m->D;
  const int64_t LD = (int64_t)c->L * D, DR = (int64_t)D * m->R, G4 = 4 * H;
  const size_t ny = (size_t)(T * B * DR), nh = (size_t)(LD * B * m->R), nc = (size_t)(LD * B * H);
  const size_t ng = (size_t)(T * B * D * G4), nb = (size_t)(D * B * G4);
  const int to_float = dt != KL_F64;
  double* xc = xcalloc((size_t)(T * B * I), sizeof(double));
  for (int64_t t = 0; t < T; t++)
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < I; i++)
        xc[(t * B + b) * I + i] = x[((i < IX ? t : 0) * B + b) * I + i];
  double *yr = xcalloc(ny, sizeof(double)), *hr = xcalloc(nh, sizeof(double)),
         *cr = xcalloc(nc, sizeof(double));
  ref_lstm(m, T, B, xc, len, h0, c0, yr, hr, cr);
  if (!use_len) len = NULL; /* every length T: the entry runs without lengths */
  /* gb[d][b][j] = W_s s_b; g[t][b][d*4H + j] = W_x x_t; gf = g + gb */
  double *gb = xcalloc(nb, sizeof(double)), *g = xcalloc(ng, sizeof(double)),
         *gf = xcalloc(ng, sizeof(double));
  for (int64_t d = 0; d < D; d++)
    for (int64_t b = 0; b < B; b++)
      for (int64_t j = 0; j < G4; j++) {
        double a = 0.0;
        for (int64_t k = IX; k < I; k++) a += m->w_ih[d][j * I + k] * xc[b * I + k];
        gb[(d * B + b) * G4 + j] = round_if(a, to_float);
        for (int64_t t = 0; t < T; t++) {
          double v = 0.0;
          for (int64_t k = 0; k < IX; k++) v += m->w_ih[d][j * I + k] * xc[(t * B + b) * I + k];
          const size_t at = (size_t)((t * B + b) * D * G4 + d * G4 + j);
          g[at] = round_if(v, to_float);
          gf[at] = round_if(v + a, to_float);
        }
      }
  void *xio = to_io(xc, (size_t)(T * B * I), dt), *gbio = to_io(gb, nb, dt);
  void *gio = to_io(g, ng, dt), *gfio = to_io(gf, ng, dt);
  void *h0io = to_io(h0, nh, dt), *c0io = to_io(c0, nc, dt);
  const size_t esz = io_size(dt);
  void *y = xcalloc(ny, esz), *hn = xcalloc(nh, esz), *cn = xcalloc(nc, esz);
  void* y3 = xcalloc(ny, esz);
  double *yd = xcalloc(ny, sizeof(double)), *hd = xcalloc(nh, sizeof(double)),
         *cd = xcalloc(nc, sizeof(double));
  dl_model f;
  dl_model_init(&f, m, dt);
  const int per = 2 + 2 * (c->bias != 0) + (c->P > 0);
  for (int d = 0; d < D; d++) f.shape[d * per][1] = IX; /* layer 0's W_x: the first IX columns */
  const double tol = 2 * tolerance(dt);
  static const char* what[3] = {"gate_bias (style folded)", "x_gates + gate_bias",
                                "x_gates (full projection)"};
  for (int k = 0; k < 3; k++) {
    kl_status st;
    if (k == 0)
      st = gate_forward(&f, m, dt, T, B, xio, IX, I, 0, gbio, h0io, c0io, len, y, hn, cn, 1);
    else
      st = gate_forward(&f, m, dt, T, B, k == 1 ? gio : gfio, D * G4, D * G4, 1,
                        k == 1 ? gbio : NULL, h0io, c0io, len, y, hn, cn, 1);
    for (size_t i = 0; i < ny; i++) yd[i] = io_get(y, i, dt);
    for (size_t i = 0; i < nh; i++) hd[i] = io_get(hn, i, dt);
    for (size_t i = 0; i < nc; i++) cd[i] = io_get(cn, i, dt);
    const double ey = max_err(yd, yr, ny), eh = max_err(hd, hr, nh), ec = max_err(cd, cr, nc);
    check(st == KL_OK && ey <= tol && eh <= tol && ec <= tol,
          "%s %s vs double reference: %s max|dy|=%.3g max|dh_n|=%.3g max|dc_n|=%.3g (tol %.0e)%s%s",
          tag, what[k], kl_status_str(st), ey, eh, ec, tol, st ? " " : "", st ? kl_last_error() : "");
    st = gate_forward(&f, m, dt, T, B, k == 0 ? xio : k == 1 ? gio : gfio, k ? D * G4 : IX,
                      k ? D * G4 : I, k != 0, k < 2 ? gbio : NULL, h0io, c0io, len, y3, hn, cn, 3);
    check(st == KL_OK && memcmp(y, y3, ny * esz) == 0, "%s %s: num_threads 1 and 3 bitwise",
          tag, what[k]);
  }
  dl_model_free(&f);
  free(xc), free(yr), free(hr), free(cr), free(gb), free(g), free(gf);
  free(xio), free(gbio), free(gio), free(gfio), free(h0io), free(c0io);
  free(y), free(hn), free(cn), free(y3), free(yd), free(hd), free(cd);
}

/* kl_lstm_forward rejects bad gate_bias / x_gates arguments, naming them. */
static void test_gate_args(void) {
  enum { T = 3, B = 2, I = 4, H = 5, D = 2 };
  float wih[4 * H * I] = {0}, whh[4 * H * H] = {0}, x[T * B * I] = {0}, g[T * B * D * 4 * H] = {0};
  float y[T * B * D * H], gb[D * B * 4 * H] = {0};
  const DLDataType f32 = {kDLFloat, 32, 1}, f64 = {kDLFloat, 64, 1};
  const DLDevice cpu = {kDLCPU, 0};
  int64_t swih[2] = {4 * H, I}, swhh[2] = {4 * H, H}, sx[3] = {T, B, I}, sg[3] = {T, B, D * 4 * H};
  int64_t sy[3] = {T, B, D * H}, sgb[3] = {D, B, 4 * H}, sgb_bad[3] = {1, B, 4 * H};
  int64_t sgb2[2] = {D * B, 4 * H}, stgb[3] = {B * 8 * H, 8 * H, 2};
  DLTensor twih = {wih, cpu, 2, f32, swih, NULL, 0}, twhh = {whh, cpu, 2, f32, swhh, NULL, 0};
  const DLTensor* w[4] = {&twih, &twhh, &twih, &twhh};
  DLTensor tx = {x, cpu, 3, f32, sx, NULL, 0}, tg = {g, cpu, 3, f32, sg, NULL, 0};
  DLTensor ty = {y, cpu, 3, f32, sy, NULL, 0}, tgb = {gb, cpu, 3, f32, sgb, NULL, 0};
  kl_forward_args good;
  memset(&good, 0, sizeof(good));
  good.num_layers = 1;
  good.bidirectional = 1;
  good.num_threads = 1;
  good.x = &tx;
  good.weights = w;
  good.num_weights = 4;
  good.y = &ty;
  good.gate_bias = &tgb;
  kl_status st = kl_lstm_forward(&good);
  check(st == KL_OK, "[args] kl_lstm_forward with a gate_bias -> %s %s", kl_status_str(st), kl_last_error());
  kl_forward_args a = good;
  a.x = &tg;
  a.x_gates = 1;
  st = kl_lstm_forward(&a);
  check(st == KL_OK, "[args] kl_lstm_forward with x_gates and a gate_bias -> %s %s",
        kl_status_str(st), kl_last_error());
  struct {
    const char* label;
    const char* want; /* a part of kl_last_error() */
    DLTensor* gbt;
    DLTensor* xt;
    int x_gates;
  } bad[] = {
      {"gate_bias of 1 direction", "gate_bias must have shape (2, 2, 20), got (1, 2, 20)",
       &(DLTensor){gb, cpu, 3, f32, sgb_bad, NULL, 0}, &tx, 0},
      {"gate_bias 2-D", "gate_bias must be 3-D", &(DLTensor){gb, cpu, 2, f32, sgb2, NULL, 0}, &tx, 0},
      {"gate_bias float64", "gate_bias must have dtype float32, got float64",
       &(DLTensor){gb, cpu, 3, f64, sgb, NULL, 0}, &tx, 0},
      {"gate_bias strided", "gate_bias must be contiguous", &(DLTensor){gb, cpu, 3, f32, sgb, stgb, 0},
       &tx, 0},
      {"gate_bias on a GPU", "every tensor of a call must be on one device",
       &(DLTensor){gb, {kDLCUDA, 0}, 3, f32, sgb, NULL, 0}, &tx, 0},
      {"gate_bias without data", "gate_bias has no data", &(DLTensor){NULL, cpu, 3, f32, sgb, NULL, 0},
       &tx, 0},
      {"x_gates 2", "x_gates must be 0 or 1, got 2", NULL, &tg, 2},
      {"x_gates with input-sized x", "must have 40 features (num_directions 2 x 4 x hidden_size 5), got 4",
       NULL, &tx, 1},
      {"gates without x_gates", "weights[0] (w_ih of layer 0) must have shape", NULL, &tg, 0},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    a = good;
    a.gate_bias = bad[i].gbt;
    a.x = bad[i].xt;
    a.x_gates = bad[i].x_gates;
    st = kl_lstm_forward(&a);
    check(st == KL_ERR_ARG && strstr(kl_last_error(), bad[i].want) != NULL,
          "[args] kl_lstm_forward %s -> %s \"%s\" (want KL_ERR_ARG \"%s\")", bad[i].label,
          kl_status_str(st), kl_last_error(), bad[i].want);
  }
  kl_cache_clear();
}

static void test_case(const tcase* c, kl_dtype dt, const char* isa) {
  model m;
  model_init(&m, c, dt != KL_F64);
  const int64_t T = c->T, B = c->B;
  const int D = m.D, R = m.R, H = c->H, LD = c->L * D;
  const size_t ny = (size_t)(T * B * D * R), nh = (size_t)(LD * B * R), nc = (size_t)(LD * B * H);
  double* x = rand_array((size_t)(T * B * c->I), 1.0, dt != KL_F64);
  int64_t* len = xcalloc((size_t)B, sizeof(int64_t));
  for (int64_t b = 0; b < B; b++) {
    if (c->lengths == 1) len[b] = T - (b * 3) % T;      /* b == 0 has T */
    else if (c->lengths == 2) len[b] = 1 + (b * 5 + 2) % (T - 1); /* all < T */
    else len[b] = T;
  }
  double *h0 = NULL, *c0 = NULL;
  if (c->state) {
    h0 = rand_array(nh, 0.5, dt != KL_F64);
    c0 = rand_array(nc, 0.5, dt != KL_F64);
  }
  double* y = xcalloc(ny, sizeof(double));
  double* hn = xcalloc(nh, sizeof(double));
  double* cn = xcalloc(nc, sizeof(double));
  ref_lstm(&m, T, B, x, len, h0, c0, y, hn, cn);

  char tag[256];
  snprintf(tag, sizeof(tag), "[%s %s %s: I=%d H=%d L=%d D=%d P=%d%s T=%lld B=%lld%s%s %s]", isa,
           dtype_name(dt), c->name, c->I, H, c->L, D, c->P, c->reverse ? " reverse" : "",
           (long long)T, (long long)B, c->lengths ? " lengths" : "", c->state ? " h0/c0" : "",
           layout_name[c->layout]);

  kl_lstm* lm = NULL;
  const kl_status cst = create_engine(&m, dt, &lm);
  check(cst == KL_OK, "%s create: %s", tag, kl_status_str(cst));
  if (cst == KL_OK) {
    run_input in = {&m, dt, T, B, x, c->lengths ? len : NULL, h0, c0};
    result r1, rn;
    run_engine(lm, NULL, &in, 1, &r1);
    if (r1.st != KL_OK) {
      check(0, "%s run: %s", tag, kl_status_str(r1.st));
    } else {
      const double ey = max_err(r1.y, y, ny), eh = max_err(r1.hnd, hn, nh), ec = max_err(r1.cnd, cn, nc);
      const double tol = tolerance(dt);
      int zeros = 1;
      for (int64_t b = 0; b < B; b++)
        for (int64_t t = len[b]; t < T; t++)
          for (int j = 0; j < D * R; j++)
            if (r1.y[(size_t)((t * B + b) * D * R + j)] != 0.0) zeros = 0;
      check(ey <= tol && eh <= tol && ec <= tol && zeros && r1.pad_ok,
            "%s vs double reference: max|dy|=%.3g max|dh_n|=%.3g max|dc_n|=%.3g (tol %.0e)%s%s", tag,
            ey, eh, ec, tol, zeros ? "" : " NONZERO OUTPUT PAST LENGTH",
            r1.pad_ok ? "" : " ROW PADDING OVERWRITTEN");
      int same = 1;
      char detail[128] = "";
      /* 16 threads: 8 per direction, so batches of more than one chunk
       * (B > 16) run on a grid of chunk groups x unit threads */
      static const int nths[] = {2, 4, 16};
      for (size_t k = 0; k < sizeof(nths) / sizeof(nths[0]); k++) {
        const int nth = nths[k];
        run_engine(lm, NULL, &in, nth, &rn);
        if (rn.st != KL_OK || memcmp(rn.ybuf, r1.ybuf, r1.ybytes) != 0 ||
            memcmp(rn.hn, r1.hn, r1.hnbytes) != 0 || memcmp(rn.cn, r1.cn, r1.cnbytes) != 0) {
          same = 0;
          snprintf(detail, sizeof(detail), " (num_threads=%d: %s, max|dy| vs 1 thread %.3g)", nth,
                   kl_status_str(rn.st), max_err(rn.y, r1.y, ny));
        }
        result_free(&rn);
      }
      check(same, "%s num_threads 1,2,4,16 bitwise identical%s", tag, detail);
      test_forward_entry(&m, &in, &r1, tag);
      test_gate_input(&m, dt, x, len, c->lengths != 0, h0, c0, tag);
      /* again on a trusted entry (a float32 input projection: W_ih's panels, gate bias added per panel run);
       * its buffers are freed after the test, so no entry may outlive it */
      char ttag[sizeof(tag) + 16];
      snprintf(ttag, sizeof(ttag), "%s trusted", tag);
      kl_cache_clear();
      g_fwd_constant = 1;
      test_gate_input(&m, dt, x, len, c->lengths != 0, h0, c0, ttag);
      g_fwd_constant = 0;
      kl_cache_clear();
    }
    result_free(&r1);
    kl_lstm_free(lm);
  }
  free(x);
  free(len);
  free(h0);
  free(c0);
  free(y);
  free(hn);
  free(cn);
  model_free(&m);
}

/* ---- concurrent runs on one object -------------------------------------- */

typedef struct conc_arg {
  const kl_lstm* lm;
  const run_input* in;
  result r;
} conc_arg;

static void* conc_main(void* p) {
  conc_arg* a = p;
  for (int rep = 0; rep < 3; rep++) {
    if (rep) result_free(&a->r);
    run_engine(a->lm, NULL, a->in, 2, &a->r);
  }
  return NULL;
}

static const tcase* find_case(const char* name) {
  for (int i = 0; i < NCASES; i++)
    if (strcmp(CASES[i].name, name) == 0) return &CASES[i];
  fprintf(stderr, "test_core: no case %s\n", name);
  exit(2);
}

static void test_concurrent(const char* isa) {
  const tcase* c = find_case("bi-h33-proj-lengths");
  model m;
  model_init(&m, c, 1);
  double* x = rand_array((size_t)(c->T * c->B * c->I), 1.0, 1);
  int64_t* len = xcalloc((size_t)c->B, sizeof(int64_t));
  for (int64_t b = 0; b < c->B; b++) len[b] = c->T - (b * 3) % c->T;
  kl_lstm* lm = NULL;
  if (create_engine(&m, KL_F32, &lm) != KL_OK) {
    check(0, "[%s] concurrent runs: create failed", isa);
  } else {
    run_input in = {&m, KL_F32, c->T, c->B, x, len, NULL, NULL};
    result serial;
    run_engine(lm, NULL, &in, 2, &serial);
    conc_arg args[3];
    pthread_t th[3];
    int ok = serial.st == KL_OK;
    for (int i = 0; i < 3; i++) {
      args[i].lm = lm;
      args[i].in = &in;
      memset(&args[i].r, 0, sizeof(args[i].r));
      if (pthread_create(&th[i], NULL, conc_main, &args[i]) != 0) {
        fprintf(stderr, "test_core: pthread_create failed\n");
        exit(2);
      }
    }
    for (int i = 0; i < 3; i++) {
      pthread_join(th[i], NULL);
      ok = ok && args[i].r.st == KL_OK && memcmp(args[i].r.ybuf, serial.ybuf, serial.ybytes) == 0 &&
           memcmp(args[i].r.hn, serial.hn, serial.hnbytes) == 0;
      result_free(&args[i].r);
    }
    check(ok, "[%s float32 %s] 3 threads running one kl_lstm at once match a serial run bitwise",
          isa, c->name);
    result_free(&serial);
    kl_lstm_free(lm);
  }
  free(x);
  free(len);
  model_free(&m);
}

/* ---- activations -------------------------------------------------------- */

static void test_activations(const char* isa) {
  enum { N = 4001 };
  float* xs = xcalloc(N, sizeof(float));
  float* ys = xcalloc(N, sizeof(float));
  for (int i = 0; i < N; i++) xs[i] = (float)(-30.0 + 60.0 * i / (N - 1));
  for (int kind = 0; kind < 2; kind++) {
    kl_f32_activation(kind, N, xs, ys);
    double e = 0.0;
    for (int i = 0; i < N; i++) {
      const double ref = kind == 0 ? sigm((double)xs[i]) : tanh((double)xs[i]);
      const double d = fabs((double)ys[i] - ref);
      if (!(d <= e)) e = isfinite(d) ? d : INFINITY;
    }
    check(e <= 2e-6, "[%s] kl_f32_activation %s on [-30, 30]: max abs error %.3g (tol 2e-6)", isa,
          kind == 0 ? "sigmoid" : "tanh", e);
  }
  free(xs);
  free(ys);
}

/* ---- argument checks ---------------------------------------------------- */

static void test_bad_args(void) {
  const int I = 5, H = 7;
  float* wih = xcalloc(4 * H * I, sizeof(float));
  float* whh = xcalloc(4 * H * H, sizeof(float));
  float* whr = xcalloc((size_t)H * H, sizeof(float));
  kl_weights w = {wih, whh, NULL, NULL, NULL};
  kl_weights wp = {wih, whh, NULL, NULL, whr};
  const kl_lstm_desc good = {I, H, 1, 0, 0, 0, KL_F32};
  kl_lstm* lm = NULL;
  kl_lstm* tmp;
  kl_status st;
  kl_lstm_desc d;

#define EXPECT_CREATE(label, desc_ptr, w_ptr, out_ptr)                                      \
  do {                                                                                      \
    tmp = (kl_lstm*)0;                                                                      \
    st = kl_lstm_create(desc_ptr, w_ptr, out_ptr);                                          \
    check(st == KL_ERR_ARG, "[args] kl_lstm_create %s -> %s (want KL_ERR_ARG)", label,      \
          kl_status_str(st));                                                               \
    if (st == KL_OK && tmp) kl_lstm_free(tmp);                                              \
  } while (0)

  EXPECT_CREATE("desc NULL", NULL, &w, &tmp);
  EXPECT_CREATE("weights NULL", &good, NULL, &tmp);
  EXPECT_CREATE("out NULL", &good, &w, NULL);
  d = good; d.input_size = 0;
  EXPECT_CREATE("input_size 0", &d, &w, &tmp);
  d = good; d.hidden_size = 0;
  EXPECT_CREATE("hidden_size 0", &d, &w, &tmp);
  d = good; d.num_layers = 0;
  EXPECT_CREATE("num_layers 0", &d, &w, &tmp);
  d = good; d.bidirectional = 2;
  EXPECT_CREATE("bidirectional 2", &d, &w, &tmp);
  d = good; d.proj_size = H;
  EXPECT_CREATE("proj_size == hidden_size", &d, &wp, &tmp);
  d = good; d.proj_size = H + 1;
  EXPECT_CREATE("proj_size > hidden_size", &d, &wp, &tmp);
  d = good; d.proj_size = -1;
  EXPECT_CREATE("proj_size -1", &d, &w, &tmp);
  d = good; d.proj_size = 3;
  EXPECT_CREATE("proj_size 3 without w_hr", &d, &w, &tmp);
  EXPECT_CREATE("w_hr without proj_size", &good, &wp, &tmp);
  {
    kl_weights wn = {NULL, whh, NULL, NULL, NULL};
    EXPECT_CREATE("w_ih NULL", &good, &wn, &tmp);
    kl_weights wn2 = {wih, NULL, NULL, NULL, NULL};
    EXPECT_CREATE("w_hh NULL", &good, &wn2, &tmp);
  }
  d = good; d.bidirectional = 1; d.reverse = 1;
  {
    kl_weights w2[2] = {w, w};
    EXPECT_CREATE("reverse with bidirectional", &d, w2, &tmp);
  }
  d = good; d.dtype = (kl_dtype)7;
  EXPECT_CREATE("dtype 7", &d, &w, &tmp);
#undef EXPECT_CREATE

  st = kl_lstm_create(&good, &w, &lm);
  check(st == KL_OK && lm != NULL, "[args] kl_lstm_create of a valid 5->7 LSTM -> %s",
        kl_status_str(st));
  if (st != KL_OK || !lm) goto out;
  check(kl_lstm_get_desc(lm)->hidden_size == H && kl_lstm_get_desc(lm)->input_size == I,
        "[args] kl_lstm_get_desc returns the description");

  {
    enum { T = 4, B = 3 };
    float x[T * B * 5] = {0};
    float y[T * B * 7] = {0};
    int64_t lens[B] = {4, 2, 1};
    kl_run_args good_a;
    memset(&good_a, 0, sizeof(good_a));
    good_a.T = T;
    good_a.B = B;
    good_a.x = x;
    good_a.x_sb = I;
    good_a.x_st = B * I;
    good_a.y = y;
    good_a.y_sb = H;
    good_a.y_st = B * H;
    good_a.lengths = lens;
    good_a.num_threads = 1;
    kl_run_args a;

#define EXPECT_RUN(label, lstm, args_ptr)                                                    \
  do {                                                                                      \
    st = kl_lstm_run(lstm, args_ptr);                                                       \
    check(st == KL_ERR_ARG, "[args] kl_lstm_run %s -> %s (want KL_ERR_ARG)", label,         \
          kl_status_str(st));                                                               \
  } while (0)

    st = kl_lstm_run(lm, &good_a);
    check(st == KL_OK, "[args] kl_lstm_run with valid arguments -> %s", kl_status_str(st));
    EXPECT_RUN("lstm NULL", NULL, &good_a);
    EXPECT_RUN("args NULL", lm, NULL);
    a = good_a; a.T = 0;
    EXPECT_RUN("T=0", lm, &a);
    a = good_a; a.T = -1;
    EXPECT_RUN("T=-1", lm, &a);
    a = good_a; a.B = -1;
    EXPECT_RUN("B=-1", lm, &a);
    a = good_a; a.x = NULL;
    EXPECT_RUN("x NULL", lm, &a);
    a = good_a; a.y = NULL;
    EXPECT_RUN("y NULL", lm, &a);
    a = good_a; a.num_threads = 0;
    EXPECT_RUN("num_threads 0", lm, &a);
    {
      int64_t bad[B] = {4, 0, 1};
      a = good_a; a.lengths = bad;
      EXPECT_RUN("a length 0", lm, &a);
    }
    {
      int64_t bad[B] = {4, T + 1, 1};
      a = good_a; a.lengths = bad;
      EXPECT_RUN("a length T+1", lm, &a);
    }
    {
      int64_t bad[B] = {-3, 2, 1};
      a = good_a; a.lengths = bad;
      EXPECT_RUN("a length -3", lm, &a);
    }
    a = good_a; a.x_sb = I + 1; /* x_st == B*I no longer B*x_sb: not one strided sequence */
    EXPECT_RUN("x strides not one sequence", lm, &a);
    a = good_a; a.x_sb = I - 1; a.x_st = B * (I - 1); /* rows overlap */
    EXPECT_RUN("x row stride < input_size", lm, &a);
#undef EXPECT_RUN
  }
  kl_lstm_free(lm);
out:
  kl_lstm_free(NULL); /* must be a no-op */
  st = kl_isa_set((kl_isa)7);
  check(st == KL_ERR_ARG, "[args] kl_isa_set(7) -> %s (want KL_ERR_ARG)", kl_status_str(st));
  st = kl_isa_set((kl_isa)-1);
  check(st == KL_ERR_ARG, "[args] kl_isa_set(-1) -> %s (want KL_ERR_ARG)", kl_status_str(st));
  free(wih);
  free(whh);
  free(whr);
}

/* ---- SIMD kernels vs the scalar ones ------------------------------------ */

/* Both NaN, both the same infinity, or |a - b| <= tol * max(1, |b|). */
static int close_f(float a, float b, double tol) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs((double)a - (double)b) <= tol * fmax(1.0, fabs((double)b));
}

/* Worst mismatch of n floats: returns 1 if all close, else records the first. */
static int all_close(const float* a, const float* b, size_t n, double tol, char* why, size_t wn,
                     const char* what) {
  for (size_t i = 0; i < n; i++)
    if (!close_f(a[i], b[i], tol)) {
      snprintf(why, wn, " (%s[%zu]: %.9g vs scalar %.9g)", what, i, (double)a[i], (double)b[i]);
      return 0;
    }
  return 1;
}

static const float SPECIALS[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f,
                                 -88.0f, 100.0f, -100.0f, 1e30f, -1e30f, 0.5f, -0.5f};
#define NSPECIALS ((int)(sizeof(SPECIALS) / sizeof(SPECIALS[0])))

/* A fingerprint kernel of the list: the same integers as the scalar kernel; one
 * flipped bit anywhere changes them. */
static void test_fp_kernel(const kl_fp_entry* e) {
  enum { NB = 64 * 37 };
  unsigned char* buf = xcalloc(NB, 1);
  for (size_t i = 0; i < NB; i++) buf[i] = (unsigned char)(urand(0, 256));
  uint64_t as[8] = {0}, av[8] = {0};
  kl_u64_fingerprint__scalar(buf, NB, as);
  e->fn(buf, NB, av);
  int ok = memcmp(as, av, sizeof(as)) == 0;
  for (size_t bit = 0; bit < NB * 8 && ok; bit += 97) {
    uint64_t a2[8] = {0};
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    e->fn(buf, NB, a2);
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    if (memcmp(a2, as, sizeof(as)) == 0) ok = 0;
  }
  check(ok, "[list %s] == scalar, and every flipped bit tried changes it", e->name);
  free(buf);
}

/* ---- every kernel of every list vs the scalar kernel of its type ---------- */

static const char* wtype_name(kl_wtype wt) {
  switch (wt) {
    case KL_W_F32: return "f32";
    case KL_W_F64: return "f64";
    case KL_W_BF16: return "bf16";
    case KL_W_F16: return "f16";
  }
  return "?";
}

/* 1 if this CPU has what a list entry needs (else the entry is skipped). */
static int cpu_has(unsigned arch, const char* name) {
  if ((arch & ~(kl_arch_detected() | KL_ARCH_F16_NARROW)) == 0) return 1; /* a preference: run it */
  printf("SKIP [kernel %s] this CPU lacks its features (0x%x)\n", name, arch);
  return 0;
}

/* Panel elements of nblk 16-unit blocks over R inputs (cell), and their size. */
static size_t panel_elems(kl_wtype wt, size_t R, size_t nblk) {
  return wt == KL_W_BF16 ? nblk * ((R + 1) / 2) * 128 : nblk * R * 64;
}
static size_t wsize(kl_wtype wt) { return wt == KL_W_F64 ? 8 : wt == KL_W_F32 ? 4 : 2; } /* bf16, f16: 2 */

/* Random panel values in [-0.5, 0.5) stored in the weight type; the pad k of each
 * bfloat16 pair is zero for odd R, as the core packs it. */
static void* random_panel(kl_wtype wt, size_t R, size_t nblk) {
  const size_t n = panel_elems(wt, R, nblk), npair = (R + 1) / 2;
  void* w = aligned_alloc(64, (n * wsize(wt) + 63) / 64 * 64);
  if (!w) exit(2);
  for (size_t i = 0; i < n; i++) {
    const float v = (float)urand(-0.5, 0.5);
    if (wt == KL_W_BF16) ((uint16_t*)w)[i] = (wt == KL_W_BF16 && (R & 1) && (i & 1) &&
                                              (i / 128) % npair == npair - 1) ? 0 : kl_f32_to_bf16(v);
    else if (wt == KL_W_F16) ((uint16_t*)w)[i] = kl_f32_to_f16(v);
    else if (wt == KL_W_F64) ((double*)w)[i] = v;
    else ((float*)w)[i] = v;
  }
  return w;
}

static const kl_lstmcell_entry* scalar_cell(kl_wtype wt) {
  for (size_t i = 0; i < kl_lstmcell_count; i++)
    if (kl_lstmcell_list[i].wt == wt && kl_lstmcell_list[i].arch == 0) return &kl_lstmcell_list[i];
  return NULL;
}
static const kl_lstmproj_entry* scalar_proj(kl_wtype wt) {
  for (size_t i = 0; i < kl_lstmproj_count; i++)
    if (kl_lstmproj_list[i].wt == wt && kl_lstmproj_list[i].arch == 0) return &kl_lstmproj_list[i];
  return NULL;
}

/* Kernels that round h to bfloat16 (BF16 dot-product instructions) are looser. */
static double kernel_tol(kl_wtype wt, const char* isa) {
  return wt == KL_W_BF16 && (strstr(isa, "bf16") || strcmp(isa, "avx512amx") == 0) ? 2e-2 : 2e-5;
}

#define KNB 16 /* batch rows: 1, 3, 6, 8, 13, 16 (tiles of up to 4 or 6 rows, split evenly) */
#define KR 40 /* largest R */

static void test_cell_kernel(const kl_lstmcell_entry* k) {
  const kl_lstmcell_entry* ref = scalar_cell(k->wt);
  char why[200] = "";
  if (!ref) {
    check(0, "[kernel %s] has a scalar kernel of its type to compare with", k->name);
    return;
  }
  const double tol = kernel_tol(k->wt, k->isa);
  const size_t Rs[] = {1, 2, 3, 17, 33, KR}, nbs[] = {1, 3, 6, 8, 13, KNB};
  int ok = 1;
  for (size_t ri = 0; ri < sizeof(Rs) / sizeof(Rs[0]) && ok; ri++)
    for (size_t ni = 0; ni < sizeof(nbs) / sizeof(nbs[0]) && ok; ni++)
      for (int special = 0; special < 4 && ok; special++) { /* none, +-inf in h, NaN in h, NaN/inf in gx and c */
        const size_t R = Rs[ri], nblk = 2, Hp = nblk * KL_NR, nb = nbs[ni];
        void* w = random_panel(k->wt, R, nblk);
        float bias[4 * 32], gx[KNB][4 * 32], h[KNB][KR], c_s[KNB][32], c_v[KNB][32], o_s[KNB][32],
            o_v[KNB][32], c_in[KNB][32];
        for (size_t i = 0; i < 4 * Hp; i++) bias[i] = (float)urand(-1.0, 1.0);
        for (size_t e = 0; e < nb; e++) {
          for (size_t i = 0; i < 4 * Hp; i++) gx[e][i] = (float)urand(-2.0, 2.0);
          for (size_t i = 0; i < KR; i++) h[e][i] = (float)urand(-1.0, 1.0);
          for (size_t i = 0; i < Hp; i++) c_in[e][i] = c_s[e][i] = c_v[e][i] = (float)urand(-1.0, 1.0);
          for (size_t i = 0; i < Hp; i++) o_s[e][i] = o_v[e][i] = 12345.0f;
        }
        if (special == 1) { h[0][R - 1] = INFINITY; h[nb - 1][R / 2] = -INFINITY; }
        if (special == 2) h[nb / 2][R / 3] = NAN;
        if (special == 3) {
          gx[0][5] = NAN;
          gx[nb - 1][Hp + 17] = INFINITY; /* forget gate of unit 17 saturates */
          c_s[nb - 1][17] = c_v[nb - 1][17] = -INFINITY;
          gx[nb / 2][2 * Hp + 3] = -INFINITY;
        }
        kl_cell_row rs[KNB], rv[KNB];
        for (size_t e = 0; e < nb; e++) {
          rs[e] = (kl_cell_row){gx[e], h[e], c_s[e], o_s[e]};
          rv[e] = (kl_cell_row){gx[e], h[e], c_v[e], o_v[e]};
        }
        ref->fn(R, Hp, 0, nblk, w, bias, nb, rs);
        k->fn(R, Hp, 0, nblk, w, bias, nb, rv);
        for (size_t e = 0; e < nb && ok; e++)
          ok = all_close(c_v[e], c_s[e], Hp, tol, why, sizeof(why), "c") &&
               all_close(o_v[e], o_s[e], Hp, tol, why, sizeof(why), "h");
        /* the engine deals rows to threads and tiles by count: a row's bits must
         * not depend on the rows beside it (each row alone, finite inputs) */
        for (size_t e = 0; e < nb && ok && special == 0; e++) {
          float c1[32], o1[32];
          memcpy(c1, c_in[e], sizeof(c1));
          kl_cell_row r1 = {gx[e], h[e], c1, o1};
          k->fn(R, Hp, 0, nblk, w, bias, 1, &r1);
          if (memcmp(c1, c_v[e], Hp * sizeof(float)) || memcmp(o1, o_v[e], Hp * sizeof(float))) {
            ok = 0;
            snprintf(why, sizeof(why), " row %zu alone differs from the same row among %zu", e, nb);
          }
        }
        if (!ok)
          snprintf(why + strlen(why), sizeof(why) - strlen(why), " R=%zu nb=%zu special=%d", R, nb,
                   special);
        free(w);
      }
  check(ok, "[kernel %s] %s cell vs %s: R = 1, 2, 3, 17, 33, 40, 1/3/6/8/13/16 rows, +-inf / NaN in h, "
        "NaN / inf in gates and c (tol %.0e); each row alone gives the same bits%s", k->name,
        wtype_name(k->wt), ref->name, tol, why);
}

static void test_proj_kernel(const kl_lstmproj_entry* k) {
  const kl_lstmproj_entry* ref = scalar_proj(k->wt);
  char why[200] = "";
  if (!ref) {
    check(0, "[kernel %s] has a scalar kernel of its type to compare with", k->name);
    return;
  }
  const double tol = kernel_tol(k->wt, k->isa);
  const size_t Hs[] = {1, 2, 3, 17, 33, KR};
  int ok = 1;
  for (size_t hi = 0; hi < sizeof(Hs) / sizeof(Hs[0]) && ok; hi++)
    for (size_t nb = 1; nb <= 9 && ok; nb += 4) /* 1, 5, 9: the 8-row tile and remainders */
      for (int special = 0; special < 3 && ok; special++) {
        const size_t H = Hs[hi], nblk = 2;
        void* w = random_panel(k->wt, H, nblk); /* larger than the projection needs */
        float h[9][KR], o_s[9][32], o_v[9][32];
        const void* hin[9];
        void *ps[9], *pv[9];
        for (size_t e = 0; e < nb; e++) {
          for (size_t i = 0; i < KR; i++) h[e][i] = (float)urand(-1.0, 1.0);
          for (size_t i = 0; i < 32; i++) o_s[e][i] = o_v[e][i] = 12345.0f;
          hin[e] = h[e];
          ps[e] = o_s[e];
          pv[e] = o_v[e];
        }
        if (special == 1) { h[0][H - 1] = INFINITY; h[nb - 1][H / 2] = -INFINITY; }
        if (special == 2) h[nb / 2][H / 3] = NAN;
        ref->fn(H, 0, nblk, w, nb, hin, ps);
        k->fn(H, 0, nblk, w, nb, hin, pv);
        for (size_t e = 0; e < nb && ok; e++) ok = all_close(o_v[e], o_s[e], 32, tol, why, sizeof(why), "proj");
        if (!ok) snprintf(why + strlen(why), sizeof(why) - strlen(why), " H=%zu nb=%zu special=%d", H, nb, special);
        free(w);
      }
  check(ok, "[kernel %s] %s projection vs %s: H = 1, 2, 3, 17, 33, 40, 1/5/9 rows, +-inf / NaN "
        "(tol %.0e)%s", k->name, wtype_name(k->wt), ref->name, tol, why);
}

/* Activations: odd lengths (vector tails), specials at every lane position. */
static void test_vunary_kernel(const kl_vunary_entry* k, const kl_vunary_entry* ref, const char* what) {
  enum { N = 67 };
  float x[N], ys[N], yv[N];
  char why[160] = "";
  int ok = 1;
  for (size_t n = 1; n <= N && ok; n += n < 20 ? 1 : 23) {
    for (size_t i = 0; i < n; i++)
      x[i] = i % 3 == 0 ? SPECIALS[(i / 3 + n) % NSPECIALS] : (float)urand(-20.0, 20.0);
    for (size_t i = 0; i < N; i++) ys[i] = yv[i] = 12345.0f;
    ref->fn(n, x, ys);
    k->fn(n, x, yv);
    ok = all_close(yv, ys, N, 2e-6, why, sizeof(why), what);
  }
  check(ok, "[kernel %s] %s vs %s, n = 1..20, 43, 66 with +-inf, NaN, +-0, +-1e30 (tol 2e-6, NaN "
        "for NaN, no write past n)%s", k->name, what, ref->name, why);
}

/* Snake against float64: y = z + c sin(t)^2 with z = (x - m) g + off and t = a z
 * rounded to float, within 6e-7 |c| + 2 eps |y|; with and without the affine step,
 * odd lengths, in place, z up to 1.2x the fast path's range (libm beyond it), +-inf
 * and NaN give NaN, no write past n. */
static void test_vsnake_kernel(const kl_vsnake_entry* k) {
  enum { N = 203 };
  static const float AS[] = {1.0f, 0.37f, 13.0f, -2.5f};
  float x[N], y[N];
  char why[200] = "";
  int ok = 1;
  for (size_t ia = 0; ia < 4 * 3 * 2 && ok; ia++) {
    const float a = AS[ia % 4], c = 1.0f / a;
    const int affine = ia >= 12;
    const float m = affine ? 0.75f : 0.0f, g = affine ? -1.5f : 1.0f, off = affine ? 0.3f : 0.0f;
    const double span = ia / 4 % 3 == 0   ? 20.0
                        : ia / 4 % 3 == 1 ? 2000.0
                                          : 1.2 * KL_SINSQ_RANGE / fabs(a) / fabs(g);
    for (size_t n = 1; n <= N && ok; n += n < 40 ? 1 : 37) {
      for (size_t i = 0; i < n; i++) x[i] = (float)urand(-span, span);
      if (n > 8) x[n / 3] = INFINITY, x[n / 2] = NAN, x[n - 2] = -INFINITY, x[1] = 0.0f;
      for (size_t i = 0; i < N; i++) y[i] = 12345.0f;
      const int inplace = n % 2;
      if (inplace) memcpy(y, x, n * sizeof(float));
      k->fn(n, inplace ? y : x, m, g, off, a, c, y);
      for (size_t i = 0; i < N && ok; i++) {
        if (i >= n) {
          ok = y[i] == 12345.0f;
          if (!ok) snprintf(why, sizeof(why), " (write past n=%zu)", n);
          continue;
        }
        const float z = (x[i] - m) * g + off;
        const double sn = sin((double)(a * z));
        const double ref = (double)z + (double)c * sn * sn;
        if (isnan(ref) || isinf(x[i])) {
          ok = isnan(y[i]);
        } else {
          ok = fabs((double)y[i] - ref) <= 6e-7 * fabs((double)c) + 2.0 * FLT_EPSILON * fabs(ref);
        }
        if (!ok)
          snprintf(why, sizeof(why), " (a=%g affine=%d n=%zu x[%zu]=%.9g: %.9g vs float64 %.9g)",
                   (double)a, affine, n, i, (double)x[i], (double)y[i], ref);
      }
    }
  }
  check(ok, "[kernel %s] snake vs float64, a = 1, 0.37, 13, -2.5, c = 1/a, with and without "
        "(x - m) g + off first, |a z| up to 1.2x %g, n = 1..40, 77, ..., in place, +-inf / NaN give "
        "NaN, no write past n%s",
        k->name, (double)KL_SINSQ_RANGE, why);
}

/* Row moments: every entry gives the scalar entry's bits; within 1e-15 relative of a
 * long double two-pass reference; a constant row has variance 0 exactly; NaN gives
 * NaN. Lengths around the 32 lanes. */
static void test_rmoments_kernel(const kl_rmoments_entry* k, const kl_rmoments_entry* ref) {
  enum { N = 300 };
  float x[N];
  char why[200] = "";
  int ok = 1;
  for (size_t n = 1; n <= N && ok; n += n < 70 ? 1 : 53) {
    const double off = n % 3 == 0 ? 1e4 : 0.5;
    for (size_t i = 0; i < n; i++) x[i] = (float)(urand(-3.0, 3.0) + off);
    double m, v, mr, vr;
    k->fn(n, x, &m, &v);
    ref->fn(n, x, &mr, &vr);
    long double sl = 0, ql = 0;
    for (size_t i = 0; i < n; i++) sl += x[i];
    const long double ml = sl / n;
    for (size_t i = 0; i < n; i++) ql += (x[i] - ml) * (x[i] - ml);
    const long double vl = ql / n;
    ok = memcmp(&m, &mr, sizeof(m)) == 0 && memcmp(&v, &vr, sizeof(v)) == 0 &&
         fabsl(m - ml) <= 1e-15L * fabsl(ml) + 1e-300L && fabsl(v - vl) <= 1e-13L * vl + 1e-300L;
    if (!ok) snprintf(why, sizeof(why), " (n=%zu: mean %.17g var %.17g, scalar %.17g %.17g, long double "
                      "%.17Lg %.17Lg)", n, m, v, mr, vr, ml, vl);
    if (ok) {
      for (size_t i = 0; i < n; i++) x[i] = 3.7f;
      k->fn(n, x, &m, &v);
      ok = v == 0.0 && m == (double)3.7f;
      if (!ok) snprintf(why, sizeof(why), " (n=%zu: constant row gave var %g)", n, v);
    }
    if (ok && n > 1) {
      x[n / 2] = NAN;
      k->fn(n, x, &m, &v);
      ok = isnan(m) && isnan(v);
      if (!ok) snprintf(why, sizeof(why), " (n=%zu: a NaN did not give NaN)", n);
    }
  }
  check(ok, "[kernel %s] row mean and variance: %s's bits, within 1e-15 / 1e-13 of long double, n = "
        "1..70, 123, ..., constant rows give 0, NaN gives NaN%s", k->name, ref->name, why);
}

/* Row softmax: finite rows (odd lengths, large magnitudes) within 2e-6 of the scalar
 * kernel, a row with NaN gives NaN, no write past n. */
static void test_softmax_kernel(const kl_vunary_entry* k, const kl_vunary_entry* ref) {
  enum { N = 67 };
  float x[N], ys[N], yv[N];
  char why[160] = "";
  int ok = 1;
  for (size_t n = 1; n <= N && ok; n += n < 20 ? 1 : 23) {
    for (size_t i = 0; i < n; i++) x[i] = (float)urand(-30.0, 30.0);
    for (size_t i = 0; i < N; i++) ys[i] = yv[i] = 12345.0f;
    ref->fn(n, x, ys);
    k->fn(n, x, yv);
    ok = all_close(yv, ys, N, 2e-6, why, sizeof(why), "softmax");
    if (ok && n > 2) { /* NaN in, NaN out */
      x[n / 2] = NAN;
      k->fn(n, x, yv);
      ok = isnan(yv[0]) && isnan(yv[n - 1]) && yv[n] == 12345.0f;
      if (!ok) snprintf(why, sizeof(why), " (n=%zu: a NaN input did not give NaN)", n);
    }
  }
  check(ok, "[kernel %s] softmax vs %s, n = 1..20, 43, 66 (tol 2e-6, NaN for NaN, no write past n)%s",
        k->name, ref->name, why);
}

static void test_rsum_kernel(const kl_rsum_entry* k, const kl_rsum_entry* ref) {
  char why[160] = "";
  int ok = 1;
  float x[301];
  for (int i = 0; i < 301; i++) x[i] = (float)urand(0.0, 1.0);
  for (size_t n = 0; n <= 301 && ok; n += 7) {
    const float a = k->fn(n, x), b = ref->fn(n, x);
    if (!close_f(a, b, 1e-5)) {
      ok = 0;
      snprintf(why, sizeof(why), " (n=%zu: %.9g vs %.9g)", n, (double)a, (double)b);
    }
  }
  x[100] = INFINITY;
  ok = ok && isinf(k->fn(301, x));
  x[5] = NAN;
  ok = ok && isnan(k->fn(301, x));
  check(ok, "[kernel %s] read-sum vs %s, n = 0..301 step 7, inf and NaN%s", k->name, ref->name, why);
}

/* C[M, N] (ldc; columns from N on must still hold 777) against the double
 * product of X's rows and W's rows (NULL: a zero row), the values first rounded
 * to bfloat16 when round_bf16; within abs_tol + rel_tol * sum |x w|. */
static int gemm_vs_double(size_t M, size_t N, size_t K, const float* X, size_t ldx,
                          const float* const* wrows, int round_bf16, const float* C, size_t ldc,
                          double abs_tol, double rel_tol, char* why, size_t wn) {
  for (size_t m = 0; m < M; m++)
    for (size_t n = 0; n < ldc; n++) {
      if (n >= N) {
        if (C[m * ldc + n] != 777.0f) {
          snprintf(why, wn, " (wrote past N)");
          return 0;
        }
        continue;
      }
      double ref = 0.0, mag = 0.0;
      for (size_t kk = 0; wrows[n] && kk < K; kk++) {
        float a = X[m * ldx + kk], w = wrows[n][kk];
        if (round_bf16) {
          a = kl_bf16_to_f32(kl_f32_to_bf16(a));
          w = kl_bf16_to_f32(kl_f32_to_bf16(w));
        }
        const double t = (double)a * (double)w;
        ref += t;
        mag += fabs(t);
      }
      if (fabs((double)C[m * ldc + n] - ref) > abs_tol + rel_tol * mag) {
        snprintf(why, wn, " (M=%zu K=%zu N=%zu C[%zu,%zu] = %.9g, want %.9g, sum|aw| %.3g)", M, K, N, m,
                 n, (double)C[m * ldc + n], ref, mag);
        return 0;
      }
    }
  return 1;
}

/* A low-precision input projection against a double product of the same
 * rounded values: M around the row tile, odd K, one and two column panels. */
static void test_gemm_kernel(const kl_gemm_entry* k) {
  const size_t Ms[] = {1, 6, 13, 16, 18, 35, 47}, Ks[] = {1, 37, 64}, Ns[] = {64, 192};
  char why[160] = "";
  int ok = 1;
  for (size_t mi = 0; mi < 7 && ok; mi++)
    for (size_t ki = 0; ki < 3 && ok; ki++)
      for (size_t ni = 0; ni < 2 && ok; ni++) {
        const size_t M = Ms[mi], K = Ks[ki], N = Ns[ni], Kp = (K + 1) / 2, ldx = K + 3, ldc = N + 5;
        float* X = xcalloc(M * ldx, sizeof(float));
        float* Wf = xcalloc(N * K, sizeof(float));
        float* C = xcalloc(M * ldc, sizeof(float));
        uint32_t* A = xcalloc(M * Kp, sizeof(uint32_t));
        uint16_t* W = aligned_alloc(64, (N / 64) * Kp * 128 * sizeof(uint16_t) + 64);
        if (!W) exit(2);
        memset(W, 0, (N / 64) * Kp * 128 * sizeof(uint16_t));
        for (size_t i = 0; i < M * ldx; i++) X[i] = (float)urand(-2.0, 2.0);
        for (size_t n = 0; n < N; n++)
          for (size_t kk = 0; kk < K; kk++) {
            Wf[n * K + kk] = (float)urand(-0.5, 0.5);
            W[(((n / 64) * Kp + kk / 2) * 4 + (n % 64) / 16) * 32 + (n % 16) * 2 + (kk & 1)] =
                kl_f32_to_bf16(Wf[n * K + kk]);
          }
        for (size_t i = 0; i < M * ldc; i++) C[i] = 777.0f;
        k->pack(M, K, X, ldx, A);
        k->gemm(M, N, Kp, A, W, C, ldc);
        const float** rows = xcalloc(N, sizeof(float*));
        for (size_t n = 0; n < N; n++) rows[n] = Wf + n * K;
        ok = gemm_vs_double(M, N, K, X, ldx, rows, 1, C, ldc, 1e-6, 1e-6, why, sizeof(why));
        free(rows);
        free(X);
        free(Wf);
        free(C);
        free(A);
        free(W);
      }
  check(ok, "[kernel %s] %s GEMM (with %s) vs a double product of the rounded values: M = 1, 6, "
        "13, 16, 18, 35, 47, K = 1, 37, 64, N = 64, 192%s", k->name, wtype_name(k->wt), k->isa, why);
}

/* The six-product float32 GEMM against a double product of the float32 values:
 * M and N around the 32 x 32 block and the 128-column block, K around the
 * 32-value k-step, values over many binades, zero (NULL) columns, the operands
 * packed in two pieces each; the float32 bound for summing its 6K products ((6K + 1) 2^-24 of the sum of
 * |a w|); then the packers' report of values that cannot be split. */
static void test_x6gemm_kernel(const kl_x6gemm_entry* k) {
  const size_t Ms[] = {1, 17, 32, 45, 70}, Ks[] = {1, 31, 32, 45, 100}, Ns[] = {32, 64, 160};
  char why[200] = "";
  int ok = 1;
  for (size_t mi = 0; mi < 5 && ok; mi++)
    for (size_t ki = 0; ki < 5 && ok; ki++)
      for (size_t ni = 0; ni < 3 && ok; ni++) {
        const size_t M = Ms[mi], K = Ks[ki], N = Ns[ni], ldx = K + 3, ldc = N + 5;
        const size_t sa = kl_x6_split_bytes(M, K), sw = kl_x6_split_bytes(N, K);
        float* X = xcalloc(M * ldx, sizeof(float));
        float* Wf = xcalloc(N * K, sizeof(float));
        float* C = xcalloc(M * ldc, sizeof(float));
        const float** rows = xcalloc(N, sizeof(float*));
        uint8_t* A = aligned_alloc(64, 3 * sa);
        uint8_t* W = aligned_alloc(64, 3 * sw);
        if (!A || !W) exit(2);
        for (size_t i = 0; i < M * ldx; i++) X[i] = (float)(urand(-2.0, 2.0) * pow(2.0, (double)(i % 23) - 11.0));
        for (size_t i = 0; i < N * K; i++) Wf[i] = (float)urand(-0.5, 0.5);
        for (size_t n = 0; n < N; n++) rows[n] = n % 7 == 3 ? NULL : Wf + n * K;
        for (size_t i = 0; i < M * ldc; i++) C[i] = 777.0f;
        const size_t mb = kl_round_up(M, 32), split_m = mb > 32 ? 32 : mb;
        int bad = k->pack_a(M, K, X, ldx, 0, split_m, A, sa);
        bad |= k->pack_a(M, K, X, ldx, split_m, mb, A, sa);
        bad |= k->pack_w(K, rows, 0, 32, W, sw);
        bad |= k->pack_w(K, rows, 32, N, W, sw);
        if (bad) { ok = 0; snprintf(why, sizeof(why), " (finite values reported as unsplittable)"); }
        k->gemm(M, N, (K + 31) / 32, A, sa, W, sw, C, ldc);
        ok = ok && gemm_vs_double(M, N, K, X, ldx, rows, 0, C, ldc, 1e-30, (6.0 * (double)K + 1.0) * 0x1p-24,
                                  why, sizeof(why));
        free(X);
        free(Wf);
        free(C);
        free(rows);
        free(A);
        free(W);
      }
  check(ok, "[kernel %s] six-product float32 GEMM (with %s) vs a double product: M = 1, 17, 32, 45, "
        "70, K = 1, 31, 32, 45, 100, N = 32, 64, 160, zero columns, two-piece packing%s", k->name, k->isa, why);

  /* values the split cannot carry: inf, NaN, and float32 beyond bfloat16's largest (rounds to inf) */
  const float specials[] = {INFINITY, -INFINITY, NAN, 3.4e38f, -3.4e38f};
  const size_t K = 40;
  float x[40];
  const float* rows[32];
  uint8_t* A = aligned_alloc(64, 3 * kl_x6_split_bytes(32, K));
  uint8_t* W = aligned_alloc(64, 3 * kl_x6_split_bytes(32, K));
  if (!A || !W) exit(2);
  for (size_t i = 0; i < K; i++) x[i] = (float)urand(-1e38, 1e38);
  for (size_t n = 0; n < 32; n++) rows[n] = x;
  int flags_ok = !k->pack_a(1, K, x, K, 0, 32, A, kl_x6_split_bytes(32, K)) &&
                 !k->pack_w(K, rows, 0, 32, W, kl_x6_split_bytes(32, K));
  for (size_t s = 0; s < 5; s++)
    for (size_t pos = 0; pos < K; pos += 13) {
      const float keep = x[pos];
      x[pos] = specials[s];
      flags_ok = flags_ok && k->pack_a(1, K, x, K, 0, 32, A, kl_x6_split_bytes(32, K)) &&
                 k->pack_w(K, rows, 0, 32, W, kl_x6_split_bytes(32, K));
      x[pos] = keep;
    }
  free(A);
  free(W);
  check(flags_ok, "[kernel %s] packers report inf, NaN and +-3.4e38 at k = 0, 13, 26, 39 (and "
        "not finite values up to 1e38)", k->name);
}

/* A float32 few-row projection against a double product: odd M, N and K around
 * the tiles (6 rows, 4 columns, 16 k), strided operands, W read in place, no
 * write past N; an infinity and a NaN in A reach exactly their row. */
static void test_f32_gemm_kernel(const kl_f32_gemm_entry* k) {
  const size_t Ms[] = {1, 5, 6, 13, 31}, Ns[] = {1, 3, 4, 7, 64}, Ks[] = {1, 15, 16, 37};
  char why[200] = "";
  int ok = 1;
  for (size_t mi = 0; mi < 5 && ok; mi++)
    for (size_t ni = 0; ni < 5 && ok; ni++)
      for (size_t ki = 0; ki < 4 && ok; ki++) {
        const size_t M = Ms[mi], N = Ns[ni], K = Ks[ki], lda = K + 3, ldw = K + 5, ldc = N + 2;
        float* A = xcalloc(M * lda, sizeof(float));
        float* W = xcalloc(N * ldw, sizeof(float));
        float* C = xcalloc(M * ldc, sizeof(float));
        for (size_t i = 0; i < M * lda; i++) A[i] = (float)urand(-2.0, 2.0);
        for (size_t i = 0; i < N * ldw; i++) W[i] = (float)urand(-0.5, 0.5);
        const size_t inf_row = M > 2 ? 1 : M, nan_row = M > 2 ? M - 1 : M; /* M <= 2: none */
        if (inf_row < M) A[inf_row * lda + K / 2] = INFINITY;
        if (nan_row < M) A[nan_row * lda] = NAN;
        for (size_t i = 0; i < M * ldc; i++) C[i] = 777.0f;
        k->fn(M, N, K, A, lda, W, ldw, C, ldc);
        for (size_t m = 0; m < M && ok; m++)
          for (size_t n = 0; n < ldc && ok; n++) {
            const float got = C[m * ldc + n];
            if (n >= N) {
              if (got != 777.0f) { ok = 0; snprintf(why, sizeof(why), " (wrote past N)"); }
              continue;
            }
            double ref = 0.0, mag = 0.0;
            for (size_t kk = 0; kk < K; kk++) {
              ref += (double)A[m * lda + kk] * (double)W[n * ldw + kk];
              mag += fabs((double)A[m * lda + kk] * (double)W[n * ldw + kk]);
            }
            const int bad = m == nan_row ? !isnan(got)
                          : isinf(ref) || isnan(ref) ? !(isnan(got) && isnan(ref)) && got != (float)ref
                          : !(fabs((double)got - ref) <= 1e-6 * (1.0 + mag));
            if (bad) {
              ok = 0;
              snprintf(why, sizeof(why), " (M=%zu N=%zu K=%zu C[%zu,%zu] = %.9g, want %.9g)", M, N, K,
                       m, n, (double)got, ref);
            }
          }
        free(A);
        free(W);
        free(C);
      }
  check(ok, "[kernel %s] f32 few-row GEMM vs a double product: M = 1, 5, 6, 13, 31, N = 1, 3, 4, "
        "7, 64, K = 1, 15, 16, 37, strided, +inf and NaN rows%s", k->name, why);
}

/* A pre-packed-panel GEMM entry against the scalar entry (the same bits: one
 * fused multiply-add per k in k order, from init or from zero and then added to
 * C; NaN where it has NaN) and the scalar one against a double product: M around
 * the tiles (12 and 2 rows), partial panels (n < 32), a second K block added to C
 * (init NULL), strided A and C, no write past n; an infinity and a NaN in A reach
 * exactly their row. */
static void test_pgemm_kernel(const kl_f32_pgemm_entry* k, const kl_f32_pgemm_entry* ref) {
  /* rows: avx512f tiles of up to 14 rows, split evenly (15 = 8 + 7, 29 = 10 + 10 + 9) */
  const size_t Ms[] = {1, 2, 3, 11, 12, 13, 14, 15, 25, 29}, ns[] = {1, 5, 16, 17, 31, 32},
               Ks[] = {1, 7, 40};
  char why[200] = "";
  int ok = 1;
  for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0] && ok; mi++)
    for (size_t ni = 0; ni < 6 && ok; ni++)
      for (size_t ki = 0; ki < 3 && ok; ki++) {
        const size_t M = Ms[mi], n = ns[ni], K = Ks[ki], lda = K + 3, ldc = n + 2, k1 = K / 2;
        float* A = xcalloc(M * lda, sizeof(float));
        float* P = xcalloc(K * KL_PGEMM_NR, sizeof(float));
        float* C = xcalloc(M * ldc, sizeof(float));
        float* R = xcalloc(M * ldc, sizeof(float));
        float init[KL_PGEMM_NR];
        for (size_t i = 0; i < M * lda; i++) A[i] = (float)urand(-2.0, 2.0);
        for (size_t kk = 0; kk < K; kk++)
          for (size_t j = 0; j < n; j++) P[kk * KL_PGEMM_NR + j] = (float)urand(-0.5, 0.5);
        for (size_t j = 0; j < n; j++) init[j] = (float)urand(-1.0, 1.0);
        const size_t inf_row = M > 2 ? 1 : M, nan_row = M > 2 ? M - 1 : M; /* M <= 2: none */
        if (inf_row < M) A[inf_row * lda + K / 2] = INFINITY;
        if (nan_row < M) A[nan_row * lda] = NAN;
        for (size_t i = 0; i < M * ldc; i++) C[i] = R[i] = 777.0f;
        /* two K blocks: [0, k1) from init, [k1, K) added to C */
        k->fn(M, n, k1, A, lda, P, init, C, ldc);
        k->fn(M, n, K - k1, A + k1, lda, P + k1 * KL_PGEMM_NR, NULL, C, ldc);
        ref->fn(M, n, k1, A, lda, P, init, R, ldc);
        ref->fn(M, n, K - k1, A + k1, lda, P + k1 * KL_PGEMM_NR, NULL, R, ldc);
        for (size_t m = 0; m < M && ok; m++)
          for (size_t j = 0; j < ldc && ok; j++) {
            const float got = C[m * ldc + j], want = R[m * ldc + j];
            if (j >= n) {
              if (got != 777.0f || want != 777.0f) { ok = 0; snprintf(why, sizeof(why), " (wrote past n)"); }
              continue;
            }
            double dref = init[j], mag = fabs(dref);
            for (size_t kk = 0; kk < K; kk++) {
              dref += (double)A[m * lda + kk] * (double)P[kk * KL_PGEMM_NR + j];
              mag += fabs((double)A[m * lda + kk] * (double)P[kk * KL_PGEMM_NR + j]);
            }
            const int same = (isnan(got) && isnan(want)) || memcmp(&got, &want, sizeof got) == 0;
            const int bad = !same || (m == nan_row ? !isnan(want)
                          : isinf(dref) || isnan(dref) ? !(isnan(want) && isnan(dref)) && want != (float)dref
                          : !(fabs((double)want - dref) <= 1e-6 * (1.0 + mag)));
            if (bad) {
              ok = 0;
              snprintf(why, sizeof(why), " (M=%zu n=%zu K=%zu C[%zu,%zu] = %.9g, scalar %.9g, double %.9g)",
                       M, n, K, m, j, (double)got, (double)want, dref);
            }
          }
        free(A);
        free(P);
        free(C);
        free(R);
      }
  check(ok, "[kernel %s] f32 packed-panel GEMM bitwise = %s, which is within 1e-6 of a double "
        "product: M = 1..25, n = 1..32, K = 1, 7, 40 in two blocks, strided, +inf and NaN rows%s",
        k->name, ref->name, why);
}

/* The portable half conversions: every half widens exactly and narrows back to
 * itself; floats round to nearest even (midpoints between neighbouring halves),
 * overflow to inf, NaN stays NaN. */
static void test_f16_conversion(void) {
  int ok = 1;
  char why[160] = "";
  for (uint32_t u = 0; u < 65536 && ok; u++) {
    const uint16_t h = (uint16_t)u;
    const float f = kl_f16_to_f32(h);
    const int nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
    if (nan) {
      ok = isnan(f) && (kl_f32_to_f16(f) & 0x7fffu) > 0x7c00u;
      if (!ok) snprintf(why, sizeof(why), " (NaN 0x%04x)", (unsigned)h);
      continue;
    }
    /* the value: sign, exponent, mantissa in double */
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double want = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
    if (h & 0x8000u) want = -want;
    if ((double)f != want || kl_f32_to_f16(f) != h) {
      ok = 0;
      snprintf(why, sizeof(why), " (0x%04x -> %.9g, want %.9g, back 0x%04x)", (unsigned)h, (double)f,
               want, (unsigned)kl_f32_to_f16(f));
    }
    /* the midpoint to the next half up rounds to the even one of the two */
    if (ok && e < 31 && (h & 0x7fffu) < 0x7bffu) {
      const float next = kl_f16_to_f32((uint16_t)(h + 1));
      const float mid = (float)(((double)f + (double)next) / 2.0); /* exact in float */
      const uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : h;
      if (kl_f32_to_f16(mid) != even) {
        ok = 0;
        snprintf(why, sizeof(why), " (midpoint after 0x%04x -> 0x%04x, want 0x%04x)", (unsigned)h,
                 (unsigned)kl_f32_to_f16(mid), (unsigned)even);
      }
    }
  }
  ok = ok && kl_f32_to_f16(65519.0f) == 0x7bffu && kl_f32_to_f16(65520.0f) == 0x7c00u &&
       kl_f32_to_f16(-1e30f) == 0xfc00u && kl_f32_to_f16(INFINITY) == 0x7c00u &&
       kl_f32_to_f16(1e-9f) == 0 && kl_f32_to_f16(-0.0f) == 0x8000u;
  check(ok, "[f16] half <-> float: all 65536 halves exact and back, midpoints to even, "
        "overflow to inf, NaN kept%s", why);
}

/* Every entry of every kernel list the CPU can run, whatever the ISA level. */
static void test_kernel_lists(void) {
  test_f16_conversion();
  for (size_t i = 0; i < kl_lstmcell_count; i++) {
    const kl_lstmcell_entry* k = &kl_lstmcell_list[i];
    if (k->arch && cpu_has(k->arch, k->name)) test_cell_kernel(k);
  }
  for (size_t i = 0; i < kl_lstmproj_count; i++)
    if (kl_lstmproj_list[i].arch && cpu_has(kl_lstmproj_list[i].arch, kl_lstmproj_list[i].name))
      test_proj_kernel(&kl_lstmproj_list[i]);
  for (int kind = 0; kind < 3; kind++) {
    const kl_vunary_entry* list =
        kind == 0 ? kl_f32_vsigmoid_list : kind == 1 ? kl_f32_vtanh_list : kl_f32_vgelu_list;
    const size_t n =
        kind == 0 ? kl_f32_vsigmoid_count : kind == 1 ? kl_f32_vtanh_count : kl_f32_vgelu_count;
    for (size_t i = 0; i + 1 < n; i++) /* the last entry is the scalar one */
      if (cpu_has(list[i].arch, list[i].name))
        test_vunary_kernel(&list[i], &list[n - 1], kind == 0 ? "sigmoid" : kind == 1 ? "tanh" : "gelu");
  }
  for (size_t i = 0; i < kl_f32_vsnake_count; i++) /* the scalar entry too: against double */
    if (cpu_has(kl_f32_vsnake_list[i].arch, kl_f32_vsnake_list[i].name))
      test_vsnake_kernel(&kl_f32_vsnake_list[i]);
  for (size_t i = 0; i < kl_f32_rmoments_count; i++)
    if (cpu_has(kl_f32_rmoments_list[i].arch, kl_f32_rmoments_list[i].name))
      test_rmoments_kernel(&kl_f32_rmoments_list[i], &kl_f32_rmoments_list[kl_f32_rmoments_count - 1]);
  for (size_t i = 0; i + 1 < kl_f32_rsum_count; i++)
    if (cpu_has(kl_f32_rsum_list[i].arch, kl_f32_rsum_list[i].name))
      test_rsum_kernel(&kl_f32_rsum_list[i], &kl_f32_rsum_list[kl_f32_rsum_count - 1]);
  for (size_t i = 0; i + 1 < kl_f32_softmax_count; i++)
    if (cpu_has(kl_f32_softmax_list[i].arch, kl_f32_softmax_list[i].name))
      test_softmax_kernel(&kl_f32_softmax_list[i], &kl_f32_softmax_list[kl_f32_softmax_count - 1]);
  for (size_t i = 0; i + 1 < kl_u64_fingerprint_count; i++)
    if (cpu_has(kl_u64_fingerprint_list[i].arch, kl_u64_fingerprint_list[i].name))
      test_fp_kernel(&kl_u64_fingerprint_list[i]);
  for (size_t i = 0; i < kl_bf16_gemm_count; i++)
    if (cpu_has(kl_bf16_gemm_list[i].arch, kl_bf16_gemm_list[i].name))
      test_gemm_kernel(&kl_bf16_gemm_list[i]);
  for (size_t i = 0; i < kl_f32_x6gemm_count; i++)
    if (cpu_has(kl_f32_x6gemm_list[i].arch, kl_f32_x6gemm_list[i].name))
      test_x6gemm_kernel(&kl_f32_x6gemm_list[i]);
  for (size_t i = 0; i < kl_f32_gemm_count; i++)
    if (cpu_has(kl_f32_gemm_list[i].arch, kl_f32_gemm_list[i].name))
      test_f32_gemm_kernel(&kl_f32_gemm_list[i]);
  for (size_t i = 0; i < kl_f32_pgemm_count; i++) /* the scalar entry too: against double */
    if (cpu_has(kl_f32_pgemm_list[i].arch, kl_f32_pgemm_list[i].name))
      test_pgemm_kernel(&kl_f32_pgemm_list[i], &kl_f32_pgemm_list[kl_f32_pgemm_count - 1]);
  /* every weight type has a scalar kernel, so the dispatch never comes back empty */
  const kl_wtype wts[] = {KL_W_F32, KL_W_F64, KL_W_BF16, KL_W_F16};
  int ok = 1;
  for (size_t i = 0; i < sizeof(wts) / sizeof(wts[0]); i++) ok = ok && scalar_cell(wts[i]) && scalar_proj(wts[i]);
  check(ok && kl_f32_vsigmoid_list[kl_f32_vsigmoid_count - 1].arch == 0 &&
            kl_f32_vtanh_list[kl_f32_vtanh_count - 1].arch == 0 &&
            kl_f32_vgelu_list[kl_f32_vgelu_count - 1].arch == 0 &&
            kl_f32_vsnake_list[kl_f32_vsnake_count - 1].arch == 0 &&
            kl_f32_rmoments_list[kl_f32_rmoments_count - 1].arch == 0 &&
            kl_f32_rsum_list[kl_f32_rsum_count - 1].arch == 0 &&
            kl_u64_fingerprint_list[kl_u64_fingerprint_count - 1].arch == 0 &&
            kl_f32_pgemm_list[kl_f32_pgemm_count - 1].arch == 0,
        "[lists] every weight type has a scalar cell and projection; vector lists end with scalar");
}

/* The kernels the active level picks: per weight type, the first list entry it
 * allows; float16 both with and without KL_ARCH_F16_NARROW. */
static void test_dispatch(const char* name) {
  const kl_wtype wts[] = {KL_W_F32, KL_W_F64, KL_W_BF16, KL_W_F16, KL_W_F16};
  const int f16_narrow = kl_f16_narrow_rows();
  int ok = 1;
  char why[300] = "";
  for (size_t t = 0; t < sizeof(wts) / sizeof(wts[0]); t++) {
    const int narrow = t == 4 ? !f16_narrow : f16_narrow; /* the second float16: the other way */
    kl_f16_narrow_rows_set(narrow);
    const kl_kernels k = kl_select_kernels(wts[t]);
    const unsigned arch = kl_arch_active() | (wts[t] == KL_W_F16 && narrow ? KL_ARCH_F16_NARROW : 0);
    /* the first allowed entry for batches; without AMX tiles for small calls */
    const kl_lstmcell_entry *want = NULL, *small = NULL;
    for (size_t i = 0; i < kl_lstmcell_count && !want; i++)
      if (kl_lstmcell_list[i].wt == wts[t] && (kl_lstmcell_list[i].arch & ~arch) == 0) want = &kl_lstmcell_list[i];
    for (size_t i = 0; i < kl_lstmcell_count && !small; i++)
      if (kl_lstmcell_list[i].wt == wts[t] && (kl_lstmcell_list[i].arch & ~(arch & ~KL_ARCH_AVX512AMX)) == 0)
        small = &kl_lstmcell_list[i];
    if (!want || !small || k.cell != small->fn || (k.cell_batch ? k.cell_batch : k.cell) != want->fn) {
      ok = 0;
      snprintf(why, sizeof(why), " (%s)", wtype_name(wts[t]));
    } else {
      snprintf(why + strlen(why), sizeof(why) - strlen(why), " %s=%s", wtype_name(wts[t]), want->name);
    }
  }
  kl_f16_narrow_rows_set(f16_narrow);
  check(ok, "[%s] dispatch picks the first allowed list entry per type (without AMX below %d rows; "
        "float16 with and without the narrow preference):%s", name, KL_CELL_BATCH_MIN, why);
}

/* ---- main ---------------------------------------------------------------- */

/* ---- dense operators (src/ops/dense.c) -------------------------------------- */
static float frand(uint32_t* st) {
  *st = *st * 1664525u + 1013904223u;
  return (float)((*st >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* kl_f32_matmul on shapes cut into several uneven tiles, against a float64
 * product; num_threads 1, 2, 3 bitwise identical. */
static void test_dense_matmul(void) {
  const int64_t M = 530, N = 1100, K = 37;
  float* A = malloc(sizeof(float) * (size_t)(M * K));
  float* B = malloc(sizeof(float) * (size_t)(N * K));
  float* C[3];
  for (int i = 0; i < 3; i++) C[i] = malloc(sizeof(float) * (size_t)(M * N));
  if (!A || !B || !C[0] || !C[1] || !C[2]) {
    check(0, "[dense] matmul: out of memory");
    goto done;
  }
  uint32_t st = 7;
  for (int64_t i = 0; i < M * K; i++) A[i] = frand(&st);
  for (int64_t i = 0; i < N * K; i++) B[i] = frand(&st);
  kl_status s = KL_OK;
  for (int t = 0; t < 3 && s == KL_OK; t++) {
    kl_matmul_args m;
    memset(&m, 0, sizeof(m));
    m.batch = 1, m.M = M, m.N = N, m.K = K, m.a = A, m.lda = K, m.b = B, m.ldb = K, m.trans_b = 1;
    m.c = C[t], m.ldc = N, m.num_threads = t + 1;
    s = kl_f32_matmul(&m);
  }
  double err = 0;
  for (int64_t i = 0; i < M && s == KL_OK; i += 7)
    for (int64_t j = 0; j < N; j++) {
      double r = 0;
      for (int64_t k = 0; k < K; k++) r += (double)A[i * K + k] * B[j * K + k];
      err = fmax(err, fabs(r - C[0][i * N + j]));
    }
  check(s == KL_OK && err < 1e-4 && !memcmp(C[0], C[1], sizeof(float) * (size_t)(M * N)) &&
            !memcmp(C[0], C[2], sizeof(float) * (size_t)(M * N)),
        "[dense] matmul 530x37 @ (1100x37)^T: %s, max abs err %.2g, threads 1/2/3 bitwise equal",
        kl_status_str(s), err);
  /* the GELU epilogue: gelu of the plain product (C[0]), within 1e-5 */
  for (int t = 1; t < 3 && s == KL_OK; t++) {
    kl_matmul_args m;
    memset(&m, 0, sizeof(m));
    m.batch = 1, m.M = M, m.N = N, m.K = K, m.a = A, m.lda = K, m.b = B, m.ldb = K, m.trans_b = 1;
    m.c = C[t], m.ldc = N, m.num_threads = t, m.act = KL_ACT_GELU_TANH;
    s = kl_f32_matmul(&m);
  }
  err = 0;
  for (int64_t i = 0; i < M * N && s == KL_OK; i++) {
    const double x = C[0][i];
    const double g = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    err = fmax(err, fabs(g - C[1][i]));
  }
  check(s == KL_OK && err < 1e-5 && !memcmp(C[1], C[2], sizeof(float) * (size_t)(M * N)),
        "[dense] matmul with the GELU (tanh) epilogue: %s, max abs err %.2g, threads 1/2 bitwise "
        "equal", kl_status_str(s), err);
done:
  free(A);
  free(B);
  for (int i = 0; i < 3; i++) free(C[i]);
}

/* Five runs of one product: C[0] by OpenBLAS, C[1..4] on panels. Raises *err to
 * max |C[0] - C[1]| over n values; whether C[2..4] have C[1]'s bits. */
static int runs_agree(float* const C[5], int64_t n, double* err) {
  for (int64_t i = 0; i < n; i++) *err = fmax(*err, fabs(C[0][i] - C[1][i]));
  int same = 1;
  for (int t = 2; t < 5; t++) same = same && !memcmp(C[1], C[t], sizeof(float) * (size_t)n);
  return same;
}

/* P = W^T in panels (the b_panels layout): W is N rows of K, P [ceil(N / 32)][K][32],
 * zeros past N. */
static void pack_wt_panels(const float* W, int64_t N, int64_t K, float* P) {
  for (int64_t q = 0; q < (N + KL_PGEMM_NR - 1) / KL_PGEMM_NR; q++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < KL_PGEMM_NR; j++)
        P[(q * K + k) * KL_PGEMM_NR + j] = q * KL_PGEMM_NR + j < N ? W[(q * KL_PGEMM_NR + j) * K + k] : 0.0f;
}

/* B packed in panels (b_panels): against the same product on OpenBLAS (1e-4:
 * sums of 600 products of up to ~20 in other orders),
 * with a strided bias and the GELU epilogue, batched A over one B; 1, 2, 3 and 8
 * threads bitwise equal. K spans several KL_PGEMM_KC blocks, N a partial panel. */
static void test_dense_matmul_panels(void) {
  const int64_t batch = 2, M = 67, N = 100, K = 600, np = (N + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL;
  float* A = malloc(sizeof(float) * (size_t)(batch * M * K));
  float* W = malloc(sizeof(float) * (size_t)(N * K));
  float* P = malloc(sizeof(float) * (size_t)(np * K * KL_DENSE_PANEL));
  float* bias = malloc(sizeof(float) * (size_t)(2 * N));
  float* C[5];
  for (int i = 0; i < 5; i++) C[i] = malloc(sizeof(float) * (size_t)(batch * M * N));
  kl_status s = KL_ERR_NOMEM;
  double err = 0;
  int same = 1;
  if (A && W && P && bias && C[0] && C[1] && C[2] && C[3] && C[4]) {
    uint32_t st = 13;
    for (int64_t i = 0; i < batch * M * K; i++) A[i] = frand(&st);
    for (int64_t i = 0; i < N * K; i++) W[i] = frand(&st);
    for (int64_t i = 0; i < 2 * N; i++) bias[i] = frand(&st);
    pack_wt_panels(W, N, K, P);
    const int threads[5] = {1, 1, 2, 3, 8};
    s = KL_OK;
    for (int act = 0; act < 2 && s == KL_OK; act++) {
      for (int t = 0; t < 5 && s == KL_OK; t++) {
        kl_matmul_args m;
        memset(&m, 0, sizeof(m));
        m.batch = batch, m.M = M, m.N = N, m.K = K, m.a = A, m.lda = K, m.sa = M * K;
        m.b = t == 0 ? W : P, m.ldb = K, m.trans_b = 1, m.b_panels = t > 0;
        m.bias = bias, m.sbias = 2, m.c = C[t], m.ldc = N, m.sc = M * N, m.act = act;
        m.num_threads = threads[t];
        s = kl_f32_matmul(&m);
      }
      if (s == KL_OK) same = runs_agree(C, batch * M * N, &err) && same;
    }
  }
  check(s == KL_OK && err < 1e-4 && same,
        "[dense] matmul on B packed in panels, 2 x 67x600 @ (100x600)^T, bias, GELU: %s, max abs "
        "diff from OpenBLAS %.2g, threads 1/2/3/8 bitwise equal", kl_status_str(s), err);
  free(A);
  free(W);
  free(P);
  free(bias);
  for (int i = 0; i < 5; i++) free(C[i]);
}

/* An A whose rows are a multiple of 4 KiB apart (KL_PGEMM_ALIAS) is read from a
 * copy with rows K + 16 apart: the same bits as that A read in place from rows 2080 apart
 * (batch 2, 1 and 2 threads), and within 1e-4 of OpenBLAS. */
static void test_dense_matmul_panels_aliased_rows(void) {
  const int64_t batch = 2, M = 45, N = 40, K = 1030, np = (N + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL;
  const int64_t lds[2] = {2048, 2080}; /* rows 8 KiB apart (aliasing), 8320 B (not) */
  float* A[2];
  for (int i = 0; i < 2; i++) A[i] = malloc(sizeof(float) * (size_t)(batch * M * lds[i]));
  float* W = malloc(sizeof(float) * (size_t)(N * K));
  float* P = malloc(sizeof(float) * (size_t)(np * K * KL_DENSE_PANEL));
  float* C[5];
  for (int i = 0; i < 5; i++) C[i] = malloc(sizeof(float) * (size_t)(batch * M * N));
  kl_status s = KL_ERR_NOMEM;
  double err = 0;
  int same = 1;
  if (A[0] && A[1] && W && P && C[0] && C[1] && C[2] && C[3] && C[4]) {
    uint32_t st = 29;
    for (int64_t i = 0; i < batch * M * lds[0]; i++) A[0][i] = frand(&st);
    for (int64_t r = 0; r < batch * M; r++)
      for (int64_t k = 0; k < lds[1]; k++) A[1][r * lds[1] + k] = k < K ? A[0][r * lds[0] + k] : NAN;
    for (int64_t i = 0; i < N * K; i++) W[i] = frand(&st);
    pack_wt_panels(W, N, K, P);
    s = KL_OK;
    for (int t = 0; t < 5 && s == KL_OK; t++) { /* OpenBLAS; lds[0] at 1, 2 threads; lds[1] likewise */
      kl_matmul_args m;
      memset(&m, 0, sizeof(m));
      const int which = t < 3 ? 0 : 1;
      m.batch = batch, m.M = M, m.N = N, m.K = K, m.a = A[which], m.lda = lds[which];
      m.sa = M * lds[which];
      m.b = t == 0 ? W : P, m.ldb = K, m.trans_b = 1, m.b_panels = t > 0;
      m.c = C[t], m.ldc = N, m.sc = M * N, m.num_threads = t == 0 ? 1 : 1 + (t + 1) % 2;
      s = kl_f32_matmul(&m);
    }
    if (s == KL_OK) same = runs_agree(C, batch * M * N, &err);
  }
  check(s == KL_OK && err < 1e-4 && same,
        "[dense] matmul on panels, A rows 8 KiB apart (copied) vs 8320 B apart (in place): %s, "
        "same bits at 1 and 2 threads, max abs diff from OpenBLAS %.2g", kl_status_str(s), err);
  for (int i = 0; i < 2; i++) free(A[i]);
  free(W);
  free(P);
  for (int i = 0; i < 5; i++) free(C[i]);
}

/* conv1d on w packed in panels (w_panels: no im2col, the output stored from
 * transposed tiles) against a float64 convolution: batch 2, asymmetric padding
 * wider than the kernel's reach (all-zero windows at both ends), a partial panel
 * of output channels, K = 5 x 70 over two KL_PGEMM_KC blocks, 260 steps over two
 * row blocks; with and without bias; 1, 2, 3 and 8 threads bitwise equal; NaN in
 * x gives NaN in exactly the outputs whose window reads it; stride 2 with
 * dilation 2 refused (stride or dilation must be 1). */
static void test_dense_conv1d_panels(void) {
  const int64_t batch = 2, cin = 70, cout = 45, ks = 5, win = 255, pl = 6, pr = 3;
  const int64_t wout = win + pl + pr - ks + 1, K = ks * cin, np = (cout + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL;
  float* x = malloc(sizeof(float) * (size_t)(batch * cin * win));
  float* w = malloc(sizeof(float) * (size_t)(cout * cin * ks));
  float* P = calloc((size_t)(np * K * KL_DENSE_PANEL), sizeof(float));
  float* bias = malloc(sizeof(float) * (size_t)cout);
  float* y[4];
  for (int i = 0; i < 4; i++) y[i] = malloc(sizeof(float) * (size_t)(batch * cout * wout));
  kl_status s = KL_ERR_NOMEM;
  double err = 0;
  int same = 1, nan_ok = 1;
  if (x && w && P && bias && y[0] && y[1] && y[2] && y[3]) {
    uint32_t st = 17;
    for (int64_t i = 0; i < batch * cin * win; i++) x[i] = frand(&st);
    for (int64_t i = 0; i < cout * cin * ks; i++) w[i] = frand(&st);
    for (int64_t i = 0; i < cout; i++) bias[i] = frand(&st);
    for (int64_t o = 0; o < cout; o++) /* w[o, c, j] at [o / 32][j * cin + c][o % 32] */
      for (int64_t c = 0; c < cin; c++)
        for (int64_t j = 0; j < ks; j++)
          P[((o / KL_DENSE_PANEL) * K + j * cin + c) * KL_DENSE_PANEL + o % KL_DENSE_PANEL] =
              w[(o * cin + c) * ks + j];
    const int threads[4] = {1, 2, 3, 8};
    s = KL_OK;
    for (int hb = 0; hb < 2 && s == KL_OK; hb++) {
      for (int t = 0; t < 4 && s == KL_OK; t++) {
        kl_conv1d_args c;
        memset(&c, 0, sizeof(c));
        c.batch = batch, c.cin = cin, c.cout = cout, c.win = win, c.wout = wout, c.ksize = ks;
        c.stride = 1, c.dilation = 1, c.pad_l = pl, c.x = x, c.w = P, c.w_panels = 1;
        c.bias = hb ? bias : NULL, c.y = y[t], c.num_threads = threads[t];
        s = kl_f32_conv1d(&c);
      }
      for (int64_t n = 0; n < batch && s == KL_OK; n++)
        for (int64_t o = 0; o < cout; o++)
          for (int64_t t = 0; t < wout; t++) {
            double r = hb ? bias[o] : 0.0;
            for (int64_t c = 0; c < cin; c++)
              for (int64_t j = 0; j < ks; j++) {
                const int64_t u = t + j - pl;
                if (u >= 0 && u < win) r += (double)x[(n * cin + c) * win + u] * w[(o * cin + c) * ks + j];
              }
            err = fmax(err, fabs(r - y[0][(n * cout + o) * wout + t]));
          }
      for (int t = 1; t < 4; t++) same = same && !memcmp(y[0], y[t], sizeof(float) * (size_t)(batch * cout * wout));
    }
    /* NaN at step 100 of channel 3 of the second element: outputs 100 + pl - j, j < ks */
    x[(cin + 3) * win + 100] = NAN;
    kl_conv1d_args c;
    memset(&c, 0, sizeof(c));
    c.batch = batch, c.cin = cin, c.cout = cout, c.win = win, c.wout = wout, c.ksize = ks;
    c.stride = 1, c.dilation = 1, c.pad_l = pl, c.x = x, c.w = P, c.w_panels = 1, c.y = y[1];
    c.num_threads = 2;
    if (s == KL_OK) s = kl_f32_conv1d(&c);
    for (int64_t n = 0; n < batch && s == KL_OK; n++)
      for (int64_t o = 0; o < cout; o++)
        for (int64_t t = 0; t < wout; t++)
          nan_ok &= isnan(y[1][(n * cout + o) * wout + t]) == (n == 1 && t > 100 + pl - ks && t <= 100 + pl);
    c.stride = 2, c.dilation = 2;
    nan_ok &= kl_f32_conv1d(&c) == KL_ERR_ARG;
  }
  check(s == KL_OK && err < 1e-4 && same && nan_ok,
        "[dense] conv1d on panels, 2 x 70 -> 45 channels, 5 taps, padding 6/3, 255 steps: %s, max "
        "abs err %.2g, threads 1/2/3/8 bitwise equal, NaN confined to its windows, stride 2 "
        "with dilation 2 refused", kl_status_str(s), err);
  free(x);
  free(w);
  free(P);
  free(bias);
  for (int i = 0; i < 4; i++) free(y[i]);
}

/* A float64 transposed convolution (groups 1) of x [batch, cin, win] and
 * w [cin, cout, ks] into y [batch, cout, wout]. */
static void ref_conv_transpose(const float* x, const float* w, const float* bias, double* y,
                               int64_t batch, int64_t cin, int64_t cout, int64_t win, int64_t wout,
                               int64_t ks, int64_t stride, int64_t dil, int64_t pad) {
  for (int64_t n = 0; n < batch; n++)
    for (int64_t o = 0; o < cout; o++) {
      double* yr = y + (n * cout + o) * wout;
      for (int64_t t = 0; t < wout; t++) yr[t] = bias ? bias[o] : 0.0;
      for (int64_t c = 0; c < cin; c++)
        for (int64_t i = 0; i < win; i++)
          for (int64_t k = 0; k < ks; k++) {
            const int64_t t = i * stride + k * dil - pad;
            if (t >= 0 && t < wout)
              yr[t] += (double)x[(n * cin + c) * win + i] * w[(c * cout + o) * ks + k];
          }
    }
}

/* ConvTranspose1d with groups 1 (kl_f32_conv1d_transpose) against float64, raw
 * and packed weights, 1/2/3 threads bitwise equal: output padding, stride >
 * kernel (phases without taps), dilation dividing stride, padding > kernel, a
 * partial panel; dilation 3 with stride 4 refused. Then conv1d on panels with
 * dilation 3 (stride 1) and with stride 3 (dilation 1) against float64. */
static void test_dense_conv_phases(void) {
  static const int64_t cases[][8] = { /* cin, cout, ks, stride, dil, pad, out_pad, win */
      {5, 33, 4, 2, 1, 1, 1, 9}, {3, 7, 3, 5, 1, 0, 2, 6}, {8, 5, 7, 6, 2, 4, 1, 10},
      {4, 3, 2, 3, 3, 6, 0, 5}, {70, 9, 9, 1, 1, 4, 0, 40},
      {64, 64, 12, 6, 1, 3, 0, 200}}; /* the last: enough work for 2 threads */
  const int64_t batch = 2;
  int ok = 1;
  double err = 0;
  kl_status s = KL_OK;
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]) && s == KL_OK; ci++) {
    const int64_t cin = cases[ci][0], cout = cases[ci][1], ks = cases[ci][2], st = cases[ci][3];
    const int64_t dil = cases[ci][4], pad = cases[ci][5], win = cases[ci][7];
    const int64_t wout = (win - 1) * st - 2 * pad + dil * (ks - 1) + cases[ci][6] + 1;
    const int64_t np = (cout + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL;
    float* x = malloc(sizeof(float) * (size_t)(batch * cin * win));
    float* w = malloc(sizeof(float) * (size_t)(cin * cout * ks));
    float* P = malloc(sizeof(float) * (size_t)(np * ks * cin * KL_DENSE_PANEL));
    float* bias = malloc(sizeof(float) * (size_t)cout);
    double* ref = malloc(sizeof(double) * (size_t)(batch * cout * wout));
    float* y[4];
    for (int i = 0; i < 4; i++) y[i] = malloc(sizeof(float) * (size_t)(batch * cout * wout));
    if (!x || !w || !P || !bias || !ref || !y[0] || !y[1] || !y[2] || !y[3]) s = KL_ERR_NOMEM;
    if (s == KL_OK) {
      uint32_t r = 29 + (uint32_t)ci;
      for (int64_t i = 0; i < batch * cin * win; i++) x[i] = frand(&r);
      for (int64_t i = 0; i < cin * cout * ks; i++) w[i] = frand(&r);
      for (int64_t i = 0; i < cout; i++) bias[i] = frand(&r);
      s = kl_f32_conv1d_transpose_pack(cin, cout, ks, st, dil, w, P);
      ref_conv_transpose(x, w, bias, ref, batch, cin, cout, win, wout, ks, st, dil, pad);
      const int threads[4] = {1, 2, 3, 2}, panels[4] = {1, 1, 1, 0};
      for (int t = 0; t < 4 && s == KL_OK; t++) {
        kl_conv1d_transpose_args c;
        memset(&c, 0, sizeof(c));
        c.batch = batch, c.cin = cin, c.cout = cout, c.win = win, c.wout = wout, c.ksize = ks;
        c.stride = st, c.dilation = dil, c.pad_l = pad, c.x = x, c.w = panels[t] ? P : w;
        c.w_panels = panels[t], c.bias = bias, c.y = y[t], c.num_threads = threads[t];
        s = kl_f32_conv1d_transpose(&c);
      }
      for (int64_t i = 0; i < batch * cout * wout && s == KL_OK; i++) err = fmax(err, fabs(ref[i] - y[0][i]));
      for (int t = 1; t < 4; t++)
        ok = ok && !memcmp(y[0], y[t], sizeof(float) * (size_t)(batch * cout * wout));
    }
    free(x);
    free(w);
    free(P);
    free(bias);
    free(ref);
    for (int i = 0; i < 4; i++) free(y[i]);
  }
  float one = 1.0f, out[8];
  kl_conv1d_transpose_args bad;
  memset(&bad, 0, sizeof(bad));
  bad.batch = 1, bad.cin = 1, bad.cout = 1, bad.win = 1, bad.wout = 8, bad.ksize = 1;
  bad.stride = 4, bad.dilation = 3, bad.x = &one, bad.w = &one, bad.y = out;
  ok = ok && kl_f32_conv1d_transpose(&bad) == KL_ERR_ARG;
  check(s == KL_OK && ok && err < 1e-4,
        "[dense] conv1d_transpose (groups 1), 6 shapes, raw and packed weights: %s, max abs err "
        "%.2g, threads 1/2/3 bitwise equal, dilation not dividing stride refused",
        kl_status_str(s), err);

  /* conv1d on panels: dilation 3 (stride 1) and stride 3 (dilation 1) */
  /* cin, cout, ks, st, dil, pad: each with work for 2 threads or more (KL_DENSE_MIN_MACS) */
  static const int64_t convs[][6] = {{64, 40, 5, 1, 3, 6}, {64, 9, 12, 3, 1, 3},
                                     {100, 40, 11, 1, 2, 10}}; /* the last: ksize cin > 1024, phases */
  const int64_t win = 700;
  err = 0;
  ok = 1;
  for (size_t ci = 0; ci < sizeof(convs) / sizeof(convs[0]) && s == KL_OK; ci++) {
    const int64_t cin = convs[ci][0], cout = convs[ci][1], ks = convs[ci][2], st = convs[ci][3];
    const int64_t dil = convs[ci][4], pad = convs[ci][5];
    const int64_t wout = (win + 2 * pad - dil * (ks - 1) - 1) / st + 1, K = ks * cin;
    const int64_t np = (cout + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL;
    float* x = malloc(sizeof(float) * (size_t)(batch * cin * win));
    float* w = malloc(sizeof(float) * (size_t)(cout * K));
    float* P = calloc((size_t)(np * K * KL_DENSE_PANEL), sizeof(float));
    float* y[3];
    for (int i = 0; i < 3; i++) y[i] = malloc(sizeof(float) * (size_t)(batch * cout * wout));
    if (!x || !w || !P || !y[0] || !y[1] || !y[2]) s = KL_ERR_NOMEM;
    if (s == KL_OK) {
      uint32_t r = 41 + (uint32_t)ci;
      for (int64_t i = 0; i < batch * cin * win; i++) x[i] = frand(&r);
      for (int64_t i = 0; i < cout * K; i++) w[i] = frand(&r);
      for (int64_t o = 0; o < cout; o++)
        for (int64_t c = 0; c < cin; c++)
          for (int64_t j = 0; j < ks; j++)
            P[((o / KL_DENSE_PANEL) * K + j * cin + c) * KL_DENSE_PANEL + o % KL_DENSE_PANEL] =
                w[(o * cin + c) * ks + j];
      const int threads[3] = {1, 2, 3};
      for (int t = 0; t < 3 && s == KL_OK; t++) {
        kl_conv1d_args c;
        memset(&c, 0, sizeof(c));
        c.batch = batch, c.cin = cin, c.cout = cout, c.win = win, c.wout = wout, c.ksize = ks;
        c.stride = st, c.dilation = dil, c.pad_l = pad, c.x = x, c.w = P, c.w_panels = 1;
        c.y = y[t], c.num_threads = threads[t];
        s = kl_f32_conv1d(&c);
      }
      for (int64_t n = 0; n < batch && s == KL_OK; n++)
        for (int64_t o = 0; o < cout; o++)
          for (int64_t t = 0; t < wout; t++) {
            double acc = 0;
            for (int64_t c = 0; c < cin; c++)
              for (int64_t j = 0; j < ks; j++) {
                const int64_t u = t * st + j * dil - pad;
                if (u >= 0 && u < win) acc += (double)x[(n * cin + c) * win + u] * w[(o * cin + c) * ks + j];
              }
            err = fmax(err, fabs(acc - y[0][(n * cout + o) * wout + t]));
          }
      for (int t = 1; t < 3; t++)
        ok = ok && !memcmp(y[0], y[t], sizeof(float) * (size_t)(batch * cout * wout));
    }
    free(x);
    free(w);
    free(P);
    for (int i = 0; i < 3; i++) free(y[i]);
  }
  check(s == KL_OK && ok && err < 1e-4,
        "[dense] conv1d on panels, dilation 3 and 2 (ksize cin 320, 1100), stride 3: %s, max abs err "
        "%.2g, threads 1/2/3 "
        "bitwise equal", kl_status_str(s), err);
}

/* Tiles split for more threads than the shape's: 256x512 (K = 256) is 2 tiles,
 * split for 8 (kl_dense_set_split_threads) into 8 (rows first), which 1, 2 and 8
 * threads all run, bitwise equal (OpenBLAS's bits for a tile depend on its M/N
 * extent on some CPUs, so the tiles must not follow num_threads). */
static void test_dense_matmul_split(void) {
  const int64_t M = 256, N = 512, K = 256;
  float* A = malloc(sizeof(float) * (size_t)(M * K));
  float* B = malloc(sizeof(float) * (size_t)(K * N));
  float* C[3];
  for (int i = 0; i < 3; i++) C[i] = malloc(sizeof(float) * (size_t)(M * N));
  kl_status s = KL_ERR_NOMEM;
  int ran8 = 0;
  if (A && B && C[0] && C[1] && C[2]) {
    uint32_t st = 11;
    for (int64_t i = 0; i < M * K; i++) A[i] = frand(&st);
    for (int64_t i = 0; i < K * N; i++) B[i] = frand(&st);
    const int threads[3] = {1, 2, 8};
    kl_dense_set_split_threads(8);
    s = KL_OK;
    for (int t = 0; t < 3 && s == KL_OK; t++) {
      kl_matmul_args m;
      memset(&m, 0, sizeof(m));
      m.batch = 1, m.M = M, m.N = N, m.K = K, m.a = A, m.lda = K, m.b = B, m.ldb = N;
      m.c = C[t], m.ldc = N, m.num_threads = threads[t];
      s = kl_f32_matmul(&m);
      if (threads[t] == 8) ran8 = kl_pool_last_threads();
    }
    kl_dense_set_split_threads(0);
  }
  check(s == KL_OK && ran8 == 8 && !memcmp(C[0], C[1], sizeof(float) * (size_t)(M * N)) &&
            !memcmp(C[0], C[2], sizeof(float) * (size_t)(M * N)),
        "[dense] matmul 256x512x256 split for 8 threads: %s, 8 threads ran %d (want "
        "8), threads 1/2/8 bitwise equal",
        kl_status_str(s), ran8);
  free(A);
  free(B);
  for (int i = 0; i < 3; i++) free(C[i]);
}

/* kl_f32_attention ([B, L, H, D] layout, broadcast mask with a fully masked row)
 * against float64; num_threads 1, 2, 3 bitwise identical. */
/* kl_threads_for_work, and the dense calls' thread counts by it: a call of
 * 2.5 KL_DENSE_MIN_MACS runs 2 of 4 threads, one under KL_DENSE_MIN_SOFTMAX
 * elements none but the caller, with the same bits at 1, 2 and 4 threads. */
static void test_dense_threads_for_work(void) {
  const double mw = 1000.0;
  check(kl_threads_for_work(4, 0, mw) == 1 && kl_threads_for_work(4, mw - 1, mw) == 1 &&
            kl_threads_for_work(4, mw, mw) == 1 && kl_threads_for_work(4, 2 * mw, mw) == 2 &&
            kl_threads_for_work(4, 3.5 * mw, mw) == 3 && kl_threads_for_work(4, 1e9, mw) == 4 &&
            kl_threads_for_work(1, 1e9, mw) == 1 && kl_threads_for_work(4, NAN, mw) == 1,
        "[threads] kl_threads_for_work: one thread per min_work, 1 .. nth");
  const int64_t M = 256, N = 160, K = 255; /* M N (K + 1) = 2.5 KL_DENSE_MIN_MACS */
  float* A = malloc(sizeof(float) * (size_t)(M * K));
  float* B = malloc(sizeof(float) * (size_t)(K * N));
  float* C[3];
  for (int i = 0; i < 3; i++) C[i] = malloc(sizeof(float) * (size_t)(M * N));
  kl_status s = KL_ERR_NOMEM;
  int last[3] = {0, 0, 0}, same = 1;
  if (A && B && C[0] && C[1] && C[2]) {
    uint32_t st = 5;
    for (int64_t i = 0; i < M * K; i++) A[i] = frand(&st);
    for (int64_t i = 0; i < K * N; i++) B[i] = frand(&st);
    const int threads[3] = {1, 2, 4};
    s = KL_OK;
    for (int t = 0; t < 3 && s == KL_OK; t++) {
      kl_matmul_args a;
      memset(&a, 0, sizeof(a));
      a.batch = 1, a.M = M, a.N = N, a.K = K;
      a.a = A, a.lda = K, a.b = B, a.ldb = N, a.c = C[t], a.ldc = N;
      a.num_threads = threads[t];
      s = kl_f32_matmul(&a);
      last[t] = kl_pool_last_threads();
      if (t) same &= !memcmp(C[0], C[t], sizeof(float) * (size_t)(M * N));
    }
    /* 40000 elements, fewer than KL_DENSE_MIN_SOFTMAX: no parallel job */
    if (s == KL_OK) s = kl_f32_softmax(40, 1000, A, C[1], 4);
  }
  check(s == KL_OK && same && last[2] == 2 && kl_pool_last_threads() == 2,
        "[dense] matmul of 2.5 KL_DENSE_MIN_MACS: %s, 2 of 4 threads (%d), bits equal at 1/2/4 "
        "threads; a small softmax on the caller alone (last job %d threads)",
        kl_status_str(s), last[2], kl_pool_last_threads());
  free(A);
  free(B);
  for (int i = 0; i < 3; i++) free(C[i]);
}

static void test_dense_attention(void) {
  const int64_t B = 2, H = 3, L = 600, S = 300, D = 9, HD = H * D;
  float* q = malloc(sizeof(float) * (size_t)(B * L * HD));
  float* kv = malloc(sizeof(float) * (size_t)(B * S * HD));
  float* mask = malloc(sizeof(float) * (size_t)(L * S));
  float* o[3];
  for (int i = 0; i < 3; i++) o[i] = malloc(sizeof(float) * (size_t)(B * L * HD));
  double* p = malloc(sizeof(double) * (size_t)S);
  if (!q || !kv || !mask || !o[0] || !o[1] || !o[2] || !p) {
    check(0, "[dense] attention: out of memory");
    goto done;
  }
  uint32_t st = 11;
  for (int64_t i = 0; i < B * L * HD; i++) q[i] = frand(&st);
  for (int64_t i = 0; i < B * S * HD; i++) kv[i] = frand(&st);
  for (int64_t i = 0; i < L * S; i++) mask[i] = (i % 5 == 0) ? -INFINITY : 0.0f;
  for (int64_t s2 = 0; s2 < S; s2++) mask[3 * S + s2] = -INFINITY; /* row 3: all masked */
  kl_status s = KL_OK;
  for (int t = 0; t < 3 && s == KL_OK; t++) {
    kl_attention_args a;
    memset(&a, 0, sizeof(a));
    a.batch = B, a.heads = H, a.L = L, a.S = S, a.D = D, a.scale = 0.4f;
    a.q = q, a.sqb = L * HD, a.sqh = D, a.sql = HD;
    a.k = kv, a.skb = S * HD, a.skh = D, a.sks = HD; /* v = k: one buffer */
    a.v = kv, a.svb = S * HD, a.svh = D, a.svs = HD;
    a.mask = mask, a.sml = S;
    a.o = o[t], a.sob = L * HD, a.soh = D, a.sol = HD;
    a.num_threads = t + 1;
    s = kl_f32_attention(&a);
  }
  double err = 0;
  int zeros = 1;
  for (int64_t b = 0; b < B && s == KL_OK; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t l = 0; l < L; l++) {
        const float* qr = q + b * L * HD + l * HD + h * D;
        const float* out = o[0] + b * L * HD + l * HD + h * D;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; j++) {
          const float* kr = kv + b * S * HD + j * HD + h * D;
          double dot = 0;
          for (int64_t d = 0; d < D; d++) dot += (double)qr[d] * kr[d];
          p[j] = 0.4 * dot + mask[l * S + j];
          mx = fmax(mx, p[j]);
        }
        if (mx == -INFINITY) {
          for (int64_t d = 0; d < D; d++) zeros &= out[d] == 0.0f;
          continue;
        }
        for (int64_t j = 0; j < S; j++) sum += p[j] = exp(p[j] - mx);
        for (int64_t d = 0; d < D; d++) {
          double r = 0;
          for (int64_t j = 0; j < S; j++) r += p[j] / sum * kv[b * S * HD + j * HD + h * D + d];
          err = fmax(err, fabs(r - out[d]));
        }
      }
  const size_t n = sizeof(float) * (size_t)(B * L * HD);
  const int last = kl_pool_last_threads(); /* 2 B H L S D multiply-adds: room for 3 threads */
  check(s == KL_OK && err < 2e-5 && zeros && !memcmp(o[0], o[1], n) && !memcmp(o[0], o[2], n) &&
            last == 3,
        "[dense] attention B2 H3 L600 S300 D9, [B, L, H, D], masked row: %s, max abs err %.2g, "
        "masked row zeros %d, threads 1/2/3 bitwise equal, the last on %d threads",
        kl_status_str(s), err, zeros, last);
done:
  free(q);
  free(kv);
  free(mask);
  for (int i = 0; i < 3; i++) free(o[i]);
  free(p);
}

/* kl_run_args.interrupt: asked on the calling thread, between the input
 * projection's tiles and every KL_INTERRUPT_STEPS steps; a yes stops every
 * thread of every chunk group at the same tile or step (no barrier left
 * waiting, whatever the thread count and split), and a callback that never says
 * yes changes no bit. */
typedef struct {
  int calls, stop_at;
} intr_count;

static int intr_cb(void* p) {
  intr_count* c = p;
  return ++c->calls == c->stop_at;
}

static void test_interrupt(void) {
  enum { T = 600, I = 8, H = 32, L = 2, D = 2 };
  uint32_t st = 7;
  float* w[L * D][4];
  kl_weights kw[L * D];
  for (int g = 0; g < L * D; g++) {
    const size_t n[4] = {4 * H * (size_t)(g < D ? I : D * H), 4 * H * H, 4 * H, 4 * H};
    for (int j = 0; j < 4; j++) {
      w[g][j] = xcalloc(n[j], sizeof(float));
      for (size_t i = 0; i < n[j]; i++) w[g][j][i] = 0.3f * frand(&st);
    }
    kw[g] = (kl_weights){w[g][0], w[g][1], w[g][2], w[g][3], NULL};
  }
  const kl_lstm_desc desc = {I, H, L, 1, 0, 0, KL_F32};
  kl_lstm* m = NULL;
  kl_status s = kl_lstm_create(&desc, kw, &m);
  check(s == KL_OK, "[interrupt] create: %s", kl_status_str(s));
  static const int64_t Bs[2] = {1, 40};
  static const int nths[4] = {1, 2, 4, 16};
  for (int bi = 0; s == KL_OK && bi < 2; bi++) {
    const int64_t B = Bs[bi];
    float* x = xcalloc((size_t)(T * B * I), sizeof(float));
    float* y0 = xcalloc((size_t)(T * B * D * H), sizeof(float));
    float* y1 = xcalloc((size_t)(T * B * D * H), sizeof(float));
    for (int64_t i = 0; i < T * B * I; i++) x[i] = frand(&st);
    kl_run_args a = {T, B, x, B * I, I, y0, B * D * H, D * H, NULL, NULL, NULL, NULL, NULL, 1, 0, NULL, NULL, NULL};
    const kl_status s0 = kl_lstm_run(m, &a);
    for (int k = 0; k < 4; k++) {
      intr_count never = {0, -1}, once = {0, 4};
      a.y = y1;
      a.num_threads = nths[k];
      a.interrupt = intr_cb;
      a.interrupt_ctx = &never;
      const kl_status s1 = kl_lstm_run(m, &a);
      check(s0 == KL_OK && s1 == KL_OK && never.calls > 2 &&
                !memcmp(y0, y1, (size_t)(T * B * D * H) * sizeof(float)),
            "[interrupt] B=%lld, %d threads: asked %d times, never stopping: same bits as no callback",
            (long long)B, nths[k], never.calls);
      a.interrupt_ctx = &once;
      const kl_status s2 = kl_lstm_run(m, &a);
      check(s2 == KL_ERR_INTERRUPTED && once.calls == 4,
            "[interrupt] B=%lld, %d threads: stopped at the 4th question (%s, asked %d times)",
            (long long)B, nths[k], kl_status_str(s2), once.calls);
    }
    free(x);
    free(y0);
    free(y1);
  }
  /* 8 steps (no recurrence poll) of 512 rows: asked between the input
   * projection's tiles too, not only before each layer */
  const int64_t Ts = 8, Bs2 = 512;
  float* x = xcalloc((size_t)(Ts * Bs2 * I), sizeof(float));
  float* y = xcalloc((size_t)(Ts * Bs2 * D * H), sizeof(float));
  for (int k = 0; s == KL_OK && k < 2; k++) {
    intr_count never = {0, -1}, second = {0, 2};
    kl_run_args a = {Ts, Bs2, x, Bs2 * I, I, y, Bs2 * D * H, D * H, NULL, NULL, NULL, NULL, NULL,
                     nths[k], 0, NULL, intr_cb, &never};
    const kl_status s1 = kl_lstm_run(m, &a);
    a.interrupt_ctx = &second;
    const kl_status s2 = kl_lstm_run(m, &a);
    check(s1 == KL_OK && never.calls > L && s2 == KL_ERR_INTERRUPTED && second.calls == 2,
          "[interrupt] T=8 B=512, %d thread(s): asked %d times in %d layers (the input projection's "
          "tiles too); stopped at the 2nd question (%s)", nths[k], never.calls, L, kl_status_str(s2));
  }
  free(x);
  free(y);
  kl_lstm_free(m);
  for (int g = 0; g < L * D; g++)
    for (int j = 0; j < 4; j++) free(w[g][j]);
}

/* The kept work buffers: best fit, at most KL_SCRATCH_KEEP kept, all freed by
 * kl_cache_clear (ASan checks that nothing leaks or is freed twice). */
/* Every count is capped at kl_max_threads(): KOKORO_LSTM_MAX_THREADS, else the
 * usable CPUs; the environment's default and kl_set_num_threads's value too. */
static void test_thread_cap(void) {
  setenv("KOKORO_LSTM_MAX_THREADS", "3", 1);
  setenv("KOKORO_LSTM_NUM_THREADS", "64", 1);
  check(kl_max_threads() == 3 && kl_get_num_threads() == 3,
        "[threads] KOKORO_LSTM_NUM_THREADS=64 capped at KOKORO_LSTM_MAX_THREADS=3 (got %d)",
        kl_get_num_threads());
  kl_set_num_threads(500);
  check(kl_get_num_threads() == 3, "[threads] kl_set_num_threads(500) capped at 3 (got %d)",
        kl_get_num_threads());
  kl_set_num_threads(0);
  setenv("KOKORO_LSTM_NUM_THREADS", "abc", 1);
  unsetenv("KOKORO_LSTM_MAX_THREADS");
  const int cap = kl_max_threads();
  check(cap >= 1 && cap <= 512 && kl_get_num_threads() == cap,
        "[threads] without KOKORO_LSTM_MAX_THREADS the cap is the usable CPUs (%d), an invalid "
        "KOKORO_LSTM_NUM_THREADS is ignored", cap);
  unsetenv("KOKORO_LSTM_NUM_THREADS");
  setenv("KOKORO_LSTM_MAX_THREADS", "64", 1); /* the other tests run up to 16 threads */
}

static void test_scratch(void) {
  kl_cache_clear();
  size_t cap[5];
  void* p[5];
  const size_t sizes[5] = {1000, 4096, 100000, 64, 0};
  for (int i = 0; i < 5; i++) {
    p[i] = kl_scratch_take(sizes[i], &cap[i]);
    check(p[i] && cap[i] >= sizes[i] && cap[i] % 64 == 0 && ((uintptr_t)p[i] & 63) == 0,
          "[scratch] take(%zu): 64-aligned, cap %zu", sizes[i], cap[i]);
    if (p[i]) memset(p[i], 0x5a, cap[i]);
  }
  for (int i = 0; i < 5; i++) kl_scratch_give(p[i], cap[i]); /* 4 slots: the 64-byte one goes */
  const kl_cache_stats s = kl_cache_get_stats();
  check(s.scratch_bytes == (int64_t)(cap[0] + cap[1] + cap[2] + cap[4]) ||
            s.scratch_bytes == (int64_t)(cap[0] + cap[1] + cap[2] + cap[3]),
        "[scratch] four largest kept: %lld bytes", (long long)s.scratch_bytes);
  size_t c;
  void* q = kl_scratch_take(3000, &c);
  check(q == p[1] && c == cap[1], "[scratch] take(3000) returns the kept 4096-byte buffer (best fit)");
  kl_scratch_give(q, c);
  /* a buffer beyond the keep limit is freed, not kept (its size as given) */
  void* big = malloc(64);
  kl_scratch_give(big, KL_SCRATCH_KEEP + 64);
  check(kl_cache_get_stats().scratch_bytes == s.scratch_bytes, "[scratch] one beyond the limit is not kept");
  kl_cache_clear();
  check(kl_cache_get_stats().scratch_bytes == 0, "[scratch] kl_cache_clear frees the kept buffers");
  kl_scratch_give(NULL, 64);
}

/* ---- counter-based random numbers (src/ops/random.c) ------------------------ */
/* Philox4x32-10 against Random123's known answers (kat_vectors, "philox4x32 10"
 * lines: counter, key, expected output), then the draw's rule: any thread count
 * and any start offset give the same elements, uniforms in [0, 1), normals finite. */
static void test_random(void) {
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int v = 0; v < 3; v++) {
    uint32_t out[4];
    kl_philox4x32_10(kat[v], kat[v] + 4, out);
    check(memcmp(out, kat[v] + 6, sizeof(out)) == 0,
          "[random] philox4x32-10 known answer %d: %08x %08x %08x %08x", v, out[0], out[1], out[2],
          out[3]);
  }
  const int64_t n = 100003; /* several chunks and a partial block */
  float* a = xcalloc((size_t)n, sizeof(float));
  float* b = xcalloc((size_t)n, sizeof(float));
  for (int dist = 0; dist < 2; dist++) {
    const char* name = dist == KL_RANDOM_UNIFORM ? "uniform" : "normal";
    const uint64_t seed = 0x123456789abcdefULL, stream = 5;
    kl_status s = kl_f32_random(dist, seed, stream, 0, n, a, 1);
    int same = s == KL_OK;
    for (int nth = 2; nth <= 16 && same; nth *= 2) {
      same = kl_f32_random(dist, seed, stream, 0, n, b, nth) == KL_OK &&
             memcmp(a, b, (size_t)n * sizeof(float)) == 0;
    }
    /* elements 7.. alone, then 3 elements at 99998 */
    same = same && kl_f32_random(dist, seed, stream, 7, n - 7, b, 2) == KL_OK &&
           memcmp(a + 7, b, (size_t)(n - 7) * sizeof(float)) == 0;
    same = same && kl_f32_random(dist, seed, stream, 99998, 3, b, 1) == KL_OK &&
           memcmp(a + 99998, b, 3 * sizeof(float)) == 0;
    double mean = 0, sq = 0;
    int in_range = 1;
    for (int64_t i = 0; i < n; i++) {
      mean += a[i];
      sq += (double)a[i] * a[i];
      if (dist == KL_RANDOM_UNIFORM ? !(a[i] >= 0.0f && a[i] < 1.0f) : !isfinite(a[i])) in_range = 0;
    }
    mean /= (double)n;
    const double sd = sqrt(sq / (double)n - mean * mean);
    const double want_mean = dist == KL_RANDOM_UNIFORM ? 0.5 : 0.0;
    const double want_sd = dist == KL_RANDOM_UNIFORM ? sqrt(1.0 / 12.0) : 1.0;
    check(same && in_range && fabs(mean - want_mean) < 0.01 && fabs(sd - want_sd) < 0.01,
          "[random] %s: threads 1/2/4/8/16 and offsets bitwise equal, values in range, mean %.4f "
          "sd %.4f",
          name, mean, sd);
    s = kl_f32_random(dist, seed, stream + 1, 0, 64, b, 1);
    check(s == KL_OK && memcmp(a, b, 64 * sizeof(float)) != 0, "[random] %s: another stream differs",
          name);
    s = kl_f32_random(dist, seed + 1, stream, 0, 64, b, 1);
    check(s == KL_OK && memcmp(a, b, 64 * sizeof(float)) != 0, "[random] %s: another seed differs",
          name);
  }
  check(kl_f32_random(2, 1, 0, 0, 4, a, 1) == KL_ERR_ARG && kl_f32_random(0, 1, 0, -1, 4, a, 1) == KL_ERR_ARG &&
            kl_f32_random(0, 1, 0, 0, 4, NULL, 1) == KL_ERR_ARG &&
            kl_f32_random(0, 1, 0, 0, -1, a, 1) == KL_ERR_ARG && kl_f32_random(0, 1, 0, 0, 0, NULL, 1) == KL_OK,
        "[random] bad dist, start, output or count -> KL_ERR_ARG; n 0 -> KL_OK");
  free(a);
  free(b);
}

/* ---- instance norm (src/ops/norm.c) ------------------------------------------ */
/* Against a double reference; a constant row gives exactly the shift, a NaN only
 * its own row; 1, 2 and 4 threads bitwise equal; bad arguments KL_ERR_ARG. */
static void test_instance_norm(void) {
  const int64_t N = 2, C = 5, L = 30011, rows = N * C;
  float* x = xcalloc((size_t)(rows * L), sizeof(float));
  float* y = xcalloc((size_t)(rows * L), sizeof(float));
  float* z = xcalloc((size_t)(rows * L), sizeof(float));
  float w[5], b[5], sc[10], sh[10];
  uint64_t st = 12345;
  for (int64_t i = 0; i < rows * L; i++) {
    st = st * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = (float)((double)(st >> 40) / (double)(1 << 24) * 4.0 + 1.0);
  }
  for (int c = 0; c < 5; c++) {
    w[c] = 0.5f + 0.25f * (float)c;
    b[c] = -0.3f * (float)c;
  }
  for (int r = 0; r < 10; r++) {
    sc[r] = 1.0f + 0.1f * (float)r;
    sh[r] = 0.05f * (float)r;
  }
  for (int64_t i = 0; i < L; i++) x[2 * L + i] = 3.7f; /* row 2 constant */
  kl_instance_norm_args a;
  memset(&a, 0, sizeof(a));
  a.batch = N;
  a.channels = C;
  a.length = L;
  a.x = x;
  a.weight = w;
  a.bias = b;
  a.scale = sc;
  a.shift = sh;
  a.scale_per_batch = a.shift_per_batch = 1;
  a.eps = 1e-5;
  a.y = y;
  a.num_threads = 1;
  kl_status s = kl_f32_instance_norm(&a);
  double err = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float* xr = x + r * L;
    double m = 0, v = 0;
    for (int64_t i = 0; i < L; i++) m += xr[i];
    m /= (double)L;
    for (int64_t i = 0; i < L; i++) v += (xr[i] - m) * (xr[i] - m);
    v /= (double)L;
    for (int64_t i = 0; i < L; i++) {
      const double want = sc[r] * ((xr[i] - m) / sqrt(v + 1e-5) * w[r % C] + b[r % C]) + sh[r];
      const double e = fabs(y[r * L + i] - want);
      if (!(e <= err)) err = e;
    }
  }
  int constant_exact = 1;
  for (int64_t i = 0; i < L; i++)
    if (y[2 * L + i] != (float)((double)b[2] * sc[2] + sh[2])) constant_exact = 0;
  int same = 1;
  for (int nth = 2; nth <= 4; nth += 2) {
    a.y = z;
    a.num_threads = nth;
    same = same && kl_f32_instance_norm(&a) == KL_OK &&
           memcmp(y, z, (size_t)(rows * L) * sizeof(float)) == 0;
  }
  check(s == KL_OK && err < 2e-5 && constant_exact && same,
        "[norm] instance norm + AdaIN 2x5x%lld: max abs err %.2g, constant row exact, threads 1/2/4 "
        "bitwise equal",
        (long long)L, err);
  x[7 * L + 11] = NAN;
  a.num_threads = 2;
  s = kl_f32_instance_norm(&a);
  int nan_ok = s == KL_OK;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < L; i += 997) nan_ok = nan_ok && (isnan(z[r * L + i]) == (r == 7));
  check(nan_ok, "[norm] a NaN gives NaN in its own row only");
  a.eps = -1;
  kl_status bad1 = kl_f32_instance_norm(&a);
  a.eps = 1e-5;
  a.y = NULL;
  kl_status bad2 = kl_f32_instance_norm(&a);
  check(bad1 == KL_ERR_ARG && bad2 == KL_ERR_ARG, "[norm] eps < 0 or no output -> KL_ERR_ARG");
  free(x);
  free(y);
  free(z);
}

int main(void) {
  const kl_isa best = kl_isa_detected();
  printf("kokoro_lstm core test: blas=%s, isa detected=%s, active=%s, avx512_bf16=%d\n",
         kl_blas_name(), kl_isa_name(best), kl_isa_name(kl_isa_active()), kl_cpu_has_avx512bf16());
  check(kl_dtype_io_size(KL_F32) == 4 && kl_dtype_io_size(KL_BF16) == 4 &&
            kl_dtype_io_size(KL_F16) == 4 && kl_dtype_io_size(KL_F64) == 8,
        "[api] kl_dtype_io_size: float32 4, bfloat16 4, float16 4, float64 8");

  /* the tests run up to 16 threads whatever the machine's cores (results never
   * depend on the count) */
  setenv("KOKORO_LSTM_MAX_THREADS", "64", 0);
  test_thread_cap();
  test_interrupt();
  test_bad_args();
  test_gate_args();
  test_scratch();
  test_kernel_lists();
  test_dense_matmul();
  test_dense_matmul_split();
  test_dense_matmul_panels();
  test_dense_matmul_panels_aliased_rows();
  test_dense_conv1d_panels();
  test_dense_conv_phases();
  test_dense_attention();
  test_dense_threads_for_work();
  test_random();
  test_instance_norm();

  const char* forced = getenv("KOKORO_LSTM_ISA");
  if (forced && *forced)
    check(strcmp(kl_isa_name(kl_isa_active()), forced) == 0,
          "[env] KOKORO_LSTM_ISA=%s selects it (active %s)", forced, kl_isa_name(kl_isa_active()));
  for (int isa = 0; isa < KL_ISA_COUNT; isa++) {
    const char* name = kl_isa_name((kl_isa)isa);
    if (forced && *forced && strcmp(forced, name) != 0) continue;
    const kl_status st = kl_isa_set((kl_isa)isa);
    if (!kl_isa_supported((kl_isa)isa)) {
      check(st == KL_ERR_ARG, "[%s] kl_isa_set for an ISA this CPU lacks -> %s (want KL_ERR_ARG)",
            name, kl_status_str(st));
      printf("SKIP [%s] not supported by this CPU (or build)\n", name);
      continue;
    }
    check(st == KL_OK && kl_isa_active() == (kl_isa)isa, "[%s] kl_isa_set -> %s, active %s", name,
          kl_status_str(st), kl_isa_name(kl_isa_active()));
    if (st != KL_OK) continue;
    test_activations(name);
    test_dispatch(name);
    /* the large float32 cases take the AMX tiles where the level has them; the
     * default (off) path is the float32 one every other level runs */
    kl_f32_amx_set(1);
    const kl_dtype dts[4] = {KL_F32, KL_BF16, KL_F16, KL_F64};
    for (int di = 0; di < 4; di++)
      for (int ci = 0; ci < NCASES; ci++) test_case(&CASES[ci], dts[di], name);
    test_concurrent(name);
  }
  kl_isa_set(best);

  /* Which threads ran the parallel jobs (libgomp's team when it is loaded, e.g.
   * with LD_PRELOAD: `make test` runs this program both ways).
   * KL_TEST_POOL=openmp|own says which one must have. */
  long jobs_own, jobs_omp, jobs_tvm;
  kl_pool_jobs(&jobs_own, &jobs_omp, &jobs_tvm);
  const char* omp = kl_pool_openmp();
  printf("parallel jobs: %ld on the own pool, %ld on OpenMP (%s)\n", jobs_own, jobs_omp,
         omp ? omp : "not loaded");
  const char* want = getenv("KL_TEST_POOL");
  if (want && strcmp(want, "openmp") == 0)
    check(omp && jobs_omp > 0 && jobs_own == 0, "KL_TEST_POOL=openmp: every job on libgomp's team");
  else if (want && strcmp(want, "own") == 0)
    check(!omp && jobs_own > 0 && jobs_omp == 0, "KL_TEST_POOL=own: every job on the own pool");

  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
