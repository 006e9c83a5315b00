/* The LSTM run: a plan made once per call (plan.c), executed layer by layer.
 *
 * Per layer, one job on the thread pool: (1) every thread computes its tiles of
 * the input gates of every timestep and both directions (inproj.c); (2) each
 * direction group of threads runs the recurrence (recurrence.c), directions in
 * parallel. Every output element is computed by the same instruction sequence
 * whatever the thread count, so results are bitwise reproducible. */
#include <stdlib.h>

#include "blas.h"
#include "engine.h"

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

const char* kl_blas_name(void) { return KL_BLAS_NAME; }

/* One layer on the pool: all threads compute the input gates, then each
 * direction group runs its recurrence (leftover threads are done). */
static void layer_task(void* ctx, int ith, int nth) {
  const kl_plan* x = ctx;
  const int D = x->m->D;
  if (x->ip->prepare) {
    x->ip->prepare(x, ith, nth);
    if (nth > 1) kl_barrier_wait(x->gbar, ith);
  }
  if (x->Gw) x->ip->run(x, ith, nth);
  if (nth < D) { /* one thread: directions one after the other */
    for (int d = 0; d < D && !atomic_load(x->stop); d++) kl_run_direction(x, d, 0, (kl_split){1, 1}, ith);
    return;
  }
  int* gstop = &x->gstop[x->gbar - x->bar]; /* written before the barrier, read after: one answer */
  if (ith == 0) *gstop = atomic_load(x->stop);
  kl_barrier_wait(x->gbar, ith);
  if (*gstop) return;
  const int p = kl_threads_per_direction(nth, D), d = ith / p;
  if (d >= D) return;
  kl_run_direction(x, d, ith % p, x->sp, ith);
}

/* The layer's job; BLAS runs single-threaded inside our threads (never oversubscribed). */
static kl_status run_layer(kl_plan* x) {
  const int blas_prev = kl_blas_get_num_threads();
  if (blas_prev != 1) kl_blas_set_num_threads(1);
  kl_status status = kl_pool_run(x->nth, layer_task, x);
  if (blas_prev != 1) kl_blas_set_num_threads(blas_prev);
  if (status == KL_OK && atomic_load(x->stop)) status = KL_ERR_INTERRUPTED;
  return status;
}

kl_status kl_lstm_run(const kl_lstm* m, const kl_run_args* a) {
  return m && m->borrowed ? KL_ERR_ARG : kl_lstm_run_views(m, a, NULL);
}

kl_status kl_lstm_run_views(const kl_lstm* m, const kl_run_args* a, const kl_wih_view* wih) {
  if (!m || !a || a->T < 1 || a->B < 0 || !a->x || !a->y || a->num_threads < 1) return KL_ERR_ARG;
  if (m->borrowed && !wih) return KL_ERR_ARG;
  if (a->B == 0) return KL_OK;
  kl_plan x;
  kl_status status = kl_plan_make(&x, m, a, wih);
  for (int l = 0; status == KL_OK && l < m->desc.num_layers; l++) {
    if (a->interrupt && a->interrupt(a->interrupt_ctx)) {
      status = KL_ERR_INTERRUPTED;
      break;
    }
    kl_plan_layer(&x, a, l);
    status = run_layer(&x);
    if (status == KL_OK) kl_plan_store_states(&x, a, l);
  }
  kl_plan_free(&x);
  return status;
}
