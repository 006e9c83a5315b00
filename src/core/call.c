/* kl_call_make: a kl_lstm_forward call's DLPack tensors validated once, here, with
 * messages that name the argument, into the kl_call every backend runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "internal.h"

/* The device of this call's tensors (x's), lengths excepted. */
static _Thread_local DLDevice g_dev;

static const char* dtype_name(DLDataType t) {
  if (t.lanes != 1) return "a vector type";
  if (t.code == kDLFloat && t.bits == 32) return "float32";
  if (t.code == kDLFloat && t.bits == 64) return "float64";
  if (t.code == kDLFloat && t.bits == 16) return "float16";
  if (t.code == kDLBfloat && t.bits == 16) return "bfloat16";
  if (t.code == kDLInt && t.bits == 64) return "int64";
  if (t.code == kDLInt && t.bits == 32) return "int32";
  return "another dtype";
}

static const char* device_name(DLDevice d) {
  return d.device_type == kDLCPU ? "cpu" : d.device_type == kDLCUDA ? "cuda" : "an unsupported device";
}

/* Element stride of dim i (compact row-major when strides is NULL). */
static int64_t stride_of(const DLTensor* t, int i) {
  if (t->strides) return t->strides[i];
  int64_t s = 1;
  for (int j = t->ndim - 1; j > i; j--) s *= t->shape[j];
  return s;
}

static const void* data_of(const DLTensor* t) { return (const char*)t->data + t->byte_offset; }

/* "(a, b, c)" of ndim sizes ("(a,)" for one). */
static void shape_str(int ndim, const int64_t* shape, char* buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (k < n) snprintf(buf + k, n - k, ndim == 1 ? ",)" : ")");
}

/* Checks device (dev), dtype, rank and shape (-1 = any). */
static kl_status check_tensor_on(const DLTensor* t, const char* name, DLDataType want, int ndim,
                                 const int64_t* shape, DLDevice dev) {
  if (!t) return kl_fail("%s is missing (NULL)", name);
  if (t->ndim < 0 || t->ndim > 32 || (t->ndim > 0 && !t->shape))
    return kl_fail("%s is not a valid DLTensor (ndim %d, shape %s)", name, (int)t->ndim,
                t->shape ? "given" : "NULL");
  int64_t numel = 1;
  for (int i = 0; i < t->ndim; i++) numel *= t->shape[i] > 0 ? t->shape[i] : 0;
  if (!t->data && numel > 0) return kl_fail("%s has no data (NULL)", name);
  /* a CPU tensor of any device id is host memory (TVM's cpu(1) is cpu(0)'s) */
  if (t->device.device_type != dev.device_type ||
      (dev.device_type != kDLCPU && t->device.device_id != dev.device_id))
    return kl_fail("%s is on %s:%d but x is on %s:%d: every tensor of a call must be on one device "
                "(lengths: the CPU or x's GPU)", name, device_name(t->device), (int)t->device.device_id,
                device_name(g_dev), (int)g_dev.device_id);
  if (t->dtype.code != want.code || t->dtype.bits != want.bits || t->dtype.lanes != 1)
    return kl_fail("%s must have dtype %s, got %s", name, dtype_name(want), dtype_name(t->dtype));
  char got[96], exp[96];
  shape_str(t->ndim, t->shape, got, sizeof(got));
  if (t->ndim != ndim) { /* with every size known, the message states the whole shape */
    int known = 1;
    for (int i = 0; i < ndim; i++) known &= shape[i] >= 0;
    if (!known) return kl_fail("%s must be %d-D, got shape %s", name, ndim, got);
    shape_str(ndim, shape, exp, sizeof(exp));
    return kl_fail("%s must be %d-D, got shape %s: expected %s", name, ndim, got, exp);
  }
  for (int i = 0; i < ndim; i++)
    if (shape[i] >= 0 && t->shape[i] != shape[i]) {
      shape_str(ndim, shape, exp, sizeof(exp));
      return kl_fail("%s must have shape %s, got %s", name, exp, got);
    }
  return KL_OK;
}

/* check_tensor_on the call's device. */
static kl_status check_tensor(const DLTensor* t, const char* name, DLDataType want, int ndim,
                              const int64_t* shape) {
  return check_tensor_on(t, name, want, ndim, shape, g_dev);
}

