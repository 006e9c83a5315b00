/* kokoro_lstm._core: the thin CPython binding of the C core (the only file
 * that includes Python.h). It checks types and shapes, releases the GIL
 * around compute and maps kl_status to exceptions; argument conveniences
 * (dtype casts, batch_first, defaults) live in kokoro_lstm/numpy_api.py. */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <numpy/arrayobject.h>
#include <string.h>

#include "kokoro_lstm.h"

static PyObject* raise_status(kl_status s, const char* what) {
  PyObject* exc = s == KL_ERR_NOMEM ? PyExc_MemoryError
                  : s == KL_ERR_ARG ? PyExc_ValueError
                                    : PyExc_RuntimeError;
  PyErr_Format(exc, "%s: %s", what, kl_status_str(s));
  return NULL;
}

static int parse_dtype(const char* name, kl_dtype* dt) {
  if (strcmp(name, "float32") == 0) *dt = KL_F32;
  else if (strcmp(name, "float64") == 0) *dt = KL_F64;
  else if (strcmp(name, "bfloat16") == 0) *dt = KL_BF16;
  else {
    PyErr_Format(PyExc_ValueError, "dtype must be 'float32', 'float64' or 'bfloat16', got '%s'", name);
    return 0;
  }
  return 1;
}

/* Checks that obj is an aligned C-contiguous ndarray of type npy_type and
 * the given shape (-1 = any). Returns a borrowed pointer or NULL (error set). */
static PyArrayObject* check_array(PyObject* obj, const char* name, int npy_type, int ndim,
                                  const npy_intp* shape, int writable) {
  if (!PyArray_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray", name);
    return NULL;
  }
  PyArrayObject* a = (PyArrayObject*)obj;
  if (PyArray_TYPE(a) != npy_type) {
    PyErr_Format(PyExc_TypeError, "%s must have dtype %s", name,
                 npy_type == NPY_FLOAT64 ? "float64" : npy_type == NPY_INT64 ? "int64" : "float32");
    return NULL;
  }
  if (PyArray_NDIM(a) != ndim) {
    PyErr_Format(PyExc_ValueError, "%s must be %d-D, got %d-D", name, ndim, PyArray_NDIM(a));
    return NULL;
  }
  for (int i = 0; i < ndim; i++)
    if (shape[i] >= 0 && PyArray_DIM(a, i) != shape[i]) {
      PyErr_Format(PyExc_ValueError, "%s: dimension %d must be %zd, got %zd", name, i,
                   (Py_ssize_t)shape[i], (Py_ssize_t)PyArray_DIM(a, i));
      return NULL;
    }
  if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) {
    PyErr_Format(PyExc_ValueError, "%s must be C-contiguous and aligned", name);
    return NULL;
  }
  if (writable && !PyArray_ISWRITEABLE(a)) {
    PyErr_Format(PyExc_ValueError, "%s must be writable", name);
    return NULL;
  }
  return a;
}

/* ---- Engine ------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  kl_lstm* lstm;
  int npy_type;
} EngineObject;

static void Engine_dealloc(EngineObject* self) {
  kl_lstm_free(self->lstm);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

/* Engine(input_size, hidden_size, num_layers, bidirectional, proj_size, dtype, weights, reverse=False)
 * weights: sequence of num_layers*D tuples (w_ih, w_hh, b_ih|None, b_hh|None, w_hr|None),
 * C-contiguous arrays of the io dtype (float64 for 'float64', float32 otherwise). */
