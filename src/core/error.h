/* This thread's error message, kl_last_error() (error.c): every part of the engine
 * (core, CUDA backend, operators) sets it here when it returns a failure. */
#ifndef KL_ERROR_H
#define KL_ERROR_H

#include "kokoro_lstm.h"

/* Sets the message to msg. */
void kl_set_error(const char* msg);
/* Sets the message from a printf format; returns status. */
kl_status kl_errorf(kl_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* kl_errorf(KL_ERR_ARG, ...): a refused argument, named in the message. */
kl_status kl_fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* Empties the message (a call starts with none). */
void kl_clear_error(void);

#endif /* KL_ERROR_H */
