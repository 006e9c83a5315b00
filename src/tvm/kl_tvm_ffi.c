/* tvm-ffi functions of the engine (see kl_tvm.h), after TVM's contrib externs
 * (tvm.contrib.cblas.matmul): each reads its DLTensor arguments and writes its
 * outputs in place; all validation happens in the engine's C entry.
 *
 * kokoro_lstm.lstm_forward_v2(cfg: Shape, x, [lengths], [h0, c0], [gate_bias], *weights,
 *                             y, h_n, c_n)
 *   cfg = (abi, num_layers, num_directions, has_lengths, has_hx, batch_first,
 *          proj_size, has_bias, constant_weights, dtype, num_threads, reverse
 *          [, has_gate_bias, x_gates])
 *   The two trailing values (layer 0's gate input given or augmented by the
 *   caller, see kl_forward_args) are optional: a 12-value cfg (modules compiled
 *   before they existed) means 0, 0.
 *   dtype: 0 float32, 1 float64, 2 bfloat16, 3 float16 weights; num_threads 0: the
 *   process default (kl_get_num_threads). Weights per (layer, direction),
 *   layer-major: w_ih, w_hh, [b_ih, b_hh], [w_hr]. Constant weights passed as
 *   tensor objects are kept alive by the weight cache while cached. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_tvm.h"
#include "kl_tvm_dense.h"
#include "kl_tvm_norm.h"
#include "kl_tvm_random.h"
#include "kokoro_lstm.h"

static kl_tvm_api g_api;

static int raise_err(const char* kind, const char* msg) {
  g_api.error_set_raised_from_cstr(kind, msg);
  return -1;
}

int kl_tvm_raise(const char* kind, const char* msg) { return raise_err(kind, msg); }

void* kl_tvm_stream(int32_t device_type, int32_t device_id) {
  return g_api.env_get_stream ? g_api.env_get_stream(device_type, device_id) : NULL;
}

/* DLTensor* of a tensor argument, or NULL. obj receives its object handle when
 * it is a tensor object (NULL for a raw DLTensor*). */
static DLTensor* as_tensor(const TVMFFIAny* a, TVMFFIObject** obj) {
  *obj = NULL;
  if (a->type_index == kTVMFFIDLTensorPtr) return (DLTensor*)a->v_ptr;
  if (a->type_index == kTVMFFITensor) {
    *obj = a->v_obj;
    return (DLTensor*)((char*)a->v_obj + sizeof(TVMFFIObject));
  }
  return NULL;
}

/* A set of tensor objects retained together (constant weights). */
typedef struct obj_set {
  int n, retained;
  TVMFFIObject* objs[];
} obj_set;

static void set_retain(void* h) {
  obj_set* s = h;
  for (int i = 0; i < s->n; i++) g_api.object_inc_ref(s->objs[i]);
  s->retained = 1;
}

static void set_release(void* h) {
  obj_set* s = h;
  for (int i = 0; i < s->n; i++) g_api.object_dec_ref(s->objs[i]);
  free(s);
}

enum { CFG_ABI, CFG_L, CFG_D, CFG_LEN, CFG_HX, CFG_BF, CFG_P, CFG_BIAS, CFG_CONST, CFG_DTYPE,
       CFG_NTH, CFG_REV, CFG_N_BASE, CFG_GATE_BIAS = CFG_N_BASE, CFG_X_GATES, CFG_N };

/* The accepted range of each config value (num_layers as kl_lstm_forward's). */
static const struct {
  const char* name;
  int64_t lo, hi;
} CFG_RANGE[CFG_N] = {
    [CFG_ABI] = {"abi", KL_TVM_LSTM_ABI, KL_TVM_LSTM_ABI},
    [CFG_L] = {"num_layers", 1, 65536},
    [CFG_D] = {"num_directions", 1, 2},
    [CFG_LEN] = {"has_lengths", 0, 1},
    [CFG_HX] = {"has_hx", 0, 1},
    [CFG_BF] = {"batch_first", 0, 1},
    [CFG_P] = {"proj_size", 0, INT32_MAX},
    [CFG_BIAS] = {"has_bias", 0, 1},
    [CFG_CONST] = {"constant_weights", 0, 1},
    [CFG_DTYPE] = {"dtype", KL_F32, KL_F16},
    [CFG_NTH] = {"num_threads", 0, INT32_MAX},
    [CFG_REV] = {"reverse", 0, 1},
    [CFG_GATE_BIAS] = {"has_gate_bias", 0, 1},
    [CFG_X_GATES] = {"x_gates", 0, 1},
};

/* The call's config shape, every value in its range before any is narrowed to an int:
 * its values (*n of them), or NULL with the error raised. */
