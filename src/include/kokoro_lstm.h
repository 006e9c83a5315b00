/*
 * kokoro_lstm: LSTM inference core (C11, no Python).
 *
 * The product: kl_lstm_forward runs a whole LSTM on DLPack tensors,
 * destination-passing, on the CPU or a CUDA device, with the weights packed once
 * and kept in a process-wide cache that is never stale; the cache, the thread
 * count and the CPU's ISA level are controlled here. Semantics are
 * torch.nn.LSTM's: gate order i, f, g, o; optional projection (proj_size);
 * stacked layers; bidirectional; per-sequence lengths with the semantics of
 * pack_padded_sequence -> LSTM -> pad_packed_sequence. It may be called from
 * several threads at once.
 *
 * Test hooks, probes and tuning setters are in kokoro_lstm_testing.h.
 */
#ifndef KOKORO_LSTM_H
#define KOKORO_LSTM_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kl_status {
  KL_OK = 0,
  KL_ERR_ARG = 1,    /* an argument is out of range or inconsistent */
  KL_ERR_NOMEM = 2,  /* an allocation failed */
  KL_ERR_THREAD = 3, /* a thread could not be created */
  KL_ERR_INTERRUPTED = 4, /* the caller's interrupt callback stopped the run */
  KL_ERR_DEVICE = 5,      /* CUDA: the driver, NVRTC or a launch failed (kl_last_error says which) */
} kl_status;

const char* kl_status_str(kl_status s);

/* Storage / compute types. KL_BF16 stores the recurrent weights in bfloat16,
 * KL_F16 in IEEE half (float16); both compute in float32 (inputs, outputs,
 * states and accumulation are float32; the caller passes float32 weights). */
typedef enum kl_dtype { KL_F32 = 0, KL_F64 = 1, KL_BF16 = 2, KL_F16 = 3 } kl_dtype;

/* ---- the one entry: a whole LSTM over DLPack tensors --------------------------
 *
 * Tensors are DLTensors on the CPU (kDLCPU) or all on one CUDA device (kDLCUDA;
 * lengths stay in host memory), of any strides the engine can read in place
 * (x: any layout whose (t, b) rows form one strided sequence, feature stride 1;
 * anything else is rejected with a message). Every shape, dtype, stride and
 * length is validated here, once; on failure the status is KL_ERR_ARG and
 * kl_last_error() names the argument.
 *
 *   x        [T, B, I] ([B, T, I] if batch_first), float32 (KL_F32, KL_BF16) or
 *            float64 (KL_F64)
 *   lengths  int64 [B], each in 1..T, or NULL (pack_padded_sequence semantics)
 *   h0, c0   [L*D, B, R] / [L*D, B, H] or NULL (zeros)
 *   weights  num_layers * D groups, layer-major, each: w_ih [4H, I_l],
 *            w_hh [4H, R], then b_ih [4H], b_hh [4H] if has_bias, then
 *            w_hr [P, H] if proj_size > 0. Rows may have any stride (feature
 *            stride 1); any other layout is rejected.
 *   gate_bias [D, B, 4H] contiguous, or NULL: added to layer 0's input gates
 *            of every step (gates = W_ih x_t + gate_bias[d, b] + b_ih + b_hh)
 *   x_gates  1: x is layer 0's input projection W_ih x_t, [T, B, D*4H] ([B, T,
 *            D*4H] if batch_first; per direction the gates i, f, g, o of H
 *            units), computed by the caller; layer 0's w_ih is validated (its
 *            columns are input_size) but not read. Both options together give
 *            gates = x + gate_bias + b_ih + b_hh.
 *   y        [T, B, D*R] ([B, T, D*R] if batch_first), written
 *   h_n, c_n [L*D, B, R] / [L*D, B, H], written, or NULL
 *
 * Weights are packed on first use and cached, keyed on the weights' addresses,
 * shapes and strides. The cache is never stale: unless constant_weights is set,
 * a call that hits runs and then checks that a 128-bit fingerprint of the
 * cached weights' current bytes matches the one taken *before* they were packed;
 * if not, it repacks and runs again, overwriting its outputs (float32/float64
 * W_ih is not copied at all: the input GEMM reads it in place). A call
 * that overlaps a write to the weights may see either weights; once writes
 * stop, every call is right. constant_weights = 1 is the caller's promise that
 * the weights never change while their memory lives (compile-time constants of
 * a TVM module, weights private to an object); keepalive, if set, is retained
 * for the life of the cache entry so that the memory cannot be freed and reused
 * while it is cached; owner, if nonzero, is part of the key (a token unique to
 * the object that owns the weights: memory reused by another owner never hits,
 * and kl_cache_drop_owner frees the owner's entries). */
