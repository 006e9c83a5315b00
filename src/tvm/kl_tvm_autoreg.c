/* Linked only into exported TVM libraries (kokoro_lstm.tvm.export_library):
 * registers the engine's functions with the libtvm_ffi of the process that
 * loads the library, when it is loaded; no Python involved. */
#include <stdio.h>

#include "kl_tvm.h"

__attribute__((constructor)) static void kl_tvm_autoregister(void) {
  const kl_tvm_api api = {TVMFFIFunctionCreate,         TVMFFIFunctionGetGlobal,
                          TVMFFIFunctionSetGlobal,      TVMFFIErrorSetRaisedFromCStr,
                          TVMFFIErrorMoveFromRaised,    TVMFFIObjectIncRef,
                          TVMFFIObjectDecRef};
  char err[160];
  if (kl_tvm_register(&api, err, sizeof(err)) < 0) fprintf(stderr, "kokoro_lstm: %s\n", err);
}