static int Engine_init(EngineObject* self, PyObject* args, PyObject* kwds) {
  static char* kwlist[] = {"input_size", "hidden_size", "num_layers", "bidirectional",
                           "proj_size",  "dtype",       "weights",    "reverse", NULL};
  kl_lstm_desc desc;
  desc.reverse = 0;
  const char* dtname;
  PyObject* weights;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "iiipisO|p", kwlist, &desc.input_size,
                                   &desc.hidden_size, &desc.num_layers, &desc.bidirectional,
                                   &desc.proj_size, &dtname, &weights, &desc.reverse))
    return -1;
  if (!parse_dtype(dtname, &desc.dtype)) return -1;
  if (desc.input_size < 1 || desc.hidden_size < 1 || desc.num_layers < 1 || desc.proj_size < 0 ||
      desc.proj_size >= desc.hidden_size || (desc.reverse && desc.bidirectional)) {
    PyErr_SetString(PyExc_ValueError,
                    "need input_size >= 1, hidden_size >= 1, num_layers >= 1, 0 <= proj_size < hidden_size, "
                    "and reverse only when unidirectional");
    return -1;
  }
  if (self->lstm) {
    PyErr_SetString(PyExc_RuntimeError, "Engine is already initialized");
    return -1;
  }
  const int D = desc.bidirectional ? 2 : 1;
  const int n = desc.num_layers * D;
  const int npy_type = desc.dtype == KL_F64 ? NPY_FLOAT64 : NPY_FLOAT32;
  PyObject* seq = PySequence_Fast(weights, "weights must be a sequence");
  if (!seq) return -1;
  int ok = 0;
  kl_weights* w = NULL;
  if (PySequence_Fast_GET_SIZE(seq) != n) {
    PyErr_Format(PyExc_ValueError, "weights: expected %d (layer, direction) entries, got %zd", n,
                 PySequence_Fast_GET_SIZE(seq));
    goto done;
  }
  w = calloc((size_t)n, sizeof(kl_weights));
  if (!w) {
    PyErr_NoMemory();
    goto done;
  }
  const npy_intp H4 = 4 * (npy_intp)desc.hidden_size;
  const npy_intp R = desc.proj_size ? desc.proj_size : desc.hidden_size;
  for (int i = 0; i < n; i++) {
    PyObject* t = PySequence_Fast_GET_ITEM(seq, i);
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 5) {
      PyErr_SetString(PyExc_TypeError, "weights entries must be 5-tuples (w_ih, w_hh, b_ih, b_hh, w_hr)");
      goto done;
    }
    const npy_intp in_size = i < D ? desc.input_size : D * R;
    const npy_intp s_ih[2] = {H4, in_size}, s_hh[2] = {H4, R}, s_b[1] = {H4},
                   s_hr[2] = {desc.proj_size, desc.hidden_size};
    const char* names[5] = {"w_ih", "w_hh", "b_ih", "b_hh", "w_hr"};
    const npy_intp* shapes[5] = {s_ih, s_hh, s_b, s_b, s_hr};
    const int ndims[5] = {2, 2, 1, 1, 2};
    const void* ptrs[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int j = 0; j < 5; j++) {
      PyObject* o = PyTuple_GET_ITEM(t, j);
      if (o == Py_None) {
        if (j < 2 || (j == 4 && desc.proj_size > 0)) {
          PyErr_Format(PyExc_ValueError, "weights[%d]: %s is required", i, names[j]);
          goto done;
        }
        continue;
      }
      if (j == 4 && desc.proj_size == 0) {
        PyErr_Format(PyExc_ValueError, "weights[%d]: w_hr given but proj_size is 0", i);
        goto done;
      }
      char name[48];
      snprintf(name, sizeof(name), "weights[%d].%s", i, names[j]);
      PyArrayObject* a = check_array(o, name, npy_type, ndims[j], shapes[j], 0);
      if (!a) goto done;
      ptrs[j] = PyArray_DATA(a);
    }
    w[i].w_ih = ptrs[0];
    w[i].w_hh = ptrs[1];
    w[i].b_ih = ptrs[2];
    w[i].b_hh = ptrs[3];
    w[i].w_hr = ptrs[4];
  }
  kl_status s;
  Py_BEGIN_ALLOW_THREADS
  s = kl_lstm_create(&desc, w, &self->lstm);
  Py_END_ALLOW_THREADS
  if (s != KL_OK) {
    raise_status(s, "packing LSTM weights");
    goto done;
  }
  self->npy_type = npy_type;
  ok = 1;
done:
  free(w);
  Py_DECREF(seq);
  return ok ? 0 : -1;
}

/* run(x, y, h0, c0, h_n, c_n, lengths, num_threads)
 * x: [T, B, I] io dtype, feature axis contiguous (any other strides);
 * y: [T, B, D*R] writable, feature axis contiguous; h0/c0/h_n/c_n contiguous
 * [L*D, B, R|H] or None; lengths: int64 [B] or None. */
