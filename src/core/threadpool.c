/* Persistent thread pool (after ggml's): workers live for the process, the
 * caller is thread 0, a job is announced by bumping an atomic generation
 * counter; workers spin briefly for the next job, then sleep on a condvar.
 * One job at a time: concurrent callers are serialized by a mutex.
 * One pool per process: when GNU OpenMP (libgomp, PyTorch's CPU runtime) is
 * already loaded, a job runs on its team instead (see "OpenMP" below).
 * Linux-only calls (futex, affinity) are under KL_LINUX; elsewhere (macOS) the
 * barrier sleeps on a condition variable and workers are not pinned.
 * -DKL_FORCE_PORTABLE builds those paths on Linux (`make ctest-portable`). */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__) && !defined(KL_FORCE_PORTABLE)
#define KL_LINUX 1
#include <dlfcn.h>
#include <link.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "internal.h"

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

#ifdef KL_LINUX
static int pinning(void) {
  const char* env = getenv("KOKORO_LSTM_PIN");
  return !(env && strcmp(env, "0") == 0);
}

/* The CPU for thread ith of a job: the (ith % n)-th of the n CPUs allowed (the
 * calling thread's set), or -1 (fewer than 2). */
static int cpu_for(int ith, const cpu_set_t* allowed) {
  const int n = CPU_COUNT(allowed);
  if (n < 2) return -1;
  for (int c = 0, k = -1; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, allowed) && ++k == ith % n) return c;
  return -1;
}

static int pin_self(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0;
}
#endif

/* Pins worker ith to the ith usable CPU (modulo their number) unless
 * KOKORO_LSTM_PIN=0. An unpinned worker woken after a sleep is often placed
 * on its waker's CPU, and the two then share one core until the scheduler
 * moves one: measured on the 2-vCPU machine, a 2-thread T=256 call after a
 * 30 ms pause ran at 1-thread speed (13.3 vs 6.4 ms). The caller (thread 0)
 * is pinned only while it runs a job (pin_member). */
static void pin_worker(int ith) {
#ifdef KL_LINUX
  cpu_set_t allowed;
  if (!pinning() || pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0) return;
  const int cpu = cpu_for(ith, &allowed);
  if (cpu >= 0) pin_self(cpu);
#else
  (void)ith;
#endif
}

/* Pins the calling thread, member ith of a job, to the ith CPU it may use for
 * the job's duration, saving its CPU set for unpin_member. The caller runs task
 * 0 of its jobs on the CPU our workers leave free for it: unpinned, the
 * scheduler put it on a worker's CPU now and then, and the recurrence's
 * per-step barrier made everyone wait for the pair sharing a core (16-core
 * Xeon, B = 1, 8 unit threads per direction: the caller's group waited 5.0 us
 * per step against 1.2 us in the other direction's). libgomp's team members,
 * which run our jobs where PyTorch is loaded, are pinned the same way: not
 * pinned, a member woken from its sleep landed on the caller's CPU (2-core Zen 4,
 * T = 256, 2 threads, calls 50 ms apart: 13.8-13.9 ms median vs 6.4 on our
 * pinned workers). Returns whether it moved. */
static int pin_member(int ith, void* saved) {
#ifdef KL_LINUX
  cpu_set_t* old = saved;
  if (!pinning() || pthread_getaffinity_np(pthread_self(), sizeof(*old), old) != 0) return 0;
  const int cpu = cpu_for(ith, old); /* a set of at least 2 CPUs */
  if (cpu < 0) return 0;
  return pin_self(cpu);
#else
  (void)ith;
  (void)saved;
  return 0;
#endif
}

static void unpin_member(const void* saved) {
#ifdef KL_LINUX
  pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t), (const cpu_set_t*)saved);
#else
  (void)saved;
#endif
}

