/* kokoro_lstm._core: the thin CPython binding of the C core, one of the two files that
 * include Python.h (noise.c has the noise draws): objects to DLTensors, the GIL released
 * around compute, kl_status to exceptions. */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL kl_py_numpy_api /* shared with noise.c */
#include <Python.h>
#include <numpy/arrayobject.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "glue.h"
#include "kokoro_lstm.h"
#include "kokoro_lstm_testing.h"
#include "threads.h"

/* ---- forward: every front's road into kl_lstm_forward. Tensors are NumPy arrays (described
 * in place), __dlpack__ producers, DLPack capsules or None; kl_lstm_forward validates them. */

typedef struct {
  DLTensor t;
  int64_t shape[8], strides[8];
  PyObject* capsule; /* owned, for __dlpack__ producers */
} tensor_arg;

static void tensor_arg_clear(tensor_arg* a) { Py_CLEAR(a->capsule); }

/* obj.__dlpack__(): for a CUDA tensor with the stream the call runs on (DLPack's
 * stream argument: the producer orders its pending work before that stream;
 * 1 is the legacy default stream). */
static PyObject* call_dlpack(PyObject* obj, PyObject* stream) {
  PyObject* dev = PyObject_HasAttrString(obj, "__dlpack_device__")
                      ? PyObject_CallMethod(obj, "__dlpack_device__", NULL) : NULL;
  long type = dev && PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) >= 1 ? PyLong_AsLong(PyTuple_GET_ITEM(dev, 0)) : -1;
  Py_XDECREF(dev);
  if (!dev || type != kDLCUDA) {
    if (dev && type == -1 && PyErr_Occurred()) return NULL;
    PyErr_Clear();
    return PyObject_CallMethod(obj, "__dlpack__", NULL);
  }
  PyObject* kwnames = Py_BuildValue("(s)", "stream");
  PyObject* const argv[] = {obj, stream};
  PyObject* name = PyUnicode_InternFromString("__dlpack__");
  PyObject* cap = kwnames && name ? PyObject_VectorcallMethod(name, argv, 1, kwnames) : NULL;
  Py_XDECREF(name);
  Py_XDECREF(kwnames);
  return cap;
}

/* A NumPy array described in place; returns 0 with an exception set on failure. */
static int from_ndarray(PyArrayObject* arr, const char* name, int writable, tensor_arg* a) {
  const int nd = PyArray_NDIM(arr);
  PyArray_Descr* d = PyArray_DESCR(arr);
  const npy_intp isz = PyArray_ITEMSIZE(arr);
  const char* bad = nd > 8 ? "has too many dimensions"
                    : !PyArray_ISNBO(d->byteorder) || !PyArray_ISALIGNED(arr) ? "must be aligned and in native byte order"
                    : writable && !PyArray_ISWRITEABLE(arr) ? "must be writable" : NULL;
  for (int i = 0; !bad && i < nd; i++) {
    a->shape[i] = PyArray_DIM(arr, i);
    a->strides[i] = PyArray_STRIDE(arr, i) / isz;
    if (PyArray_STRIDE(arr, i) % isz) bad = "has strides that are not multiples of the item size";
  }
  if (bad) {
    PyErr_Format(PyExc_ValueError, "%s %s", name, bad);
    return 0;
  }
  const int kind = d->kind;
  a->t.dtype.code = kind == 'f' ? kDLFloat : kind == 'i' ? kDLInt : kind == 'u' ? kDLUInt : kDLOpaqueHandle;
  a->t.dtype.bits = (uint8_t)(isz * 8);
  a->t.dtype.lanes = 1;
  a->t.data = PyArray_DATA(arr);
  a->t.device.device_type = kDLCPU;
  a->t.ndim = nd;
  a->t.shape = a->shape;
  a->t.strides = a->strides;
  return 1;
}

/* Fills a->t from obj (an ndarray, a DLPack capsule or a __dlpack__ producer); returns
 * 0 with an exception set on failure. stream: the DLPack stream number for CUDA
 * producers. */
