/* Persistent thread pool (after ggml's): workers live for the process, the
 * caller is thread 0, a job is announced by bumping an atomic generation
 * counter; workers spin briefly for the next job, then sleep on a condvar.
 * One job at a time: concurrent callers are serialized by a mutex. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KL_PAUSE() _mm_pause()
#else
#define KL_PAUSE() ((void)0)
#endif

#define KL_MAX_THREADS 512 /* < 1024: nth travels in the low bits of gen */
#define KL_SPIN_JOB 20000   /* pause iterations a worker waits before sleeping */
#define KL_SPIN_YIELD 4096  /* barrier spins between sched_yield calls */

typedef struct {
  pthread_mutex_t job_lock;  /* held by the caller for a whole job */
  pthread_mutex_t lock;      /* protects the condvar sleep */
  pthread_cond_t wake;
  atomic_uint gen;           /* (job sequence << 10) | nth of that job */
  atomic_int pending;        /* workers still running the current job */
  int n_workers;             /* threads started, excluding callers */
  /* current job: read only by its participants, which the caller waits for */
  kl_task_fn fn;
  void* ctx;
} kl_pool;

static kl_pool g_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
                         PTHREAD_COND_INITIALIZER, 0, 0, 0, NULL, NULL};

/* The generation current when each worker was created (under job_lock,
 * before the job that needed it was announced), so none misses that job. */
static unsigned g_start_gen[KL_MAX_THREADS];

static void* worker_main(void* arg) {
  const int ith = (int)(intptr_t)arg; /* 1-based */
  kl_pool* p = &g_pool;
  unsigned seen = g_start_gen[ith];
  for (;;) {
    unsigned g;
    int spins = 0;
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && spins < KL_SPIN_JOB) {
      KL_PAUSE();
      spins++;
    }
    if (g == seen) {
      pthread_mutex_lock(&p->lock);
      while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen)
        pthread_cond_wait(&p->wake, &p->lock);
      pthread_mutex_unlock(&p->lock);
    }
    seen = g;
    const int nth = (int)(g & 1023u); /* a worker outside the job reads nothing else */
    if (ith < nth) {
      p->fn(p->ctx, ith, nth);
      atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
  }
  return NULL;
}

static int ensure_workers(kl_pool* p, int n) {
  while (p->n_workers < n) {
    pthread_t t;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return 0;
    g_start_gen[p->n_workers + 1] = atomic_load_explicit(&p->gen, memory_order_relaxed);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, worker_main, (void*)(intptr_t)(p->n_workers + 1));
    pthread_attr_destroy(&attr);
    if (rc != 0) return 0;
    p->n_workers++;
  }
  return 1;
}

kl_status kl_pool_run(int nth, kl_task_fn fn, void* ctx) {
  if (nth < 1) nth = 1;
  if (nth > KL_MAX_THREADS) nth = KL_MAX_THREADS;
  if (nth == 1) {
    fn(ctx, 0, 1);
    return KL_OK;
  }
  kl_pool* p = &g_pool;
  pthread_mutex_lock(&p->job_lock);
  if (!ensure_workers(p, nth - 1)) {
    pthread_mutex_unlock(&p->job_lock);
    return KL_ERR_THREAD;
  }
  p->fn = fn;
  p->ctx = ctx;
  atomic_store_explicit(&p->pending, nth - 1, memory_order_relaxed);
  pthread_mutex_lock(&p->lock);
  const unsigned seq = (atomic_load_explicit(&p->gen, memory_order_relaxed) >> 10) + 1u;
  atomic_store_explicit(&p->gen, (seq << 10) | (unsigned)nth, memory_order_release);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);
  fn(ctx, 0, nth);
  int spins = 0;
  while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
    KL_PAUSE();
    if (++spins % KL_SPIN_YIELD == 0) sched_yield();
  }
  pthread_mutex_unlock(&p->job_lock);
  return KL_OK;
}

void kl_barrier_init(kl_barrier* b, int n) {
  atomic_init(&b->count, 0);
  atomic_init(&b->phase, 0);
  b->n = n;
}

void kl_barrier_wait(kl_barrier* b) {
  if (b->n <= 1) return;
  const int phase = atomic_load_explicit(&b->phase, memory_order_acquire);
  if (atomic_fetch_add_explicit(&b->count, 1, memory_order_acq_rel) == b->n - 1) {
    atomic_store_explicit(&b->count, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->phase, 1, memory_order_acq_rel);
    return;
  }
  int spins = 0;
  while (atomic_load_explicit(&b->phase, memory_order_acquire) == phase) {
    KL_PAUSE();
    if (++spins % KL_SPIN_YIELD == 0) sched_yield();
  }
}
