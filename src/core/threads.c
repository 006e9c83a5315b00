/* The thread rule (threads.h) and the pool choice: how many threads a call
 * runs and on whose threads, with every environment variable that steers
 * them. The same rule serves every front: Python passes only overrides
 * (kl_set_num_threads, the limit, the host count). */
#include "threads.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#if defined(__linux__) && !defined(KL_FORCE_PORTABLE)
#define KL_AFFINITY 1
#endif

static atomic_int g_num_threads; /* kl_set_num_threads; 0: none */
static atomic_int g_limit;       /* kl_threads_set_limit; 0: none */
static atomic_int g_host;        /* kl_threads_set_host; 0: none */

int kl_env_count(const char* name) {
  const char* env = getenv(name);
  if (!env) return 0;
  while (*env == ' ' || *env == '\t') env++;
  if (!*env) return 0;
  char* end;
  const long v = strtol(env, &end, 10);
  while (*end == ' ' || *end == '\t' || *end == '\n') end++;
  return *end == 0 && v >= 1 && v <= INT_MAX ? (int)v : 0;
}

/* ---- cgroup CPU quota ---- */

/* The first line of path without its trailing blanks, or 0 if unreadable/empty. */
static int read_line(const char* path, char* buf, size_t cap) {
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  const int ok = fgets(buf, (int)cap, f) != NULL;
  fclose(f);
  if (!ok) return 0;
  size_t n = strlen(buf);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\t' ||
                   buf[n - 1] == '\r'))
    buf[--n] = 0;
  return n > 0;
}

/* s (leading blanks allowed) as a whole number, up to its first blank; NULL if not one. */
static const char* parse_number(const char* s, double* v) {
  char* end;
  *v = strtod(s, &end);
  if (end == s || (*end && *end != ' ' && *end != '\t')) return NULL;
  return end;
}

/* dir/name, or 0 when it does not fit. */
static int join(char* out, size_t cap, const char* dir, const char* name) {
  const size_t n = strlen(dir);
  const char* sep = n > 0 && dir[n - 1] == '/' ? "" : "/";
  const int w = snprintf(out, cap, "%s%s%s", dir, sep, name);
  return w > 0 && (size_t)w < cap;
}

/* cpu.max's quota in CPUs ("150000 100000" -> 1.5; "max ..." -> 0). */
static double v2_quota(const char* dir) {
  char path[4200], line[256];
  double quota, period = 100000;
  if (!join(path, sizeof(path), dir, "cpu.max") || !read_line(path, line, sizeof(line))) return 0;
  const char* rest = parse_number(line, &quota);
  if (!rest) return 0;
  while (*rest == ' ' || *rest == '\t') rest++;
  if (*rest && !parse_number(rest, &period)) return 0;
  return quota > 0 && period > 0 ? quota / period : 0;
}

/* cpu.cfs_quota_us / cpu.cfs_period_us in CPUs; 0 for none (-1). */
static double v1_quota(const char* dir) {
  char path[4200], line[256];
  double quota, period;
  if (!join(path, sizeof(path), dir, "cpu.cfs_quota_us") || !read_line(path, line, sizeof(line)) ||
      !parse_number(line, &quota))
    return 0;
  if (!join(path, sizeof(path), dir, "cpu.cfs_period_us") || !read_line(path, line, sizeof(line)) ||
      !parse_number(line, &period))
    return 0;
  return quota > 0 && period > 0 ? quota / period : 0;
}

/* The smallest positive quota(base/rel), quota of each ancestor, ..., quota(base),
 * folded into *best; rel's empty, "." and ".." parts are skipped. */
static void walk_up(const char* base, const char* rel, double (*quota)(const char*),
                    double* best) {
  char dir[4096];
  size_t n = (size_t)snprintf(dir, sizeof(dir), "%s", base);
  if (n >= sizeof(dir)) return;
  size_t ends[512];
  int depth = 0;
  ends[depth++] = n;
  for (const char* p = rel; *p && depth < 512;) {
    while (*p == '/') p++;
    const size_t len = strcspn(p, "/");
    if (len == 0) break;
    if (!(len == 1 && p[0] == '.') && !(len == 2 && p[0] == '.' && p[1] == '.')) {
      const int slash = n == 0 || dir[n - 1] != '/';
      if (n + (size_t)slash + len >= sizeof(dir)) return;
      if (slash) dir[n++] = '/';
      memcpy(dir + n, p, len);
      n += len;
      dir[n] = 0;
      ends[depth++] = n;
    }
    p += len;
  }
  while (depth-- > 0) {
    dir[ends[depth]] = 0;
    const double q = quota(dir);
    if (q > 0 && (*best == 0 || q < *best)) *best = q;
  }
}

