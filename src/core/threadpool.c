/* Persistent thread pool (after ggml's): workers live for the process, the
 * caller is thread 0, a job is announced by bumping an atomic generation
 * counter; workers spin briefly for the next job, then sleep (futex on Linux,
 * a condition variable elsewhere). One job at a time: concurrent callers are
 * serialized by a mutex. One pool per process: a job runs on another
 * runtime's threads when the process has them (pool_foreign.c); members are
 * pinned to CPUs (affinity.c). The thread count is decided by the caller
 * (threads.c); the pool runs the count it is given. */
#include <limits.h>
#include <stddef.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"
#include "threads.h"

#ifdef KL_LINUX
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KL_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define KL_PAUSE() __asm__ __volatile__("yield")
#else
#define KL_PAUSE() ((void)0)
#endif

#define KL_SPIN_JOB_NS 200000     /* a worker waits for the next job this long before sleeping */
#define KL_SPIN_BARRIER_NS 100000 /* and at a barrier this long */
#define KL_SPIN_YIELD 1024        /* caller's spins between sched_yield while workers finish */

int64_t kl_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* One pause of a spin that may last ns: 0 once ns have passed since its first
 * pause (i counts the pauses from 0; the clock is read every 64th). */
static int spin_pause(unsigned i, int64_t* deadline, int64_t ns) {
  KL_PAUSE();
  if ((i & 63) != 0) return 1;
  const int64_t t = kl_now_ns();
  if (*deadline == 0) *deadline = t + ns;
  return t <= *deadline;
}

/* Spins (pause) until *addr != val or ns have passed; returns the last value read. */
static int spin_while_equal(atomic_int* addr, int val, int64_t ns) {
  int64_t deadline = 0;
  for (unsigned i = 0;; i++) {
    const int v = atomic_load_explicit(addr, memory_order_acquire);
    if (v != val || !spin_pause(i, &deadline, ns)) return v;
  }
}

