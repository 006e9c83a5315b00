/* What the dense operators' files share (dense_common.c, phases.c): the kernels
 * chosen once, a blocked transpose, the convolutions' argument checks and the
 * convolutions computed in phases of panel GEMMs. Internal to src/ops. */
#ifndef KL_DENSE_INTERNAL_H
#define KL_DENSE_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "check.h"
#include "dense.h"
#include "internal.h"

static inline int64_t kl_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The kernels of the active ISA level, each level's picked once per process (a
 * table filled on first use, thread-safe; kl_isa_set, a test hook, takes effect at
 * an operator's next call). */
typedef struct kl_dense_kernels {
  kl_f32_pgemm_ukernel_fn pgemm;
  kl_f32_vunary_fn gelu, softmax;
} kl_dense_kernels;
kl_dense_kernels kl_dense_kernels_active(void);

/* The most rows of A one task of the panel kernels takes (matmul's B in panels,
 * the phases of a convolution). */
#define KL_PGEMM_MC 240

/* dst[j * ldd + i] = src[i * lds + j] for i < m, j < n. */
void kl_dense_transpose(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t m, int64_t n);

/* ---- argument checks ---------------------------------------------------------------- */
/* The tensors' float data. */
static inline const float* kl_cdata(const kl_view* v) { return (const float*)v->data; }
static inline float* kl_wdata(const kl_view* v) { return (float*)v->data; }

/* A config length (stride, padding, dilation, kernel size) in lo..KL_CONV_MAX_LEN. */
kl_status kl_conv_len(const char* name, int64_t v, int64_t lo);
/* A convolution config's common values: w_panels (NULL: the operator has none) 0 or
 * 1, stride and dilation >= 1, pad_l and pad_r (NULL: none) >= 0, num_threads into *nth. */
kl_status kl_conv_config(const int64_t* w_panels, int64_t stride, int64_t dilation, int64_t pad_l,
                         const int64_t* pad_r, int64_t num_threads, int* nth);
/* A transposed convolution's last input step i * stride + (ksize - 1) * dilation fits int64. */
kl_status kl_conv_reach(int64_t win, int64_t stride, int64_t ksize, int64_t dilation);
/* n1 * n2 * n3 * n4 floats fit int64 bytes, or a message naming what it is the size of. */
kl_status kl_scratch_size(const char* what, int64_t n1, int64_t n2, int64_t n3, int64_t n4);
/* x, w, y (3-D, compact) and bias (any compact tensor, NULL: none), all on x's
 * device (the CPU or a CUDA device), y's batch x's; outputs disjoint from inputs. */
kl_status kl_conv_tensors(const DLTensor* xt, const DLTensor* wt, const DLTensor* bt,
                          const DLTensor* yt, kl_view* x, kl_view* w, kl_view* b, kl_view* y);
/* KL_OK when x is a CPU tensor (or NULL, which the check reports), else the error:
 * the convolutions' CPU kernels (kl_tvm_dense.c runs CUDA tensors on src/cuda). */
kl_status kl_conv_cpu(const DLTensor* xt);
/* The data of a checked convolution's tensors, for its arguments (bias NULL: not given). */
void kl_conv_data(const kl_view* x, const kl_view* w, const kl_view* bias, const kl_view* y,
                  const float** xp, const float** wp, const float** bp, float** yp);

/* ---- convolutions as phases of panel GEMMs (phases.c) ------------------------------
 * When the im2col rows of a convolution's outputs are not evenly spaced rows of
 * the time-major input, its outputs are split into phases in which they are:
 * phase g's outputs t = t0[g] + tstep * i, i < m[g], output i being rows i .. of
 * the time-major input xt_g (rows lda apart, overlapping) times g's panels.
 * A transposed convolution of stride s has s phases (one per output t mod s,
 * each a plain correlation over its own taps) on one xt; a dilated one (stride
 * 1, dilation d) has d phases sharing one set of panels, each on its own xt_g
 * (every d-th input step). A task takes one block of rows i (the same block in
 * every phase: one window of the output) and a run of panels, and for each panel
 * computes every phase's tile in L1 and stores it to y's rows with stride
 * tstep: the lines of one output window are completed by one task, in its cache. */
/* xt_g for g < nph, per batch element: rows u < rows of cin floats (a phase's
 * rows at xt + (b * nph + g) * rows * cin), row u holding x[.., g + step * u - off],
 * zeros where that step is outside [0, win). */
typedef struct kl_gx_job {
  const float* x;
  int64_t batch, cin, win, nph, rows, step, off;
  float* xt;
} kl_gx_job;

/* Runs the convolution a (its batch, ksize, cin, cout, wout, bias and y) in nph
 * phases of output stride nph over the rows of gx (built here, its fields but xt
 * given), phase g on gx's xt_g when gx has one per phase, else every phase on its
 * one xt; w: panels of ksize * cin rows. tab holds the per-phase tables a_off, m,
 * t0, kred and w_off in turn, nph values each. */
kl_status kl_ph_convolve(const kl_conv1d_args* a, kl_gx_job* gx, int64_t nph, const float* w,
                         const int64_t* tab, int nth);

#endif