static int to_dltensor(PyObject* obj, const char* name, int writable, PyObject* stream, tensor_arg* a) {
  memset(&a->t, 0, sizeof(a->t));
  a->capsule = NULL;
  if (PyArray_Check(obj)) return from_ndarray((PyArrayObject*)obj, name, writable, a);
  /* a DLPack capsule itself (torch_ops passes torch._C._to_dlpack's: no stream
   * handshake, the caller runs on the tensors' stream) or an object's __dlpack__ */
  PyObject* cap = PyCapsule_CheckExact(obj) ? Py_NewRef(obj) : call_dlpack(obj, stream);
  if (!cap) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray or support DLPack (__dlpack__), got %s",
                   name, Py_TYPE(obj)->tp_name);
    }
    return 0;
  }
  DLTensor* src = NULL;
  const char* bad = NULL;
  if (PyCapsule_IsValid(cap, "dltensor")) {
    src = &((DLManagedTensor*)PyCapsule_GetPointer(cap, "dltensor"))->dl_tensor;
  } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    DLManagedTensorVersioned* v = PyCapsule_GetPointer(cap, "dltensor_versioned");
    src = &v->dl_tensor;
    if (writable && (v->flags & DLPACK_FLAG_BITMASK_READ_ONLY)) bad = "must be writable";
  } else {
    bad = ": __dlpack__ did not return a DLPack capsule";
  }
  if (bad) {
    Py_DECREF(cap);
    PyErr_Format(src ? PyExc_ValueError : PyExc_TypeError, bad[0] == ':' ? "%s%s" : "%s %s", name, bad);
    return 0;
  }
  a->t = *src;
  a->capsule = cap;
  return 1;
}

/* Ctrl-C during a long call: the engine polls py_interrupt, which at most every
 * INTERRUPT_POLL_NS runs Python's signal handlers with the GIL; a handler's exception
 * (KeyboardInterrupt) stops the run. Only the main thread runs handlers. */
#define INTERRUPT_POLL_NS 50000000LL
static unsigned long g_main_thread; /* threading.main_thread().ident at import */

typedef struct {
  long long next_ns;
  int raised;
} interrupt_state;

static int py_interrupt(void* ctx) {
  interrupt_state* st = ctx;
  if (st->raised || !kl_py_poll_due(&st->next_ns, INTERRUPT_POLL_NS)) return st->raised;
  PyGILState_STATE g = PyGILState_Ensure();
  st->raised = PyErr_CheckSignals() < 0; /* the exception stays set on this thread */
  PyGILState_Release(g);
  return st->raised;
}

PyObject* kl_py_status_error(kl_status s) {
  PyObject* exc = s == KL_ERR_NOMEM ? PyExc_MemoryError : s == KL_ERR_ARG ? PyExc_ValueError : PyExc_RuntimeError;
  PyErr_SetString(exc, *kl_last_error() ? kl_last_error() : kl_status_str(s));
  return NULL;
}

static int parse_dtype(const char* name, kl_dtype* dt) {
  return kl_py_dtype_from_name(name, dt) ||
         (PyErr_Format(PyExc_ValueError, "dtype must be 'float32', 'float64', 'bfloat16' or 'float16', got '%s'", name), 0);
}

/* The tensors of one call: the eight named ones (None: absent) and the weights. */
enum { NT = 8 };
static const char* const TENSOR_NAMES[NT] = {"x", "lengths", "h0", "c0", "y", "h_n", "c_n", "gate_bias"};

typedef struct {
  tensor_arg* ta;     /* NT + nw */
  const DLTensor** wp; /* nw */
  Py_ssize_t nw;
} call_tensors;

static void call_tensors_free(call_tensors* c) {
  if (c->ta)
    for (Py_ssize_t i = 0; i < NT + c->nw; i++) tensor_arg_clear(&c->ta[i]);
  free(c->ta);
  free(c->wp);
}

/* Describes every tensor of the call into fa; returns 0 with an exception set. The
 * weights' tuple (seq) holds a reference to each for the whole call: the caller's
 * list may be emptied by another thread while the GIL is released. */
