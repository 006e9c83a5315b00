/* The thread rule and the pool choice (threads.c; docs/threads.md). Every
 * environment variable that steers threads or pools is read in threads.c. */
#ifndef KL_THREADS_H
#define KL_THREADS_H

#include <stdint.h>

/* The threads a call runs, given its own count (>= 1) or 0 for the default:
 * 1. the call's count; else kl_set_num_threads's value; else
 *    KOKORO_LSTM_NUM_THREADS; else the usable CPUs, at most the host runtime's
 *    count (kl_threads_set_host);
 * 2. at most the limit (kl_threads_set_limit) and kl_max_threads().
 * kl_get_num_threads() is kl_threads_resolve(0); kl_threads_cap(n) is step 2. */
int kl_threads_resolve(int requested);
/* The same with this host count (> 0) instead of the stored one: a front that
 * knows its host runtime's count per call (Python with torch) passes it. */
int kl_threads_resolve_with(int requested, int host);

/* A process-wide limit on every count, 0 for none (threadpoolctl's limits). */
void kl_threads_set_limit(int n);
int kl_threads_limit(void);
/* The host runtime's thread count (torch.get_num_threads()), 0 for none: it
 * caps the automatic default, never a count that was asked for. */
void kl_threads_set_host(int n);

/* The CPUs this thread may run on (affinity mask), at most the process's
 * cgroup CPU quota rounded up; >= 1. */
int kl_usable_cpus(void);
/* The same with this quota (0: none) instead of the process's. */
int kl_cpus_within(double quota);
/* The CPU quota (CPUs, e.g. 1.5) of the cgroup that proc_cgroup (the format of
 * /proc/self/cgroup) lists, read under root: v2 cpu.max, v1
 * cpu.cfs_quota_us / cpu.cfs_period_us, in the cgroup and each ancestor, the
 * smallest; 0 when there is none. */
double kl_cgroup_cpu_limit(const char* root, const char* proc_cgroup);
/* Test hook: the process's quota is read from these paths from now on (NULL,
 * NULL: /sys/fs/cgroup and /proc/self/cgroup, the default). */
void kl_threads_set_cgroup_paths(const char* root, const char* proc_cgroup);
/* The environment variable name as a thread count: a decimal integer in
 * 1..INT_MAX, blanks around it allowed; 0 when unset or not such a count (the
 * rule then ignores it). */
int kl_env_count(const char* name);

/* A call of a small batch (below one chunk of the recurrence, small_batch)
 * and fewer than KL_SHORT_CALL_ROWS rows (T x B) runs at most `recurrence`
 * threads (the recurrence's own): more would only share an input GEMM that
 * small, and cost more to wake and synchronize than they save. */
#define KL_SHORT_CALL_ROWS 128
int kl_threads_short_call(int nth, int64_t rows, int small_batch, int recurrence);

/* A call of `work` units (its op family's unit: multiply-adds, bytes, elements)
 * runs at most one thread per `min_work` units, at least one and at most nth:
 * a thread with less work costs more to wake and to wait for than it saves. */
int kl_threads_for_work(int nth, double work, double min_work);

/* Which threads run a parallel job (kl_pool_run):
 * foreign 1: the caller's runtime when it has threads for the job (TVM's pool
 *   for calls marked KL_POOL_TVM, libgomp's team when libgomp is loaded), else
 *   the own workers; 0: always the own workers. Default: 1, or 0 with
 *   KOKORO_LSTM_POOL=own (read once).
 * pin 1: each member of a job runs pinned to one CPU of the caller's set for
 *   the job; 0: not pinned. Default: 1, or 0 with KOKORO_LSTM_PIN=0 (read per
 *   job).
 * -1 in kl_pool_set_params: that field's default. */
typedef struct kl_pool_params {
  int foreign, pin;
} kl_pool_params;
void kl_pool_set_params(kl_pool_params p);
/* The params now in force (defaults resolved). */
kl_pool_params kl_pool_get_params(void);
/* The thread count of the last parallel job (nth > 1) any pool ran; 0 before one. */
int kl_pool_last_threads(void);

#endif
