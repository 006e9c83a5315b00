/* The engine's OpenBLAS entry points in an exported TVM library, found when the library
 * is loaded rather than named in its NEEDED list: TVM's plain export_library passes no
 * linker options, so the library can carry no $ORIGIN rpath, and an absolute NEEDED
 * path would tie it to the machine that exported it. kokoro_lstm/tvm/_link.py compiles
 * this file at export time with
 *   KL_BLAS_PREFIX     the symbols' prefix: scipy_ (scipy-openblas32) or empty (system)
 *   KL_BLAS_SONAME     the library's soname, e.g. "libscipy_openblas.so"
 *   KL_BLAS_INSTALLED  its path on the exporting machine (the last place looked)
 * The library is taken, in this order, from: this process (already loaded, e.g. by
 * `import kokoro_lstm`), the folder of the library carrying this file, the dynamic
 * linker's search for the soname (LD_LIBRARY_PATH, ldconfig's cache), KL_BLAS_INSTALLED.
 * Found at load time; if it is not, the load prints one line naming the file to copy,
 * and a call that needs it prints it again and aborts. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(KL_BLAS_PREFIX) || !defined(KL_BLAS_SONAME) || !defined(KL_BLAS_INSTALLED)
#error "define KL_BLAS_PREFIX, KL_BLAS_SONAME and KL_BLAS_INSTALLED"
#endif

#define KL_CAT2(a, b) a##b
#define KL_CAT(a, b) KL_CAT2(a, b)
#define KL_SYM(name) KL_CAT(KL_BLAS_PREFIX, name)
#define KL_STR2(x) #x
#define KL_STR(x) KL_STR2(x)
#define KL_HIDDEN __attribute__((visibility("hidden")))

/* cblas.h's enums are passed as int; blasint is int (the 32-bit integer interface). */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float*, int, const float*,
                         int, float, float*, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double*, int,
                         const double*, int, double, double*, int);
typedef int (*get_threads_fn)(void);
typedef void (*set_threads_fn)(int);

static struct {
  sgemm_fn sgemm;
  dgemm_fn dgemm;
  get_threads_fn get_threads;
  set_threads_fn set_threads;
  char error[1024];
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

/* The path of the library that holds this file (dladdr of its own data), or NULL. */
static const char* self_path(void) {
  Dl_info info;
  return dladdr(&blas, &info) && info.dli_fname ? info.dli_fname : NULL;
}

/* KL_BLAS_SONAME in the folder of the library that holds this file, or NULL. */
static void* open_beside(void) {
  const char* self = self_path();
  const char* slash = self ? strrchr(self, '/') : NULL;
  if (!slash) return NULL; /* loaded by a bare name: the soname search below covers it */
  const size_t dir = (size_t)(slash - self) + 1;
  const size_t len = dir + sizeof(KL_BLAS_SONAME);
  char* path = malloc(len);
  if (!path) return NULL;
  memcpy(path, self, dir);
  memcpy(path + dir, KL_BLAS_SONAME, sizeof(KL_BLAS_SONAME));
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  free(path);
  return h;
}

static void resolve(void) {
  void* h = dlopen(KL_BLAS_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) h = open_beside();
  if (!h) h = dlopen(KL_BLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen(KL_BLAS_INSTALLED, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* self = self_path();
    snprintf(blas.error, sizeof blas.error,
             "kokoro_lstm engine in %s: " KL_BLAS_SONAME " not found (not loaded, not beside "
             "the library, not on the dynamic linker's path, not at " KL_BLAS_INSTALLED
             "): copy it beside the library",
             self ? self : "?");
    fprintf(stderr, "%s\n", blas.error);
    return;
  }
  static const char* const names[4] = {
      KL_STR(KL_SYM(cblas_sgemm)), KL_STR(KL_SYM(cblas_dgemm)),
      KL_STR(KL_SYM(openblas_get_num_threads)), KL_STR(KL_SYM(openblas_set_num_threads))};
  void* p[4];
  for (int i = 0; i < 4; i++) {
    p[i] = dlsym(h, names[i]);
    if (!p[i]) {
      snprintf(blas.error, sizeof blas.error, "kokoro_lstm engine: " KL_BLAS_SONAME " has no %s",
               names[i]);
      fprintf(stderr, "%s\n", blas.error);
      dlclose(h);
      return;
    }
  }
  /* memcpy: ISO C has no conversion from dlsym's void* to a function pointer. */
  memcpy(&blas.sgemm, &p[0], sizeof p[0]);
  memcpy(&blas.dgemm, &p[1], sizeof p[1]);
  memcpy(&blas.get_threads, &p[2], sizeof p[2]);
  memcpy(&blas.set_threads, &p[3], sizeof p[3]);
}

__attribute__((constructor)) static void resolve_at_load(void) {
  pthread_once(&blas_once, resolve);
}

/* The library, or the load's message and abort: the engine's BLAS calls have no error path. */
static void need_blas(void) {
  pthread_once(&blas_once, resolve);
  if (blas.error[0]) {
    fprintf(stderr, "%s\n", blas.error);
    abort();
  }
}

KL_HIDDEN void KL_SYM(cblas_sgemm)(int order, int ta, int tb, int m, int n, int k, float alpha,
                                   const float* a, int lda, const float* b, int ldb, float beta,
                                   float* c, int ldc) {
  need_blas();
  blas.sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

KL_HIDDEN void KL_SYM(cblas_dgemm)(int order, int ta, int tb, int m, int n, int k, double alpha,
                                   const double* a, int lda, const double* b, int ldb,
                                   double beta, double* c, int ldc) {
  need_blas();
  blas.dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

KL_HIDDEN int KL_SYM(openblas_get_num_threads)(void) {
  need_blas();
  return blas.get_threads();
}

KL_HIDDEN void KL_SYM(openblas_set_num_threads)(int n) {
  need_blas();
  blas.set_threads(n);
}
