/* Linked only into exported TVM libraries (kokoro_lstm.tvm.export_library):
 * registers the engine's functions with the libtvm_ffi of the process that
 * loads the library, when it is loaded; no Python involved. */
#include <stdio.h>

#include "kl_tvm.h"

/* tvm-ffi's c_env_api.h; weak: older libtvm_ffi builds lack it */
extern void* TVMFFIEnvGetStream(int32_t device_type, int32_t device_id) __attribute__((weak));

__attribute__((constructor)) static void kl_tvm_autoregister(void) {
  const kl_tvm_api api = {TVMFFIFunctionCreate,         TVMFFIFunctionGetGlobal,
                          TVMFFIFunctionSetGlobal,      TVMFFIErrorSetRaisedFromCStr,
                          TVMFFIErrorMoveFromRaised,    TVMFFIObjectIncRef,
                          TVMFFIObjectDecRef,           TVMFFIEnvGetStream};
  char err[160];
  if (kl_tvm_register(&api, err, sizeof(err)) < 0) fprintf(stderr, "kokoro_lstm: %s\n", err);
}
