/* Private to the pool's rooms: threadpool.c (the own workers), affinity.c
 * (pinning), pool_foreign.c (libgomp's team, TVM's pool). */
#ifndef KL_POOL_H
#define KL_POOL_H

#include "internal.h"

/* Linux-only calls (futex, affinity, the loader's object list) are under
 * KL_LINUX; elsewhere (macOS) the barrier sleeps on a condition variable and
 * nothing is pinned. -DKL_FORCE_PORTABLE builds those paths on Linux
 * (`make ctest-portable`). */
#if defined(__linux__) && !defined(KL_FORCE_PORTABLE)
#define KL_LINUX 1
#include <sched.h>
typedef cpu_set_t kl_cpus;
#else
typedef char kl_cpus;
#endif

/* Pins worker ith (1-based) of the own pool to the ith CPU of its set. */
void kl_pin_worker(int ith);
/* Pins the calling thread, member ith of a job, to the ith CPU of its set for
 * the job, saving the set in *saved; returns whether it moved (then
 * kl_unpin_member(saved) restores the set). */
int kl_pin_member(int ith, kl_cpus* saved);
void kl_unpin_member(const kl_cpus* saved);

/* Runs the job on another runtime's threads when the pool choice and the
 * caller allow it (threads.h): KL_POOL_TVM or KL_POOL_OPENMP_RAN for the one
 * that ran it, 0 if none did (then nothing of it ran). */
#define KL_POOL_OPENMP_RAN 2
int kl_foreign_run(int nth, kl_task_fn fn, void* ctx);
/* In a forked child: the other runtimes' threads are not there. */
void kl_foreign_after_fork(void);

#endif
