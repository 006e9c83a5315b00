/* Kept work buffers (scratch.h): best fit among KL_SCRATCH_SLOTS kept ones.
 * Fresh buffers of KL_SCRATCH_HUGE bytes or more are whole 2 MiB pages asked
 * to be transparent huge pages (Linux): a large call's gate buffer then faults
 * in and, above all, is unmapped about 20 times faster, and an interrupted call
 * returns without waiting 0.1-0.2 s for its free. */
#if defined(__linux__) && !defined(KL_FORCE_PORTABLE)
#include <sys/mman.h>
#endif
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"
#include "scratch.h"

#define KL_SCRATCH_SLOTS 4
#define KL_SCRATCH_HUGE ((size_t)32 << 20)
#define KL_HUGE_PAGE ((size_t)2 << 20)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void* p;
  size_t cap;
} g_scratch[KL_SCRATCH_SLOTS]; /* under g_lock */

static void atfork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void atfork_child(void) { pthread_mutex_unlock(&g_lock); }
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void install_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

static size_t kept_locked(void) {
  size_t n = 0;
  for (int i = 0; i < KL_SCRATCH_SLOTS; i++) n += g_scratch[i].cap;
  return n;
}

void* kl_scratch_take(size_t bytes, size_t* cap) {
  bytes = kl_round_up(bytes ? bytes : 64, 64);
  pthread_once(&g_once, install_atfork);
  pthread_mutex_lock(&g_lock);
  int best = -1; /* the smallest kept buffer that is large enough */
  for (int i = 0; i < KL_SCRATCH_SLOTS; i++)
    if (g_scratch[i].p && g_scratch[i].cap >= bytes && (best < 0 || g_scratch[i].cap < g_scratch[best].cap))
      best = i;
  void* p = NULL;
  if (best >= 0) {
    p = g_scratch[best].p;
    *cap = g_scratch[best].cap;
    g_scratch[best].p = NULL;
    g_scratch[best].cap = 0;
  }
  pthread_mutex_unlock(&g_lock);
  if (p) return p;
  if (bytes < KL_SCRATCH_HUGE) {
    *cap = bytes;
    return aligned_alloc(64, bytes);
  }
  *cap = kl_round_up(bytes, KL_HUGE_PAGE);
  p = aligned_alloc(KL_HUGE_PAGE, *cap);
#if defined(__linux__) && !defined(KL_FORCE_PORTABLE) && defined(MADV_HUGEPAGE)
  if (p) madvise(p, *cap, MADV_HUGEPAGE); /* advice only: without it, small pages */
#endif
  return p;
}

void kl_scratch_give(void* p, size_t cap) {
  if (!p) return;
  pthread_mutex_lock(&g_lock);
  /* keep it in a free slot, else in place of the smallest kept one if larger,
   * while the kept total stays within KL_SCRATCH_KEEP; free what is not kept */
  int slot = -1;
  for (int i = 0; i < KL_SCRATCH_SLOTS; i++)
    if (!g_scratch[i].p) { slot = i; break; }
  if (slot < 0) {
    slot = 0;
    for (int i = 1; i < KL_SCRATCH_SLOTS; i++)
      if (g_scratch[i].cap < g_scratch[slot].cap) slot = i;
    if (g_scratch[slot].cap >= cap) slot = -1;
  }
  void* drop = p;
  if (slot >= 0 && kept_locked() - g_scratch[slot].cap + cap <= KL_SCRATCH_KEEP) {
    drop = g_scratch[slot].p;
    g_scratch[slot].p = p;
    g_scratch[slot].cap = cap;
  }
  pthread_mutex_unlock(&g_lock);
  free(drop);
}

void kl_scratch_clear(void) {
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < KL_SCRATCH_SLOTS; i++) {
    free(g_scratch[i].p);
    g_scratch[i].p = NULL;
    g_scratch[i].cap = 0;
  }
  pthread_mutex_unlock(&g_lock);
}

size_t kl_scratch_kept_bytes(void) {
  pthread_mutex_lock(&g_lock);
  const size_t n = kept_locked();
  pthread_mutex_unlock(&g_lock);
  return n;
}
