/* Argument checks shared by the operators (see check.h). */
#include "check.h"

#include <stdio.h>

#include "internal.h"

static const char* dtype_str(int code, int bits, char* buf, size_t n) {
  snprintf(buf, n, "%s%d", code == kDLFloat ? "float" : code == kDLInt ? "int" : "dtype code ?", bits);
  return buf;
}

kl_status kl_view_of(const DLTensor* t, const char* name, int code, int bits, int ndim_min,
                     int ndim_max, kl_view* v) {
  if (t && t->device.device_type != kDLCPU)
    return kl_fail("%s must be a CPU tensor, got device type %d", name, (int)t->device.device_type);
  return kl_view_on(t, name, code, bits, ndim_min, ndim_max, v);
}

kl_status kl_view_on(const DLTensor* t, const char* name, int code, int bits, int ndim_min,
                     int ndim_max, kl_view* v) {
  char want[32];
  if (!t) return kl_fail("%s is missing", name);
  if (t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1)
    return kl_fail("%s must be %s", name, dtype_str(code, bits, want, sizeof(want)));
  if (ndim_max > KL_VIEW_MAXD) ndim_max = KL_VIEW_MAXD;
  if (t->ndim < ndim_min || t->ndim > ndim_max) {
    if (ndim_min == ndim_max)
      return kl_fail("%s must be %d-D, got %d dimensions", name, ndim_min, t->ndim);
    return kl_fail("%s must have %d to %d dimensions, got %d", name, ndim_min, ndim_max, t->ndim);
  }
  v->ndim = t->ndim;
  int64_t compact = 1, lo = 0, hi = 0;
  int ovf = 0;
  for (int i = t->ndim - 1; i >= 0; i--) {
    const int64_t n = t->shape[i];
    if (n < 0) return kl_fail("%s has a negative size %lld in dimension %d", name, (long long)n, i);
    v->shape[i] = n;
    v->strides[i] = t->strides ? t->strides[i] : compact;
    ovf |= kl_mul(compact, n, &compact);
    int64_t span = 0;
    if (n > 1) ovf |= kl_mul(n - 1, v->strides[i], &span);
    ovf |= span < 0 ? kl_add(lo, span, &lo) : kl_add(hi, span, &hi);
  }
  int64_t bytes;
  if (ovf || __builtin_sub_overflow(hi, lo, &bytes) || kl_add(bytes, 1, &bytes) ||
      kl_mul(bytes, bits / 8 > 0 ? bits / 8 : 1, &bytes))
    return kl_fail("%s: its sizes and strides overflow 64-bit offsets", name);
  v->numel = compact;
  if (compact == 0) { /* nothing is read or written: strides as if compact (DLPack may give 0s) */
    int64_t st = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
      v->strides[i] = st;
      if (v->shape[i] > 1 && kl_mul(st, v->shape[i], &st)) st = 1;
    }
  }
  v->data = (char*)t->data + t->byte_offset;
  if (!t->data && compact > 0) return kl_fail("%s has no data (NULL)", name);
  return KL_OK;
}

kl_status kl_view_f32(const DLTensor* t, const char* name, int ndim_min, int ndim_max, kl_view* v) {
  return kl_view_of(t, name, kDLFloat, 32, ndim_min, ndim_max, v);
}

int kl_view_compact(const kl_view* v) {
  if (v->numel == 0) return 1;
  int64_t st = 1;
  for (int i = v->ndim - 1; i >= 0; i--) {
    if (v->shape[i] != 1 && v->strides[i] != st) return 0;
    st *= v->shape[i];
  }
  return 1;
}

kl_status kl_check_distinct(const kl_view* v, const char* name) {
  if (v->numel <= 1) return KL_OK;
  int idx[KL_VIEW_MAXD], n = 0;
  for (int i = 0; i < v->ndim; i++) {
    if (v->shape[i] == 1) continue;
    if (v->strides[i] < 1)
      return kl_fail("%s is an output: its strides must be positive, got %lld in dimension %d", name,
                     (long long)v->strides[i], i);
    int j = n++;
    for (; j > 0 && v->strides[idx[j - 1]] > v->strides[i]; j--) idx[j] = idx[j - 1];
    idx[j] = i;
  }
  int64_t extent = 1; /* elements spanned by the dimensions so far */
  for (int k = 0; k < n; k++) {
    const int i = idx[k];
    if (v->strides[i] < extent)
      return kl_fail("%s is an output: its elements overlap (stride %lld of dimension %d is less "
                     "than the %lld elements of the dimensions inside it)",
                     name, (long long)v->strides[i], i, (long long)extent);
    extent += (v->shape[i] - 1) * v->strides[i]; /* no overflow: kl_view_of bounded it */
  }
  return KL_OK;
}

kl_status kl_check_disjoint(const DLTensor* const* outs, const char* const* out_names, int nout,
                            const DLTensor* const* ins, const char* const* in_names, int nin) {
  for (int i = 0; i < nout; i++) {
    uintptr_t lo, hi, l2, h2;
    if (!outs[i] || !kl_dl_extent(outs[i], (outs[i]->dtype.bits + 7) / 8, &lo, &hi)) continue;
    for (int j = 0; j < nout + nin; j++) {
      const DLTensor* t = j < nout ? outs[j] : ins[j - nout];
      if (j == i || !t || !kl_dl_extent(t, (t->dtype.bits + 7) / 8, &l2, &h2)) continue;
      if (lo < h2 && l2 < hi)
        return kl_fail("%s and %s overlap in memory: an output must not share memory with another "
                       "output or an input", out_names[i], j < nout ? out_names[j] : in_names[j - nout]);
    }
  }
  return KL_OK;
}

kl_status kl_check_flag(const char* name, int64_t v) {
  return v == 0 || v == 1 ? KL_OK : kl_fail("%s must be 0 or 1, got %lld", name, (long long)v);
}

kl_status kl_check_threads(int64_t v, int* out) {
  if (v < 0 || v > INT32_MAX)
    return kl_fail("num_threads must be in 0..%d (0: the default), got %lld", INT32_MAX, (long long)v);
  *out = (int)v;
  return KL_OK;
}