static void* worker_main(void* arg) {
  const int ith = (int)(intptr_t)arg; /* 1-based */
  kl_pool* p = &g_pool;
  pin_worker(ith);
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
static void ext_after_fork(void);
static void atfork_child(void) {
  kl_pool* p = &g_pool;
  ext_after_fork();
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

/* ---- the process's other pools: libgomp's team, TVM's pool ----
 * PyTorch runs its parallel ops on libgomp's team, whose threads spin-wait for
 * milliseconds after each op. Our own workers started right after one compete
 * with them for the cores: measured on the 2-vCPU machine, a 2-thread T=256 call
 * right after a torch conv took 1.38x its time alone. So when libgomp is
 * already loaded (never loaded by us), a job runs as a parallel region of that
 * team: the threads that were spinning for torch's next op run ours, and no
 * second set of threads exists. Same partition, same results bit for bit.
 * Not used: in a forked child (libgomp's team does not survive fork), inside a
 * parallel region, when the team comes out smaller than the job (the job then
 * runs on our pool), or with KOKORO_LSTM_POOL=own. Calls made by TVM (marked
 * with kl_pool_set_caller) run on TVM's pool instead, under the same rules.
 * g_ext holds what was found of both runtimes. */
#ifdef KL_LINUX
typedef void (*gomp_parallel_fn)(void (*)(void*), void*, unsigned, unsigned);
typedef int (*omp_query_fn)(void);
/* TVM's runtime (c_backend_api.h): the pool its compiled parallel loops run on */
typedef struct { void* sync_handle; int32_t num_task; } tvm_group_env;
typedef int (*tvm_lambda_fn)(int task_id, tvm_group_env* penv, void* cdata);
typedef int (*tvm_launch_fn)(tvm_lambda_fn flambda, void* cdata, int num_task);
static struct {
  int state; /* libgomp: 0 not looked for, 1 found, -1 not found yet, -2 never (env, fork) */
  unsigned long long adds; /* loader's object count when last looked */
  gomp_parallel_fn parallel;
  omp_query_fn thread_num, num_threads, max_threads, in_parallel;
  char path[256];
  tvm_launch_fn tvm_launch; /* once found, kept */
} g_ext;
static pthread_mutex_t g_ext_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_long g_jobs_own, g_jobs_omp, g_jobs_tvm;
static _Thread_local int g_caller; /* kl_pool_set_caller */

typedef struct { unsigned long long adds; int first; char path[256], tvm[256]; } ext_scan;

static int find_runtimes(struct dl_phdr_info* info, size_t size, void* arg) {
  ext_scan* s = arg;
  if (s->first) { /* the loader's counters: unchanged since the last scan -> stop */
    s->first = 0;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
      s->adds = info->dlpi_adds;
    if (s->adds != 0 && s->adds == g_ext.adds) return 1;
  }
  const char* name = info->dlpi_name ? info->dlpi_name : "";
  const char* base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strlen(name) >= sizeof(s->path)) return 0;
  if (!s->path[0] && strncmp(base, "libgomp", 7) == 0) strcpy(s->path, name);
  if (!s->tvm[0] && (strncmp(base, "libtvm_runtime", 14) == 0 || strncmp(base, "libtvm.", 7) == 0))
    strcpy(s->tvm, name);
  return 0;
}

/* Looks for a loaded libgomp and libtvm_runtime when the set of loaded objects
 * has changed. */
static void ext_lookup(void) {
  pthread_mutex_lock(&g_ext_lock);
  if (g_ext.state == 0) {
    const char* env = getenv("KOKORO_LSTM_POOL");
    __atomic_store_n(&g_ext.state, env && strcmp(env, "own") == 0 ? -2 : -1, __ATOMIC_RELEASE);
  }
  if (g_ext.state != -2 && (g_ext.state != 1 || !g_ext.tvm_launch)) {
    ext_scan s = {0, 1, "", ""};
    dl_iterate_phdr(find_runtimes, &s);
    g_ext.adds = s.adds;
    void* t = !g_ext.tvm_launch && s.tvm[0] ? dlopen(s.tvm, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD)
                                            : NULL;
    if (t) { /* kept loaded, as libgomp below */
      tvm_launch_fn launch = (tvm_launch_fn)dlsym(t, "TVMBackendParallelLaunch");
      if (launch) __atomic_store_n(&g_ext.tvm_launch, launch, __ATOMIC_RELEASE);
      else dlclose(t);
    }
    void* h = g_ext.state == -1 && s.path[0] ? dlopen(s.path, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD)
                                              : NULL;
    if (h) { /* the reference taken here keeps it loaded for the process */
      g_ext.parallel = (gomp_parallel_fn)dlsym(h, "GOMP_parallel");
      g_ext.thread_num = (omp_query_fn)dlsym(h, "omp_get_thread_num");
      g_ext.num_threads = (omp_query_fn)dlsym(h, "omp_get_num_threads");
      g_ext.max_threads = (omp_query_fn)dlsym(h, "omp_get_max_threads");
      g_ext.in_parallel = (omp_query_fn)dlsym(h, "omp_in_parallel");
      if (g_ext.parallel && g_ext.thread_num && g_ext.num_threads && g_ext.max_threads &&
          g_ext.in_parallel) {
        strcpy(g_ext.path, s.path);
        __atomic_store_n(&g_ext.state, 1, __ATOMIC_RELEASE);
      } else {
        dlclose(h);
        __atomic_store_n(&g_ext.state, -2, __ATOMIC_RELEASE); /* no GOMP 4.0 entry points */
      }
    }
  }
  pthread_mutex_unlock(&g_ext_lock);
}

/* A job on another runtime's threads: member i of n runs part i, or, when the
 * runtime gave fewer threads than the job has parts, nothing (every member sees
 * the same n, so no part runs unless all do; the caller then runs the job on
 * the own pool). */
typedef struct {
  kl_task_fn fn;
  void* ctx;
  int nth;
  int ran; /* written by member 0 */
  atomic_int started; /* libgomp: members on their CPUs (omp_region) */
} ext_job;

static void ext_part(ext_job* j, int i, int n) {
  if (n < j->nth) return;
  if (i < j->nth) j->fn(j->ctx, i, j->nth);
  if (i == 0) j->ran = 1;
}

/* A member of libgomp's team runs its part pinned (pin_member), and the caller
 * starts its own only when every member has pinned itself, yielding its CPU
 * meanwhile: a member woken from its sleep is often queued on the caller's CPU,
 * and there it waited until the scheduler preempted the caller, which by then
 * had run its share of the input projection alone (2-core Zen 4, torch loaded,
 * T = 256, 2 threads, calls 50 ms apart: 8.7-9.7 ms median vs 6.2-6.3 on our
 * own pool; back to back both 6.2). */
static void omp_region(void* arg) {
  const int i = g_ext.thread_num(), n = g_ext.num_threads();
  ext_job* j = arg;
  cpu_set_t saved;
  const int member = n >= j->nth && i < j->nth;
  const int moved = member && pin_member(i, &saved);
  if (member) {
    atomic_fetch_add(&j->started, 1);
    if (i == 0)
      while (atomic_load(&j->started) < j->nth) sched_yield();
  }
  ext_part(arg, i, n);
  if (moved) unpin_member(&saved);
}

/* Runs the job on libgomp's team; 0 if it did not (then nothing of it ran). */
static int omp_run(int nth, kl_task_fn fn, void* ctx) {
  int state = __atomic_load_n(&g_ext.state, __ATOMIC_ACQUIRE);
  if (state == 0 || state == -1) {
    ext_lookup();
    state = __atomic_load_n(&g_ext.state, __ATOMIC_ACQUIRE);
  }
  if (state != 1 || g_ext.in_parallel()) return 0;
  /* the whole team (torch's thread count) when larger: libgomp ends the
   * threads a smaller team leaves out, and torch's next op would start them again */
  const int max = g_ext.max_threads();
  ext_job j = {fn, ctx, nth, 0, 0};
  g_ext.parallel(omp_region, &j, (unsigned)(max > nth ? max : nth), 0);
  return j.ran;
}

static int tvm_task(int task_id, tvm_group_env* penv, void* cdata) {
  ext_part(cdata, task_id, penv->num_task);
  return 0;
}

/* Runs the job on the TVM runtime's pool (every worker it uses, each task on
 * its own thread, the caller running task 0); 0 if it did not. */
static int tvm_run(int nth, kl_task_fn fn, void* ctx) {
  if (g_caller != KL_POOL_TVM) return 0;
  tvm_launch_fn launch = __atomic_load_n(&g_ext.tvm_launch, __ATOMIC_ACQUIRE);
  if (!launch && __atomic_load_n(&g_ext.state, __ATOMIC_ACQUIRE) != -2) {
    ext_lookup();
    launch = __atomic_load_n(&g_ext.tvm_launch, __ATOMIC_ACQUIRE);
  }
  if (!launch || __atomic_load_n(&g_ext.state, __ATOMIC_ACQUIRE) == -2) return 0;
  ext_job j = {fn, ctx, nth, 0, 0};
  return launch(tvm_task, &j, 0) == 0 && j.ran;
}

static void ext_after_fork(void) {
  __atomic_store_n(&g_ext.state, -2, __ATOMIC_RELEASE);
  pthread_mutex_init(&g_ext_lock, NULL);
}
#else
static void ext_after_fork(void) {}
#endif

const char* kl_pool_openmp(void) {
#ifdef KL_LINUX
  const int state = __atomic_load_n(&g_ext.state, __ATOMIC_ACQUIRE);
  if (state == 0 || state == -1) ext_lookup();
  return __atomic_load_n(&g_ext.state, __ATOMIC_ACQUIRE) == 1 ? g_ext.path : NULL;
#else
  return NULL;
#endif
}

void kl_pool_jobs(long* own, long* openmp, long* tvm) {
#ifdef KL_LINUX
  *own = atomic_load(&g_jobs_own);
  *openmp = atomic_load(&g_jobs_omp);
  *tvm = atomic_load(&g_jobs_tvm);
#else
  *own = *openmp = *tvm = 0;
#endif
}

int kl_pool_set_caller(int caller) {
#ifdef KL_LINUX
  const int prev = g_caller;
  g_caller = caller;
  return prev;
#else
  (void)caller;
  return KL_POOL_AUTO;
#endif
}

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
#ifdef KL_LINUX
  if (tvm_run(nth, fn, ctx)) {
    atomic_fetch_add(&g_jobs_tvm, 1);
    pthread_mutex_unlock(&p->job_lock);
    return KL_OK;
  }
  if (omp_run(nth, fn, ctx)) {
    atomic_fetch_add(&g_jobs_omp, 1);
    pthread_mutex_unlock(&p->job_lock);
    return KL_OK;
  }
  atomic_fetch_add(&g_jobs_own, 1);
#endif
  if (!ensure_workers(p, nth - 1)) {
    pthread_mutex_unlock(&p->job_lock);
    return KL_ERR_THREAD;
  }
  p->fn = fn;
  p->ctx = ctx;
  atomic_store_explicit(&p->pending, nth - 1, memory_order_relaxed);
  /* a sleeper registers before rechecking gen, so either it sees the new gen or
   * we see it counted and wake it; all at once (a condvar broadcast woke them one
   * after another through its mutex) */
  const int seq = ((atomic_load(&p->gen) >> 10) + 1) & 0x1fffff;
  atomic_store(&p->gen, (seq << 10) | nth);
  if (atomic_load(&p->sleepers) > 0) wake_all(&p->gen);
#ifdef KL_LINUX
  cpu_set_t saved;
#else
  char saved;
#endif
  const int moved = pin_member(0, &saved);
  fn(ctx, 0, nth);
  int spins = 0;
  while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
    KL_PAUSE();
    if (++spins % KL_SPIN_YIELD == 0) sched_yield();
  }
  if (moved) unpin_member(&saved);
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

