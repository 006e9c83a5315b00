/* Pinning the members of a job to CPUs (pool.h), unless the pool choice says
 * not to (threads.h: KOKORO_LSTM_PIN=0). An unpinned thread woken from a sleep
 * is often queued on its waker's CPU, and the recurrence's per-step barrier
 * then makes its whole group wait for the pair sharing that core. */
#include "pool.h"

#include <pthread.h>

#include "threads.h"

#ifdef KL_LINUX
static int pinning(void) { return kl_pool_get_params().pin; }

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

/* A worker is pinned for its life; the caller (thread 0) only while it runs a
 * job (kl_pin_member), on the CPU the workers leave free for it. */
void kl_pin_worker(int ith) {
#ifdef KL_LINUX
  cpu_set_t allowed;
  if (!pinning() || pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0) return;
  const int cpu = cpu_for(ith, &allowed);
  if (cpu >= 0) pin_self(cpu);
#else
  (void)ith;
#endif
}

/* Also used by libgomp's team members, which run our jobs where PyTorch is
 * loaded, so that they do not land on the caller's CPU either. */
int kl_pin_member(int ith, kl_cpus* saved) {
#ifdef KL_LINUX
  if (!pinning() || pthread_getaffinity_np(pthread_self(), sizeof(*saved), saved) != 0) return 0;
  const int cpu = cpu_for(ith, saved); /* a set of at least 2 CPUs */
  if (cpu < 0) return 0;
  return pin_self(cpu);
#else
  (void)ith;
  (void)saved;
  return 0;
#endif
}

void kl_unpin_member(const kl_cpus* saved) {
#ifdef KL_LINUX
  pthread_setaffinity_np(pthread_self(), sizeof(*saved), saved);
#else
  (void)saved;
#endif
}
