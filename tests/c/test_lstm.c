/* The LSTM against the double reference for every case and dtype at one ISA
 * level, threads bitwise; concurrent runs on one object; the activations. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "kokoro_lstm_testing.h"

/* Runs at 2, 4 and 16 threads give r1's bits (16 threads: 8 per direction, so
 * batches of more than one chunk (B > 16) run on a grid of chunk groups x unit
 * threads). */
static void check_threads(const kl_lstm* lm, const run_input* in, const result* r1, size_t ny,
                          const char* tag) {
  int same = 1;
  char detail[128] = "";
  static const int nths[] = {2, 4, 16};
  for (size_t k = 0; k < sizeof(nths) / sizeof(nths[0]); k++) {
    const int nth = nths[k];
    result rn;
    run_engine(lm, NULL, in, nth, &rn);
    if (rn.st != KL_OK || memcmp(rn.ybuf, r1->ybuf, r1->ybytes) != 0 ||
        memcmp(rn.hn, r1->hn, r1->hnbytes) != 0 || memcmp(rn.cn, r1->cn, r1->cnbytes) != 0) {
      same = 0;
      snprintf(detail, sizeof(detail), " (num_threads=%d: %s, max|dy| vs 1 thread %.3g)", nth,
               kl_status_str(rn.st), max_err(rn.y, r1->y, ny));
    }
    result_free(&rn);
  }
  check(same, "%s num_threads 1,2,4,16 bitwise identical%s", tag, detail);
}

/* The double reference's results of one case. */
typedef struct ref_out {
  const int64_t* len;
  const double *y, *hn, *cn;
} ref_out;

/* One case on the packed object lm: against the reference, threads bitwise, then
 * the one entry and the caller's gate input on the same inputs. */
static void check_case(const kl_lstm* lm, const model* m, const run_input* in, const ref_out* ref,
                       const char* tag) {
  const tcase* c = m->c;
  const int64_t T = in->T, B = in->B;
  const int DR = m->D * m->R, LD = c->L * m->D;
  const size_t ny = (size_t)(T * B * DR), nh = (size_t)(LD * B * m->R), nc = (size_t)(LD * B * c->H);
  result r1;
  run_engine(lm, NULL, in, 1, &r1);
  if (r1.st != KL_OK) {
    check(0, "%s run: %s", tag, kl_status_str(r1.st));
    result_free(&r1);
    return;
  }
  const double ey = max_err(r1.y, ref->y, ny), eh = max_err(r1.hnd, ref->hn, nh);
  const double ec = max_err(r1.cnd, ref->cn, nc), tol = tolerance(in->dt);
  int zeros = 1;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = ref->len[b]; t < T; t++)
      for (int j = 0; j < DR; j++)
        if (r1.y[(size_t)((t * B + b) * DR + j)] != 0.0) zeros = 0;
  check(ey <= tol && eh <= tol && ec <= tol && zeros && r1.pad_ok,
        "%s vs double reference: max|dy|=%.3g max|dh_n|=%.3g max|dc_n|=%.3g (tol %.0e)%s%s", tag,
        ey, eh, ec, tol, zeros ? "" : " NONZERO OUTPUT PAST LENGTH",
        r1.pad_ok ? "" : " ROW PADDING OVERWRITTEN");
  check_threads(lm, in, &r1, ny, tag);
  test_forward_entry(m, in, &r1, tag);
  test_gate_input(m, in->dt, in->x, ref->len, c->lengths != 0, in->h0, in->c0, tag);
  /* again on a trusted entry (a float32 input projection: W_ih's panels, gate bias added per panel run);
   * its buffers are freed after the test, so no entry may outlive it */
  char ttag[256 + 16];
  snprintf(ttag, sizeof(ttag), "%s trusted", tag);
  kl_cache_clear();
  g_fwd_constant = 1;
  test_gate_input(m, in->dt, in->x, ref->len, c->lengths != 0, in->h0, in->c0, ttag);
  g_fwd_constant = 0;
  kl_cache_clear();
  result_free(&r1);
}

void test_case(const tcase* c, kl_dtype dt, const char* isa) {
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
    const run_input in = {&m, dt, T, B, x, c->lengths ? len : NULL, h0, c0};
    const ref_out ref = {len, y, hn, cn};
    check_case(lm, &m, &in, &ref, tag);
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

void test_concurrent(const char* isa) {
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

void test_activations(const char* isa) {
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
