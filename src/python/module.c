/* kokoro_lstm._core: the thin CPython binding of the C core (the only file
 * that includes Python.h). It checks types and shapes, releases the GIL
 * around compute and maps kl_status to exceptions; argument conveniences
 * (dtype casts, batch_first, defaults) live in kokoro_lstm/numpy_api.py. */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <numpy/arrayobject.h>
#include <stdlib.h>
#include <string.h>

#include "glue.h"
#include "kokoro_lstm.h"
#include "kokoro_lstm_testing.h"
#include "random.h"
#include "threads.h"

/* ---- forward: every front's road into kl_lstm_forward ------------------------
 *
 * Tensors are NumPy arrays (described in place), any object with __dlpack__
 * (torch tensors, CuPy arrays, ...), a DLPack capsule, or None. The binding only turns them into DLTensors;
 * kl_lstm_forward validates everything once. */

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
  if (!dev) {
    PyErr_Clear();
    return PyObject_CallMethod(obj, "__dlpack__", NULL);
  }
  long type = -1;
  if (PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) >= 1) type = PyLong_AsLong(PyTuple_GET_ITEM(dev, 0));
  Py_DECREF(dev);
  if (type == -1 && PyErr_Occurred()) return NULL;
  if (type != kDLCUDA) return PyObject_CallMethod(obj, "__dlpack__", NULL);
  PyObject* kw = Py_BuildValue("{s:O}", "stream", stream);
  if (!kw) return NULL;
  PyObject* meth = PyObject_GetAttrString(obj, "__dlpack__");
  PyObject* empty = PyTuple_New(0);
  PyObject* cap = meth && empty ? PyObject_Call(meth, empty, kw) : NULL;
  Py_XDECREF(meth);
  Py_XDECREF(empty);
  Py_DECREF(kw);
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

/* Ctrl-C during a long call: the engine asks py_interrupt on the calling thread
 * between layers and every KL_INTERRUPT_STEPS steps; at most every
 * INTERRUPT_POLL_NS it takes the GIL and runs Python's signal handlers, and a
 * handler's exception (KeyboardInterrupt) stops the run and is raised by the
 * call. Only the main thread runs signal handlers, so calls on other threads
 * pass no callback; calls shorter than INTERRUPT_POLL_NS never take the GIL. */
#define INTERRUPT_POLL_NS 50000000LL
static unsigned long g_main_thread; /* threading.main_thread().ident at import */

typedef struct {
  long long next_ns;
  int raised;
} interrupt_state;

static int py_interrupt(void* ctx) {
  interrupt_state* st = ctx;
  if (st->raised) return 1;
  const long long t = kl_py_now_ns();
  if (t < st->next_ns) return 0;
  st->next_ns = t + INTERRUPT_POLL_NS;
  PyGILState_STATE g = PyGILState_Ensure();
  st->raised = PyErr_CheckSignals() < 0; /* the exception stays set on this thread */
  PyGILState_Release(g);
  return st->raised;
}

/* The exception of a failed engine call: MemoryError, ValueError (KL_ERR_ARG) or
 * RuntimeError, with the engine's message. */
static PyObject* status_error(kl_status s) {
  PyObject* exc = s == KL_ERR_NOMEM ? PyExc_MemoryError : s == KL_ERR_ARG ? PyExc_ValueError : PyExc_RuntimeError;
  PyErr_SetString(exc, *kl_last_error() ? kl_last_error() : kl_status_str(s));
  return NULL;
}

