/* tvm-ffi glue of the dense operators (src/ops/dense.h): argument checks and
 * DLTensor unpacking; destination-passing like kokoro_lstm.lstm_forward_v2. Each
 * extern's first argument is its config shape, read by kl_tvm_dense.h's KL_*_CFG_*
 * indices; num_threads 0 there is the process default (kl_get_num_threads).
 *
 * kokoro_lstm.matmul_v1(cfg, A [..., M, K], B [..., K, N] | [..., N, K], [bias [N]], C [..., M, N])
 *   act: 0 none, 1 GELU tanh form on the result (KL_ACT_GELU_TANH).
 *   b_panels 1: B is op(B) packed in 32-column panels, a compact [ceil(N / 32), K, 32]
 *   tensor shared by every batch (see kl_matmul_args; trans_b ignored).
 *   numpy batch broadcasting where each operand's batch is C's or all ones; every
 *   matrix needs unit stride along its rows and batch dims that fold into one stride;
 *   rows may overlap (row stride < K) only in A with b_panels.
 *   bias: N values along its last dimension (any leading ones, any stride).
 * kokoro_lstm.conv1d_v1(cfg, x [N, Cin, W], w [Cout, Cin, K], [bias [Cout]], y [N, Cout, Wout])
 *   w_panels 1: w packed in panels over (tap, channel), a compact
 *   [ceil(Cout / 32), K * Cin, 32] tensor (see kl_conv1d_args); stride or dilation 1.
 * kokoro_lstm.conv1d_transpose_dw_v1(cfg, x [N, C, W], w [C, 1, K], [bias [C]], y [N, C, Wout])
 * kokoro_lstm.conv1d_transpose_v1(cfg, x [N, Cin, W], w [Cin, Cout, K], [bias [Cout]], y [N, Cout, Wout])
 *   groups 1, dilation a divisor of stride; w_panels 1: w packed by output phase, a
 *   compact [ceil(Cout / 32), K * Cin, 32] tensor (kl_f32_conv1d_transpose_pack), K
 *   being the config's ksize.
 * kokoro_lstm.softmax_v1(cfg, x [..., n], y [..., n])
 *   softmax over the last axis; compact tensors.
 * kokoro_lstm.attention_v1(cfg, q, k, v, [mask], o)
 *   softmax(scale * q k^T + mask) v per (batch, head), a fully masked row giving zeros
 *   (see kl_f32_attention); scale is given as its float32 bits. Each of q, k, v, o is
 *   4-D with layout 0: [B, H, rows, D] or 1: [B, rows, H, D] (a linear's output before
 *   its head transpose), unit stride along D; mask: float32 [.., L, S] broadcast to
 *   [B, H, L, S] (2 to 4 dims, each leading one 1 or full), unit stride along S.
 *   conv tensors compact; a conv bias is any compact tensor of Cout (C) values. */
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "dense.h"
#include "kl_tvm_dense.h"

#define MAXD 8

typedef struct view {
  int ndim;
  int64_t shape[MAXD], strides[MAXD];
  float* data;
} view;

int kl_tvm_errf(const char* kind, const char* fn, const char* what) {
  char msg[400];
  snprintf(msg, sizeof(msg), "%s: %s", fn, what);
  return kl_tvm_raise(kind, msg);
}

int kl_tvm_cpu_tensor(const char* fn, const TVMFFIAny* arg, const char* name, int code, int bits,
                      const DLTensor** out) {
  char what[200];
  const DLTensor* t = NULL;
  if (arg->type_index == kTVMFFIDLTensorPtr) t = (const DLTensor*)arg->v_ptr;
  else if (arg->type_index == kTVMFFITensor)
    t = (const DLTensor*)((const char*)arg->v_obj + sizeof(TVMFFIObject));
  if (!t) {
    snprintf(what, sizeof(what), "%s must be a tensor (type index %d)", name, (int)arg->type_index);
    return kl_tvm_errf("TypeError", fn, what);
  }
  if (t->device.device_type != kDLCPU) {
    snprintf(what, sizeof(what), "%s must be a CPU tensor, got device type %d", name,
             (int)t->device.device_type);
    return kl_tvm_errf("ValueError", fn, what);
  }
  if (t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1) {
    snprintf(what, sizeof(what), "%s must be %s%d", name,
             code == kDLFloat ? "float" : code == kDLInt ? "int" : "dtype code ?", bits);
    return kl_tvm_errf("TypeError", fn, what);
  }
  *out = t;
  return 0;
}