typedef struct kl_keepalive {
  void* handle;
  void (*retain)(void* handle);
  void (*release)(void* handle);
} kl_keepalive;

typedef struct kl_forward_args {
  int num_layers;       /* L >= 1 */
  int bidirectional;    /* 0 or 1 */
  int reverse;          /* unidirectional only: run backwards */
  int has_bias;         /* 0 or 1 */
  int proj_size;        /* 0 or P */
  int batch_first;      /* x and y are [B, T, ...] */
  int constant_weights; /* see above */
  kl_dtype dtype;       /* KL_F32, KL_F64, KL_BF16 or KL_F16 (float32 tensors, bf16/f16 weights) */
  int num_threads;      /* >= 1, or 0 for kl_get_num_threads() */
  const DLTensor* x;
  const DLTensor* lengths;
  const DLTensor* h0;
  const DLTensor* c0;
  const DLTensor* const* weights;
  int num_weights;
  DLTensor* y;
  DLTensor* h_n;
  DLTensor* c_n;
  const kl_keepalive* keepalive; /* constant_weights only; may be NULL */
  uint64_t owner;                /* 0, or a token unique to the weights' owner */
  const DLTensor* gate_bias;     /* [D, B, 4H] or NULL (see above) */
  int x_gates;                   /* 0 or 1 (see above) */
  /* NULL, or asked on the calling thread before each layer and every
   * KL_INTERRUPT_STEPS steps of the recurrence (CPU): nonzero stops the run at a
   * step boundary, which then returns KL_ERR_INTERRUPTED with the outputs
   * unspecified (e.g. a Python binding checking for signals). Never changes the
   * results of a run it does not stop. */
  int (*interrupt)(void* ctx);
  void* interrupt_ctx;
  void* stream;                  /* CUDA tensors: the CUstream to run on (NULL: the legacy default stream) */
} kl_forward_args;

#define KL_INTERRUPT_STEPS 64

kl_status kl_lstm_forward(const kl_forward_args* args);

/* CUDA tensors (kDLCUDA) run on the GPU, asynchronously on args->stream, in
 * float32 (dtype float32, or bfloat16 / float16 recurrent weights). Nothing of
 * CUDA is needed to build or import the engine: at the first CUDA call the
 * driver (libcuda.so.1) and NVRTC ($KOKORO_LSTM_NVRTC, else libnvrtc.so.13 or
 * .12) are loaded and the kernels compiled for the device, then cached per
 * process and on disk ($KOKORO_LSTM_CACHE_DIR, else ~/.cache/kokoro_lstm/cuda).
 * Weights are read in place on every call (no packed copy to go stale). Work
 * buffers are kept per (device, stream) until kl_cache_clear, so warm calls
 * allocate nothing and may be captured in CUDA graphs. A missing driver or NVRTC,
 * or a failed launch, is KL_ERR_DEVICE with the reason in kl_last_error(). */

/* The NVRTC library to load when $KOKORO_LSTM_NVRTC is not set (the variable is
 * the user's override), before libnvrtc.so.13 and .12; NULL or "" forgets it.
 * Read at the first CUDA call: later calls change nothing. KL_ERR_ARG if the path
 * is longer than 1023 bytes. */
kl_status kl_cuda_set_nvrtc_path(const char* path);

/* The message of this thread's last failed kl_lstm_forward (or ""). */
const char* kl_last_error(void);

