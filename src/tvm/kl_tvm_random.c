/* tvm-ffi glue of the counter-based random numbers (src/ops/random.h),
 * destination-passing like the dense externs.
 *
 * kokoro_lstm.random_v1(cfg, seed, y)
 *   cfg = (abi, dist, stream, num_threads): dist 0 uniform [0, 1), 1 standard
 *   normal; stream >= 0; num_threads 0: the process default. seed: an int64 tensor
 *   of one element; y: a compact float32 tensor of any shape, filled with elements
 *   0.. of the draw (seed, stream) in row-major order. Both on the CPU, or both on
 *   one CUDA device: then the kernel (src/cuda/random.cu, the same bits) runs on
 *   TVMFFIEnvGetStream's stream, reading the seed there (num_threads unused).
 * kokoro_lstm.fresh_seed_v1(seed)
 *   Writes a seed into an int64 tensor of one element, on the CPU or a CUDA device
 *   (there by a kernel on TVMFFIEnvGetStream's stream, counting on the device), that
 *   no earlier call in this process wrote: a
 *   bijective 64-bit mix of a per-process key and a call counter, the key drawn once
 *   from the OS's entropy (getrandom / getentropy, else the clocks) and mixed with
 *   the process id on every call, so a forked child does not repeat its parent's
 *   seeds. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

#include "check.h"
#include "kl_cuda.h"
#include "kl_tvm_dense.h"
#include "kl_tvm_random.h"
#include "random.h"

/* y on the CPU or a CUDA device, the seed on the same device (a CUDA kernel reads it
 * there, so that a captured graph draws with its value at each replay): 0, else raises. */
static int check_devices(const char* fn, const DLTensor* seed, const DLTensor* y) {
  char what[300];
  const DLDevice s = seed->device, d = y->device;
  if (d.device_type != kDLCPU && d.device_type != kDLCUDA) {
    snprintf(what, sizeof(what), "y must be on the CPU or a CUDA device, got device type %d", (int)d.device_type);
    return kl_tvm_errf("ValueError", fn, what);
  }
  if (s.device_type == d.device_type && (d.device_type == kDLCPU || s.device_id == d.device_id)) return 0;
  if (d.device_type == kDLCPU)
    snprintf(what, sizeof(what), "seed must be a CPU tensor like y, got device type %d", (int)s.device_type);
  else
    snprintf(what, sizeof(what), "seed must be on y's device cuda:%d, got device type %d id %d", (int)d.device_id,
             (int)s.device_type, (int)s.device_id);
  return kl_tvm_errf("ValueError", fn, what);
}

/* The config's values, checked: 0, else raises. */
static int random_config(const char* fn, const TVMFFIAny* args, int32_t nargs, int64_t* dist, int64_t* stream,
                         int64_t* nth) {
  char what[300];
  const int64_t* cfg;
  if (kl_tvm_config(fn, args, nargs, KL_TVM_RANDOM_ABI, KL_RANDOM_CFG_N, KL_RANDOM_CFG_N, &cfg, NULL))
    return -1;
  if (nargs != 3) {
    snprintf(what, sizeof(what), "expected 3 arguments (cfg, seed, y), got %d", (int)nargs);
    return kl_tvm_errf("TypeError", fn, what);
  }
  *dist = cfg[KL_RANDOM_CFG_DIST], *stream = cfg[KL_RANDOM_CFG_STREAM], *nth = cfg[KL_RANDOM_CFG_NUM_THREADS];
  if ((*dist != KL_RANDOM_UNIFORM && *dist != KL_RANDOM_NORMAL) || *stream < 0 || *nth < 0 || *nth > INT32_MAX) {
    snprintf(what, sizeof(what),
             "config (dist %lld, stream %lld, num_threads %lld): dist must be 0 (uniform) or 1 "
             "(normal), stream and num_threads >= 0",
             (long long)*dist, (long long)*stream, (long long)*nth);
    return kl_tvm_errf("ValueError", fn, what);
  }
  return 0;
}

