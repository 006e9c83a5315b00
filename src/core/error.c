/* kl_last_error(): one message per thread, set by whatever failed last. */
#include <stdarg.h>
#include <stdio.h>

#include "error.h"

static _Thread_local char g_err[1024];

const char* kl_last_error(void) { return g_err; }

void kl_set_error(const char* msg) { snprintf(g_err, sizeof(g_err), "%s", msg); }

void kl_clear_error(void) { g_err[0] = 0; }

kl_status kl_errorf(kl_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_err, sizeof(g_err), fmt, ap);
  va_end(ap);
  return status;
}

kl_status kl_fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_err, sizeof(g_err), fmt, ap);
  va_end(ap);
  return KL_ERR_ARG;
}
