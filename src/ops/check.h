/* Argument checks shared by the operators' check functions (check.c; dense.h's
 * kl_<op>_check, norm.h's): they run before an operator touches memory, and a
 * failure is KL_ERR_ARG with a message that names the argument in kl_last_error().
 * Size arithmetic on values a caller chose goes through kl_mul / kl_add, which
 * report int64 overflow instead of wrapping. */
#ifndef KL_CHECK_H
#define KL_CHECK_H

#include <stdint.h>

#include "error.h" /* kl_fail */
#include "kokoro_lstm.h"

/* *out = a * b (a + b); 1 on int64 overflow (then *out is unspecified). */
static inline int kl_mul(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }
static inline int kl_add(int64_t a, int64_t b, int64_t* out) { return __builtin_add_overflow(a, b, out); }

/* A tensor's dimensions, element strides (compact ones filled in) and data. */
#define KL_VIEW_MAXD 8
typedef struct kl_view {
  int ndim;
  int64_t shape[KL_VIEW_MAXD], strides[KL_VIEW_MAXD];
  int64_t numel;
  void* data;
} kl_view;

/* t as a view: a CPU tensor of dtype (code, bits) with ndim_min..ndim_max (at most
 * KL_VIEW_MAXD) dimensions, none negative, whose element count and extent fit int64,
 * with data unless it is empty. */
kl_status kl_view_of(const DLTensor* t, const char* name, int code, int bits, int ndim_min,
                     int ndim_max, kl_view* v);
/* The same for a tensor on any device (only its shape, strides and dtype are read). */
kl_status kl_view_on(const DLTensor* t, const char* name, int code, int bits, int ndim_min,
                     int ndim_max, kl_view* v);
/* kl_view_of for float32. */
kl_status kl_view_f32(const DLTensor* t, const char* name, int ndim_min, int ndim_max, kl_view* v);

/* 1 when v is row-major compact (dims of size 1 may have any stride; an empty view is). */
int kl_view_compact(const kl_view* v);

/* No two elements of output v share memory (a written element is written once):
 * with its dimensions of size > 1 in order of stride, each stride positive and at
 * least the extent of the smaller ones. */
kl_status kl_check_distinct(const kl_view* v, const char* name);

/* No output shares memory with another output or with an input (NULL entries are
 * skipped): an operator writes its outputs while it still reads its inputs. */
kl_status kl_check_disjoint(const DLTensor* const* outs, const char* const* out_names, int nout,
                            const DLTensor* const* ins, const char* const* in_names, int nin);

/* A config flag v in {0, 1}; a count of threads in 0..INT32_MAX (0: the default). */
kl_status kl_check_flag(const char* name, int64_t v);
kl_status kl_check_threads(int64_t v, int* out);

/* The largest stride, padding, dilation or kernel size a convolution's config may
 * give (2^20; models use tens): products of them with the tensors' sizes stay far
 * from int64's range, and a convolution's scratch (x transposed over its padded
 * steps) stays within a few MiB per channel beyond its tensors' own sizes. */
#define KL_CONV_MAX_LEN (1 << 20)
/* The most output phases of a convolution computed in phases (a transposed one's
 * stride, a dilated one's dilation on weights in panels): each has a row of tables. */
#define KL_CONV_MAX_PHASES 65536

#endif
