/* The LSTM cases of the C test: the cases, one model's parameters in double, the
 * double-precision reference (torch.nn.LSTM's semantics) and the engine under test
 * run on them through kl_lstm_run or kl_lstm_forward (lstm_model.c, lstm_run.c). */
#ifndef KL_TEST_LSTM_H
#define KL_TEST_LSTM_H

#include <stddef.h>
#include <stdint.h>

#include "kokoro_lstm.h"
#include "engine.h" /* the handle API (kl_lstm_create / run) */

/* One case: sizes, lengths, given state and bias, and the memory layout of x and y. */
enum { LAYOUT_SEQ = 0, LAYOUT_BATCH = 1, LAYOUT_SEQ_PADDED = 2 };
typedef struct tcase {
  const char* name;
  int I, H, L, bidir, P, reverse;
  int64_t T, B;
  int lengths; /* 0: all T; 1: varying lengths (some T); 2: varying, all < T */
  int state;   /* h0/c0 given */
  int bias;    /* b_ih/b_hh given */
  int layout;
} tcase;

#define MAXW 16 /* num_layers * D */

/* One model's parameters in double (already rounded to float for float32
 * and bfloat16 runs, whose reference then sees the same values). */
typedef struct model {
  const tcase* c;
  int D, R;
  int in_size[MAXW];
  double *w_ih[MAXW], *w_hh[MAXW], *b_ih[MAXW], *b_hh[MAXW], *w_hr[MAXW];
} model;

extern const char* const layout_name[];
extern const tcase CASES[];
extern const int NCASES;

double round_if(double v, int to_float);
/* n uniform values in [-scale, scale), rounded to float when to_float. */
double* rand_array(size_t n, double scale, int to_float);
void model_init(model* m, const tcase* c, int to_float);
void model_free(model* m);

double sigm(double x);
/* x [T][B][I], y [T][B][D*R], h0/hn [L*D][B][R], c0/cn [L*D][B][H]. */
void ref_lstm(const model* m, int64_t T, int64_t B, const double* x, const int64_t* len,
              const double* h0, const double* c0, double* y, double* hn, double* cn);

/* The engine's arrays: float for float32, bfloat16 and float16 runs, double for float64. */
size_t io_size(kl_dtype dt);
void* to_io(const double* a, size_t n, kl_dtype dt);
double io_get(const void* p, size_t i, kl_dtype dt);
const char* dtype_name(kl_dtype dt);
double tolerance(kl_dtype dt);

/* ---- the engine under test (lstm_run.c) ---------------------------------- */

/* The packed object of m's weights in dtype dt (the caller's arrays scribbled and
 * freed right after kl_lstm_create). */
kl_status create_engine(const model* m, kl_dtype dt, kl_lstm** out);

/* The model's weights as DLTensors for kl_lstm_forward, with padded row strides
 * (and every-other-element biases), so the entry's strided reads are tested. */
typedef struct dl_model {
  int n, per;
  void* buf[MAXW * 5];
  DLTensor t[MAXW * 5];
  int64_t shape[MAXW * 5][2], strides[MAXW * 5][2];
  const DLTensor* ptrs[MAXW * 5];
} dl_model;

/* kl_lstm_forward's constant_weights for run_forward (1: a trusted entry, which
 * holds float32 W_ih in panels too). */
extern int g_fwd_constant;

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

void dl_model_init(dl_model* f, const model* m, kl_dtype dt);
void dl_model_free(dl_model* f);
/* kl_forward_args for f's weights: the case's description, dtype, nth threads and
 * g_fwd_constant; no tensors. */
kl_forward_args forward_args(const dl_model* f, const model* m, kl_dtype dt, int nth);
/* kl_lstm_forward on the same buffers as a kl_lstm_run call (seq-first tensors). */
kl_status run_forward(const dl_model* f, const model* m, kl_dtype dt, const kl_run_args* a);
void result_free(result* r);
/* One run through kl_lstm_run on lm, or through kl_lstm_forward on f when lm is NULL. */
void run_engine(const kl_lstm* lm, const dl_model* f, const run_input* in, int nth, result* r);

#endif