/* ---- default thread count and the cap on every count ---- */
static atomic_int g_num_threads; /* 0: not set */

/* A positive integer environment value, or 0 when unset or not one. */
static long env_count(const char* name) {
  const char* env = getenv(name);
  if (!env) return 0;
  while (*env == ' ' || *env == '\t') env++;
  if (!*env) return 0;
  char* end;
  const long v = strtol(env, &end, 10);
  while (*end == ' ' || *end == '\t' || *end == '\n') end++;
  return *end == 0 && v >= 1 && v <= INT_MAX ? v : 0;
}

#ifdef KL_LINUX
/* The CPU quota of this process's cgroup (v2 cpu.max, in the cgroup and each
 * ancestor, the smallest), rounded up to whole CPUs; 0 when there is none. Read
 * once per process. */
static int g_cgroup_cpus;
static pthread_once_t g_cgroup_once = PTHREAD_ONCE_INIT;
static void read_cgroup_cpus(void) {
  char rel[640] = "", line[640];
  FILE* f = fopen("/proc/self/cgroup", "r");
  if (!f) return;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "0::", 3) == 0) {
      memcpy(rel, line + 3, sizeof(line) - 3);
      rel[strcspn(rel, "\n")] = 0;
    }
  fclose(f);
  double best = 0;
  for (;;) {
    char path[704];
    snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cpu.max", strcmp(rel, "/") == 0 ? "" : rel);
    FILE* q = fopen(path, "r");
    if (q) {
      double quota, period;
      if (fscanf(q, "%lf %lf", &quota, &period) == 2 && quota > 0 && period > 0 &&
          (best == 0 || quota / period < best))
        best = quota / period;
      fclose(q);
    }
    char* slash = strrchr(rel, '/');
    if (!slash || rel[0] == 0 || strcmp(rel, "/") == 0) break;
    if (slash == rel) strcpy(rel, "/");
    else *slash = 0;
  }
  if (best > 0) g_cgroup_cpus = best < 1 ? 1 : (int)(best - 1e-9) + 1;
}
#endif