static const int64_t* lstm_config(const TVMFFIAny* args, int32_t nargs, size_t* n) {
  char msg[512];
  if (nargs < 1 || args[0].type_index != kTVMFFIShape)
    return raise_err("TypeError", KL_TVM_LSTM_NAME ": the first argument must be the config shape"), NULL;
  const TVMFFIShapeCell* cell = (const TVMFFIShapeCell*)((char*)args[0].v_obj + sizeof(TVMFFIObject));
  if ((cell->size != CFG_N && cell->size != CFG_N_BASE) || cell->data[CFG_ABI] != KL_TVM_LSTM_ABI) {
    snprintf(msg, sizeof(msg),
             KL_TVM_LSTM_NAME ": the module was compiled for calling convention %lld with %zu "
             "config values; this engine implements v%d with %d or %d: recompile the module",
             cell->size ? (long long)cell->data[0] : -1LL, cell->size, KL_TVM_LSTM_ABI, CFG_N_BASE,
             CFG_N);
    return raise_err("RuntimeError", msg), NULL;
  }
  const int64_t* c = cell->data;
  for (size_t i = 1; i < cell->size; i++)
    if (c[i] < CFG_RANGE[i].lo || c[i] > CFG_RANGE[i].hi) {
      snprintf(msg, sizeof(msg), KL_TVM_LSTM_NAME ": config value %zu (%s) must be in %lld..%lld, got %lld",
               i, CFG_RANGE[i].name, (long long)CFG_RANGE[i].lo, (long long)CFG_RANGE[i].hi,
               (long long)c[i]);
      return raise_err("ValueError", msg), NULL;
    }
  *n = cell->size;
  return c;
}

/* fa from the checked config (c, n values) and the call's tensors t in their order:
 * x, [lengths], [h0, c0], [gate_bias], the nw weights, y, h_n, c_n. */
static void lstm_args(kl_forward_args* fa, const int64_t* c, size_t n, DLTensor** t, int nw) {
  int k = 0;
  memset(fa, 0, sizeof(*fa));
  fa->num_layers = (int)c[CFG_L];
  fa->bidirectional = c[CFG_D] == 2;
  fa->reverse = c[CFG_REV] != 0;
  fa->has_bias = (int)c[CFG_BIAS];
  fa->proj_size = (int)c[CFG_P];
  fa->batch_first = c[CFG_BF] != 0;
  fa->dtype = (kl_dtype)c[CFG_DTYPE];
  fa->num_threads = (int)c[CFG_NTH];
  fa->x_gates = n == CFG_N ? (int)c[CFG_X_GATES] : 0;
  fa->x = t[k++];
  if (c[CFG_LEN]) fa->lengths = t[k++];
  if (c[CFG_HX]) {
    fa->h0 = t[k++];
    fa->c0 = t[k++];
  }
  if (n == CFG_N && c[CFG_GATE_BIAS]) fa->gate_bias = t[k++];
  fa->weights = (const DLTensor* const*)(t + k);
  fa->num_weights = nw;
  k += nw;
  fa->y = t[k++];
  fa->h_n = t[k++];
  fa->c_n = t[k++];
}

static int lstm_forward(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  (void)self;
  char msg[512];
  size_t n;
  result->type_index = kTVMFFINone;
  const int64_t* c = lstm_config(args, nargs, &n);
  if (!c) return -1;
  const int has_gb = n == CFG_N && c[CFG_GATE_BIAS] != 0;
  const int nw = (int)(c[CFG_L] * c[CFG_D] * (2 + 2 * c[CFG_BIAS] + (c[CFG_P] > 0)));
  const int w0 = 1 + (c[CFG_LEN] ? 1 : 0) + (c[CFG_HX] ? 2 : 0) + has_gb;
  if (nargs != w0 + nw + 4) {
    snprintf(msg, sizeof(msg), KL_TVM_LSTM_NAME ": expected %d arguments for this config, got %d",
             w0 + nw + 4, (int)nargs);
    return raise_err("TypeError", msg);
  }
  const int ntensor = nargs - 1;
  DLTensor** t = malloc((size_t)ntensor * sizeof(DLTensor*));
  obj_set* keep = malloc(sizeof(obj_set) + (size_t)nw * sizeof(TVMFFIObject*));
  if (!t || !keep) {
    free(t);
    free(keep);
    return raise_err("MemoryError", KL_TVM_LSTM_NAME ": out of memory");
  }
  int constant = c[CFG_CONST] != 0;
  keep->n = nw;
  keep->retained = 0;
  for (int i = 0; i < ntensor; i++) {
    TVMFFIObject* obj;
    t[i] = as_tensor(&args[i + 1], &obj);
    if (!t[i]) {
      free(t);
      free(keep);
      snprintf(msg, sizeof(msg), KL_TVM_LSTM_NAME ": argument %d must be a tensor (type index %d)",
               i + 1, (int)args[i + 1].type_index);
      return raise_err("TypeError", msg);
    }
    if (i >= w0 && i < w0 + nw) {
      keep->objs[i - w0] = obj;
      if (!obj) constant = 0; /* cannot keep a raw DLTensor* alive: check it instead */
    }
  }
  kl_forward_args fa;
  lstm_args(&fa, c, n, t, nw);
  fa.constant_weights = constant;
  const kl_keepalive ka = {keep, set_retain, set_release};
  fa.keepalive = constant ? &ka : NULL;
  if (fa.x && fa.x->device.device_type == kDLCUDA) fa.stream = kl_tvm_stream(kDLCUDA, fa.x->device.device_id);
  const kl_status s = kl_lstm_forward(&fa);
  if (!keep->retained) free(keep);
  free(t);
  if (s != KL_OK) {
    snprintf(msg, sizeof(msg), KL_TVM_LSTM_NAME ": %s", *kl_last_error() ? kl_last_error() : kl_status_str(s));
    return raise_err(s == KL_ERR_NOMEM ? "MemoryError" : s == KL_ERR_ARG ? "ValueError" : "RuntimeError", msg);
  }
  return 0;
}

