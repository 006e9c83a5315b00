/* A validated kl_lstm_forward call (call.c), the one description of it that every
 * backend runs: sizes, where each tensor's data lies and with which strides, the
 * lengths in host memory. Strides are in elements. */
#ifndef KL_CALL_H
#define KL_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "kokoro_lstm.h"

/* One (layer, direction)'s weights as found in caller memory: row strides in
 * elements (feature stride 1) for the matrices, an element stride for the biases. */
typedef struct kl_wsrc {
  const void *w_ih, *w_hh, *b_ih, *b_hh, *w_hr;
  int64_t ld_ih, ld_hh, ld_hr, s_bi, s_bh;
} kl_wsrc;

typedef struct kl_call {
  const kl_forward_args* args; /* as given (the CPU's weight cache keys on its tensors) */
  DLDevice device;             /* x's; every tensor's but host lengths */
  void* stream;                /* CUDA: a CUstream of device, NULL the legacy default stream */
  int L, D, P, reverse, has_bias, x_gates, num_threads;
  kl_dtype dtype;
  int64_t T, B, H, R; /* R = proj_size or H */
  int64_t input_size;
  const void* x;         /* x[t, b, i] = x + t*x_st + b*x_sb + i (or layer 0's gates) */
  int64_t x_st, x_sb;
  void* y; /* y[t, b, j] = y + t*y_st + b*y_sb + j */
  int64_t y_st, y_sb;
  const void *h0, *c0; /* [L*D, B, R], [L*D, B, H] contiguous, or NULL */
  void *h_n, *c_n;
  const int64_t* lengths; /* host memory, [B] in 1..T, or NULL */
  /* lengths left on the GPU, lengths_dev[b * lengths_st], when the stream is being
   * captured into a CUDA graph: the kernels read them at every replay (unchecked) */
  const int64_t* lengths_dev;
  int64_t lengths_st;
  const void* gate_bias;  /* [D, B, 4H] contiguous, or NULL */
  kl_wsrc* w;             /* [L * D], index layer * D + direction */
} kl_call;

struct kl_backend;
/* Validates a against the layout rule below and fills c (KL_OK), else a message
 * naming the argument. Lengths on the GPU are read through the backend. An empty
 * batch is KL_OK with c->B == 0 and nothing to run. kl_call_free(c) either way. */
kl_status kl_call_make(const kl_forward_args* a, const struct kl_backend* backend, kl_call* c);
void kl_call_free(kl_call* c);
/* The index in a->weights of (layer, direction) group g's tensor j (w_ih, w_hh,
 * b_ih, b_hh, w_hr), or -1 when the call has none. */
int kl_call_weight_index(const kl_forward_args* a, int g, int j);

/* The layout rule (plan.c): the rows (t, b) of a [T, B, K] tensor with these strides
 * as one strided sequence: row stride ld, row (t, b) = t*gt + b*gb. 0 if they are not one. */
int kl_row_layout(int64_t T, int64_t B, int64_t s_t, int64_t s_b, int64_t K, int64_t* ld, int64_t* gt,
                  int64_t* gb);

#endif /* KL_CALL_H */