int kl_tvm_compact_tensor(const char* fn, const TVMFFIAny* arg, const char* name, int code,
                          int bits, const DLTensor** out, int64_t* n) {
  const DLTensor* t;
  if (kl_tvm_cpu_tensor(fn, arg, name, code, bits, &t)) return -1;
  int64_t count = 1, st = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->strides && t->shape[i] != 1 && t->strides[i] != st) {
      char what[200];
      snprintf(what, sizeof(what), "%s must be compact", name);
      return kl_tvm_errf("ValueError", fn, what);
    }
    st *= t->shape[i];
    count *= t->shape[i];
  }
  *out = t;
  *n = count;
  return 0;
}

static const TVMFFIShapeCell* as_shape(const TVMFFIAny* a) {
  if (a->type_index != kTVMFFIShape) return NULL;
  return (const TVMFFIShapeCell*)((const char*)a->v_obj + sizeof(TVMFFIObject));
}

/* A float32 CPU tensor argument as a view (strides filled in when compact). */
static int get_view(const char* fn, const TVMFFIAny* arg, const char* name, view* v) {
  char what[200];
  const DLTensor* t;
  if (kl_tvm_cpu_tensor(fn, arg, name, kDLFloat, 32, &t)) return -1;
  if (t->ndim < 1 || t->ndim > MAXD) {
    snprintf(what, sizeof(what), "%s must have 1 to %d dimensions, got %d", name, MAXD, t->ndim);
    return kl_tvm_errf("ValueError", fn, what);
  }
  v->ndim = t->ndim;
  int64_t st = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    v->shape[i] = t->shape[i];
    v->strides[i] = t->strides ? t->strides[i] : st;
    st *= t->shape[i];
  }
  v->data = (float*)((char*)t->data + t->byte_offset);
  return 0;
}

static int64_t numel(const view* v) {
  int64_t n = 1;
  for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
  return n;
}

static int is_compact(const view* v) {
  int64_t st = 1;
  for (int i = v->ndim - 1; i >= 0; i--) {
    if (v->shape[i] != 1 && v->strides[i] != st) return 0;
    st *= v->shape[i];
  }
  return 1;
}

/* Batch dims [0, nb) of v, right-aligned against C's batch shape cb[0, ncb):
 * sets *stride to the element stride of the folded batch (0: broadcast).
 * Returns 0, or -1 when v's batch is neither C's nor all ones, or does not fold. */
static int fold_batch(const view* v, int nb, const int64_t* cb, int ncb, int64_t* stride) {
  int64_t n = 1;
  for (int i = 0; i < nb; i++) n *= v->shape[i];
  if (n == 1) {
    *stride = 0;
    return 0;
  }
  if (nb > ncb) return -1;
  for (int i = 0; i < ncb; i++) {
    const int j = i - (ncb - nb);
    const int64_t d = j >= 0 ? v->shape[j] : 1;
    if (d != cb[i]) return -1;
  }
  /* fold: innermost batch dim with size > 1 gives the stride; each outer one
   * must continue it */
  int64_t s = -1, expect = 0;
  for (int i = nb - 1; i >= 0; i--) {
    if (v->shape[i] == 1) continue;
    if (s < 0) {
      s = v->strides[i];
      expect = s * v->shape[i];
    } else {
      if (v->strides[i] != expect) return -1;
      expect *= v->shape[i];
    }
  }
  *stride = s;
  return 0;
}

/* Row stride of the matrix made of the last two dims (rows, cols): the column
 * stride must be 1 (or cols <= 1), else -1; -2 when rows overlap (stride < cols)
 * and overlap is not allowed (only an A read by the panel kernels may: a
 * convolution's time-shifted windows). */
static int64_t row_stride(const view* v, int overlap_ok) {
  const int64_t rows = v->shape[v->ndim - 2], cols = v->shape[v->ndim - 1];
  if (cols > 1 && v->strides[v->ndim - 1] != 1) return -1;
  const int64_t ld = v->strides[v->ndim - 2];
  if (rows <= 1) return cols > 0 ? cols : 1; /* any value >= cols is valid for BLAS */
  if (ld < cols) return overlap_ok && ld >= 1 ? ld : -2;
  return ld;
}

static int status_err(const char* fn, kl_status s) {
  return kl_tvm_errf(s == KL_ERR_NOMEM ? "MemoryError" : s == KL_ERR_ARG ? "ValueError" : "RuntimeError",
              fn, kl_status_str(s));
}