/* Weight cache: at most 64 entries and KOKORO_LSTM_CACHE_MB MiB of packed weights
 * (default 1024, read once); entries no call is using leave least recently used
 * first, the most recently used one always stays. Drop every entry not in use;
 * counters since start or clear. */
typedef struct kl_cache_stats {
  int64_t entries, bytes, hits, misses, repacks;
  int64_t scratch_bytes; /* calls' large work buffers kept for the next calls */
} kl_cache_stats;
/* Drops every cached entry and frees the kept work buffers. */
void kl_cache_clear(void);
/* Drops the entries of one owner (kl_forward_args.owner), e.g. when it dies. */
void kl_cache_drop_owner(uint64_t owner);
kl_cache_stats kl_cache_get_stats(void);

/* Process-wide default thread count for calls that pass num_threads = 0:
 * KOKORO_LSTM_NUM_THREADS if set to a positive integer, else the CPUs this
 * process may run on; kl_set_num_threads(n >= 1) overrides it, n = 0 restores
 * the default. Every count, this default and each call's own, runs at most
 * kl_max_threads() threads: KOKORO_LSTM_MAX_THREADS if set to a positive
 * integer, else the CPUs of the affinity mask, at most the cgroup (v2 or v1)
 * CPU quota rounded up; never more than 512. The whole rule: docs/threads.md.
 * Results never depend on the count. */
int kl_get_num_threads(void);
void kl_set_num_threads(int n);
int kl_max_threads(void);

/* Which threads run parallel work (Linux; elsewhere always the own pool).
 * Calls made on a thread marked KL_POOL_TVM (the tvm-ffi functions mark theirs
 * for the duration of the call) run on the TVM runtime's pool when
 * libtvm_runtime is loaded and uses at least the call's thread count; other
 * calls run on GNU OpenMP's team when libgomp is loaded (e.g. by PyTorch);
 * else, and with KOKORO_LSTM_POOL=own or in a forked child, on the engine's own
 * pool. kl_pool_set_caller: marks this thread's calls, returns the previous mark. */
#define KL_POOL_AUTO 0
#define KL_POOL_TVM 1
int kl_pool_set_caller(int caller);

/* ---- CPU dispatch ------------------------------------------------------ */
/* x86-64: scalar < avx2 < avx512 < avx512-bf16 < avx512-amx; aarch64: scalar < neon < neon-bf16.
 * Each level allows the kernels of the levels below it; avx512 is AVX-512F without
 * the AVX512_BF16 kernels. Only the current architecture's names are ever
 * supported (kl_isa_supported). */
typedef enum kl_isa {
  KL_ISA_SCALAR = 0,
  KL_ISA_AVX2 = 1,
  KL_ISA_AVX512 = 2,
  KL_ISA_NEON = 3,
  KL_ISA_NEON_BF16 = 4, /* NEON + BFDOT (FEAT_BF16) */
  KL_ISA_AVX512_BF16 = 5, /* AVX-512F + AVX512_BF16 (vdpbf16ps) */
  KL_ISA_AVX512_AMX = 6,  /* avx512-bf16 + AMX-BF16 (tdpbf16ps) for the bfloat16 input projection */
} kl_isa;
#define KL_ISA_COUNT 7 /* names are kl_isa_name(0 .. KL_ISA_COUNT-1) */

kl_isa kl_isa_detected(void);  /* best ISA this CPU (and build) supports */
int kl_isa_supported(kl_isa isa); /* 1 if kl_isa_set(isa) would succeed */
kl_isa kl_isa_active(void);    /* the ISA kernels run with */
/* Force an ISA (tests, KOKORO_LSTM_ISA); KL_ERR_ARG if the CPU lacks it.
 * Affects weights packed afterwards (cached weights keep theirs until kl_cache_clear). */
kl_status kl_isa_set(kl_isa isa);
const char* kl_isa_name(kl_isa isa);

/* Which BLAS the core was linked against (a static string). */
const char* kl_blas_name(void);

#ifdef __cplusplus
}
#endif
#endif /* KOKORO_LSTM_H */
