/* The process-wide weight cache: packed LSTMs keyed on where the caller's
 * weights lie (addresses, shapes, strides) and how they are to be packed.
 *
 * Never stale: on a miss, untrusted weights are read once, into a private
 * copy whose bytes are both fingerprinted and packed, so an entry's packing is
 * always of the bytes its fingerprint saw. A call that finds it runs with it
 * and then confirms that the current bytes give the same fingerprint (checking
 * after the run keeps the check's reads out of the recurrence's cache); if not,
 * the entry is dropped, and the call packs again and runs again, overwriting
 * its outputs. A write racing with the miss therefore can only make the next
 * call repack (the bytes differ from the copy's), never serve weights packed
 * from bytes the fingerprint did not see, even when the writer puts the old
 * bytes back. Trusted entries (constant weights) skip the copy and the check
 * and hold their keepalive until evicted.
 *
 * Entries are reference counted: a call holds its entry while it runs, so
 * eviction or replacement by another thread never frees weights in use. */
#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "kokoro_lstm_testing.h"
#include "scratch.h"

#define KL_CACHE_CAPACITY 64
/* The packed bytes the table keeps: KOKORO_LSTM_CACHE_MB (MiB, read once) or this.
 * Entries of weights that were freed cannot be told from live ones, so the bytes
 * are bounded as well as the entries. */
#define KL_CACHE_DEFAULT_BYTES ((int64_t)1024 << 20)

