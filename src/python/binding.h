/* What the binding's two Python-facing files share (module.c, noise.c; both include
 * Python.h and NumPy's API, whose table module.c imports): the exception of a failed
 * engine call and the module functions noise.c defines for methods.def. */
#ifndef KL_PY_BINDING_H
#define KL_PY_BINDING_H

#include <Python.h>

#include "kokoro_lstm.h"

/* Sets the exception of a failed engine call: MemoryError, ValueError (KL_ERR_ARG) or
 * RuntimeError, with the engine's message; returns NULL. */
PyObject* kl_py_status_error(kl_status s);

PyObject* mod_random_fill(PyObject* m, PyObject* args, PyObject* kwds);
PyObject* mod_random_fill_cuda(PyObject* m, PyObject* args);

#endif /* KL_PY_BINDING_H */
