/* The handle API refuses bad arguments with KL_ERR_ARG: kl_lstm_create, kl_lstm_run,
 * kl_isa_set. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "kokoro_lstm_testing.h"

/* kl_lstm_create refuses every bad description or weight set of a 5 -> 7 LSTM. */
static void bad_create_args(float* wih, float* whh, float* whr, int I, int H) {
  kl_weights w = {wih, whh, NULL, NULL, NULL};
  kl_weights wp = {wih, whh, NULL, NULL, whr};
  const kl_lstm_desc good = {I, H, 1, 0, 0, 0, KL_F32};
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
}

/* kl_lstm_run on a valid object refuses every bad run argument. */
static void bad_run_args(const kl_lstm* lm, int I, int H) {
  kl_status st;
  enum { T = 4, B = 3 };
  float x[T * B * 5] = {0};
  float y[T * B * 7] = {0};
  int64_t lens[B] = {4, 2, 1};
  const kl_run_args good_a = {.T = T, .B = B, .x = x, .x_sb = I, .x_st = B * I, .y = y,
                              .y_sb = H, .y_st = B * H, .lengths = lens, .num_threads = 1};
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

/* The handle API's argument checks: create, run, kl_lstm_free(NULL), kl_isa_set. */
void test_bad_args(void) {
  const int I = 5, H = 7;
  float* wih = xcalloc(4 * H * I, sizeof(float));
  float* whh = xcalloc(4 * H * H, sizeof(float));
  float* whr = xcalloc((size_t)H * H, sizeof(float));
  kl_weights w = {wih, whh, NULL, NULL, NULL};
  const kl_lstm_desc good = {I, H, 1, 0, 0, 0, KL_F32};
  kl_lstm* lm = NULL;
  bad_create_args(wih, whh, whr, I, H);
  kl_status st = kl_lstm_create(&good, &w, &lm);
  check(st == KL_OK && lm != NULL, "[args] kl_lstm_create of a valid 5->7 LSTM -> %s",
        kl_status_str(st));
  if (st != KL_OK || !lm) goto out;
  check(kl_lstm_get_desc(lm)->hidden_size == H && kl_lstm_get_desc(lm)->input_size == I,
        "[args] kl_lstm_get_desc returns the description");

  bad_run_args(lm, I, H);
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
