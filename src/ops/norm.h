/* Instance normalization (norm.c), with Kokoro's AdaIN fused:
 *   y[n, c, :] = scale[n, c] * ((x[n, c, :] - mean) / sqrt(var + eps) * weight[c] + bias[c])
 *                + shift[n, c]
 * optionally followed by Kokoro's Snake, y + snake_c[c] * sin(snake_a[c] * y)^2 (the
 * f32-vsnake kernels). mean and the biased var over the row x[n, c, :], computed in two passes in double
 * (the mean, then the squares of the differences from it), so a constant row gives
 * var 0 and a normalized 0 exactly (never the NaN of E[x^2] - E[x]^2 < 0), and a row
 * holding a NaN gives NaN. Each row is one task of the engine's pool, done whole by
 * one thread in a fixed order: results do not depend on num_threads. */
#ifndef KL_NORM_H
#define KL_NORM_H

#include <stdint.h>

#include "kokoro_lstm.h"

typedef struct kl_instance_norm_args {
  int64_t batch, channels, length;
  const float* x;                /* [batch, channels, length] compact */
  const float *weight, *bias;    /* channels values each, or NULL (1 and 0) */
  const float *scale, *shift;    /* NULL (1 and 0), or channels values (shared by the
                                  * batch) or batch * channels values, [n][c] */
  int scale_per_batch, shift_per_batch; /* 1: batch * channels values */
  const float *snake_a, *snake_c; /* NULL, or channels values each (Snake after the norm) */
  double eps;                    /* >= 0 */
  float* y;                      /* like x; may be x */
  int num_threads;               /* >= 1, or 0 for kl_get_num_threads() */
} kl_instance_norm_args;

kl_status kl_f32_instance_norm(const kl_instance_norm_args* args);

/* The tensors and config of a call, checked before it touches memory (norm.c): x
 * [N, C, ...] float32 CPU compact; each parameter (NULL: not given) C values, scale
 * and shift also N * C; y x's shape, x itself or disjoint from every input; snake_a
 * and snake_c both or neither; eps >= 0. Fills *out; KL_ERR_ARG with the argument
 * named in kl_last_error(). */
kl_status kl_instance_norm_check(double eps, int64_t num_threads, const DLTensor* x,
                                 const DLTensor* weight, const DLTensor* bias, const DLTensor* scale,
                                 const DLTensor* shift, const DLTensor* snake_a,
                                 const DLTensor* snake_c, const DLTensor* y,
                                 kl_instance_norm_args* out);

#endif