int kl_tvm_random(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  static const char* fn = KL_TVM_RANDOM_NAME;
  char what[300];
  result->type_index = kTVMFFINone;
  int64_t dist = 0, stream = 0, nth = 0, nseed = 0, n = 0;
  const DLTensor *seed, *y;
  if (random_config(fn, args, nargs, &dist, &stream, &nth) ||
      kl_tvm_compact_tensor(fn, &args[1], "seed", kDLInt, 64, &seed, &nseed) ||
      kl_tvm_compact_tensor(fn, &args[2], "y", kDLFloat, 32, &y, &n) || check_devices(fn, seed, y))
    return -1;
  if (nseed != 1) {
    snprintf(what, sizeof(what), "seed must have one element, got %lld", (long long)nseed);
    return kl_tvm_errf("ValueError", fn, what);
  }
  const DLTensor* outs[1] = {y};
  const DLTensor* ins[1] = {seed};
  static const char* const out_names[1] = {"y"};
  static const char* const in_names[1] = {"seed"};
  if (kl_check_disjoint(outs, out_names, 1, ins, in_names, 1))
    return kl_tvm_errf("ValueError", fn, kl_last_error());
  const int64_t* sp = (const int64_t*)(const void*)((const char*)seed->data + seed->byte_offset);
  float* yp = (float*)(void*)((char*)y->data + y->byte_offset);
  const int id = y->device.device_id;
  kl_status st;
  if (y->device.device_type == kDLCUDA) { /* on TVM's stream for the device */
    st = kl_cuda_random((int)dist, sp, (uint64_t)stream, n, yp, id, kl_tvm_stream(kDLCUDA, id));
  } else {
    int64_t s;
    memcpy(&s, sp, sizeof(s));
    st = kl_f32_random((int)dist, (uint64_t)s, (uint64_t)stream, 0, n, yp, (int)nth);
  }
  if (st != KL_OK)
    return kl_tvm_errf(st == KL_ERR_NOMEM ? "MemoryError" : st == KL_ERR_ARG ? "ValueError" : "RuntimeError",
                       fn, *kl_last_error() ? kl_last_error() : kl_status_str(st));
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
  if (nargs != 1) return kl_tvm_errf("TypeError", fn, "expected one argument (the int64 seed to write)");
  const DLTensor* t;
  int64_t n;
  if (kl_tvm_compact_tensor(fn, &args[0], "seed", kDLInt, 64, &t, &n)) return -1;
  if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDA) {
    char what[200];
    snprintf(what, sizeof(what), "seed must be a CPU or CUDA tensor, got device type %d",
             (int)t->device.device_type);
    return kl_tvm_errf("ValueError", fn, what);
  }
  if (n != 1) return kl_tvm_errf("ValueError", fn, "seed must have one element");
  uint64_t key = atomic_load_explicit(&g_key, memory_order_acquire);
  if (!key) { /* the first caller's draw wins; 0 stays the "not drawn" mark */
    uint64_t mine = os_entropy() | 1, expected = 0;
    if (atomic_compare_exchange_strong(&g_key, &expected, mine)) key = mine;
    else key = expected;
  }
  /* for a fixed key and process, a bijection of a counter: never repeats; each CUDA
   * device counts on the device (a captured graph's replays draw anew) from its own
   * base, so its seeds are not the host's */
  const uint64_t base = mix64(key ^ mix64((uint64_t)getpid()) ^ 0x9e3779b97f4a7c15ULL);
  int64_t* out = (int64_t*)(void*)((char*)t->data + t->byte_offset);
  if (t->device.device_type == kDLCUDA) {
    const int id = t->device.device_id;
    const kl_status st = kl_cuda_fresh_seed(base ^ mix64(0x100u + (uint64_t)id), out, id,
                                            kl_tvm_stream(kDLCUDA, id));
    return st ? kl_tvm_errf("RuntimeError", fn, *kl_last_error() ? kl_last_error() : kl_status_str(st)) : 0;
  }
  const uint64_t s = mix64(base + atomic_fetch_add_explicit(&g_counter, 1, memory_order_relaxed));
  memcpy(out, &s, sizeof(s));
  return 0;
}