/* A matrix readable as rows: feature stride 1, row stride >= cols. */
static kl_status check_rows(const DLTensor* t, const char* name, int64_t* ld) {
  const int64_t s0 = stride_of(t, 0), s1 = stride_of(t, 1);
  if ((t->shape[1] > 1 && s1 != 1) || (t->shape[0] > 1 && s0 < t->shape[1]) || s0 > INT32_MAX)
    return kl_fail("%s: rows must have unit element stride and a row stride >= %lld (got strides "
                "(%lld, %lld)); pass a contiguous tensor",
                name, (long long)t->shape[1], (long long)s0, (long long)s1);
  *ld = t->shape[0] > 1 ? s0 : t->shape[1];
  return KL_OK;
}

static int is_compact(const DLTensor* t) {
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] == 0) return 1; /* empty: nothing is read or written */
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && stride_of(t, i) != s) return 0;
    s *= t->shape[i];
  }
  return 1;
}

static kl_status check_compact(const DLTensor* t, const char* name) {
  return is_compact(t) ? KL_OK : kl_fail("%s must be contiguous (row-major)", name);
}

/* y's (time, batch) rows of `row` elements must not overlap one another: both
 * strides positive (where the size exceeds 1), the smaller at least a row, the
 * larger at least the smaller's whole extent. */
static kl_status check_y_rows(const DLTensor* y, int64_t row) {
  int64_t n[2] = {y->shape[0], y->shape[1]}, s[2] = {stride_of(y, 0), stride_of(y, 1)};
  for (int i = 0; i < 2; i++)
    if (n[i] > 1 && s[i] < 1)
      return kl_fail("y: the strides of its first two dimensions must be positive, got (%lld, %lld)",
                  (long long)s[0], (long long)s[1]);
  if (n[0] <= 1 || n[1] <= 1) { /* one moving dimension (or none) */
    const int i = n[0] > 1 ? 0 : 1;
    if (n[i] > 1 && s[i] < row)
      return kl_fail("y: its rows overlap (stride %lld < %lld features)", (long long)s[i], (long long)row);
    return KL_OK;
  }
  const int sm = s[0] <= s[1] ? 0 : 1, bg = 1 - sm;
  if (s[sm] < row || s[bg] < n[sm] * s[sm])
    return kl_fail("y: its rows overlap (strides (%lld, %lld) for shape (%lld, %lld, %lld)); pass a "
                "contiguous tensor", (long long)s[0], (long long)s[1], (long long)y->shape[0],
                (long long)y->shape[1], (long long)y->shape[2]);
  return KL_OK;
}

/* Outputs may not share memory with each other or with any input: y's zeros
 * past a length are written before layer 0 reads x, and every output is written
 * while the inputs may still be read. */
static kl_status check_no_overlap(const kl_forward_args* a, int64_t esz) {
  const DLTensor* out[3] = {a->y, a->h_n, a->c_n};
  static const char* const out_name[3] = {"y", "h_n", "c_n"};
  const DLTensor* in[5] = {a->x, a->h0, a->c0, a->lengths, a->gate_bias};
  static const char* const in_name[5] = {"x", "h0", "c0", "lengths", "gate_bias"};
  uintptr_t lo[3], hi[3], l2, h2;
  int have[3];
  for (int i = 0; i < 3; i++) have[i] = out[i] && kl_dl_extent(out[i], esz, &lo[i], &hi[i]);
  for (int i = 0; i < 3; i++) {
    if (!have[i]) continue;
    for (int j = i + 1; j < 3; j++)
      if (have[j] && lo[i] < hi[j] && lo[j] < hi[i])
        return kl_fail("%s and %s overlap in memory: outputs must not overlap each other or the inputs",
                    out_name[i], out_name[j]);
    for (int j = 0; j < 5; j++)
      if (in[j] && kl_dl_extent(in[j], j == 3 ? 8 : esz, &l2, &h2) && lo[i] < h2 && l2 < hi[i])
        return kl_fail("%s and %s overlap in memory: outputs must not overlap each other or the inputs",
                    out_name[i], in_name[j]);
    for (int j = 0; j < a->num_weights; j++)
      if (kl_dl_extent(a->weights[j], esz, &l2, &h2) && lo[i] < h2 && l2 < hi[i])
        return kl_fail("%s and weights[%d] overlap in memory: outputs must not overlap each other or "
                    "the inputs", out_name[i], j);
  }
  return KL_OK;
}

static const char* const W_NAMES[5] = {"w_ih", "w_hh", "b_ih", "b_hh", "w_hr"};