static int parse_dtype(const char* name, kl_dtype* dt) {
  if (kl_py_dtype_from_name(name, dt)) return 1;
  PyErr_Format(PyExc_ValueError, "dtype must be 'float32', 'float64', 'bfloat16' or 'float16', got '%s'", name);
  return 0;
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
  return s == KL_OK || (status_error(s), 0);
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

static PyObject* mod_cache_drop_owner(PyObject* m, PyObject* arg) {
  (void)m;
  const unsigned long long owner = PyLong_AsUnsignedLongLong(arg);
  if (owner == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  kl_cache_drop_owner(owner);
  Py_RETURN_NONE;
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
  if (g_pack_hook) {
    PyObject* r = PyObject_CallNoArgs(g_pack_hook);
    if (!r) PyErr_WriteUnraisable(g_pack_hook);
    Py_XDECREF(r);
  }
  PyGILState_Release(st);
}

static PyObject* mod_set_pack_hook(PyObject* m, PyObject* fn) {
  (void)m;
  if (fn != Py_None && !PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "set_pack_hook takes a callable or None");
    return NULL;
  }
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
  if (n < 0 || n > INT_MAX) {
    PyErr_Format(PyExc_ValueError, "a thread count must be in 0..%d (0: none), got %ld", INT_MAX, n);
    return 0;
  }
  *out = (int)n;
  return 1;
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

static PyObject* mod_usable_cpus(PyObject* m, PyObject* args) {
  (void)m;
  const char *root = NULL, *proc = NULL;
  if (!PyArg_ParseTuple(args, "|zz", &root, &proc)) return NULL;
  if (!root != !proc) {
    PyErr_SetString(PyExc_ValueError, "usable_cpus takes both paths or neither");
    return NULL;
  }
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
  (void)m;
  const char* name = PyUnicode_AsUTF8(arg);
  kl_isa isa;
  if (!name) return NULL;
  if (!kl_py_isa_from_name(name, &isa))
    return PyErr_Format(PyExc_ValueError, "unknown ISA '%s' (expected scalar, avx2, avx512, avx512-bf16, "
                        "avx512-amx, neon or neon-bf16)", name);
  if (kl_isa_set(isa) != KL_OK)
    return PyErr_Format(PyExc_ValueError, "this CPU does not support ISA '%s' (best: %s)", name,
                        kl_isa_name(kl_isa_detected()));
  Py_RETURN_NONE;
}

static PyObject* mod_set_f32_amx(PyObject* m, PyObject* arg) {
  (void)m;
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  kl_f32_amx_set(on);
  Py_RETURN_NONE;
}

static PyObject* mod_activation(PyObject* m, PyObject* args) {
  (void)m;
  const char* kind;
  PyObject* xo;
  if (!PyArg_ParseTuple(args, "sO", &kind, &xo)) return NULL;
  int k;
  if (strcmp(kind, "sigmoid") == 0) k = 0;
  else if (strcmp(kind, "tanh") == 0) k = 1;
  else {
    PyErr_Format(PyExc_ValueError, "kind must be 'sigmoid' or 'tanh', got '%s'", kind);
    return NULL;
  }
  PyArrayObject* x = (PyArrayObject*)PyArray_FROMANY(xo, NPY_FLOAT32, 0, 0, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  if (!x) return NULL;
  PyArrayObject* y = (PyArrayObject*)PyArray_NewLikeArray(x, NPY_CORDER, NULL, 0);
  if (!y) {
    Py_DECREF(x);
    return NULL;
  }
  const size_t n = (size_t)PyArray_SIZE(x);
  const float* xp = PyArray_DATA(x);
  float* yp = PyArray_DATA(y);
  Py_BEGIN_ALLOW_THREADS
  kl_f32_activation(k, n, xp, yp);
  Py_END_ALLOW_THREADS
  Py_DECREF(x);
  return (PyObject*)y;
}

/* A benchmark's best seconds, or ValueError(msg) when it refused (t < 0). */
static PyObject* bench_result(double t, const char* msg) {
  if (t < 0) return PyErr_Format(PyExc_ValueError, "%s", msg);
  return PyFloat_FromDouble(t);
}

/* bench_*(args): parse, run the benchmark with the GIL released, its best seconds. */
#define BENCH(fn, decl, fmt, call, msg, ...) \
  static PyObject* fn(PyObject* m, PyObject* args) { \
    decl; \
    double t; \
    if ((void)m, !PyArg_ParseTuple(args, fmt, __VA_ARGS__)) return NULL; \
    Py_BEGIN_ALLOW_THREADS \
    t = call; \
    Py_END_ALLOW_THREADS \
    return bench_result(t, msg); \
  }
BENCH(mod_bench_sgemm, int M; int N; int K; int nth; int reps, "iiiii", kl_bench_sgemm(M, N, K, nth, reps),
      "bench_sgemm: need positive sizes, threads and reps (or out of memory)", &M, &N, &K, &nth, &reps)
BENCH(mod_bench_stream, Py_ssize_t nbytes; int reps, "ni",
      nbytes < 64 ? -1.0 : kl_bench_stream((size_t)nbytes, reps),
      "bench_stream: need nbytes >= 64 and reps >= 1 (or out of memory)", &nbytes, &reps)
BENCH(mod_bench_fingerprint, Py_ssize_t nbytes; int nth; int reps, "nii",
      nbytes < 64 ? -1.0 : kl_bench_fingerprint((size_t)nbytes, nth, reps),
      "bench_fingerprint: need nbytes >= 64, threads and reps >= 1", &nbytes, &nth, &reps)

/* random_fill: see its docstring and src/ops/random.h; seed's int64 bits are the key. */
static PyObject* mod_random_fill(PyObject* m, PyObject* args, PyObject* kwds) {
  (void)m;
  static char* kwlist[] = {"dist", "seed", "stream", "out", "start", "num_threads", NULL};
  int dist, nth = 0;
  long long seed, stream, start = 0;
  PyObject* out;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "iLLO|Li", kwlist, &dist, &seed, &stream, &out,
                                   &start, &nth))
    return NULL;
  if (stream < 0) return PyErr_Format(PyExc_ValueError, "random_fill: stream must be >= 0, got %lld", stream);
  tensor_arg ta;
  float* y = NULL;
  int64_t n = 0;
  const int ok = PyArray_Check(out) && to_dltensor(out, "out", 1, NULL, &ta) && kl_py_f32_span(&ta.t, &y, &n);
  if (!ok) {
    PyErr_Clear();
    return PyErr_Format(PyExc_TypeError, "random_fill: out must be a writable C-contiguous float32 numpy array");
  }
  kl_status s;
  Py_BEGIN_ALLOW_THREADS
  s = kl_f32_random(dist, (uint64_t)seed, (uint64_t)stream, (int64_t)start, n, y, nth);
  Py_END_ALLOW_THREADS
  if (s == KL_OK) return Py_NewRef(Py_None);
  if (s == KL_ERR_ARG) return status_error(s);
  return PyErr_Format(s == KL_ERR_NOMEM ? PyExc_MemoryError : PyExc_RuntimeError, "%s", kl_status_str(s));
}

static PyMethodDef module_methods[] = {
    {"bench_fingerprint", mod_bench_fingerprint, METH_VARARGS, "bench_fingerprint(nbytes, num_threads, reps): best seconds of the cache's staleness check."},
    {"bench_sgemm", mod_bench_sgemm, METH_VARARGS, "bench_sgemm(M, N, K, num_threads, reps): best seconds of the engine-style sgemm."},
    {"bench_stream", mod_bench_stream, METH_VARARGS, "bench_stream(nbytes, reps): best seconds to read a cached buffer once."},
    {"set_isa", mod_set_isa, METH_O, "set_isa(name): force 'scalar', 'avx2', 'avx512', 'avx512-bf16', 'avx512-amx' (x86-64), 'neon' or 'neon-bf16' (aarch64) for engines built afterwards."},
    {"get_isa", mod_get_isa, METH_NOARGS, "The ISA new engines use."},
    {"set_f32_amx", mod_set_f32_amx, METH_O, "set_f32_amx(on): float32 input projections of large calls on AMX tiles (six bfloat16 products) for engines built afterwards (KOKORO_LSTM_F32_AMX=1)."},
    {"get_f32_amx", mod_get_f32_amx, METH_NOARGS, "Whether new engines run large float32 input projections on AMX tiles."},
    {"f16_narrow_rows", mod_f16_narrow_rows, METH_NOARGS, "Whether float16 kernels widen a single row's halves 8 at a time (measured once per process, or KOKORO_LSTM_F16_WIDEN)."},
    {"detected_isa", mod_detected_isa, METH_NOARGS, "The best ISA this CPU supports."},
    {"has_avx512bf16", mod_has_avx512bf16, METH_NOARGS, "Whether AVX512_BF16 kernels are used for bfloat16."},
    {"blas_name", mod_blas_name, METH_NOARGS, "The BLAS this build links."},
    {"random_fill", (PyCFunction)(void (*)(void))mod_random_fill, METH_VARARGS | METH_KEYWORDS, "random_fill(dist, seed, stream, out, start=0, num_threads=0): elements start.. of the counter-based draw (seed, stream >= 0) into the writable C-contiguous float32 array out (dist 0 uniform [0, 1), 1 normal)."},
    {"activation", mod_activation, METH_VARARGS, "activation(kind, x): vectorized float32 sigmoid/tanh (tests)."},
    {"forward", (PyCFunction)(void (*)(void))mod_forward, METH_VARARGS | METH_KEYWORDS,
     "forward(x, lengths, h0, c0, weights, y, h_n, c_n, *, num_layers, bidirectional, has_bias, "
     "proj_size=0, batch_first=False, reverse=False, dtype='float32', num_threads=0, "
     "constant_weights=False, owner=0, gate_bias=None, x_gates=False, stream=0): "
     "the C entry kl_lstm_forward (GIL released)."},
    {"cache_clear", mod_cache_clear, METH_NOARGS, "Drop every cached packed LSTM and the CUDA work buffers."},
    {"cuda_compile_check", mod_cuda_compile_check, METH_O, "cuda_compile_check(arch): compile the CUDA kernels for arch ('sm_80', 'sm_90a') with NVRTC; raises RuntimeError with its log."},
    {"set_nvrtc_path", mod_set_nvrtc_path, METH_O, "set_nvrtc_path(path): the libnvrtc the first CUDA call loads unless KOKORO_LSTM_NVRTC is set."},
    {"cache_info", mod_cache_info, METH_NOARGS, "Weight cache entries, bytes and counters, and the bytes of work buffers kept for reuse."},
    {"cache_drop_owner", mod_cache_drop_owner, METH_O, "Drop the cache entries of one owner token."},
    {"input_layout_ok", mod_input_layout_ok, METH_VARARGS, "input_layout_ok(T, B, x_st, x_sb, I): whether the engine reads x in place."},
    {"set_pack_hook", mod_set_pack_hook, METH_O, "Test hook run after packing, before caching."},
    {"get_num_threads", mod_get_num_threads, METH_NOARGS, "The engine's default thread count."},
    {"pool_info", mod_pool_info, METH_NOARGS, "Which threads run parallel calls: {'pool': 'openmp' or 'own' (calls not made by TVM), 'openmp': libgomp's path or None, 'jobs_own', 'jobs_openmp', 'jobs_tvm': parallel jobs each pool has run}."},
    {"set_num_threads", mod_set_num_threads, METH_O, "Set the default thread count (0: automatic)."},
    {"resolve_threads", mod_resolve_threads, METH_VARARGS, "resolve_threads(requested, host): the thread rule (0: the default; host: the host runtime's count, 0 none)."},
    {"set_thread_limit", mod_set_thread_limit, METH_O, "A limit on every thread count (0: none)."},
    {"thread_limit", mod_thread_limit, METH_NOARGS, "The limit on every thread count (0: none)."},
    {"set_host_threads", mod_set_host_threads, METH_O, "The host runtime's thread count, a cap on the automatic default (0: none)."},
    {"max_threads", mod_max_threads, METH_NOARGS, "The cap on every count: KOKORO_LSTM_MAX_THREADS, else the usable CPUs."},
    {"usable_cpus", mod_usable_cpus, METH_VARARGS, "usable_cpus(root=None, proc_cgroup=None): CPUs in the affinity mask, at most the cgroup CPU quota rounded up."},
    {"cgroup_cpu_limit", mod_cgroup_cpu_limit, METH_VARARGS, "cgroup_cpu_limit(root, proc_cgroup): the CPU quota in CPUs (0.0: none)."},
    {"set_cgroup_paths", mod_set_cgroup_paths, METH_VARARGS, "Test hook: set_cgroup_paths(root, proc_cgroup) for the process's quota (None, None: the default)."},
    {"env_count", mod_env_count, METH_VARARGS, "env_count(name): the environment variable as a thread count, 0 if unset or not one."},
    {"env_cache_mb", mod_env_cache_mb, METH_NOARGS, "KOKORO_LSTM_CACHE_MB as the cache reads it: MiB, -1 unset or blank, -2 ignored."},
    {"env_values", mod_env_values, METH_NOARGS, "(KOKORO_LSTM_NUM_THREADS, KOKORO_LSTM_MAX_THREADS, KOKORO_LSTM_CACHE_MB) as bytes, None if unset."},
    {"set_pool_params", mod_set_pool_params, METH_VARARGS, "set_pool_params(foreign, pin): 1/0, or -1 for the environment's default."},
    {"tvm_register", mod_tvm_register, METH_O, "Register the tvm-ffi functions with libtvm_ffi at path."},
    {NULL, NULL, 0, NULL}};

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
  if (PyErr_Occurred()) { /* no interrupt checks then; the module still loads */
    PyErr_Clear();
    g_main_thread = 0;
  }
  Py_XDECREF(ident);
  Py_XDECREF(main);
  Py_XDECREF(threading);
  return PyModule_Create(&moduledef);
}
