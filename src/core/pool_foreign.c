/* The process's other pools: libgomp's team (PyTorch's CPU runtime) and TVM's
 * pool. PyTorch's team spins for milliseconds after each op, so a second set
 * of threads started next to it competes for the cores; a job therefore runs
 * as a parallel region of that team when libgomp is already loaded (never
 * loaded by us), and a call made by TVM (marked with kl_pool_set_caller) on
 * TVM's pool. The partition is the same, so are the results bit for bit.
 * Not used: with the pool choice "own" (threads.h), in a forked child, inside
 * a parallel region, or when the runtime gives fewer threads than the job has
 * parts (the job then runs on the own pool). */
#include "pool.h"

#include <pthread.h>

#include "threads.h"

#ifdef KL_LINUX
#include <dlfcn.h>
#include <link.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

typedef void (*gomp_parallel_fn)(void (*)(void*), void*, unsigned, unsigned);
typedef int (*omp_query_fn)(void);
/* TVM's runtime (c_backend_api.h): the pool its compiled parallel loops run on */
typedef struct { void* sync_handle; int32_t num_task; } tvm_group_env;
typedef int (*tvm_lambda_fn)(int task_id, tvm_group_env* penv, void* cdata);
typedef int (*tvm_launch_fn)(tvm_lambda_fn flambda, void* cdata, int num_task);
/* What was found of both runtimes. */
static struct {
  int state; /* libgomp: 0 not looked for, 1 found, -1 not found yet, -2 never (fork, no GOMP 4.0) */
  unsigned long long adds; /* loader's object count when last looked */
  gomp_parallel_fn parallel;
  omp_query_fn thread_num, num_threads, max_threads, in_parallel;
  char path[256];
  tvm_launch_fn tvm_launch; /* once found, kept */
} g_ext;
static pthread_mutex_t g_ext_lock = PTHREAD_MUTEX_INITIALIZER;
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
  if (g_ext.state == 0) __atomic_store_n(&g_ext.state, -1, __ATOMIC_RELEASE);
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

/* A member of libgomp's team runs its part pinned (kl_pin_member), and the
 * caller starts its own only when every member has pinned itself, yielding
 * its CPU meanwhile: a member woken from its sleep is often queued on the
 * caller's CPU, and would wait there until the caller is preempted. */
static void omp_region(void* arg) {
  const int i = g_ext.thread_num(), n = g_ext.num_threads();
  ext_job* j = arg;
  cpu_set_t saved;
  const int member = n >= j->nth && i < j->nth;
  const int moved = member && kl_pin_member(i, &saved);
  if (member) {
    atomic_fetch_add(&j->started, 1);
    if (i == 0)
      while (atomic_load(&j->started) < j->nth) sched_yield();
  }
  ext_part(arg, i, n);
  if (moved) kl_unpin_member(&saved);
}

static int libgomp_state(void) {
  int state = __atomic_load_n(&g_ext.state, __ATOMIC_ACQUIRE);
  if (state == 0 || state == -1) {
    ext_lookup();
    state = __atomic_load_n(&g_ext.state, __ATOMIC_ACQUIRE);
  }
  return state;
}

/* Runs the job on libgomp's team; 0 if it did not (then nothing of it ran). */
static int omp_run(int nth, kl_task_fn fn, void* ctx) {
  if (libgomp_state() != 1 || g_ext.in_parallel()) return 0;
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

int kl_foreign_run(int nth, kl_task_fn fn, void* ctx) {
  if (!kl_pool_get_params().foreign) return 0;
  if (tvm_run(nth, fn, ctx)) return KL_POOL_TVM;
  if (omp_run(nth, fn, ctx)) return KL_POOL_OPENMP_RAN;
  return 0;
}

void kl_foreign_after_fork(void) {
  __atomic_store_n(&g_ext.state, -2, __ATOMIC_RELEASE);
  pthread_mutex_init(&g_ext_lock, NULL);
}

const char* kl_pool_openmp(void) {
  if (!kl_pool_get_params().foreign) return NULL;
  return libgomp_state() == 1 ? g_ext.path : NULL;
}

int kl_pool_set_caller(int caller) {
  const int prev = g_caller;
  g_caller = caller;
  return prev;
}
#else
int kl_foreign_run(int nth, kl_task_fn fn, void* ctx) {
  (void)nth, (void)fn, (void)ctx;
  return 0;
}

void kl_foreign_after_fork(void) {}

const char* kl_pool_openmp(void) { return NULL; }

int kl_pool_set_caller(int caller) {
  (void)caller;
  return KL_POOL_AUTO;
}
#endif