typedef struct kl_tvm_func {
  const char* name;
  TVMFFISafeCallType call;
} kl_tvm_func;

/* Every function of the engine that tvm-ffi can call. */
static const kl_tvm_func FUNCS[] = {
    {KL_TVM_LSTM_NAME, lstm_forward},
    {KL_TVM_MATMUL_NAME, kl_tvm_matmul},
    {KL_TVM_CONV1D_NAME, kl_tvm_conv1d},
    {KL_TVM_CONV1D_TRANSPOSE_DW_NAME, kl_tvm_conv1d_transpose_dw},
    {KL_TVM_CONV1D_TRANSPOSE_NAME, kl_tvm_conv1d_transpose},
    {KL_TVM_SOFTMAX_NAME, kl_tvm_softmax},
    {KL_TVM_ATTENTION_NAME, kl_tvm_attention},
    /* counter-based noise (kl_tvm_random.c) */
    {KL_TVM_RANDOM_NAME, kl_tvm_random},
    {KL_TVM_FRESH_SEED_NAME, kl_tvm_fresh_seed},
    /* instance norm, safe on constant rows (kl_tvm_norm.c) */
    {KL_TVM_INSTANCE_NORM_NAME, kl_tvm_instance_norm},
};

/* What tvm-ffi calls: the function (self) with this thread's parallel work on
 * the TVM runtime's pool (kl_pool_set_caller), whose threads run the module's
 * own parallel loops and spin between them. With our own pool beside them, a
 * compiled bert at 64 tokens ran 5.9x slower on 2 threads than on 1 (16-core
 * Xeon). */
static int from_tvm(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* result) {
  const int prev = kl_pool_set_caller(KL_POOL_TVM);
  const int rc = ((const kl_tvm_func*)self)->call(NULL, args, nargs, result);
  kl_pool_set_caller(prev);
  return rc;
}

int kl_tvm_register(const kl_tvm_api* api, char* err, size_t errlen) {
  if (!api || !api->function_create || !api->function_get_global || !api->function_set_global ||
      !api->error_set_raised_from_cstr || !api->object_dec_ref || !api->object_inc_ref) {
    if (err) snprintf(err, errlen, "incomplete tvm-ffi C API");
    return -1;
  }
  g_api = *api;
  int n = 0;
  for (size_t i = 0; i < sizeof(FUNCS) / sizeof(FUNCS[0]); i++) {
    const TVMFFIByteArray name = {FUNCS[i].name, strlen(FUNCS[i].name)};
    TVMFFIObjectHandle f = NULL;
    if (api->function_get_global(&name, &f) == 0 && f) { /* registered already (another copy) */
      api->object_dec_ref(f);
      n++;
      continue;
    }
    if (api->function_create((void*)&FUNCS[i], from_tvm, NULL, &f) != 0 ||
        api->function_set_global(&name, f, 0) != 0) {
      if (api->error_move_from_raised) { /* take the pending error */
        TVMFFIObjectHandle e = NULL;
        api->error_move_from_raised(&e);
        if (e) api->object_dec_ref(e);
      }
      if (f) api->object_dec_ref(f);
      if (err) snprintf(err, errlen, "could not register %s with tvm-ffi", FUNCS[i].name);
      return -1;
    }
    api->object_dec_ref(f); /* the global table holds its own reference */
    n++;
  }
  return n;
}
