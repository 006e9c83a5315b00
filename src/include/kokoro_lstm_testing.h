/*
 * kokoro_lstm's test hooks, probes and tuning setters: for the project's own
 * tests, benchmarks and Python binding. Not a stable API; the product is
 * kokoro_lstm.h.
 */
#ifndef KOKORO_LSTM_TESTING_H
#define KOKORO_LSTM_TESTING_H

#include <stddef.h>
#include <stdint.h>

#include "kokoro_lstm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Test hook: called after packing, before the entry is cached (a write injected
 * here must be detected by the next call). NULL to remove. */
void kl_cache_set_pack_hook(void (*hook)(void* ctx), void* ctx);
/* KOKORO_LSTM_CACHE_MB as the weight cache reads it: MiB in 0..2^40; -1 when
 * unset or blank, -2 when set to something the cache ignores (it keeps its default). */
long long kl_cache_env_mb(void);
/* Test hook: called on a miss of untrusted weights after their bytes were read
 * for the fingerprint and before they are packed (a write injected here must
 * not reach a cached packing unseen). NULL to remove. */
void kl_cache_set_fingerprint_hook(void (*hook)(void* ctx), void* ctx);

/* 1 if an input with these element strides (feature stride 1) can be read in
 * place by kl_lstm_forward, i.e. its (t, b) rows form one strided sequence with a
 * row stride >= input_size; 0 if it must be copied first. */
int kl_input_layout_ok(int64_t T, int64_t B, int64_t x_st, int64_t x_sb, int64_t input_size);

/* Which pool ran what (kokoro_lstm.h, kl_pool_set_caller): kl_pool_openmp:
 * libgomp's path, or NULL when it is not used; kl_pool_jobs: the parallel jobs
 * each pool has run in this process. */
const char* kl_pool_openmp(void);
void kl_pool_jobs(long* own, long* openmp, long* tvm);

/* 1 if the active ISA level uses the AVX512_BF16 kernels (dtype bfloat16). */
int kl_cpu_has_avx512bf16(void);
/* float32 input projections of large calls (T * B >= 1024 rows) as six
 * bfloat16 products on AMX tiles (as accurate as float32, other bits). Off
 * unless KOKORO_LSTM_F32_AMX=1 or kl_f32_amx_set(1): it pays only where AMX
 * outruns float32 FMA by about 6x. Takes effect at the level avx512-amx, for
 * weights packed afterwards. */
void kl_f32_amx_set(int on);
int kl_f32_amx_enabled(void);
/* float16 weights on AVX-512, a single batch row: 1 when its halves are widened
 * 8 per instruction instead of 16 (same bits). Decided once per process by timing
 * both, or by KOKORO_LSTM_F16_WIDEN=256 / 512; _set overrides it
 * (tests). */
int kl_f16_narrow_rows(void);
void kl_f16_narrow_rows_set(int on);

/* Vector activations of the active ISA over n floats, for accuracy tests:
 * kind 0 = sigmoid, 1 = tanh. */
void kl_f32_activation(int kind, size_t n, const float* x, float* y);

/* Machine-limit probes (benchmarks): best seconds over reps of an
 * [M,K]x[K,N] sgemm run like the engine's input projection on nth threads,
 * and of one read of an nbytes buffer that is already in cache. */
double kl_bench_sgemm(int M, int N, int K, int nth, int reps);
double kl_bench_stream(size_t nbytes, int reps);
/* Best seconds of the weight cache's staleness check over nbytes on nth threads. */
double kl_bench_fingerprint(size_t nbytes, int nth, int reps);

/* Compiles the CUDA kernels for arch ("sm_80", "sm_90a", "compute_90", ...)
 * without a GPU, in the configurations the engine uses (tests, CI): KL_OK, or
 * KL_ERR_DEVICE with NVRTC's message (or why it is missing) in kl_last_error(). */
kl_status kl_cuda_compile_check(const char* arch);

#ifdef __cplusplus
}
#endif
#endif /* KOKORO_LSTM_TESTING_H */
