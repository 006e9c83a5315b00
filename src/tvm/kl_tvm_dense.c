/* tvm-ffi glue of the dense operators (src/ops/dense.h): the calling conventions
 * and DLTensor unpacking; destination-passing like kokoro_lstm.lstm_forward_v2. Each
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
 *   conv tensors compact; a conv bias is any compact tensor of Cout (C) values.
 * conv1d_v1, conv1d_transpose_v1 and matmul_v1 also run on CUDA tensors (all on one
 * device, w unpacked, a transpose of dilation 1; a matmul's B [N, K] with trans_b 1, no
 * activation, every tensor compact) with the engine's kernels (src/cuda/conv.cu) on
 * TVM's stream: nothing allocated or synchronized, so a CUDA graph captures them.
 * Everything but the calling convention (config length, argument count, tensor type) is
 * checked by the operator's kl_<op>_forward (src/ops/<op>.c) before any memory is
 * touched: value ranges, shapes, overflow-checked sizes, and no output sharing memory
 * with an input. An extern here is its convention (a dense_extern row) and its config's
 * values mapped to the operator's config. */
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "dense.h"
#include "internal.h"
#include "kl_cuda.h"
#include "kl_tvm_dense.h"

int kl_tvm_errf(const char* kind, const char* fn, const char* what) {
  char msg[700];
  snprintf(msg, sizeof(msg), "%s: %s", fn, what);
  return kl_tvm_raise(kind, msg);
}

/* The DLTensor of argument `name`: 0, else raises TypeError and returns -1. */
static int tensor_arg(const char* fn, const TVMFFIAny* arg, const char* name, const DLTensor** out) {
  char what[200];
  *out = NULL;
  if (arg->type_index == kTVMFFIDLTensorPtr) *out = (const DLTensor*)arg->v_ptr;
  else if (arg->type_index == kTVMFFITensor)
    *out = (const DLTensor*)((const char*)arg->v_obj + sizeof(TVMFFIObject));
  if (*out) return 0;
  snprintf(what, sizeof(what), "%s must be a tensor (type index %d)", name, (int)arg->type_index);
  return kl_tvm_errf("TypeError", fn, what);
}

/* t of dtype (code, bits), one lane: 0, else raises TypeError and returns -1. */
static int dtype_arg(const char* fn, const DLTensor* t, const char* name, int code, int bits) {
  char what[200];
  if (t->dtype.code == code && t->dtype.bits == bits && t->dtype.lanes == 1) return 0;
  snprintf(what, sizeof(what), "%s must be %s%d", name,
           code == kDLFloat ? "float" : code == kDLInt ? "int" : "dtype code ?", bits);
  return kl_tvm_errf("TypeError", fn, what);
}

int kl_tvm_cpu_tensor(const char* fn, const TVMFFIAny* arg, const char* name, int code, int bits,
                      const DLTensor** out) {
  char what[200];
  const DLTensor* t;
  if (tensor_arg(fn, arg, name, &t)) return -1;
  if (t->device.device_type != kDLCPU) {
    snprintf(what, sizeof(what), "%s must be a CPU tensor, got device type %d", name,
             (int)t->device.device_type);
    return kl_tvm_errf("ValueError", fn, what);
  }
  if (dtype_arg(fn, t, name, code, bits)) return -1;
  *out = t;
  return 0;
}

int kl_tvm_compact_tensor(const char* fn, const TVMFFIAny* arg, const char* name, int code,
                          int bits, const DLTensor** out, int64_t* n) {
  const DLTensor* t;
  kl_view v;
  if (tensor_arg(fn, arg, name, &t) || dtype_arg(fn, t, name, code, bits)) return -1;
  if (kl_view_on(t, name, code, bits, 0, KL_VIEW_MAXD, &v))
    return kl_tvm_errf("ValueError", fn, kl_last_error());
  if (!kl_view_compact(&v)) {
    char what[200];
    snprintf(what, sizeof(what), "%s must be compact", name);
    return kl_tvm_errf("ValueError", fn, what);
  }
  *out = t;
  *n = v.numel;
  return 0;
}