static int collect_tensors(PyObject* const in[NT], PyObject* seq, PyObject* dl_stream,
                           kl_forward_args* fa, call_tensors* c) {
  c->nw = PyTuple_GET_SIZE(seq);
  c->ta = calloc((size_t)(NT + c->nw), sizeof(tensor_arg));
  c->wp = calloc((size_t)(c->nw ? c->nw : 1), sizeof(DLTensor*));
  if (!c->ta || !c->wp) {
    PyErr_NoMemory();
    return 0;
  }
  const DLTensor* ptr[NT] = {NULL};
  for (int i = 0; i < NT; i++) {
    if (in[i] == Py_None) continue;
    if (!to_dltensor(in[i], TENSOR_NAMES[i], i >= 4 && i < 7, dl_stream, &c->ta[i])) return 0;
    ptr[i] = &c->ta[i].t;
  }
  for (Py_ssize_t i = 0; i < c->nw; i++) {
    char name[32];
    snprintf(name, sizeof(name), "weights[%zd]", i);
    PyObject* o = PyTuple_GET_ITEM(seq, i);
    if (o == Py_None) {
      PyErr_Format(PyExc_TypeError, "%s is None (omit absent biases with has_bias=False)", name);
      return 0;
    }
    if (!to_dltensor(o, name, 0, dl_stream, &c->ta[NT + i])) return 0;
    c->wp[i] = &c->ta[NT + i].t;
  }
  fa->x = ptr[0], fa->lengths = ptr[1], fa->h0 = ptr[2], fa->c0 = ptr[3];
  fa->y = (DLTensor*)ptr[4], fa->h_n = (DLTensor*)ptr[5], fa->c_n = (DLTensor*)ptr[6];
  fa->gate_bias = ptr[7];
  fa->weights = c->wp;
  fa->num_weights = (int)c->nw;
  return 1;
}

/* kl_lstm_forward with the GIL released and Ctrl-C polled on the main thread;
 * returns 0 with an exception set. */
static int run_forward(kl_forward_args* fa) {
  interrupt_state ist = {kl_py_now_ns() + INTERRUPT_POLL_NS, 0};
  if (g_main_thread && PyThread_get_thread_ident() == g_main_thread) {
    fa->interrupt = py_interrupt;
    fa->interrupt_ctx = &ist;
  }
  kl_status s;
  Py_BEGIN_ALLOW_THREADS
  s = kl_lstm_forward(fa);
  Py_END_ALLOW_THREADS
  if (ist.raised) return 0; /* the signal handler's exception */
  return s == KL_OK || (kl_py_status_error(s), 0);
}

/* forward(...): see its docstring and kl_forward_args; stream: the CUstream CUDA
 * tensors run on (an int; 0: the legacy default stream). */
static PyObject* mod_forward(PyObject* m, PyObject* args, PyObject* kwds) {
  (void)m;
  static char* kwlist[] = {"x", "lengths", "h0", "c0", "weights", "y", "h_n", "c_n",
                           "num_layers", "bidirectional", "has_bias", "proj_size",
                           "batch_first", "reverse", "dtype", "num_threads",
                           "constant_weights", "owner", "gate_bias", "x_gates", "stream", NULL};
  PyObject *xo, *leno, *h0o, *c0o, *wo, *yo, *hno, *cno, *gbo = Py_None;
  kl_forward_args fa;
  memset(&fa, 0, sizeof(fa));
  const char* dtname = "float32";
  unsigned long long owner = 0, stream = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOO|$ippippsipKOpK", kwlist, &xo, &leno, &h0o,
                                   &c0o, &wo, &yo, &hno, &cno, &fa.num_layers, &fa.bidirectional,
                                   &fa.has_bias, &fa.proj_size, &fa.batch_first, &fa.reverse,
                                   &dtname, &fa.num_threads, &fa.constant_weights, &owner, &gbo,
                                   &fa.x_gates, &stream))
    return NULL;
  if (!parse_dtype(dtname, &fa.dtype)) return NULL;
  fa.owner = owner;
  fa.stream = (void*)(uintptr_t)stream;
  PyObject* seq = PySequence_Check(wo) ? PySequence_Tuple(wo) : NULL;
  if (!seq) {
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      PyErr_SetString(PyExc_TypeError, "weights must be a sequence of tensors");
    }
    return NULL;
  }
  PyObject* dl_stream = PyLong_FromUnsignedLongLong(stream ? stream : 1);
  PyObject* const in[NT] = {xo, leno, h0o, c0o, yo, hno, cno, gbo};
  call_tensors c = {NULL, NULL, 0};
  const int ok = dl_stream && collect_tensors(in, seq, dl_stream, &fa, &c) && run_forward(&fa);
  call_tensors_free(&c);
  Py_DECREF(seq);
  Py_XDECREF(dl_stream);
  return ok ? Py_NewRef(Py_None) : NULL;
}

