/* tvm-ffi glue of the counter-based random numbers (src/ops/random.h),
 * destination-passing like the dense externs.
 *
 * kokoro_lstm.random_v1(cfg, seed, y)
 *   cfg = (abi, dist, stream, num_threads): dist 0 uniform [0, 1), 1 standard
 *   normal; stream >= 0; num_threads 0: the process default. seed: an int64 CPU
 *   tensor of one element; y: a compact float32 CPU tensor of any shape, filled
 *   with elements 0.. of the draw (seed, stream) in row-major order.
 * kokoro_lstm.fresh_seed_v1(seed)
 *   Writes a seed into an int64 CPU tensor of one element that no earlier call in
 *   this process wrote: a bijective 64-bit mix of a per-process key and a call
 *   counter, the key drawn once from the OS's entropy (getrandom / getentropy,
 *   else the clocks) and mixed with the process id on every call, so a forked
 *   child does not repeat its parent's seeds. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

#include "kl_tvm_dense.h"
#include "kl_tvm_random.h"
#include "random.h"

static int errf(const char* kind, const char* fn, const char* what) {
  char msg[400];
  snprintf(msg, sizeof(msg), "%s: %s", fn, what);
  return kl_tvm_raise(kind, msg);
}

static const DLTensor* as_dltensor(const TVMFFIAny* a) {
  if (a->type_index == kTVMFFIDLTensorPtr) return (const DLTensor*)a->v_ptr;
  if (a->type_index == kTVMFFITensor) return (const DLTensor*)((const char*)a->v_obj + sizeof(TVMFFIObject));
  return NULL;
}

/* A compact CPU tensor argument of this dtype (code, bits); its element count in *n. */
static int get_tensor(const char* fn, const TVMFFIAny* arg, const char* name, int code, int bits,
                      const DLTensor** out, int64_t* n) {
  char what[200];
  const DLTensor* t = as_dltensor(arg);
  if (!t) {
    snprintf(what, sizeof(what), "%s must be a tensor (type index %d)", name, (int)arg->type_index);
    return errf("TypeError", fn, what);
  }
  if (t->device.device_type != kDLCPU) {
    snprintf(what, sizeof(what), "%s must be a CPU tensor, got device type %d", name,
             (int)t->device.device_type);
    return errf("ValueError", fn, what);
  }
  if (t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1) {
    snprintf(what, sizeof(what), "%s must be %s", name, code == kDLFloat ? "float32" : "int64");
    return errf("TypeError", fn, what);
  }
  int64_t count = 1, st = 1;
  int compact = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->strides && t->shape[i] != 1 && t->strides[i] != st) compact = 0;
    st *= t->shape[i];
    count *= t->shape[i];
  }
  if (!compact) {
    snprintf(what, sizeof(what), "%s must be compact", name);
    return errf("ValueError", fn, what);
  }
  *out = t;
  *n = count;
  return 0;
}