int kl_tvm_config(const char* fn, const TVMFFIAny* args, int32_t nargs, int64_t abi, int nmin,
                  int nmax, const int64_t** cfg, int* ncfg) {
  char what[200];
  const TVMFFIShapeCell* cell = nargs >= 1 ? as_shape(&args[0]) : NULL;
  if (!cell) return kl_tvm_errf("TypeError", fn, "the first argument must be the config shape");
  if ((int)cell->size < nmin || (int)cell->size > nmax || cell->data[0] != abi) {
    snprintf(what, sizeof(what),
             "the module was compiled for calling convention %lld with %zu config values; this "
             "engine implements v%lld with %d%s: recompile the module",
             cell->size ? (long long)cell->data[0] : -1LL, cell->size, (long long)abi, nmin,
             nmax > nmin ? " or more" : "");
    return kl_tvm_errf("RuntimeError", fn, what);
  }
  *cfg = cell->data;
  if (ncfg) *ncfg = (int)cell->size;
  return 0;
}

int kl_tvm_cfg_threads(const char* fn, int64_t v, int* out) {
  if (v < 0 || v > INT32_MAX) {
    char what[120];
    snprintf(what, sizeof(what), "num_threads must be in 0..%d (0: the default), got %lld",
             INT32_MAX, (long long)v);
    return kl_tvm_errf("ValueError", fn, what);
  }
  *out = (int)v;
  return 0;
}

static int check_cfg(const char* fn, const TVMFFIAny* args, int32_t nargs, int ncfg,
                     const int64_t** cfg) {
  return kl_tvm_config(fn, args, nargs, KL_TVM_DENSE_ABI, ncfg, ncfg, cfg, NULL);
}

static int check_nargs(const char* fn, int32_t nargs, int want) {
  if (nargs == want) return 0;
  char what[120];
  snprintf(what, sizeof(what), "expected %d arguments for this config, got %d", want, (int)nargs);
  return kl_tvm_errf("TypeError", fn, what);
}