static PyObject* mod_cuda_compile_check(PyObject* m, PyObject* arg) {
  const char* arch = PyUnicode_AsUTF8(arg);
  kl_status s;
  if ((void)m, !arch) return NULL;
  Py_BEGIN_ALLOW_THREADS
  s = kl_cuda_compile_check(arch);
  Py_END_ALLOW_THREADS
  return s == KL_OK ? Py_NewRef(Py_None) : PyErr_Format(PyExc_RuntimeError, "%s", kl_last_error());
}

/* set_nvrtc_path(path): the libnvrtc the first CUDA call loads unless $KOKORO_LSTM_NVRTC is set. */
static PyObject* mod_set_nvrtc_path(PyObject* m, PyObject* arg) {
  PyObject* path = NULL;
  if ((void)m, !PyUnicode_FSConverter(arg, &path)) return NULL;
  const kl_status s = kl_cuda_set_nvrtc_path(PyBytes_AS_STRING(path));
  Py_DECREF(path);
  return s == KL_OK ? Py_NewRef(Py_None) : PyErr_Format(PyExc_ValueError, "%s", kl_last_error());
}

static PyObject* mod_cache_info(PyObject* m, PyObject* unused) {
  (void)m, (void)unused;
  const kl_cache_stats s = kl_cache_get_stats();
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L}", "entries", (long long)s.entries, "bytes",
                       (long long)s.bytes, "hits", (long long)s.hits, "misses", (long long)s.misses,
                       "repacks", (long long)s.repacks, "scratch_bytes", (long long)s.scratch_bytes);
}

/* Test hook: a Python callable run after packing, before caching. */
static PyObject* g_pack_hook;

static void pack_hook_trampoline(void* ctx) {
  (void)ctx;
  PyGILState_STATE st = PyGILState_Ensure();
  PyObject* r = g_pack_hook ? PyObject_CallNoArgs(g_pack_hook) : Py_NewRef(Py_None);
  if (!r) PyErr_WriteUnraisable(g_pack_hook);
  Py_XDECREF(r);
  PyGILState_Release(st);
}

static PyObject* mod_set_pack_hook(PyObject* m, PyObject* fn) {
  if ((void)m, fn != Py_None && !PyCallable_Check(fn))
    return PyErr_Format(PyExc_TypeError, "set_pack_hook takes a callable or None");
  kl_cache_set_pack_hook(NULL, NULL);
  Py_XSETREF(g_pack_hook, fn == Py_None ? NULL : Py_NewRef(fn));
  if (g_pack_hook) kl_cache_set_pack_hook(pack_hook_trampoline, NULL);
  Py_RETURN_NONE;
}

/* ---- threads: the rule is in C (src/core/threads.c); Python passes overrides ---- */
static PyObject* mod_pool_info(PyObject* m, PyObject* unused) {
  (void)m, (void)unused;
  const char* omp = kl_pool_openmp();
  long own, openmp, tvm;
  kl_pool_jobs(&own, &openmp, &tvm);
  const kl_pool_params p = kl_pool_get_params();
  return Py_BuildValue("{s:s,s:z,s:l,s:l,s:l,s:i,s:O,s:O}", "pool", omp ? "openmp" : "own",
                       "openmp", omp, "jobs_own", own, "jobs_openmp", openmp, "jobs_tvm", tvm,
                       "last_threads", kl_pool_last_threads(), "foreign",
                       p.foreign ? Py_True : Py_False, "pin", p.pin ? Py_True : Py_False);
}

/* A count argument in 0..INT_MAX (0: none / the default). */
static int count_arg(PyObject* arg, int* out) {
  const long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred()) return 0;
  if (n >= 0 && n <= INT_MAX) return *out = (int)n, 1;
  PyErr_Format(PyExc_ValueError, "a thread count must be in 0..%d (0: none), got %ld", INT_MAX, n);
  return 0;
}

/* Functions that only return an engine value, set a count (count_arg), or parse
 * their arguments (fmt into the locals decl declares) and return one expression. */
#define NONE(expr) ((expr), Py_NewRef(Py_None))
#define GETTER(fn, conv, ...) \
  static PyObject* fn(PyObject* m, PyObject* unused) { return (void)m, (void)unused, conv(__VA_ARGS__); }
#define PARSED(fn, decl, fmt, result, ...) \
  static PyObject* fn(PyObject* m, PyObject* args) { \
    decl; \
    if ((void)m, !PyArg_ParseTuple(args, fmt, __VA_ARGS__)) return NULL; \
    return result; \
  }