static PyObject* Engine_run(EngineObject* self, PyObject* args) {
  PyObject *xo, *yo, *h0o, *c0o, *hno, *cno, *leno;
  int nth;
  if (!PyArg_ParseTuple(args, "OOOOOOOi", &xo, &yo, &h0o, &c0o, &hno, &cno, &leno, &nth)) return NULL;
  if (!self->lstm) {
    PyErr_SetString(PyExc_RuntimeError, "Engine is not initialized");
    return NULL;
  }
  if (nth < 1) {
    PyErr_Format(PyExc_ValueError, "num_threads must be >= 1, got %d", nth);
    return NULL;
  }
  const kl_lstm_desc* d = kl_lstm_get_desc(self->lstm);
  const npy_intp D = d->bidirectional ? 2 : 1, LD = d->num_layers * D;
  const npy_intp R = d->proj_size ? d->proj_size : d->hidden_size, H = d->hidden_size;
  const int type = self->npy_type;
  const npy_intp esz = type == NPY_FLOAT64 ? 8 : 4;
  PyArrayObject* x = NULL;
  PyObject* result = NULL;

  if (!PyArray_Check(xo) || PyArray_TYPE((PyArrayObject*)xo) != type ||
      PyArray_NDIM((PyArrayObject*)xo) != 3) {
    PyErr_Format(PyExc_TypeError, "x must be a 3-D ndarray of dtype %s", type == NPY_FLOAT64 ? "float64" : "float32");
    return NULL;
  }
  x = (PyArrayObject*)xo;
  const npy_intp T = PyArray_DIM(x, 0), B = PyArray_DIM(x, 1);
  if (T < 1) {
    PyErr_SetString(PyExc_ValueError, "x: sequence length must be >= 1");
    return NULL;
  }
  if (PyArray_DIM(x, 2) != d->input_size) {
    PyErr_Format(PyExc_ValueError, "x: expected input_size %d, got %zd", d->input_size,
                 (Py_ssize_t)PyArray_DIM(x, 2));
    return NULL;
  }
  const npy_intp y_shape[3] = {T, B, D * R};
  if (!PyArray_Check(yo) || PyArray_TYPE((PyArrayObject*)yo) != type ||
      PyArray_NDIM((PyArrayObject*)yo) != 3) {
    PyErr_SetString(PyExc_TypeError, "y must be a 3-D ndarray of the engine's dtype");
    return NULL;
  }
  PyArrayObject* y = (PyArrayObject*)yo;
  for (int i = 0; i < 3; i++)
    if (PyArray_DIM(y, i) != y_shape[i]) {
      PyErr_Format(PyExc_ValueError, "y: expected shape (%zd, %zd, %zd)", (Py_ssize_t)T,
                   (Py_ssize_t)B, (Py_ssize_t)(D * R));
      return NULL;
    }
  if (B == 0) Py_RETURN_NONE; /* empty batch: nothing to compute */
  if (!PyArray_ISWRITEABLE(y) || !PyArray_ISALIGNED(y) || PyArray_STRIDE(y, 2) != esz ||
      PyArray_STRIDE(y, 0) % esz || PyArray_STRIDE(y, 1) % esz ||
      (T > 1 && PyArray_STRIDE(y, 0) < 0) || (B > 1 && PyArray_STRIDE(y, 1) < 0)) {
    PyErr_SetString(PyExc_ValueError, "y must be writable, aligned, with a contiguous last axis");
    return NULL;
  }
  const npy_intp s_h[3] = {LD, B, R}, s_c[3] = {LD, B, H}, s_len[1] = {B};
  const void *h0 = NULL, *c0 = NULL, *len = NULL;
  void *hn = NULL, *cn = NULL;
  PyArrayObject* a;
  if (h0o != Py_None) { if (!(a = check_array(h0o, "h0", type, 3, s_h, 0))) return NULL; h0 = PyArray_DATA(a); }
  if (c0o != Py_None) { if (!(a = check_array(c0o, "c0", type, 3, s_c, 0))) return NULL; c0 = PyArray_DATA(a); }
  if (hno != Py_None) { if (!(a = check_array(hno, "h_n", type, 3, s_h, 1))) return NULL; hn = PyArray_DATA(a); }
  if (cno != Py_None) { if (!(a = check_array(cno, "c_n", type, 3, s_c, 1))) return NULL; cn = PyArray_DATA(a); }
  if (leno != Py_None) {
    if (!(a = check_array(leno, "lengths", NPY_INT64, 1, s_len, 0))) return NULL;
    len = PyArray_DATA(a);
    const int64_t* l = len;
    for (npy_intp b = 0; b < B; b++)
      if (l[b] < 1 || l[b] > T) {
        PyErr_Format(PyExc_ValueError, "lengths[%zd] = %lld is outside 1..%zd", (Py_ssize_t)b,
                     (long long)l[b], (Py_ssize_t)T);
        return NULL;
      }
  }
  /* The GEMM reads x rows as one strided sequence; anything else is copied. */
  Py_INCREF(x);
  const npy_intp st = PyArray_STRIDE(x, 0), sb = PyArray_STRIDE(x, 1);
  const int uniform = PyArray_ISALIGNED(x) && PyArray_STRIDE(x, 2) == esz && st % esz == 0 &&
                      sb % esz == 0 &&
                      kl_input_layout_ok(T, B, st / esz, sb / esz, d->input_size);
  if (!uniform) {
    PyArrayObject* copy = (PyArrayObject*)PyArray_NewCopy(x, NPY_CORDER);
    Py_DECREF(x);
    if (!copy) return NULL;
    x = copy;
  }
  kl_run_args ra;
  ra.T = T;
  ra.B = B;
  ra.x = PyArray_DATA(x);
  ra.x_st = PyArray_STRIDE(x, 0) / esz;
  ra.x_sb = PyArray_STRIDE(x, 1) / esz;
  ra.y = PyArray_DATA(y);
  ra.y_st = PyArray_STRIDE(y, 0) / esz;
  ra.y_sb = PyArray_STRIDE(y, 1) / esz;
  ra.h0 = h0;
  ra.c0 = c0;
  ra.h_n = hn;
  ra.c_n = cn;
  ra.lengths = len;
  ra.num_threads = nth;
  kl_status s;
  Py_BEGIN_ALLOW_THREADS
  s = kl_lstm_run(self->lstm, &ra);
  Py_END_ALLOW_THREADS
  if (s != KL_OK) {
    raise_status(s, "LSTM run");
    goto done;
  }
  Py_INCREF(Py_None);
  result = Py_None;
done:
  Py_DECREF(x);
  return result;
}

