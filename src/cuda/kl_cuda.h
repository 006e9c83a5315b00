/* The engine's CUDA backend, as the core sees it (its row of backend.c): validated
 * calls on kDLCUDA tensors; and the noise and convolution kernels, which the fronts
 * call directly (kl_tvm_random.c, kl_tvm_dense.c, the Python binding). Everything
 * CUDA is found at run time (module.c); a build without CUDA still has these
 * functions, which then fail with a message naming what is missing. */
#ifndef KL_CUDA_H
#define KL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "call.h"

/* Runs the call on its stream (asynchronously); on failure sets the error. */
kl_status kl_cuda_lstm_forward(const kl_call* c);
/* Copies count int64 from device memory to dst on the stream and waits for them
 * (lengths on the device: they shape the launches). Not while the stream is captured. */
kl_status kl_cuda_read_int64(int device_id, void* stream, const int64_t* src, size_t count, int64_t* dst);
/* 1 while the stream is being captured into a CUDA graph, else 0 (errors too). */
int kl_cuda_stream_capturing(int device_id, void* stream);
/* Elements 0..n-1 of the draw (*seed, stream) of dist (src/ops/random.h, the same
 * bits as kl_f32_random) into y on device_id, on the stream (asynchronously): seed is
 * one int64 in that device's memory, read by the kernel when it runs. The first call
 * on a device builds the kernel; later ones allocate nothing and do not synchronize,
 * so they can be captured in a CUDA graph (a replay draws with the seed's value then). */
kl_status kl_cuda_random(int dist, const int64_t* seed, uint64_t stream, int64_t n, float* y, int device_id,
                         void* cu_stream);
/* Writes splitmix64's finalizer of (base + this device's call count, advanced by the
 * kernel) into one int64 at out on device_id, on the stream: a new seed per call and
 * per replay of a graph that captured it; allocates nothing after a device's first. */
kl_status kl_cuda_fresh_seed(uint64_t base, int64_t* out, int device_id, void* cu_stream);
/* y = conv1d(x, w) (+ bias), or conv_transpose1d when transpose (dilation 1), of
 * arguments checked by kl_conv1d_check / kl_conv1d_transpose_check (src/ops/dense.h)
 * whose tensors are on device_id, w unpacked; on the stream (asynchronously). The
 * first call on a device builds the kernels; later ones allocate nothing and do not
 * synchronize, so they can be captured in a CUDA graph. */
struct kl_conv1d_args;
kl_status kl_cuda_conv1d(const struct kl_conv1d_args* a, int transpose, int device_id, void* cu_stream);
/* c [M, N] = a [M, K] w [N, K]^T (+ bias [N]) on device_id, all compact, on the stream
 * as kl_cuda_conv1d (the same kernel, float32 by 3xTF32). */
kl_status kl_cuda_matmul(int64_t M, int64_t N, int64_t K, const float* a, const float* w, const float* bias,
                         float* c, int device_id, void* cu_stream);
/* Frees the work buffers of every device. */
void kl_cuda_clear(void);

#endif /* KL_CUDA_H */