int kl_call_weight_index(const kl_forward_args* a, int g, int j) {
  const int per = 2 + 2 * a->has_bias + (a->proj_size > 0);
  if ((j == 2 || j == 3) && !a->has_bias) return -1;
  if (j == 4 && !a->proj_size) return -1;
  return g * per + (j == 4 && !a->has_bias ? 2 : j);
}

/* The scalar arguments, before any tensor is read. */
static kl_status check_args(const kl_forward_args* a) {
  if (a->num_layers < 1) return kl_fail("num_layers must be >= 1, got %d", a->num_layers);
  if (a->bidirectional != 0 && a->bidirectional != 1)
    return kl_fail("bidirectional must be 0 or 1, got %d", a->bidirectional);
  if (a->reverse && a->bidirectional) return kl_fail("reverse is only for a unidirectional LSTM");
  if (a->has_bias != 0 && a->has_bias != 1) return kl_fail("has_bias must be 0 or 1");
  if (a->dtype < KL_F32 || a->dtype > KL_F16) return kl_fail("unknown dtype %d", (int)a->dtype);
  if (a->num_threads < 0) return kl_fail("num_threads must be >= 1 (or 0 for the default), got %d", a->num_threads);
  if (a->proj_size < 0) return kl_fail("proj_size must be >= 0, got %d", a->proj_size);
  if (a->x_gates != 0 && a->x_gates != 1) return kl_fail("x_gates must be 0 or 1, got %d", a->x_gates);
  if (a->num_layers > 65536) return kl_fail("num_layers must be at most 65536, got %d", a->num_layers);
  const int L = a->num_layers, D = a->bidirectional ? 2 : 1;
  const int per = 2 + 2 * a->has_bias + (a->proj_size > 0);
  if (!a->weights || a->num_weights != L * D * per)
    return kl_fail("expected %d weight tensors (%d layer(s) x %d direction(s) x %d), got %d", L * D * per,
                L, D, per, a->weights ? a->num_weights : 0);
  return KL_OK;
}

/* Every weight tensor of the (layer, direction) groups [0, L*D), against the
 * shapes that layer 0's w_ih set; w[g]: where group g's tensors lie. */
static kl_status check_weights(const kl_forward_args* a, DLDataType io, int64_t I, int64_t H,
                               int64_t R, kl_wsrc* w) {
  const int D = a->bidirectional ? 2 : 1, P = a->proj_size;
  kl_status s;
  for (int g = 0; g < a->num_layers * D; g++) {
    const int layer = g / D, dir = g % D;
    const int64_t in = layer == 0 ? I : D * R;
    const int64_t shapes[5][2] = {{4 * H, in}, {4 * H, R}, {4 * H, -1}, {4 * H, -1}, {P, H}};
    const void* ptr[5] = {NULL, NULL, NULL, NULL, NULL};
    int64_t lds[5] = {0, 0, 0, 0, 0};
    for (int j = 0; j < 5; j++) {
      const int idx = kl_call_weight_index(a, g, j);
      if (idx < 0) continue;
      const DLTensor* t = a->weights[idx];
      char name[80];
      snprintf(name, sizeof(name), "weights[%d] (%s of layer %d%s)", idx, W_NAMES[j], layer,
               dir ? ", reverse" : "");
      const int nd = j == 2 || j == 3 ? 1 : 2;
      if ((s = check_tensor(t, name, io, nd, shapes[j]))) return s;
      if (nd == 2) {
        if ((s = check_rows(t, name, &lds[j]))) return s;
      } else {
        lds[j] = stride_of(t, 0);
        if (lds[j] < 1) return kl_fail("%s: needs a positive stride, got %lld", name, (long long)lds[j]);
      }
      ptr[j] = data_of(t);
    }
    w[g] = (kl_wsrc){ptr[0], ptr[1], ptr[2], ptr[3], ptr[4], lds[0], lds[1], lds[4],
                     a->has_bias ? lds[2] : 1, a->has_bias ? lds[3] : 1};
  }
  return KL_OK;
}

/* lengths shape the launches: read into c->lengths, host memory (from x's GPU: a
 * synchronization), or, on a GPU stream being captured, left there (c->lengths_dev). */