static const TVMFFIShapeCell* as_shape(const TVMFFIAny* a) {
  if (a->type_index != kTVMFFIShape) return NULL;
  return (const TVMFFIShapeCell*)((const char*)a->v_obj + sizeof(TVMFFIObject));
}

/* A failed check (its message in kl_last_error()) or a failed run. */
static int status_err(const char* fn, kl_status s) {
  if (s == KL_ERR_ARG && *kl_last_error()) return kl_tvm_errf("ValueError", fn, kl_last_error());
  return kl_tvm_errf(s == KL_ERR_NOMEM ? "MemoryError" : s == KL_ERR_ARG ? "ValueError" : "RuntimeError",
                     fn, kl_status_str(s));
}

int kl_tvm_config(const char* fn, const TVMFFIAny* args, int32_t nargs, int64_t abi, int nmin,
                  int nmax, const int64_t** cfg, int* ncfg) {
  char what[200];
  const TVMFFIShapeCell* cell = nargs >= 1 ? as_shape(&args[0]) : NULL;
  if (!cell) return kl_tvm_errf("TypeError", fn, "the first argument must be the config shape");
  if ((int64_t)cell->size < nmin || (int64_t)cell->size > nmax || cell->data[0] != abi) {
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
  if (kl_check_threads(v, out)) return kl_tvm_errf("ValueError", fn, kl_last_error());
  return 0;
}

static int check_nargs(const char* fn, int32_t nargs, int want) {
  if (nargs == want) return 0;
  char what[120];
  snprintf(what, sizeof(what), "expected %d arguments for this config, got %d", want, (int)nargs);
  return kl_tvm_errf("TypeError", fn, what);
}

/* An extern's calling convention: config values nmin (required) to n, then its
 * float32 tensors in order, the one at index opt (-1: none) passed only when config
 * value opt_flag is nonzero. */
#define KL_TVM_DENSE_MAXT 5
#define KL_TVM_DENSE_MAXCFG 16
typedef struct dense_extern {
  const char* fn;
  int nmin, n;
  int ntensors;
  const char* names[KL_TVM_DENSE_MAXT];
  int opt, opt_flag;
  int cuda; /* 1: its tensors may instead all be on one CUDA device */
} dense_extern;
_Static_assert(KL_MATMUL_CFG_N <= KL_TVM_DENSE_MAXCFG && KL_CONV1D_CFG_N <= KL_TVM_DENSE_MAXCFG &&
                   KL_CONV1D_TRANSPOSE_DW_CFG_N <= KL_TVM_DENSE_MAXCFG &&
                   KL_CONV1D_TRANSPOSE_CFG_N <= KL_TVM_DENSE_MAXCFG &&
                   KL_SOFTMAX_CFG_N <= KL_TVM_DENSE_MAXCFG && KL_ATTENTION_CFG_N <= KL_TVM_DENSE_MAXCFG,
               "every config fits a dense_call");

/* The externs' conventions (kl_tvm_dense.h's names and config layouts). */
enum { MATMUL, CONV1D, CONV1D_TRANSPOSE_DW, CONV1D_TRANSPOSE, SOFTMAX, ATTENTION };
static const dense_extern EXTERNS[] = {
    [MATMUL] = {KL_TVM_MATMUL_NAME, KL_MATMUL_CFG_NMIN, KL_MATMUL_CFG_N, 4, {"A", "B", "bias", "C"}, 2,
                KL_MATMUL_CFG_HAS_BIAS, 1},
    [CONV1D] = {KL_TVM_CONV1D_NAME, KL_CONV1D_CFG_NMIN, KL_CONV1D_CFG_N, 4, {"x", "w", "bias", "y"}, 2,
                KL_CONV1D_CFG_HAS_BIAS, 1},
    [CONV1D_TRANSPOSE_DW] = {KL_TVM_CONV1D_TRANSPOSE_DW_NAME, KL_CONV1D_TRANSPOSE_DW_CFG_N,
                             KL_CONV1D_TRANSPOSE_DW_CFG_N, 4, {"x", "w", "bias", "y"}, 2,
                             KL_CONV1D_TRANSPOSE_DW_CFG_HAS_BIAS},
    [CONV1D_TRANSPOSE] = {KL_TVM_CONV1D_TRANSPOSE_NAME, KL_CONV1D_TRANSPOSE_CFG_N, KL_CONV1D_TRANSPOSE_CFG_N,
                          4, {"x", "w", "bias", "y"}, 2, KL_CONV1D_TRANSPOSE_CFG_HAS_BIAS, 1},
    [SOFTMAX] = {KL_TVM_SOFTMAX_NAME, KL_SOFTMAX_CFG_N, KL_SOFTMAX_CFG_N, 2, {"x", "y"}, -1, 0},
    [ATTENTION] = {KL_TVM_ATTENTION_NAME, KL_ATTENTION_CFG_N, KL_ATTENTION_CFG_N, 5,
                   {"q", "k", "v", "mask", "o"}, 3, KL_ATTENTION_CFG_HAS_MASK},
};

/* An extern's arguments: its config values (those not given 0) and tensors (NULL:
 * the optional one not passed). */
typedef struct dense_call {
  int64_t c[KL_TVM_DENSE_MAXCFG];
  const DLTensor* t[KL_TVM_DENSE_MAXT];
} dense_call;

/* Argument `name` of fn as a float32 tensor on first's device (or, for the first,
 * on the CPU or a CUDA device): 0, else raises and returns -1. */
static int device_tensor(const char* fn, const TVMFFIAny* arg, const char* name, const DLTensor* first,
                         const DLTensor** out) {
  char what[200];
  if (tensor_arg(fn, arg, name, out) || dtype_arg(fn, *out, name, kDLFloat, 32)) return -1;
  const DLDevice d = (*out)->device;
  if (!first && (d.device_type == kDLCPU || d.device_type == kDLCUDA)) return 0;
  if (first && d.device_type == first->device.device_type &&
      (d.device_type == kDLCPU || d.device_id == first->device.device_id))
    return 0;
  if (first)
    snprintf(what, sizeof(what), "%s must be on the device of the first tensor (type %d id %d), got type %d id %d",
             name, (int)first->device.device_type, (int)first->device.device_id, (int)d.device_type,
             (int)d.device_id);
  else
    snprintf(what, sizeof(what), "%s must be a CPU or CUDA tensor, got device type %d", name, (int)d.device_type);
  return kl_tvm_errf("ValueError", fn, what);
}

/* args by extern op's convention into *k; 0, else raises and returns -1. */
static int unpack(int op, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result, dense_call* k) {
  const dense_extern* e = &EXTERNS[op];
  int64_t* cfg = k->c;
  const DLTensor** t = k->t;
  const int64_t* raw;
  int ncfg;
  result->type_index = kTVMFFINone;
  if (kl_tvm_config(e->fn, args, nargs, KL_TVM_DENSE_ABI, e->nmin, e->n, &raw, &ncfg)) return -1;
  for (int i = 0; i < e->n; i++) cfg[i] = i < ncfg ? raw[i] : 0;
  const int skip = e->opt >= 0 && cfg[e->opt_flag] == 0 ? e->opt : -1;
  if (check_nargs(e->fn, nargs, 1 + e->ntensors - (skip >= 0))) return -1;
  for (int i = 0, a = 1; i < e->ntensors; i++) {
    t[i] = NULL;
    if (i == skip) continue;
    if (e->cuda ? device_tensor(e->fn, &args[a++], e->names[i], i ? t[0] : NULL, &t[i])
                : kl_tvm_cpu_tensor(e->fn, &args[a++], e->names[i], kDLFloat, 32, &t[i]))
      return -1;
  }
  kl_set_error("");
  return 0;
}

/* An operator's status as the extern's result. */
static int finish(int op, kl_status s) { return s == KL_OK ? 0 : status_err(EXTERNS[op].fn, s); }

/* C [..., M, N] = A [..., M, K] B^T (+ bias) on A's CUDA device, B [N, K] (trans_b 1,
 * no panels, no activation), every tensor compact: checked, then kl_cuda_matmul on
 * TVM's stream. */
static kl_status matmul_cuda(const dense_call* k) {
  kl_view a, b, bias, c;
  kl_status st;
  if (k->c[KL_MATMUL_CFG_TRANS_B] != 1 || k->c[KL_MATMUL_CFG_B_PANELS] || k->c[KL_MATMUL_CFG_ACT])
    return kl_fail("on CUDA a matmul takes B as [N, K] (trans_b 1), unpacked, with no activation");
  if ((st = kl_view_on(k->t[0], "A", kDLFloat, 32, 2, KL_VIEW_MAXD, &a)) ||
      (st = kl_view_on(k->t[1], "B", kDLFloat, 32, 2, 2, &b)) ||
      (k->t[2] && (st = kl_view_on(k->t[2], "bias", kDLFloat, 32, 1, KL_VIEW_MAXD, &bias))) ||
      (st = kl_view_on(k->t[3], "C", kDLFloat, 32, 2, KL_VIEW_MAXD, &c)))
    return st;
  if (!kl_view_compact(&a) || !kl_view_compact(&b) || !kl_view_compact(&c) || (k->t[2] && !kl_view_compact(&bias)))
    return kl_fail("on CUDA a matmul's tensors must be compact");
  const int64_t K = b.shape[1], N = b.shape[0], M = K ? a.numel / K : 0;
  int same = a.ndim == c.ndim && a.shape[a.ndim - 1] == K && c.shape[c.ndim - 1] == N;
  for (int i = 0; same && i < a.ndim - 1; i++) same = a.shape[i] == c.shape[i];
  if (!same || (k->t[2] && bias.numel != N))
    return kl_fail("shapes do not match: A [..., M, %lld], B [%lld, %lld] (trans_b), C [..., M, %lld] with A's "
                   "leading dimensions, bias %lld values",
                   (long long)a.shape[a.ndim - 1], (long long)N, (long long)K, (long long)c.shape[c.ndim - 1],
                   (long long)(k->t[2] ? bias.numel : N));
  const DLTensor* outs[1] = {k->t[3]};
  const DLTensor* ins[3] = {k->t[0], k->t[1], k->t[2]};
  static const char* const out_names[1] = {"C"}, *const in_names[3] = {"A", "B", "bias"};
  if ((st = kl_check_disjoint(outs, out_names, 1, ins, in_names, 3))) return st;
  const int id = k->t[0]->device.device_id;
  return kl_cuda_matmul(M, N, K, a.data, b.data, k->t[2] ? bias.data : NULL, c.data, id,
                        kl_tvm_stream(kDLCUDA, id));
}

int kl_tvm_matmul(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  dense_call k;
  if (unpack(MATMUL, args, nargs, result, &k)) return -1;
  if (k.t[0]->device.device_type == kDLCUDA) return finish(MATMUL, matmul_cuda(&k));
  const kl_matmul_config cfg = {k.c[KL_MATMUL_CFG_TRANS_B], k.c[KL_MATMUL_CFG_ACT],
                                k.c[KL_MATMUL_CFG_B_PANELS], k.c[KL_MATMUL_CFG_NUM_THREADS]};
  return finish(MATMUL, kl_matmul_forward(&cfg, k.t[0], k.t[1], k.t[2], k.t[3]));
}

/* A checked convolution on x's CUDA device, on TVM's stream for it. */
static kl_status conv_cuda(kl_status checked, const kl_conv1d_args* a, int transpose, const DLTensor* x) {
  const int id = x->device.device_id;
  return checked ? checked : kl_cuda_conv1d(a, transpose, id, kl_tvm_stream(kDLCUDA, id));
}

int kl_tvm_conv1d(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  dense_call k;
  if (unpack(CONV1D, args, nargs, result, &k)) return -1;
  const kl_conv1d_config cfg = {k.c[KL_CONV1D_CFG_STRIDE],   k.c[KL_CONV1D_CFG_PAD_L],
                                k.c[KL_CONV1D_CFG_PAD_R],    k.c[KL_CONV1D_CFG_DILATION],
                                k.c[KL_CONV1D_CFG_W_PANELS], k.c[KL_CONV1D_CFG_NUM_THREADS]};
  if (k.t[0]->device.device_type == kDLCUDA) {
    kl_conv1d_args a;
    return finish(CONV1D, conv_cuda(kl_conv1d_check(&cfg, k.t[0], k.t[1], k.t[2], k.t[3], &a), &a, 0, k.t[0]));
  }
  return finish(CONV1D, kl_conv1d_forward(&cfg, k.t[0], k.t[1], k.t[2], k.t[3]));
}

int kl_tvm_conv1d_transpose_dw(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  dense_call k;
  if (unpack(CONV1D_TRANSPOSE_DW, args, nargs, result, &k)) return -1;
  const kl_conv1d_transpose_dw_config cfg = {
      k.c[KL_CONV1D_TRANSPOSE_DW_CFG_STRIDE], k.c[KL_CONV1D_TRANSPOSE_DW_CFG_PAD_L],
      k.c[KL_CONV1D_TRANSPOSE_DW_CFG_DILATION], k.c[KL_CONV1D_TRANSPOSE_DW_CFG_NUM_THREADS]};
  return finish(CONV1D_TRANSPOSE_DW,
                kl_conv1d_transpose_dw_forward(&cfg, k.t[0], k.t[1], k.t[2], k.t[3]));
}

int kl_tvm_conv1d_transpose(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  dense_call k;
  if (unpack(CONV1D_TRANSPOSE, args, nargs, result, &k)) return -1;
  const kl_conv1d_transpose_config cfg = {
      k.c[KL_CONV1D_TRANSPOSE_CFG_STRIDE], k.c[KL_CONV1D_TRANSPOSE_CFG_PAD_L],
      k.c[KL_CONV1D_TRANSPOSE_CFG_DILATION], k.c[KL_CONV1D_TRANSPOSE_CFG_KSIZE],
      k.c[KL_CONV1D_TRANSPOSE_CFG_W_PANELS], k.c[KL_CONV1D_TRANSPOSE_CFG_NUM_THREADS]};
  if (k.t[0]->device.device_type == kDLCUDA) {
    kl_conv1d_transpose_args a;
    return finish(CONV1D_TRANSPOSE,
                  conv_cuda(kl_conv1d_transpose_check(&cfg, k.t[0], k.t[1], k.t[2], k.t[3], &a), &a, 1, k.t[0]));
  }
  return finish(CONV1D_TRANSPOSE,
                kl_conv1d_transpose_forward(&cfg, k.t[0], k.t[1], k.t[2], k.t[3]));
}

int kl_tvm_softmax(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  dense_call k;
  if (unpack(SOFTMAX, args, nargs, result, &k)) return -1;
  const kl_softmax_config cfg = {k.c[KL_SOFTMAX_CFG_NUM_THREADS]};
  return finish(SOFTMAX, kl_softmax_forward(&cfg, k.t[0], k.t[1]));
}

int kl_tvm_attention(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  dense_call k;
  if (unpack(ATTENTION, args, nargs, result, &k)) return -1;
  const kl_attention_config cfg = {k.c[KL_ATTENTION_CFG_Q_LAYOUT],   k.c[KL_ATTENTION_CFG_K_LAYOUT],
                                   k.c[KL_ATTENTION_CFG_V_LAYOUT],   k.c[KL_ATTENTION_CFG_O_LAYOUT],
                                   k.c[KL_ATTENTION_CFG_SCALE_BITS], k.c[KL_ATTENTION_CFG_NUM_THREADS]};
  return finish(ATTENTION, kl_attention_forward(&cfg, k.t[0], k.t[1], k.t[2], k.t[3], k.t[4]));
}