int kl_tvm_matmul(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  static const char* fn = KL_TVM_MATMUL_NAME;
  char what[300];
  const int64_t* cfg;
  result->type_index = kTVMFFINone;
  int ncfg; /* act and b_panels are optional */
  if (kl_tvm_config(fn, args, nargs, KL_TVM_DENSE_ABI, KL_MATMUL_CFG_NMIN, KL_MATMUL_CFG_N, &cfg, &ncfg)) return -1;
  const int has_bias = cfg[KL_MATMUL_CFG_HAS_BIAS] != 0;
  const int64_t act = ncfg > KL_MATMUL_CFG_ACT ? cfg[KL_MATMUL_CFG_ACT] : 0;
  const int64_t panels = ncfg > KL_MATMUL_CFG_B_PANELS ? cfg[KL_MATMUL_CFG_B_PANELS] : 0;
  const int trans_b = !panels && cfg[KL_MATMUL_CFG_TRANS_B] != 0;
  if (act != KL_ACT_NONE && act != KL_ACT_GELU_TANH)
    return kl_tvm_errf("ValueError", fn, "unknown activation in the config");
  if (panels != 0 && panels != 1) return kl_tvm_errf("ValueError", fn, "unknown B layout in the config");
  if (check_nargs(fn, nargs, 4 + has_bias)) return -1;
  view A, B, C, bias;
  if (get_view(fn, &args[1], "A", &A) || get_view(fn, &args[2], "B", &B) ||
      (has_bias && get_view(fn, &args[3], "bias", &bias)) ||
      get_view(fn, &args[3 + has_bias], "C", &C))
    return -1;
  if (A.ndim < 2 || B.ndim < 2 || C.ndim < 2)
    return kl_tvm_errf("ValueError", fn, "A, B and C must have at least 2 dimensions");
  const int64_t M = A.shape[A.ndim - 2], K = A.shape[A.ndim - 1];
  const int64_t N = panels ? C.shape[C.ndim - 1]
                    : trans_b ? B.shape[B.ndim - 2] : B.shape[B.ndim - 1];
  const int64_t KB = panels ? K : trans_b ? B.shape[B.ndim - 1] : B.shape[B.ndim - 2];
  const int64_t np = (N + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL; /* panels of a packed B */
  if (panels && (B.ndim != 3 || B.shape[0] != np || B.shape[1] != K ||
                 B.shape[2] != KL_DENSE_PANEL || !is_compact(&B))) {
    snprintf(what, sizeof(what),
             "B packed in panels must be a compact [%lld, %lld, %d] tensor for K = %lld, N = %lld",
             (long long)np, (long long)K, KL_DENSE_PANEL, (long long)K, (long long)N);
    return kl_tvm_errf("ValueError", fn, what);
  }
  if (KB != K || C.shape[C.ndim - 2] != M || C.shape[C.ndim - 1] != N) {
    snprintf(what, sizeof(what),
             "shapes do not match: A [..., %lld, %lld], B%s [..., %lld, %lld], C [..., %lld, %lld]",
             (long long)M, (long long)K, trans_b ? "^T" : "", (long long)KB, (long long)N,
             (long long)C.shape[C.ndim - 2], (long long)C.shape[C.ndim - 1]);
    return kl_tvm_errf("ValueError", fn, what);
  }
  if (has_bias && (bias.shape[bias.ndim - 1] != N || numel(&bias) != N)) {
    snprintf(what, sizeof(what), "bias must have %lld values along its last dimension",
             (long long)N);
    return kl_tvm_errf("ValueError", fn, what);
  }
  kl_matmul_args m;
  memset(&m, 0, sizeof(m));
  const int ncb = C.ndim - 2;
  int64_t sc;
  m.batch = 1;
  for (int i = 0; i < ncb; i++) m.batch *= C.shape[i];
  if (fold_batch(&C, ncb, C.shape, ncb, &sc) || fold_batch(&A, A.ndim - 2, C.shape, ncb, &m.sa) ||
      (!panels && fold_batch(&B, B.ndim - 2, C.shape, ncb, &m.sb)))
    return kl_tvm_errf("ValueError", fn,
                "batch dimensions must be C's or all ones, and fold into one stride");
  if (m.batch > 1 && sc == 0) sc = M * N; /* unreachable: C's batch is its own */
  m.sc = sc;
  m.lda = row_stride(&A, (int)panels);
  m.ldb = panels ? KL_DENSE_PANEL : row_stride(&B, 0);
  m.ldc = row_stride(&C, 0);
  if (m.lda == -1 || m.ldb == -1 || m.ldc == -1)
    return kl_tvm_errf("ValueError", fn, "the last dimension of A, B and C must have stride 1");
  if (m.lda < 0 || m.ldb < 0 || m.ldc < 0)
    return kl_tvm_errf("ValueError", fn,
                "rows of a matrix overlap (row stride < row length): only A, and only with B "
                "packed in panels, may");
  m.M = M;
  m.N = N;
  m.K = K;
  m.trans_b = trans_b;
  m.b_panels = (int)panels;
  m.a = A.data;
  m.b = B.data;
  m.c = C.data;
  if (has_bias) {
    m.bias = bias.data;
    m.sbias = bias.strides[bias.ndim - 1];
  }
  m.act = (int)act;
  if (kl_tvm_cfg_threads(fn, cfg[KL_MATMUL_CFG_NUM_THREADS], &m.num_threads)) return -1;
  const kl_status s = kl_f32_matmul(&m);
  return s == KL_OK ? 0 : status_err(fn, s);
}

static int conv_common(const char* fn, const TVMFFIAny* args, int has_bias, view* x, view* w,
                       view* bias, view* y) {
  if (get_view(fn, &args[1], "x", x) || get_view(fn, &args[2], "w", w) ||
      (has_bias && get_view(fn, &args[3], "bias", bias)) ||
      get_view(fn, &args[3 + has_bias], "y", y))
    return -1;
  if (x->ndim != 3 || w->ndim != 3 || y->ndim != 3)
    return kl_tvm_errf("ValueError", fn, "x, w and y must be 3-D (NCW, OIW)");
  if (!is_compact(x) || !is_compact(w) || !is_compact(y) || (has_bias && !is_compact(bias)))
    return kl_tvm_errf("ValueError", fn, "tensors must be compact");
  if (x->shape[0] != y->shape[0]) return kl_tvm_errf("ValueError", fn, "x and y batch sizes differ");
  return 0;
}

int kl_tvm_conv1d(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  static const char* fn = KL_TVM_CONV1D_NAME;
  char what[300];
  const int64_t* cfg;
  result->type_index = kTVMFFINone;
  int ncfg; /* w_panels is optional */
  if (kl_tvm_config(fn, args, nargs, KL_TVM_DENSE_ABI, KL_CONV1D_CFG_NMIN, KL_CONV1D_CFG_N, &cfg, &ncfg)) return -1;
  const int has_bias = cfg[KL_CONV1D_CFG_HAS_BIAS] != 0;
  const int64_t panels = ncfg > KL_CONV1D_CFG_W_PANELS ? cfg[KL_CONV1D_CFG_W_PANELS] : 0;
  if (panels != 0 && panels != 1) return kl_tvm_errf("ValueError", fn, "unknown w layout in the config");
  if (check_nargs(fn, nargs, 4 + has_bias)) return -1;
  view x, w, bias, y;
  if (conv_common(fn, args, has_bias, &x, &w, &bias, &y)) return -1;
  kl_conv1d_args c;
  memset(&c, 0, sizeof(c));
  c.batch = x.shape[0];
  c.cin = x.shape[1];
  c.win = x.shape[2];
  c.cout = panels ? y.shape[1] : w.shape[0];
  c.ksize = panels ? w.shape[1] / (c.cin > 0 ? c.cin : 1) : w.shape[2];
  c.wout = y.shape[2];
  c.stride = cfg[KL_CONV1D_CFG_STRIDE];
  c.pad_l = cfg[KL_CONV1D_CFG_PAD_L];
  c.dilation = cfg[KL_CONV1D_CFG_DILATION];
  const int64_t pad_r = cfg[KL_CONV1D_CFG_PAD_R];
  if (c.stride < 1 || c.dilation < 1 || c.pad_l < 0 || pad_r < 0)
    return kl_tvm_errf("ValueError", fn, "invalid config (stride, padding or dilation)");
  if (panels && c.stride != 1 && c.dilation != 1)
    return kl_tvm_errf("ValueError", fn, "w packed in panels needs stride 1 or dilation 1");
  if (panels && (w.shape[0] != (c.cout + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL || c.ksize < 1 ||
                 w.shape[1] != c.ksize * c.cin || w.shape[2] != KL_DENSE_PANEL)) {
    snprintf(what, sizeof(what),
             "w packed in panels must be [%lld, ksize * %lld, %d] for %lld output channels, got "
             "[%lld, %lld, %lld]",
             (long long)((c.cout + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL), (long long)c.cin,
             KL_DENSE_PANEL, (long long)c.cout, (long long)w.shape[0], (long long)w.shape[1],
             (long long)w.shape[2]);
    return kl_tvm_errf("ValueError", fn, what);
  }
  const int64_t span = c.win + c.pad_l + pad_r - c.dilation * (c.ksize - 1) - 1;
  const int64_t wout = span < 0 ? 0 : span / c.stride + 1;
  if ((!panels && (w.shape[1] != c.cin || y.shape[1] != c.cout)) || c.wout != wout ||
      (has_bias && numel(&bias) != c.cout)) {
    snprintf(what, sizeof(what),
             "shapes do not match: x [%lld, %lld, %lld], w [%lld, %lld, %lld], y [.., %lld, %lld] "
             "(expected %lld output steps)",
             (long long)c.batch, (long long)c.cin, (long long)c.win, (long long)w.shape[0],
             (long long)w.shape[1], (long long)w.shape[2], (long long)y.shape[1], (long long)c.wout,
             (long long)wout);
    return kl_tvm_errf("ValueError", fn, what);
  }
  c.x = x.data;
  c.w = w.data;
  c.w_panels = (int)panels;
  c.bias = has_bias ? bias.data : NULL;
  c.y = y.data;
  if (kl_tvm_cfg_threads(fn, cfg[KL_CONV1D_CFG_NUM_THREADS], &c.num_threads)) return -1;
  const kl_status s = kl_f32_conv1d(&c);
  return s == KL_OK ? 0 : status_err(fn, s);
}

/* The stride, pad_l and dilation of a transposed conv's config (the depthwise one
 * has them at the same indices); ValueError unless stride >= 1, dilation >= 1 and
 * pad_l >= 0. */
_Static_assert((int)KL_CONV1D_TRANSPOSE_DW_CFG_STRIDE == (int)KL_CONV1D_TRANSPOSE_CFG_STRIDE &&
                   (int)KL_CONV1D_TRANSPOSE_DW_CFG_PAD_L == (int)KL_CONV1D_TRANSPOSE_CFG_PAD_L &&
                   (int)KL_CONV1D_TRANSPOSE_DW_CFG_DILATION ==
                       (int)KL_CONV1D_TRANSPOSE_CFG_DILATION,
               "transposed conv configs share stride, pad_l and dilation");
static int conv_t_cfg(const char* fn, const int64_t* cfg, int64_t* stride, int64_t* pad_l,
                      int64_t* dilation) {
  *stride = cfg[KL_CONV1D_TRANSPOSE_CFG_STRIDE];
  *pad_l = cfg[KL_CONV1D_TRANSPOSE_CFG_PAD_L];
  *dilation = cfg[KL_CONV1D_TRANSPOSE_CFG_DILATION];
  if (*stride < 1 || *dilation < 1 || *pad_l < 0)
    return kl_tvm_errf("ValueError", fn, "invalid config (stride, padding or dilation)");
  return 0;
}

int kl_tvm_conv1d_transpose_dw(void* self, const TVMFFIAny* args, int32_t nargs,
                               TVMFFIAny* result) {
  (void)self;
  static const char* fn = KL_TVM_CONV1D_TRANSPOSE_DW_NAME;
  const int64_t* cfg;
  result->type_index = kTVMFFINone;
  if (check_cfg(fn, args, nargs, KL_CONV1D_TRANSPOSE_DW_CFG_N, &cfg)) return -1;
  const int has_bias = cfg[KL_CONV1D_TRANSPOSE_DW_CFG_HAS_BIAS] != 0;
  if (check_nargs(fn, nargs, 4 + has_bias)) return -1;
  view x, w, bias, y;
  if (conv_common(fn, args, has_bias, &x, &w, &bias, &y)) return -1;
  kl_conv1d_transpose_dw_args c;
  memset(&c, 0, sizeof(c));
  c.batch = x.shape[0];
  c.ch = x.shape[1];
  c.win = x.shape[2];
  c.ksize = w.shape[2];
  c.wout = y.shape[2];
  if (conv_t_cfg(fn, cfg, &c.stride, &c.pad_l, &c.dilation)) return -1;
  if (w.shape[0] != c.ch || w.shape[1] != 1 || y.shape[1] != c.ch ||
      (has_bias && numel(&bias) != c.ch))
    return kl_tvm_errf("ValueError", fn, "shapes do not match: x [N, C, W], w [C, 1, K], y [N, C, Wout]");
  c.x = x.data;
  c.w = w.data;
  c.bias = has_bias ? bias.data : NULL;
  c.y = y.data;
  if (kl_tvm_cfg_threads(fn, cfg[KL_CONV1D_TRANSPOSE_DW_CFG_NUM_THREADS], &c.num_threads)) return -1;
  const kl_status s = kl_f32_conv1d_transpose_dw(&c);
  return s == KL_OK ? 0 : status_err(fn, s);
}

int kl_tvm_conv1d_transpose(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  static const char* fn = KL_TVM_CONV1D_TRANSPOSE_NAME;
  char what[300];
  const int64_t* cfg;
  result->type_index = kTVMFFINone;
  if (check_cfg(fn, args, nargs, KL_CONV1D_TRANSPOSE_CFG_N, &cfg)) return -1;
  const int has_bias = cfg[KL_CONV1D_TRANSPOSE_CFG_HAS_BIAS] != 0;
  const int64_t panels = cfg[KL_CONV1D_TRANSPOSE_CFG_W_PANELS];
  if (panels != 0 && panels != 1) return kl_tvm_errf("ValueError", fn, "unknown w layout in the config");
  if (check_nargs(fn, nargs, 4 + has_bias)) return -1;
  view x, w, bias, y;
  if (conv_common(fn, args, has_bias, &x, &w, &bias, &y)) return -1;
  kl_conv1d_transpose_args c;
  memset(&c, 0, sizeof(c));
  c.batch = x.shape[0];
  c.cin = x.shape[1];
  c.win = x.shape[2];
  c.cout = y.shape[1];
  c.wout = y.shape[2];
  if (conv_t_cfg(fn, cfg, &c.stride, &c.pad_l, &c.dilation)) return -1;
  c.ksize = cfg[KL_CONV1D_TRANSPOSE_CFG_KSIZE];
  if (c.ksize < 1 || c.stride % c.dilation)
    return kl_tvm_errf("ValueError", fn, "invalid config (ksize < 1, or dilation not a divisor of stride)");
  const int64_t np = (c.cout + KL_DENSE_PANEL - 1) / KL_DENSE_PANEL;
  if (panels && (w.shape[0] != np || w.shape[1] != c.ksize * c.cin || w.shape[2] != KL_DENSE_PANEL)) {
    snprintf(what, sizeof(what),
             "w packed by phase must be [%lld, %lld, %d] for %lld output channels, ksize %lld and "
             "%lld input channels, got [%lld, %lld, %lld]",
             (long long)np, (long long)(c.ksize * c.cin), KL_DENSE_PANEL, (long long)c.cout,
             (long long)c.ksize, (long long)c.cin, (long long)w.shape[0], (long long)w.shape[1],
             (long long)w.shape[2]);
    return kl_tvm_errf("ValueError", fn, what);
  }
  if (!panels && (w.shape[0] != c.cin || w.shape[1] != c.cout || w.shape[2] != c.ksize)) {
    snprintf(what, sizeof(what),
             "shapes do not match: x [%lld, %lld, %lld], w [%lld, %lld, %lld] (IOW), y [.., %lld, "
             "%lld], ksize %lld",
             (long long)c.batch, (long long)c.cin, (long long)c.win, (long long)w.shape[0],
             (long long)w.shape[1], (long long)w.shape[2], (long long)c.cout, (long long)c.wout,
             (long long)c.ksize);
    return kl_tvm_errf("ValueError", fn, what);
  }
  c.w_panels = (int)panels;
  if (has_bias && numel(&bias) != c.cout)
    return kl_tvm_errf("ValueError", fn, "bias must have one value per output channel");
  c.x = x.data;
  c.w = w.data;
  c.bias = has_bias ? bias.data : NULL;
  c.y = y.data;
  if (kl_tvm_cfg_threads(fn, cfg[KL_CONV1D_TRANSPOSE_CFG_NUM_THREADS], &c.num_threads)) return -1;
  const kl_status s = kl_f32_conv1d_transpose(&c);
  return s == KL_OK ? 0 : status_err(fn, s);
}

int kl_tvm_softmax(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  static const char* fn = KL_TVM_SOFTMAX_NAME;
  const int64_t* cfg;
  result->type_index = kTVMFFINone;
  if (check_cfg(fn, args, nargs, KL_SOFTMAX_CFG_N, &cfg) || check_nargs(fn, nargs, 3)) return -1;
  view x, y;
  if (get_view(fn, &args[1], "x", &x) || get_view(fn, &args[2], "y", &y)) return -1;
  if (x.ndim != y.ndim || numel(&x) != numel(&y) || x.shape[x.ndim - 1] != y.shape[y.ndim - 1])
    return kl_tvm_errf("ValueError", fn, "x and y must have the same shape");
  if (!is_compact(&x) || !is_compact(&y)) return kl_tvm_errf("ValueError", fn, "tensors must be compact");
  const int64_t n = x.shape[x.ndim - 1];
  int nth = 0;
  if (kl_tvm_cfg_threads(fn, cfg[KL_SOFTMAX_CFG_NUM_THREADS], &nth)) return -1;
  const kl_status s = kl_f32_softmax(n ? numel(&x) / n : 0, n, x.data, y.data, nth);
  return s == KL_OK ? 0 : status_err(fn, s);
}

/* (batch, head, row) strides and sizes of a 4-D attention operand in layout
 * 0 [B, H, rows, D] or 1 [B, rows, H, D]; -1 if D's stride is not 1. */
static int attn_view(const view* v, int layout, int64_t dims[4], int64_t st[3]) {
  const int hi = layout ? 2 : 1, ri = layout ? 1 : 2;
  dims[0] = v->shape[0];
  dims[1] = v->shape[hi];
  dims[2] = v->shape[ri];
  dims[3] = v->shape[3];
  if (dims[3] > 1 && v->strides[3] != 1) return -1;
  st[0] = v->strides[0];
  st[1] = v->strides[hi];
  st[2] = dims[2] > 1 ? v->strides[ri] : dims[3];
  if (st[2] < dims[3]) return -1;
  return 0;
}

int kl_tvm_attention(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  static const char* fn = KL_TVM_ATTENTION_NAME;
  char what[300];
  const int64_t* cfg;
  result->type_index = kTVMFFINone;
  if (check_cfg(fn, args, nargs, KL_ATTENTION_CFG_N, &cfg)) return -1;
  const int has_mask = cfg[KL_ATTENTION_CFG_HAS_MASK] != 0;
  if (check_nargs(fn, nargs, 5 + has_mask)) return -1;
  for (int i = KL_ATTENTION_CFG_Q_LAYOUT; i <= KL_ATTENTION_CFG_O_LAYOUT; i++)
    if (cfg[i] != 0 && cfg[i] != 1) return kl_tvm_errf("ValueError", fn, "layouts must be 0 or 1");
  view q, k, v, mask, o;
  if (get_view(fn, &args[1], "q", &q) || get_view(fn, &args[2], "k", &k) ||
      get_view(fn, &args[3], "v", &v) || (has_mask && get_view(fn, &args[4], "mask", &mask)) ||
      get_view(fn, &args[4 + has_mask], "o", &o))
    return -1;
  if (q.ndim != 4 || k.ndim != 4 || v.ndim != 4 || o.ndim != 4)
    return kl_tvm_errf("ValueError", fn, "q, k, v and o must be 4-D");
  int64_t dq[4], dk[4], dv[4], dout[4], sq[3], sk[3], sv[3], so[3];
  if (attn_view(&q, (int)cfg[KL_ATTENTION_CFG_Q_LAYOUT], dq, sq) ||
      attn_view(&k, (int)cfg[KL_ATTENTION_CFG_K_LAYOUT], dk, sk) ||
      attn_view(&v, (int)cfg[KL_ATTENTION_CFG_V_LAYOUT], dv, sv) ||
      attn_view(&o, (int)cfg[KL_ATTENTION_CFG_O_LAYOUT], dout, so))
    return kl_tvm_errf("ValueError", fn, "q, k, v and o need unit stride along D and distinct rows");
  if (dk[0] != dq[0] || dv[0] != dq[0] || dout[0] != dq[0] || dk[1] != dq[1] ||
      dv[1] != dq[1] || dout[1] != dq[1] || dk[3] != dq[3] || dv[2] != dk[2] ||
      dout[2] != dq[2] || dout[3] != dv[3] || dv[3] != dq[3]) {
    snprintf(what, sizeof(what),
             "shapes do not match: q [B %lld, H %lld, L %lld, D %lld], k [%lld, %lld, S %lld, %lld], "
             "v [%lld, %lld, %lld, %lld], o [%lld, %lld, %lld, %lld] (as B, H, rows, D)",
             (long long)dq[0], (long long)dq[1], (long long)dq[2], (long long)dq[3],
             (long long)dk[0], (long long)dk[1], (long long)dk[2], (long long)dk[3],
             (long long)dv[0], (long long)dv[1], (long long)dv[2], (long long)dv[3],
             (long long)dout[0], (long long)dout[1], (long long)dout[2], (long long)dout[3]);
    return kl_tvm_errf("ValueError", fn, what);
  }
  kl_attention_args a;
  memset(&a, 0, sizeof(a));
  a.batch = dq[0];
  a.heads = dq[1];
  a.L = dq[2];
  a.S = dk[2];
  a.D = dq[3];
  if (has_mask) {
    const int nd = mask.ndim;
    const int64_t full[4] = {a.batch, a.heads, a.L, a.S};
    if (nd < 2 || mask.shape[nd - 2] != a.L || mask.shape[nd - 1] != a.S ||
        (a.S > 1 && mask.strides[nd - 1] != 1))
      return kl_tvm_errf("ValueError", fn, "mask must be [.., L, S] with unit stride along S");
    int64_t ms[3] = {0, 0, a.L > 1 ? mask.strides[nd - 2] : 0};
    for (int i = 0; i < nd - 2; i++) {
      const int d = 4 - nd + i; /* the [B, H, L, S] axis of mask's axis i */
      if (mask.shape[i] == 1) continue;
      if (mask.shape[i] != full[d])
        return kl_tvm_errf("ValueError", fn, "mask's leading dimensions must be 1 or [B, H]'s");
      ms[d] = mask.strides[i];
    }
    a.mask = mask.data;
    a.smb = ms[0];
    a.smh = ms[1];
    a.sml = ms[2];
  }
  uint32_t bits = (uint32_t)cfg[KL_ATTENTION_CFG_SCALE_BITS];
  memcpy(&a.scale, &bits, sizeof(a.scale));
  a.q = q.data;
  a.sqb = sq[0];
  a.sqh = sq[1];
  a.sql = sq[2];
  a.k = k.data;
  a.skb = sk[0];
  a.skh = sk[1];
  a.sks = sk[2];
  a.v = v.data;
  a.svb = sv[0];
  a.svh = sv[1];
  a.svs = sv[2];
  a.o = o.data;
  a.sob = so[0];
  a.soh = so[1];
  a.sol = so[2];
  if (kl_tvm_cfg_threads(fn, cfg[KL_ATTENTION_CFG_NUM_THREADS], &a.num_threads)) return -1;
  const kl_status s = kl_f32_attention(&a);
  return s == KL_OK ? 0 : status_err(fn, s);
}