#define COUNT_SETTER(fn, set) \
  static PyObject* fn(PyObject* m, PyObject* arg) { \
    int n; \
    if ((void)m, !count_arg(arg, &n)) return NULL; \
    set(n); \
    Py_RETURN_NONE; \
  }
GETTER(mod_get_num_threads, PyLong_FromLong, kl_get_num_threads())
GETTER(mod_thread_limit, PyLong_FromLong, kl_threads_limit())
GETTER(mod_max_threads, PyLong_FromLong, kl_max_threads())
GETTER(mod_get_isa, PyUnicode_FromString, kl_isa_name(kl_isa_active()))
GETTER(mod_get_f32_amx, PyBool_FromLong, kl_f32_amx_enabled())
GETTER(mod_f16_narrow_rows, PyBool_FromLong, kl_f16_narrow_rows())
GETTER(mod_detected_isa, PyUnicode_FromString, kl_isa_name(kl_isa_detected()))
GETTER(mod_has_avx512bf16, PyBool_FromLong, kl_cpu_has_avx512bf16())
GETTER(mod_blas_name, PyUnicode_FromString, kl_blas_name())
COUNT_SETTER(mod_set_num_threads, kl_set_num_threads)
COUNT_SETTER(mod_set_thread_limit, kl_threads_set_limit)
COUNT_SETTER(mod_set_host_threads, kl_threads_set_host)
GETTER(mod_cache_clear, NONE, kl_cache_clear())
GETTER(mod_env_cache_mb, PyLong_FromLongLong, kl_cache_env_mb())
/* the raw bytes (None: unset) of the variables the thread rule and the cache read */
GETTER(mod_env_values, Py_BuildValue, "(yyy)", getenv("KOKORO_LSTM_NUM_THREADS"),
       getenv("KOKORO_LSTM_MAX_THREADS"), getenv("KOKORO_LSTM_CACHE_MB"))
PARSED(mod_resolve_threads, int requested; int host, "ii",
       PyLong_FromLong(kl_threads_resolve_with(requested, host)), &requested, &host)
PARSED(mod_input_layout_ok, long long T; long long B; long long st; long long sb; long long in, "LLLLL",
       PyBool_FromLong(kl_input_layout_ok(T, B, st, sb, in)), &T, &B, &st, &sb, &in)
PARSED(mod_cgroup_cpu_limit, const char* root; const char* proc, "ss",
       PyFloat_FromDouble(kl_cgroup_cpu_limit(root, proc)), &root, &proc)
PARSED(mod_set_cgroup_paths, const char* root; const char* proc, "zz",
       NONE(kl_threads_set_cgroup_paths(root, proc)), &root, &proc)
PARSED(mod_set_pool_params, kl_pool_params p, "ii", NONE(kl_pool_set_params(p)), &p.foreign, &p.pin)
PARSED(mod_env_count, const char* name, "s", PyLong_FromLong(kl_env_count(name)), &name)
PARSED(mod_set_f32_amx, int on, "p", NONE(kl_f32_amx_set(on)), &on)
PARSED(mod_cache_drop_owner, unsigned long long owner, "K", NONE(kl_cache_drop_owner(owner)), &owner)

static PyObject* mod_usable_cpus(PyObject* m, PyObject* args) {
  const char *root = NULL, *proc = NULL;
  if ((void)m, !PyArg_ParseTuple(args, "|zz", &root, &proc)) return NULL;
  if (!root != !proc) return PyErr_Format(PyExc_ValueError, "usable_cpus takes both paths or neither");
  return PyLong_FromLong(root ? kl_cpus_within(kl_cgroup_cpu_limit(root, proc)) : kl_usable_cpus());
}

static PyObject* mod_tvm_register(PyObject* m, PyObject* arg) {
  (void)m;
  const char* path = PyUnicode_AsUTF8(arg);
  if (!path) return NULL;
  char err[512];
  const int n = kl_py_tvm_load(path, err, sizeof(err));
  if (n == -1) return PyErr_Format(PyExc_OSError, "cannot load %s: %s", path, err);
  if (n < 0) return PyErr_Format(PyExc_RuntimeError, "kokoro_lstm: %s (%s)", err, path);
  return PyLong_FromLong(n);
}

/* ---- module functions ----------------------------------------------------- */

static PyObject* mod_set_isa(PyObject* m, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  char err[160];
  if ((void)m, !name) return NULL;
  return kl_py_isa_set(name, err, sizeof(err)) ? Py_NewRef(Py_None) : PyErr_Format(PyExc_ValueError, "%s", err);
}