static kl_status read_lengths(const kl_forward_args* a, const kl_backend* be, int64_t T, int64_t B,
                              kl_call* c) {
  const DLDevice ldev = a->lengths->device;
  const int on_gpu = be->read_int64 && ldev.device_type == g_dev.device_type && ldev.device_id == g_dev.device_id;
  kl_status s;
  if ((s = check_tensor_on(a->lengths, "lengths", (DLDataType){kDLInt, 64, 1}, 1, (const int64_t[]){B},
                           on_gpu ? g_dev : (DLDevice){kDLCPU, 0})))
    return s;
  const int64_t ls = stride_of(a->lengths, 0);
  if (on_gpu && ls < 0) return kl_fail("lengths on the GPU: negative strides are not supported");
  if (on_gpu && be->capturing(g_dev.device_id, a->stream)) {
    c->lengths_dev = data_of(a->lengths);
    c->lengths_st = ls;
    return KL_OK;
  }
  const size_t span = B > 0 ? (size_t)((B - 1) * ls + 1) : 1;
  int64_t* len = malloc((on_gpu ? span : (size_t)(B ? B : 1)) * sizeof(int64_t));
  c->lengths = len;
  if (!len) return KL_ERR_NOMEM;
  if (on_gpu && B > 0) {
    if ((s = be->read_int64(g_dev.device_id, a->stream, data_of(a->lengths), span, len))) return s;
    for (int64_t b = 1; b < B; b++) len[b] = len[b * ls];
  }
  for (int64_t b = 0; b < B; b++) {
    if (!on_gpu) len[b] = ((const int64_t*)data_of(a->lengths))[b * ls];
    if (len[b] < 1 || len[b] > T)
      return kl_fail("lengths[%lld] = %lld is outside 1..%lld (the sequence length)", (long long)b,
                  (long long)len[b], (long long)T);
  }
  return KL_OK;
}

/* States, lengths (read_lengths) and outputs. */
static kl_status check_io(const kl_forward_args* a, const kl_backend* be, DLDataType io, int64_t esz,
                          int64_t T, int64_t B, int64_t H, int64_t R, kl_call* c) {
  const int D = a->bidirectional ? 2 : 1, bf = a->batch_first != 0;
  const int64_t LD = (int64_t)a->num_layers * D;
  const int64_t s_h[3] = {LD, B, R}, s_c[3] = {LD, B, H};
  const int64_t s_y[3] = {bf ? B : T, bf ? T : B, D * R};
  kl_status s;
  if (a->h0 && ((s = check_tensor(a->h0, "h0", io, 3, s_h)) || (s = check_compact(a->h0, "h0")))) return s;
  if (a->c0 && ((s = check_tensor(a->c0, "c0", io, 3, s_c)) || (s = check_compact(a->c0, "c0")))) return s;
  if ((s = check_tensor(a->y, "y", io, 3, s_y))) return s;
  if (B > 0 && D * R > 1 && stride_of(a->y, 2) != 1) return kl_fail("y: the feature axis must have stride 1");
  if (a->h_n && ((s = check_tensor(a->h_n, "h_n", io, 3, s_h)) || (s = check_compact(a->h_n, "h_n")))) return s;
  if (a->c_n && ((s = check_tensor(a->c_n, "c_n", io, 3, s_c)) || (s = check_compact(a->c_n, "c_n")))) return s;
  if (a->gate_bias && ((s = check_tensor(a->gate_bias, "gate_bias", io, 3, (const int64_t[]){D, B, 4 * H})) ||
                       (s = check_compact(a->gate_bias, "gate_bias"))))
    return s;
  if (a->lengths && (s = read_lengths(a, be, T, B, c))) return s;
  if (B > 0 && (s = check_y_rows(a->y, D * R))) return s;
  return check_no_overlap(a, esz);
}

/* x: [T, B, I] or [B, T, I]; with x_gates, [T, B, D*4H] or [B, T, D*4H]. */
static kl_status check_x(const kl_forward_args* a, DLDataType io, kl_call* c) {
  const int64_t any3[3] = {-1, -1, -1};
  const char* xname = a->x_gates ? "x (layer 0's gates, x_gates)" : "x";
  kl_status s;
  if ((s = check_tensor(a->x, xname, io, 3, any3))) return s;
  const int bf = a->batch_first != 0;
  const int64_t T = a->x->shape[bf ? 1 : 0], B = a->x->shape[bf ? 0 : 1], IX = a->x->shape[2];
  if (T < 1) return kl_fail("%s: the sequence length must be >= 1, got %lld", xname, (long long)T);
  if (IX < 1 || IX > INT32_MAX)
    return kl_fail("%s: the feature size must be in 1..2^31-1, got %lld", xname, (long long)IX);
  const int64_t x_st = stride_of(a->x, bf ? 1 : 0), x_sb = stride_of(a->x, bf ? 0 : 1);
  if (B > 0 && ((IX > 1 && stride_of(a->x, 2) != 1) || !kl_input_layout_ok(T, B, x_st, x_sb, IX)))
    return kl_fail("%s: this layout cannot be read in place (the feature axis must have stride 1 and "
                   "the (time, batch) rows one common stride); pass a contiguous tensor", xname);
  c->T = T, c->B = B, c->x = data_of(a->x), c->x_st = x_st, c->x_sb = x_sb;
  return KL_OK;
}