int kl_tvm_random(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  static const char* fn = KL_TVM_RANDOM_NAME;
  char what[300];
  result->type_index = kTVMFFINone;
  const TVMFFIShapeCell* cell = nargs >= 1 && args[0].type_index == kTVMFFIShape
      ? (const TVMFFIShapeCell*)((const char*)args[0].v_obj + sizeof(TVMFFIObject)) : NULL;
  if (!cell) return errf("TypeError", fn, "the first argument must be the config shape");
  if (cell->size != KL_RANDOM_CFG_N || cell->data[KL_RANDOM_CFG_ABI] != KL_TVM_RANDOM_ABI) {
    snprintf(what, sizeof(what),
             "the module was compiled for calling convention %lld with %zu config values; this "
             "engine implements v%d with %d: recompile the module",
             cell->size ? (long long)cell->data[0] : -1LL, cell->size, KL_TVM_RANDOM_ABI,
             KL_RANDOM_CFG_N);
    return errf("RuntimeError", fn, what);
  }
  const int64_t* cfg = cell->data;
  if (nargs != 3) {
    snprintf(what, sizeof(what), "expected 3 arguments (cfg, seed, y), got %d", (int)nargs);
    return errf("TypeError", fn, what);
  }
  const int64_t dist = cfg[KL_RANDOM_CFG_DIST], stream = cfg[KL_RANDOM_CFG_STREAM],
                nth = cfg[KL_RANDOM_CFG_NUM_THREADS];
  if ((dist != KL_RANDOM_UNIFORM && dist != KL_RANDOM_NORMAL) || stream < 0 || nth < 0 ||
      nth > INT32_MAX) {
    snprintf(what, sizeof(what),
             "config (dist %lld, stream %lld, num_threads %lld): dist must be 0 (uniform) or 1 "
             "(normal), stream and num_threads >= 0",
             (long long)dist, (long long)stream, (long long)nth);
    return errf("ValueError", fn, what);
  }
  const DLTensor *seed, *y;
  int64_t nseed, n;
  if (get_tensor(fn, &args[1], "seed", kDLInt, 64, &seed, &nseed) ||
      get_tensor(fn, &args[2], "y", kDLFloat, 32, &y, &n))
    return -1;
  if (nseed != 1) {
    snprintf(what, sizeof(what), "seed must have one element, got %lld", (long long)nseed);
    return errf("ValueError", fn, what);
  }
  int64_t s;
  memcpy(&s, (const char*)seed->data + seed->byte_offset, sizeof(s));
  const kl_status st = kl_f32_random((int)dist, (uint64_t)s, (uint64_t)stream, 0, n,
                                     (float*)((char*)y->data + y->byte_offset), (int)nth);
  if (st != KL_OK)
    return errf(st == KL_ERR_NOMEM ? "MemoryError" : st == KL_ERR_ARG ? "ValueError" : "RuntimeError",
                fn, kl_status_str(st));
  return 0;
}

/* ---- fresh seeds ---------------------------------------------------------------- */
/* splitmix64's finalizer: a bijection of 64-bit words that spreads every input bit. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t os_entropy(void) {
  uint64_t k = 0;
#if defined(__linux__)
  if (getrandom(&k, sizeof(k), GRND_NONBLOCK) == (ssize_t)sizeof(k)) return k;
#elif defined(__APPLE__) || defined(__OpenBSD__) || defined(__FreeBSD__)
  if (getentropy(&k, sizeof(k)) == 0) return k;
#endif
  struct timespec a, b;
  clock_gettime(CLOCK_REALTIME, &a);
  clock_gettime(CLOCK_MONOTONIC, &b);
  return mix64((uint64_t)a.tv_sec * 1000000000ULL + (uint64_t)a.tv_nsec) ^
         mix64((uint64_t)b.tv_nsec + ((uint64_t)b.tv_sec << 32)) ^ mix64((uint64_t)(uintptr_t)&k);
}

static _Atomic uint64_t g_key;     /* the per-process key, 0 until drawn */
static _Atomic uint64_t g_counter; /* calls so far */

int kl_tvm_fresh_seed(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  static const char* fn = KL_TVM_FRESH_SEED_NAME;
  result->type_index = kTVMFFINone;
  if (nargs != 1) return errf("TypeError", fn, "expected one argument (the int64 seed to write)");
  const DLTensor* t;
  int64_t n;
  if (get_tensor(fn, &args[0], "seed", kDLInt, 64, &t, &n)) return -1;
  if (n != 1) return errf("ValueError", fn, "seed must have one element");
  uint64_t key = atomic_load_explicit(&g_key, memory_order_acquire);
  if (!key) { /* the first caller's draw wins; 0 stays the "not drawn" mark */
    uint64_t mine = os_entropy() | 1, expected = 0;
    if (atomic_compare_exchange_strong(&g_key, &expected, mine)) key = mine;
    else key = expected;
  }
  const uint64_t c = atomic_fetch_add_explicit(&g_counter, 1, memory_order_relaxed);
  /* for a fixed key and process, a bijection of the counter: never repeats */
  const uint64_t seed = mix64(key ^ mix64((uint64_t)getpid()) ^ 0x9e3779b97f4a7c15ULL) + c;
  const uint64_t out = mix64(seed);
  memcpy((char*)t->data + t->byte_offset, &out, sizeof(out));
  return 0;
}