static PyObject* Engine_get_info(EngineObject* self, void* closure) {
  (void)closure;
  if (!self->lstm) Py_RETURN_NONE;
  const kl_lstm_desc* d = kl_lstm_get_desc(self->lstm);
  static const char* names[] = {"float32", "float64", "bfloat16"};
  return Py_BuildValue("{s:i,s:i,s:i,s:O,s:i,s:s}", "input_size", d->input_size, "hidden_size",
                       d->hidden_size, "num_layers", d->num_layers, "bidirectional",
                       d->bidirectional ? Py_True : Py_False, "proj_size", d->proj_size, "dtype",
                       names[d->dtype]);
}

static PyMethodDef Engine_methods[] = {
    {"run", (PyCFunction)Engine_run, METH_VARARGS,
     "run(x, y, h0, c0, h_n, c_n, lengths, num_threads): one forward pass into y (GIL released)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Engine_getset[] = {
    {"info", (getter)Engine_get_info, NULL, "the engine's description (dict)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kokoro_lstm._core.Engine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Packed LSTM weights and the C engine that runs them.",
    .tp_methods = Engine_methods,
    .tp_getset = Engine_getset,
    .tp_init = (initproc)Engine_init,
    .tp_new = PyType_GenericNew,
};

/* ---- module functions ----------------------------------------------------- */

static int parse_isa(const char* name, kl_isa* isa) {
  for (int i = 0; i < KL_ISA_COUNT; i++)
    if (strcmp(name, kl_isa_name((kl_isa)i)) == 0) {
      *isa = (kl_isa)i;
      return 1;
    }
  PyErr_Format(PyExc_ValueError, "unknown ISA '%s' (expected scalar, avx2, avx512, neon or neon-bf16)", name);
  return 0;
}

static PyObject* mod_set_isa(PyObject* m, PyObject* arg) {
  (void)m;
  const char* name = PyUnicode_AsUTF8(arg);
  kl_isa isa;
  if (!name || !parse_isa(name, &isa)) return NULL;
  if (kl_isa_set(isa) != KL_OK) {
    PyErr_Format(PyExc_ValueError, "this CPU does not support ISA '%s' (best: %s)", name,
                 kl_isa_name(kl_isa_detected()));
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyObject* mod_get_isa(PyObject* m, PyObject* unused) {
  (void)m, (void)unused;
  return PyUnicode_FromString(kl_isa_name(kl_isa_active()));
}

static PyObject* mod_detected_isa(PyObject* m, PyObject* unused) {
  (void)m, (void)unused;
  return PyUnicode_FromString(kl_isa_name(kl_isa_detected()));
}

static PyObject* mod_has_avx512bf16(PyObject* m, PyObject* unused) {
  (void)m, (void)unused;
  return PyBool_FromLong(kl_cpu_has_avx512bf16());
}

static PyObject* mod_blas_name(PyObject* m, PyObject* unused) {
  (void)m, (void)unused;
  return PyUnicode_FromString(kl_blas_name());
}

/* activation(kind, x): the active ISA's float32 sigmoid/tanh over x (tests). */
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

/* bytes_equal(a, b): True if two C-contiguous arrays hold the same bytes
 * (the weight cache's staleness check; GIL released for the compare). */
static PyObject* mod_bytes_equal(PyObject* m, PyObject* args) {
  (void)m;
  PyObject *ao, *bo;
  if (!PyArg_ParseTuple(args, "OO", &ao, &bo)) return NULL;
  if (!PyArray_Check(ao) || !PyArray_Check(bo)) {
    PyErr_SetString(PyExc_TypeError, "bytes_equal takes two numpy arrays");
    return NULL;
  }
  PyArrayObject *a = (PyArrayObject*)ao, *b = (PyArrayObject*)bo;
  if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_IS_C_CONTIGUOUS(b)) {
    PyErr_SetString(PyExc_ValueError, "bytes_equal needs C-contiguous arrays");
    return NULL;
  }
  const size_t na = (size_t)PyArray_NBYTES(a), nb = (size_t)PyArray_NBYTES(b);
  if (na != nb) Py_RETURN_FALSE;
  int same;
  const void *pa = PyArray_DATA(a), *pb = PyArray_DATA(b);
  Py_BEGIN_ALLOW_THREADS
  same = na == 0 || memcmp(pa, pb, na) == 0;
  Py_END_ALLOW_THREADS
  return PyBool_FromLong(same);
}

static PyObject* mod_bench_sgemm(PyObject* m, PyObject* args) {
  (void)m;
  int M, N, K, nth, reps;
  if (!PyArg_ParseTuple(args, "iiiii", &M, &N, &K, &nth, &reps)) return NULL;
  double t;
  Py_BEGIN_ALLOW_THREADS
  t = kl_bench_sgemm(M, N, K, nth, reps);
  Py_END_ALLOW_THREADS
  if (t < 0) {
    PyErr_SetString(PyExc_ValueError, "bench_sgemm: need positive sizes, threads and reps (or out of memory)");
    return NULL;
  }
  return PyFloat_FromDouble(t);
}

static PyObject* mod_bench_stream(PyObject* m, PyObject* args) {
  (void)m;
  Py_ssize_t nbytes;
  int reps;
  if (!PyArg_ParseTuple(args, "ni", &nbytes, &reps)) return NULL;
  double t;
  Py_BEGIN_ALLOW_THREADS
  t = nbytes < 64 ? -1.0 : kl_bench_stream((size_t)nbytes, reps);
  Py_END_ALLOW_THREADS
  if (t < 0) {
    PyErr_SetString(PyExc_ValueError, "bench_stream: need nbytes >= 64 and reps >= 1 (or out of memory)");
    return NULL;
  }
  return PyFloat_FromDouble(t);
}

static PyMethodDef module_methods[] = {
    {"bench_sgemm", mod_bench_sgemm, METH_VARARGS, "bench_sgemm(M, N, K, num_threads, reps): best seconds of the engine-style sgemm."},
    {"bench_stream", mod_bench_stream, METH_VARARGS, "bench_stream(nbytes, reps): best seconds to read a cached buffer once."},
    {"set_isa", mod_set_isa, METH_O, "set_isa(name): force 'scalar', 'avx2' or 'avx512' for engines built afterwards."},
    {"get_isa", mod_get_isa, METH_NOARGS, "The ISA new engines use."},
    {"detected_isa", mod_detected_isa, METH_NOARGS, "The best ISA this CPU supports."},
    {"has_avx512bf16", mod_has_avx512bf16, METH_NOARGS, "Whether AVX512_BF16 kernels are used for bfloat16."},
    {"blas_name", mod_blas_name, METH_NOARGS, "The BLAS this build links."},
    {"activation", mod_activation, METH_VARARGS, "activation(kind, x): vectorized float32 sigmoid/tanh (tests)."},
    {"bytes_equal", mod_bytes_equal, METH_VARARGS, "bytes_equal(a, b): same bytes in two contiguous arrays."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_core",
                                       "C core of kokoro_lstm (see kokoro_lstm.h).", -1,
                                       module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__core(void) {
  import_array();
  if (PyType_Ready(&EngineType) < 0) return NULL;
  PyObject* m = PyModule_Create(&moduledef);
  if (!m) return NULL;
  Py_INCREF(&EngineType);
  if (PyModule_AddObject(m, "Engine", (PyObject*)&EngineType) < 0) {
    Py_DECREF(&EngineType);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