static int is_dir(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

double kl_cgroup_cpu_limit(const char* root, const char* proc_cgroup) {
  char v2[4096] = "/", v1[4096] = "/", line[4200];
  FILE* f = fopen(proc_cgroup, "r");
  if (f) {
    /* "id:controllers:path"; controllers empty for the v2 (unified) hierarchy */
    while (fgets(line, sizeof(line), f)) {
      line[strcspn(line, "\n")] = 0;
      char* c = strchr(line, ':');
      char* rel = c ? strchr(c + 1, ':') : NULL;
      if (!rel) continue;
      *rel++ = 0;
      const char* controllers = c + 1;
      if (strlen(rel) >= sizeof(v2)) continue;
      if (!*controllers) strcpy(v2, rel);
      for (const char* p = controllers; *p;) {
        const size_t len = strcspn(p, ",");
        if (len == 3 && strncmp(p, "cpu", 3) == 0) strcpy(v1, rel);
        p += len;
        if (*p == ',') p++;
      }
    }
    fclose(f);
  }
  double best = 0;
  walk_up(root, v2, v2_quota, &best);
  static const char* const mounts[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
  for (int i = 0; i < 3; i++) {
    char base[4200];
    if (!join(base, sizeof(base), root, mounts[i]) || !is_dir(base)) continue;
    walk_up(base, v1, v1_quota, &best);
    break;
  }
  return best;
}

/* The process's quota, read once (again after kl_threads_set_cgroup_paths). */
static pthread_mutex_t g_cgroup_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_cgroup_read;
static double g_cgroup_cpus;
static char g_cgroup_root[1024] = "/sys/fs/cgroup", g_cgroup_proc[1024] = "/proc/self/cgroup";

void kl_threads_set_cgroup_paths(const char* root, const char* proc_cgroup) {
  pthread_mutex_lock(&g_cgroup_lock);
  snprintf(g_cgroup_root, sizeof(g_cgroup_root), "%s", root ? root : "/sys/fs/cgroup");
  snprintf(g_cgroup_proc, sizeof(g_cgroup_proc), "%s", proc_cgroup ? proc_cgroup : "/proc/self/cgroup");
  atomic_store(&g_cgroup_read, 0);
  pthread_mutex_unlock(&g_cgroup_lock);
}

static double cgroup_cpus(void) {
  if (atomic_load_explicit(&g_cgroup_read, memory_order_acquire)) return g_cgroup_cpus;
  pthread_mutex_lock(&g_cgroup_lock);
  if (!atomic_load(&g_cgroup_read)) {
    g_cgroup_cpus = kl_cgroup_cpu_limit(g_cgroup_root, g_cgroup_proc);
    atomic_store_explicit(&g_cgroup_read, 1, memory_order_release);
  }
  const double v = g_cgroup_cpus;
  pthread_mutex_unlock(&g_cgroup_lock);
  return v;
}

/* ---- the count ---- */

int kl_cpus_within(double quota) {
  int n = 0;
#ifdef KL_AFFINITY
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
#endif
#ifdef _SC_NPROCESSORS_ONLN
  if (n < 1) {
    const long c = sysconf(_SC_NPROCESSORS_ONLN);
    n = c > KL_MAX_THREADS ? KL_MAX_THREADS : (int)c;
  }
#endif
  if (quota > 0) { /* a fraction of a CPU still gets one */
    const double whole = ceil(quota - 1e-9);
    if (whole < n) n = whole < 1 ? 1 : (int)whole;
  }
  return n < 1 ? 1 : n;
}

int kl_usable_cpus(void) { return kl_cpus_within(cgroup_cpus()); }

int kl_max_threads(void) {
  const int env = kl_env_count("KOKORO_LSTM_MAX_THREADS");
  const int n = env ? env : kl_usable_cpus();
  return n > KL_MAX_THREADS ? KL_MAX_THREADS : n;
}

int kl_threads_cap(int n) {
  int cap = kl_max_threads();
  const int limit = atomic_load(&g_limit);
  if (limit > 0 && limit < cap) cap = limit;
  return n < 1 ? 1 : n > cap ? cap : n;
}

int kl_threads_resolve_with(int requested, int host) {
  if (requested >= 1) return kl_threads_cap(requested);
  const int set = atomic_load(&g_num_threads);
  if (set > 0) return kl_threads_cap(set);
  const int env = kl_env_count("KOKORO_LSTM_NUM_THREADS");
  if (env) return kl_threads_cap(env);
  const int n = kl_usable_cpus();
  return kl_threads_cap(host > 0 && host < n ? host : n);
}

int kl_threads_resolve(int requested) {
  return kl_threads_resolve_with(requested, atomic_load(&g_host));
}

int kl_get_num_threads(void) { return kl_threads_resolve(0); }

void kl_set_num_threads(int n) {
  atomic_store(&g_num_threads, n < 0 ? 0 : n > KL_MAX_THREADS ? KL_MAX_THREADS : n);
}

void kl_threads_set_limit(int n) { atomic_store(&g_limit, n < 0 ? 0 : n); }
int kl_threads_limit(void) { return atomic_load(&g_limit); }
void kl_threads_set_host(int n) { atomic_store(&g_host, n < 0 ? 0 : n); }

int kl_threads_short_call(int nth, int64_t rows, int small_batch, int recurrence) {
  return small_batch && rows < KL_SHORT_CALL_ROWS && nth > recurrence ? recurrence : nth;
}

int kl_threads_for_work(int nth, double work, double min_work) {
  if (nth <= 1 || !(work >= min_work)) return 1; /* NaN work: one thread */
  const double n = work / min_work;
  return n < (double)nth ? (int)n : nth;
}

/* ---- the pool choice ---- */
static atomic_int g_foreign = -1, g_pin = -1; /* kl_pool_set_params; -1: the default */
static atomic_int g_foreign_env = -1;         /* KOKORO_LSTM_POOL, once read */

void kl_pool_set_params(kl_pool_params p) {
  atomic_store(&g_foreign, p.foreign < 0 ? -1 : p.foreign != 0);
  atomic_store(&g_pin, p.pin < 0 ? -1 : p.pin != 0);
}

kl_pool_params kl_pool_get_params(void) {
  kl_pool_params p = {atomic_load(&g_foreign), atomic_load(&g_pin)};
  if (p.foreign < 0) {
    p.foreign = atomic_load(&g_foreign_env);
    if (p.foreign < 0) {
      const char* env = getenv("KOKORO_LSTM_POOL");
      p.foreign = !(env && strcmp(env, "own") == 0);
      atomic_store(&g_foreign_env, p.foreign);
    }
  }
  if (p.pin < 0) {
    const char* env = getenv("KOKORO_LSTM_PIN");
    p.pin = !(env && strcmp(env, "0") == 0);
  }
  return p;
}
