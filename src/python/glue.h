/* The binding's plain-C side (no Python.h): argument names to the engine's enums,
 * the monotonic clock of the interrupt poll, and loading tvm-ffi. module.c turns
 * these into Python objects and exceptions. */
#ifndef KL_PY_GLUE_H
#define KL_PY_GLUE_H

#include <stddef.h>

#include "kokoro_lstm.h"

/* "float32", "float64", "bfloat16" or "float16": 1 and *dt set; 0 otherwise. */
int kl_py_dtype_from_name(const char* name, kl_dtype* dt);
/* kl_isa_name's inverse: 1 and *isa set; 0 for a name no ISA has. */
int kl_py_isa_from_name(const char* name, kl_isa* isa);
/* kl_isa_set by name: 1, or 0 and why in err (an unknown name, an ISA this CPU lacks). */
int kl_py_isa_set(const char* name, char* err, size_t n);
/* 1 when CLOCK_MONOTONIC has passed *next_ns (then *next_ns = now + period_ns), else 0. */
int kl_py_poll_due(long long* next_ns, long long period_ns);
/* CLOCK_MONOTONIC in nanoseconds. */
long long kl_py_now_ns(void);
/* Registers the engine's tvm-ffi functions with the libtvm_ffi at path (loaded if
 * it is not yet): their count, or -1 when path does not load (err: dlerror's
 * message) and -2 when registering fails (err: why). */
int kl_py_tvm_load(const char* path, char* err, size_t errlen);

#endif
