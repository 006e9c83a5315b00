/* kl_lstm_forward: the one entry for every integration (NumPy, torch, TVM):
 * validate (call.c), choose the backend of x's device (backend.c), run. */
#include "backend.h"
#include "error.h"

kl_status kl_lstm_forward(const kl_forward_args* a) {
  kl_clear_error();
  if (!a) return kl_fail("no arguments");
  const kl_backend* be = kl_backend_for(a->x);
  if (!be) return KL_ERR_ARG;
  kl_status s = be->supports(a);
  if (s) return s;
  kl_call c;
  s = kl_call_make(a, be, &c);
  if (!s && c.B > 0) s = be->run(&c);
  kl_call_free(&c);
  return s;
}