/* activation(kind, x): kl_f32_activation ('sigmoid' or 'tanh') of x as float32 (tests). */
static PyObject* mod_activation(PyObject* m, PyObject* args) {
  const char* kind;
  PyObject* xo;
  if ((void)m, !PyArg_ParseTuple(args, "sO", &kind, &xo)) return NULL;
  const int k = !strcmp(kind, "sigmoid") ? 0 : !strcmp(kind, "tanh") ? 1 : -1;
  if (k < 0) return PyErr_Format(PyExc_ValueError, "kind must be 'sigmoid' or 'tanh', got '%s'", kind);
  PyArrayObject* x = (PyArrayObject*)PyArray_FROMANY(xo, NPY_FLOAT32, 0, 0, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  PyArrayObject* y = x ? (PyArrayObject*)PyArray_NewLikeArray(x, NPY_CORDER, NULL, 0) : NULL;
  if (y) {
    const size_t n = (size_t)PyArray_SIZE(x);
    const float* xp = PyArray_DATA(x);
    float* yp = PyArray_DATA(y);
    Py_BEGIN_ALLOW_THREADS
    kl_f32_activation(k, n, xp, yp);
    Py_END_ALLOW_THREADS
  }
  Py_XDECREF(x);
  return (PyObject*)y;
}

/* bench_*(args): parse, run the benchmark with the GIL released, its best seconds
 * (ValueError(msg) when it refused: t < 0). */
#define BENCH(fn, decl, fmt, call, msg, ...) \
  static PyObject* fn(PyObject* m, PyObject* args) { \
    decl; \
    double t; \
    if ((void)m, !PyArg_ParseTuple(args, fmt, __VA_ARGS__)) return NULL; \
    Py_BEGIN_ALLOW_THREADS \
    t = call; \
    Py_END_ALLOW_THREADS \
    return t < 0 ? PyErr_Format(PyExc_ValueError, "%s", msg) : PyFloat_FromDouble(t); \
  }
BENCH(mod_bench_sgemm, int M; int N; int K; int nth; int reps, "iiiii", kl_bench_sgemm(M, N, K, nth, reps),
      "bench_sgemm: need positive sizes, threads and reps (or out of memory)", &M, &N, &K, &nth, &reps)
BENCH(mod_bench_stream, Py_ssize_t nbytes; int reps, "ni",
      nbytes < 64 ? -1.0 : kl_bench_stream((size_t)nbytes, reps),
      "bench_stream: need nbytes >= 64 and reps >= 1 (or out of memory)", &nbytes, &reps)
BENCH(mod_bench_fingerprint, Py_ssize_t nbytes; int nth; int reps, "nii",
      nbytes < 64 ? -1.0 : kl_bench_fingerprint((size_t)nbytes, nth, reps),
      "bench_fingerprint: need nbytes >= 64, threads and reps >= 1", &nbytes, &nth, &reps)

#define METH_KW (METH_VARARGS | METH_KEYWORDS)
#define KL_PY_METHOD(name, kind, doc) {#name, (PyCFunction)(void (*)(void))mod_##name, METH_##kind, doc},
static PyMethodDef module_methods[] = {
#include "methods.def"
    {NULL, NULL, 0, NULL}};
#undef KL_PY_METHOD

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_core",
                                       "C core of kokoro_lstm (see kokoro_lstm.h).", -1,
                                       module_methods, NULL, NULL, NULL, NULL};

/* Exported (the rest of the engine is hidden): threadpoolctl finds the extension
 * by this symbol (kokoro_lstm/_threads.py). */
__attribute__((visibility("default"))) int kokoro_lstm_get_num_threads(void) {
  return kl_get_num_threads();
}

PyMODINIT_FUNC PyInit__core(void) {
  import_array();
  PyObject* threading = PyImport_ImportModule("threading");
  PyObject* main = threading ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
  PyObject* ident = main ? PyObject_GetAttrString(main, "ident") : NULL;
  g_main_thread = ident ? PyLong_AsUnsignedLong(ident) : 0;
  if (PyErr_Occurred()) PyErr_Clear(), g_main_thread = 0; /* no interrupt checks then; the module loads */
  Py_XDECREF(ident), Py_XDECREF(main), Py_XDECREF(threading);
  return PyModule_Create(&moduledef);
}