static int usable_cpus(void) {
  int n = 0;
#ifdef KL_LINUX
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  pthread_once(&g_cgroup_once, read_cgroup_cpus);
  if (n > 0 && g_cgroup_cpus > 0 && g_cgroup_cpus < n) n = g_cgroup_cpus;
#endif
#ifdef _SC_NPROCESSORS_ONLN
  if (n < 1) {
    const long c = sysconf(_SC_NPROCESSORS_ONLN);
    n = c > KL_MAX_THREADS ? KL_MAX_THREADS : (int)c;
  }
#endif
  return n < 1 ? 1 : n;
}

int kl_max_threads(void) {
  const long env = env_count("KOKORO_LSTM_MAX_THREADS");
  const long n = env ? env : usable_cpus();
  return n > KL_MAX_THREADS ? KL_MAX_THREADS : (int)n;
}

int kl_threads_cap(int n) {
  const int cap = kl_max_threads();
  return n < 1 ? 1 : n > cap ? cap : n;
}

int kl_get_num_threads(void) {
  const int n = atomic_load(&g_num_threads);
  if (n > 0) return kl_threads_cap(n);
  const long env = env_count("KOKORO_LSTM_NUM_THREADS");
  return kl_threads_cap(env ? (int)env : usable_cpus());
}

void kl_set_num_threads(int n) {
  atomic_store(&g_num_threads, n < 0 ? 0 : n > KL_MAX_THREADS ? KL_MAX_THREADS : n);
}