struct kl_centry {
  int64_t* key;
  size_t key_len;
  kl_lstm* m;
  kl_fp128 fp;
  int trusted;
  int refs;          /* the table's reference + one per call in flight */
  int in_table;
  uint64_t last_use;
  kl_keepalive ka;   /* trusted entries: retained while the entry lives */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static kl_centry* g_table[KL_CACHE_CAPACITY];
static int g_n;
static uint64_t g_clock;
static kl_cache_stats g_stats;
static void (*g_hook)(void*);
static void* g_hook_ctx;
static void (*g_fp_hook)(void*);
static void* g_fp_hook_ctx;

static int64_t g_max_bytes = KL_CACHE_DEFAULT_BYTES;

static void atfork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void atfork_child(void) { pthread_mutex_unlock(&g_lock); }
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void install_atfork(void) {
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
  const long long mb = kl_cache_env_mb();
  if (mb >= 0) g_max_bytes = (int64_t)mb << 20;
}

long long kl_cache_env_mb(void) {
  const char* env = getenv("KOKORO_LSTM_CACHE_MB"); /* a count of MiB; anything else: the default */
  if (!env || !*env) return -1;
  char* end;
  const long long mb = strtoll(env, &end, 10);
  if (*end == 0 && end != env && mb >= 0 && mb <= ((long long)1 << 40)) return mb;
  for (; *env; env++)
    if (!isspace((unsigned char)*env)) return -2;
  return -1;
}

static void entry_free(kl_centry* e) {
  if (e->ka.release) e->ka.release(e->ka.handle);
  kl_lstm_free(e->m);
  free(e->key);
  free(e);
}

/* Drops one reference; frees at zero. Caller holds g_lock. */
static int unref_locked(kl_centry* e) { return --e->refs == 0; }

static void remove_locked(int i) {
  kl_centry* e = g_table[i];
  e->in_table = 0;
  g_stats.entries--;
  g_stats.bytes -= (int64_t)kl_lstm_packed_bytes(e->m);
  g_table[i] = g_table[--g_n];
  if (unref_locked(e)) entry_free(e); /* nobody else holds it: safe under the lock */
}

/* Removes the least recently used entry other than the most recently used one,
 * among those no call is using if any_entry is 0; returns 0 if there is none.
 * Caller holds g_lock. */
static int evict_lru_locked(int any_entry) {
  int lru = -1;
  for (int j = 0; j < g_n; j++) {
    const kl_centry* e = g_table[j];
    if (e->last_use == g_clock || (!any_entry && e->refs > 1)) continue;
    if (lru < 0 || e->last_use < g_table[lru]->last_use) lru = j;
  }
  if (lru < 0) return 0;
  remove_locked(lru);
  return 1;
}

/* Within the byte cap: unused entries go, least recently used first. The most
 * recently used entry stays (else a call whose weights alone exceed the cap
 * would repack every time), as do entries in use, until their calls release
 * them. Caller holds g_lock. */
static void shrink_locked(void) {
  while (g_stats.bytes > g_max_bytes && evict_lru_locked(0)) {
  }
}

static int find_locked(const int64_t* key, size_t len) {
  for (int i = 0; i < g_n; i++)
    if (g_table[i]->key_len == len && memcmp(g_table[i]->key, key, len * sizeof(int64_t)) == 0)
      return i;
  return -1;
}

void kl_cache_release(kl_centry* e) {
  if (!e) return;
  pthread_mutex_lock(&g_lock);
  const int last = unref_locked(e);
  shrink_locked(); /* entries kept over the cap while in use */
  pthread_mutex_unlock(&g_lock);
  if (last) entry_free(e);
}

const kl_lstm* kl_centry_lstm(const kl_centry* e) { return e->m; }

static int fp_equal(kl_fp128 a, kl_fp128 b) { return a.lo == b.lo && a.hi == b.hi; }

/* One weight tensor of a (layer, direction) group as the cache reads it: the
 * kl_wsrc members holding its pointer and stride (elements), its rows and
 * columns (a vector: rows elements, *ld apart). */
typedef struct wfield {
  const void** p;
  int64_t* ld;
  int64_t rows, cols;
  int vec;
} wfield;

/* Group g's fingerprinted tensors of w, in order: w_ih (unless borrowed: read
 * in place by every run), w_hh, b_ih, b_hh, w_hr (those it has). */
static int group_fields(const kl_lstm_desc* d, int g, int borrow_wih, kl_wsrc* w, wfield f[5]) {
  const int64_t H = d->hidden_size, P = d->proj_size, R = P ? P : H, D = d->bidirectional ? 2 : 1;
  const int64_t in = g < D ? d->input_size : D * R;
  int n = 0;
  if (!borrow_wih) f[n++] = (wfield){&w->w_ih, &w->ld_ih, 4 * H, in, 0};
  f[n++] = (wfield){&w->w_hh, &w->ld_hh, 4 * H, R, 0};
  if (w->b_ih) f[n++] = (wfield){&w->b_ih, &w->s_bi, 4 * H, 1, 1};
  if (w->b_hh) f[n++] = (wfield){&w->b_hh, &w->s_bh, 4 * H, 1, 1};
  if (w->w_hr) f[n++] = (wfield){&w->w_hr, &w->ld_hr, P, H, 0};
  return n;
}

int kl_cache_regions(const kl_lstm_desc* d, const kl_wsrc* w, int borrow_wih, kl_region* out) {
  const int G = d->num_layers * (d->bidirectional ? 2 : 1);
  const int64_t esz = (int64_t)kl_dtype_io_size(d->dtype);
  int n = 0;
  for (int g = 0; g < G; g++) {
    kl_wsrc wg = w[g];
    wfield f[5];
    const int nf = group_fields(d, g, borrow_wih, &wg, f);
    for (int j = 0; j < nf; j++) {
      const wfield* x = &f[j];
      if (x->vec && *x->ld == 1) out[n++] = (kl_region){*x->p, 1, x->rows * esz, x->rows * esz};
      else out[n++] = (kl_region){*x->p, x->rows, x->cols * esz, *x->ld * esz};
    }
  }
  return n;
}

/* The weights to pack on an untrusted miss: w's fingerprinted tensors copied
 * back to back into *copy (kl_fingerprint_copy, in kl_cache_regions' order)
 * with *fp, the fingerprint of the copy; returns w rebased onto the copy (the
 * caller frees it and *copy), or NULL when out of memory. */
static kl_wsrc* snapshot(const kl_lstm_desc* d, const kl_wsrc* w, int borrow_wih, int nth,
                         void** copy, kl_fp128* fp) {
  const int G = d->num_layers * (d->bidirectional ? 2 : 1);
  const int64_t esz = (int64_t)kl_dtype_io_size(d->dtype);
  kl_region* r = malloc((size_t)G * 5 * sizeof(kl_region));
  kl_wsrc* ws = malloc((size_t)G * sizeof(kl_wsrc));
  const int nr = r ? kl_cache_regions(d, w, borrow_wih, r) : 0;
  char* c = r ? malloc(kl_fingerprint_bytes(r, nr) + 1) : NULL;
  if (!r || !ws || !c || kl_fingerprint_copy(r, nr, nth, c, fp) != KL_OK) {
    free(r);
    free(ws);
    free(c);
    return NULL;
  }
  char* at = c;
  for (int g = 0; g < G; g++) {
    ws[g] = w[g];
    wfield f[5];
    const int nf = group_fields(d, g, borrow_wih, &ws[g], f);
    for (int j = 0; j < nf; j++) {
      *f[j].p = at;
      *f[j].ld = f[j].vec ? 1 : f[j].cols;
      at += (size_t)(f[j].rows * f[j].cols * esz);
    }
  }
  free(r);
  *copy = c;
  return ws;
}

kl_centry* kl_cache_find(const int64_t* key, size_t key_len) {
  pthread_once(&g_once, install_atfork);
  pthread_mutex_lock(&g_lock);
  const int i = find_locked(key, key_len);
  kl_centry* e = i >= 0 ? g_table[i] : NULL;
  if (e) {
    e->refs++;
    e->last_use = ++g_clock;
  }
  pthread_mutex_unlock(&g_lock);
  return e;
}

int kl_cache_confirm(kl_centry* e, const kl_region* regions, int nregions, int nth) {
  kl_fp128 fp;
  const int same = e->trusted ||
                   (kl_fingerprint(regions, nregions, nth, &fp) == KL_OK && fp_equal(fp, e->fp));
  pthread_mutex_lock(&g_lock);
  if (same) {
    g_stats.hits++;
  } else { /* changed since packed (or no memory to tell): drop the entry */
    g_stats.repacks++;
    if (e->in_table) remove_locked(find_locked(e->key, e->key_len));
  }
  pthread_mutex_unlock(&g_lock);
  return same;
}

kl_status kl_cache_pack(const int64_t* key, size_t key_len, const kl_lstm_desc* desc,
                        const kl_wsrc* w, int borrow_wih, int trusted, const kl_keepalive* ka,
                        int nth, int count_miss, kl_centry** out) {
  *out = NULL;
  pthread_once(&g_once, install_atfork);
  if (count_miss) {
    pthread_mutex_lock(&g_lock);
    g_stats.misses++;
    pthread_mutex_unlock(&g_lock);
  }
  /* untrusted: one copy, fingerprinted and packed (see the file comment) */
  kl_fp128 fp = {0, 0};
  void* copy = NULL;
  kl_wsrc* ws = trusted ? NULL : snapshot(desc, w, borrow_wih, nth, &copy, &fp);
  const int have_fp = ws != NULL;
  kl_centry* n = calloc(1, sizeof(*n));
  int64_t* k = malloc(key_len * sizeof(int64_t));
  if (!n || !k) {
    free(n);
    free(k);
    free(ws);
    free(copy);
    return KL_ERR_NOMEM;
  }
  if (g_fp_hook) g_fp_hook(g_fp_hook_ctx);
  /* trusted weights cannot change behind the entry: W_ih may be held packed too */
  kl_status s = kl_lstm_pack(desc, ws ? ws : w, (borrow_wih ? KL_PACK_BORROW_WIH : 0) |
                                                   (trusted ? KL_PACK_WIH_PANELS : 0), &n->m);
  free(ws);
  free(copy);
  if (s != KL_OK) {
    free(n);
    free(k);
    return s;
  }
  if (g_hook) g_hook(g_hook_ctx);
  memcpy(k, key, key_len * sizeof(int64_t));
  n->key = k;
  n->key_len = key_len;
  n->fp = fp;
  n->trusted = trusted;
  n->refs = 1;
  if (!trusted && !have_fp) { /* no memory for the fingerprint: run uncached */
    *out = n;
    return KL_OK;
  }
  if (trusted && ka && ka->retain) {
    ka->retain(ka->handle);
    n->ka = *ka;
  }
  pthread_mutex_lock(&g_lock);
  const int old = find_locked(key, key_len); /* another thread packed the same meanwhile */
  if (old >= 0) remove_locked(old);
  /* a free slot: the least recently used entry no call is using, else any */
  if (g_n == KL_CACHE_CAPACITY && !evict_lru_locked(0)) evict_lru_locked(1);
  n->refs++;
  n->in_table = 1;
  n->last_use = ++g_clock;
  g_table[g_n++] = n;
  g_stats.entries++;
  g_stats.bytes += (int64_t)kl_lstm_packed_bytes(n->m);
  shrink_locked();
  pthread_mutex_unlock(&g_lock);
  *out = n;
  return KL_OK;
}

void kl_cache_clear_cpu(void) {
  pthread_mutex_lock(&g_lock);
  while (g_n > 0) remove_locked(g_n - 1);
  g_stats = (kl_cache_stats){0, 0, 0, 0, 0, 0};
  pthread_mutex_unlock(&g_lock);
  kl_scratch_clear();
}

void kl_cache_drop_owner(uint64_t owner) {
  if (!owner) return;
  pthread_mutex_lock(&g_lock);
  for (int i = g_n - 1; i >= 0; i--) /* the owner token is the key header's last value */
    if (g_table[i]->key_len > KL_CACHE_KEY_OWNER && (uint64_t)g_table[i]->key[KL_CACHE_KEY_OWNER] == owner)
      remove_locked(i);
  pthread_mutex_unlock(&g_lock);
}

kl_cache_stats kl_cache_get_stats(void) {
  pthread_mutex_lock(&g_lock);
  kl_cache_stats s = g_stats;
  pthread_mutex_unlock(&g_lock);
  s.scratch_bytes = (int64_t)kl_scratch_kept_bytes();
  return s;
}

void kl_cache_set_pack_hook(void (*hook)(void*), void* ctx) {
  pthread_mutex_lock(&g_lock);
  g_hook = hook;
  g_hook_ctx = ctx;
  pthread_mutex_unlock(&g_lock);
}

void kl_cache_set_fingerprint_hook(void (*hook)(void*), void* ctx) {
  pthread_mutex_lock(&g_lock);
  g_fp_hook = hook;
  g_fp_hook_ctx = ctx;
  pthread_mutex_unlock(&g_lock);
}