/* Layer 0's w_ih gives hidden_size and input_size (with x_gates, x's features are
 * checked against them). */
static kl_status check_w_ih0(const kl_forward_args* a, DLDataType io, kl_call* c) {
  const char* xname = a->x_gates ? "x (layer 0's gates, x_gates)" : "x";
  const int64_t IX = a->x->shape[2];
  const DLTensor* w_ih0 = a->weights[0];
  kl_status s;
  if ((s = check_tensor(w_ih0, "weights[0] (w_ih of layer 0)", io, 2, (const int64_t[]){-1, -1}))) return s;
  if (!a->x_gates && w_ih0->shape[1] != IX)
    return kl_fail("weights[0] (w_ih of layer 0) must have shape (-1, %lld), got (%lld, %lld): its columns are "
                   "x's %lld features (input_size)", (long long)IX, (long long)w_ih0->shape[0],
                   (long long)w_ih0->shape[1], (long long)IX);
  if (w_ih0->shape[0] < 4 || w_ih0->shape[0] % 4 || w_ih0->shape[0] / 4 > INT32_MAX)
    return kl_fail("w_ih of layer 0 must have 4*hidden_size rows, got %lld", (long long)w_ih0->shape[0]);
  const int64_t H = w_ih0->shape[0] / 4, I = w_ih0->shape[1];
  if (I < 1 || I > INT32_MAX)
    return kl_fail("w_ih of layer 0: input_size must be in 1..2^31-1, got %lld", (long long)I);
  if (a->x_gates && IX != c->D * 4 * H)
    return kl_fail("%s must have %lld features (num_directions %d x 4 x hidden_size %lld), got %lld", xname,
                   (long long)(c->D * 4 * H), c->D, (long long)H, (long long)IX);
  if (c->P >= H) return kl_fail("proj_size (%d) must be smaller than hidden_size (%lld)", c->P, (long long)H);
  c->H = H, c->input_size = I, c->R = c->P ? c->P : H;
  return KL_OK;
}

static void* data_or_null(const DLTensor* t) { return t ? (char*)t->data + t->byte_offset : NULL; }

kl_status kl_call_make(const kl_forward_args* a, const kl_backend* be, kl_call* c) {
  memset(c, 0, sizeof(*c));
  if (!a) return kl_fail("no arguments");
  g_dev = be->device_type == kDLCPU ? (DLDevice){kDLCPU, 0} : a->x->device;
  kl_status s;
  if ((s = check_args(a))) return s;
  const DLDataType io = {kDLFloat, (uint8_t)(a->dtype == KL_F64 ? 64 : 32), 1};
  const int64_t esz = a->dtype == KL_F64 ? 8 : 4;
  *c = (kl_call){.args = a, .device = g_dev, .stream = a->stream, .L = a->num_layers, .D = a->bidirectional ? 2 : 1,
                 .P = a->proj_size, .reverse = a->reverse != 0, .has_bias = a->has_bias, .x_gates = a->x_gates,
                 .num_threads = a->num_threads, .dtype = a->dtype};
  if ((s = check_x(a, io, c)) || (s = check_w_ih0(a, io, c))) return s;
  if (!(c->w = calloc((size_t)(c->L * c->D), sizeof(kl_wsrc)))) return KL_ERR_NOMEM;
  s = check_weights(a, io, c->input_size, c->H, c->R, c->w);
  if (!s) s = check_io(a, be, io, esz, c->T, c->B, c->H, c->R, c);
  if (s) return s;
  const int bf = a->batch_first != 0;
  c->y = data_or_null(a->y), c->y_st = stride_of(a->y, bf ? 1 : 0), c->y_sb = stride_of(a->y, bf ? 0 : 1);
  c->h0 = data_or_null(a->h0), c->c0 = data_or_null(a->c0);
  c->h_n = data_or_null(a->h_n), c->c_n = data_or_null(a->c_n);
  c->gate_bias = data_or_null(a->gate_bias);
  return KL_OK;
}

void kl_call_free(kl_call* c) {
  free(c->w);
  free((void*)c->lengths);
  c->w = NULL;
  c->lengths = NULL;
}
