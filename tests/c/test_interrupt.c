/* kl_run_args.interrupt: the Ctrl-C poll of a run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"

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

void test_interrupt(void) {
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
