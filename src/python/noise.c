/* The binding's counter-based noise (src/ops/random.h): random_fill into a NumPy array on
 * the CPU, random_fill_cuda into device memory (the torch ops' CUDA road). */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL kl_py_numpy_api /* imported by module.c */
#define NO_IMPORT_ARRAY
#include <Python.h>
#include <numpy/arrayobject.h>

#include "binding.h"
#include "kl_cuda.h"
#include "random.h"

/* random_fill: see its docstring and src/ops/random.h; seed's int64 bits are the key. */
PyObject* mod_random_fill(PyObject* m, PyObject* args, PyObject* kwds) {
  (void)m;
  static char* kwlist[] = {"dist", "seed", "stream", "out", "start", "num_threads", NULL};
  int dist, nth = 0;
  long long seed, stream, start = 0;
  PyObject* out;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "iLLO|Li", kwlist, &dist, &seed, &stream, &out,
                                   &start, &nth))
    return NULL;
  if (stream < 0) return PyErr_Format(PyExc_ValueError, "random_fill: stream must be >= 0, got %lld", stream);
  PyArrayObject* a = PyArray_Check(out) ? (PyArrayObject*)out : NULL;
  if (!a || PyArray_TYPE(a) != NPY_FLOAT32 || !PyArray_ISCARRAY(a))
    return PyErr_Format(PyExc_TypeError, "random_fill: out must be a writable C-contiguous float32 numpy array");
  float* y = PyArray_DATA(a);
  const int64_t n = (int64_t)PyArray_SIZE(a);
  kl_status s;
  Py_BEGIN_ALLOW_THREADS
  s = kl_f32_random(dist, (uint64_t)seed, (uint64_t)stream, (int64_t)start, n, y, nth);
  Py_END_ALLOW_THREADS
  return s == KL_OK ? Py_NewRef(Py_None) : kl_py_status_error(s);
}

/* random_fill_cuda: see its docstring and kl_cuda_random; the pointers are the
 * caller's (torch's data_ptr()), checked by it. */
PyObject* mod_random_fill_cuda(PyObject* m, PyObject* args) {
  (void)m;
  int dist, device;
  long long stream, n;
  unsigned long long seed, y, cu_stream;
  if (!PyArg_ParseTuple(args, "iKLLKiK", &dist, &seed, &stream, &n, &y, &device, &cu_stream)) return NULL;
  if (stream < 0)
    return PyErr_Format(PyExc_ValueError, "random_fill_cuda: stream must be >= 0, got %lld", stream);
  kl_status s;
  Py_BEGIN_ALLOW_THREADS /* the first call on a device compiles the kernel */
  s = kl_cuda_random(dist, (const int64_t*)(uintptr_t)seed, (uint64_t)stream, n, (float*)(uintptr_t)y, device,
                     (void*)(uintptr_t)cu_stream);
  Py_END_ALLOW_THREADS
  return s == KL_OK ? Py_NewRef(Py_None) : kl_py_status_error(s);
}