/* Sleep while *addr == val / wake every sleeper on addr. */
#ifdef KL_LINUX
static void wait_on(atomic_int* addr, int val) {
  syscall(SYS_futex, (int*)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void wake_all(atomic_int* addr) {
  syscall(SYS_futex, (int*)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
/* A few mutex/condvar pairs shared by address: the waker changes *addr before
 * taking the lock, the sleeper rechecks it under the lock, so no wake is lost;
 * a wake meant for another address sharing the pair only causes a recheck. */
#define KL_WAIT_SLOTS 16
static pthread_mutex_t g_wait_lock[KL_WAIT_SLOTS];
static pthread_cond_t g_wait_cond[KL_WAIT_SLOTS];
static pthread_once_t g_wait_once = PTHREAD_ONCE_INIT;

static void wait_init(void) {
  for (int i = 0; i < KL_WAIT_SLOTS; i++) {
    pthread_mutex_init(&g_wait_lock[i], NULL);
    pthread_cond_init(&g_wait_cond[i], NULL);
  }
}

static int wait_slot(const atomic_int* addr) {
  pthread_once(&g_wait_once, wait_init);
  return (int)(((uintptr_t)addr >> 6) % KL_WAIT_SLOTS);
}

static void wait_on(atomic_int* addr, int val) {
  const int s = wait_slot(addr);
  pthread_mutex_lock(&g_wait_lock[s]);
  while (atomic_load(addr) == val) pthread_cond_wait(&g_wait_cond[s], &g_wait_lock[s]);
  pthread_mutex_unlock(&g_wait_lock[s]);
}

static void wake_all(atomic_int* addr) {
  const int s = wait_slot(addr);
  pthread_mutex_lock(&g_wait_lock[s]);
  pthread_cond_broadcast(&g_wait_cond[s]);
  pthread_mutex_unlock(&g_wait_lock[s]);
}
#endif

typedef struct {
  pthread_mutex_t job_lock;  /* held by the caller for a whole job */
  atomic_int gen;            /* (job sequence << 10) | nth of that job */
  atomic_int sleepers;       /* workers asleep on gen (futex) */
  atomic_int pending;        /* workers still running the current job */
  int n_workers;             /* threads started, excluding callers */
  /* current job: read only by its participants, which the caller waits for */
  kl_task_fn fn;
  void* ctx;
} kl_pool;

static kl_pool g_pool = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, NULL, NULL};

/* The generation current when each worker was created (under job_lock,
 * before the job that needed it was announced), so none misses that job. */
static int g_start_gen[KL_MAX_THREADS];

static void* worker_main(void* arg) {
  const int ith = (int)(intptr_t)arg; /* 1-based */
  kl_pool* p = &g_pool;
  kl_pin_worker(ith);
  int seen = g_start_gen[ith];
  for (;;) {
    int g = spin_while_equal(&p->gen, seen, KL_SPIN_JOB_NS);
    if (g == seen) {
      /* seq_cst: either the caller sees sleepers > 0 and wakes us, or we see
       * its new gen (the futex also rechecks the value) */
      atomic_fetch_add(&p->sleepers, 1);
      while ((g = atomic_load(&p->gen)) == seen) wait_on(&p->gen, seen);
      atomic_fetch_sub(&p->sleepers, 1);
    }
    seen = g;
    const int nth = g & 1023; /* a worker outside the job reads nothing else */
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

/* fork: the child has only the forking thread, so it starts with no workers
 * (they are created again on its first parallel call). prepare takes the job
 * lock, so no job is half-announced when the process is copied. */
static void atfork_prepare(void) { pthread_mutex_lock(&g_pool.job_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_pool.job_lock); }
static void atfork_child(void) {
  kl_pool* p = &g_pool;
  kl_foreign_after_fork();
  atomic_store(&p->sleepers, 0);
  atomic_store(&p->pending, 0);
  p->n_workers = 0;
  pthread_mutex_unlock(&p->job_lock);
}
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static void install_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }
/* at load, so that a child forked before our first parallel call knows it */
__attribute__((constructor)) static void pool_at_load(void) {
  pthread_once(&g_atfork_once, install_atfork);
}

static atomic_long g_jobs_own, g_jobs_omp, g_jobs_tvm;
static atomic_int g_last_threads;

void kl_pool_jobs(long* own, long* openmp, long* tvm) {
  *own = atomic_load(&g_jobs_own);
  *openmp = atomic_load(&g_jobs_omp);
  *tvm = atomic_load(&g_jobs_tvm);
}

int kl_pool_last_threads(void) { return atomic_load(&g_last_threads); }

/* nth comes from the thread rule (threads.h); outside 1..KL_MAX_THREADS (the
 * pool's bound: nth travels in gen's low 10 bits) it is clamped. */
kl_status kl_pool_run(int nth, kl_task_fn fn, void* ctx) {
  if (nth < 1) nth = 1;
  if (nth > KL_MAX_THREADS) nth = KL_MAX_THREADS;
  if (nth == 1) {
    fn(ctx, 0, 1);
    return KL_OK;
  }
  pthread_once(&g_atfork_once, install_atfork);
  kl_pool* p = &g_pool;
  pthread_mutex_lock(&p->job_lock); /* one job at a time, whichever threads run it */
  atomic_store(&g_last_threads, nth);
  const int ran = kl_foreign_run(nth, fn, ctx);
  atomic_fetch_add(ran == KL_POOL_TVM ? &g_jobs_tvm : ran ? &g_jobs_omp : &g_jobs_own, 1);
  if (ran) {
    pthread_mutex_unlock(&p->job_lock);
    return KL_OK;
  }
  if (!ensure_workers(p, nth - 1)) {
    pthread_mutex_unlock(&p->job_lock);
    return KL_ERR_THREAD;
  }
  p->fn = fn;
  p->ctx = ctx;
  atomic_store_explicit(&p->pending, nth - 1, memory_order_relaxed);
  /* a sleeper registers before rechecking gen, so either it sees the new gen or
   * we see it counted and wake it; the futex wakes them all at once */
  const int seq = ((atomic_load(&p->gen) >> 10) + 1) & 0x1fffff;
  atomic_store(&p->gen, (seq << 10) | nth);
  if (atomic_load(&p->sleepers) > 0) wake_all(&p->gen);
  kl_cpus saved;
  const int moved = kl_pin_member(0, &saved);
  fn(ctx, 0, nth);
  int spins = 0;
  while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
    KL_PAUSE();
    if (++spins % KL_SPIN_YIELD == 0) sched_yield();
  }
  if (moved) kl_unpin_member(&saved);
  pthread_mutex_unlock(&p->job_lock);
  return KL_OK;
}

void kl_barrier_init(kl_barrier* b, int n, kl_barrier_slot* slots) {
  atomic_init(&b->sleepers, 0);
  atomic_init(&b->wake, 0);
  b->n = n;
  b->slot = slots;
  for (int i = 0; i < n; i++) atomic_init(&slots[i].arrived, 0);
}

/* Whether every slot has arrived `round` times (counts wrap around). */
static int all_arrived(const kl_barrier* b, unsigned round) {
  for (int j = 0; j < b->n; j++)
    if ((int)(atomic_load(&b->slot[j].arrived) - round) < 0) return 0;
  return 1;
}

void kl_barrier_wait(kl_barrier* b, int i) {
  if (b->n <= 1) return;
  /* Only member i writes slot i; seq_cst orders this store before the load of
   * sleepers below, and a sleeper's increment before its last check of the
   * slots: either we see the sleeper and wake it, or it sees our slot. */
  const unsigned round = atomic_load_explicit(&b->slot[i].arrived, memory_order_relaxed) + 1u;
  atomic_store(&b->slot[i].arrived, round);
  if (atomic_load(&b->sleepers) > 0) {
    atomic_fetch_add(&b->wake, 1);
    wake_all(&b->wake);
  }
  int64_t deadline = 0;
  for (unsigned k = 0; !all_arrived(b, round); k++)
    if (!spin_pause(k, &deadline, KL_SPIN_BARRIER_NS)) break;
  if (all_arrived(b, round)) return;
  atomic_fetch_add(&b->sleepers, 1);
  for (;;) {
    const int w = atomic_load(&b->wake);
    if (all_arrived(b, round)) break;
    wait_on(&b->wake, w);
  }
  atomic_fetch_sub(&b->sleepers, 1);
}
