/* tvm-ffi glue: the engine's functions as tvm-ffi global functions over
 * DLTensors (destination-passing), for R.call_dps_packed in compiled Relax
 * modules. Registered from C through tvm-ffi's stable C ABI; the functions it
 * calls are passed in (kl_tvm_api), so this file links to no tvm-ffi symbol:
 * the Python extension resolves them at run time from the libtvm_ffi already
 * loaded, an exported TVM library links them directly (kl_tvm_autoreg.c). */
#ifndef KL_TVM_H
#define KL_TVM_H

#include <stddef.h>
#include <tvm/ffi/c_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Name of the LSTM function and the version of its calling convention. The
 * name carries the version, so artifacts built against different versions
 * can share a process. */
#define KL_TVM_LSTM_ABI 2
#define KL_TVM_LSTM_NAME "kokoro_lstm.lstm_forward_v2"

typedef struct kl_tvm_api {
  int (*function_create)(void* self, TVMFFISafeCallType safe_call, void (*deleter)(void* self),
                         TVMFFIObjectHandle* out);
  int (*function_get_global)(const TVMFFIByteArray* name, TVMFFIObjectHandle* out);
  int (*function_set_global)(const TVMFFIByteArray* name, TVMFFIObjectHandle f, int allow_override);
  void (*error_set_raised_from_cstr)(const char* kind, const char* message);
  void (*error_move_from_raised)(TVMFFIObjectHandle* result);
  int (*object_inc_ref)(TVMFFIObjectHandle obj);
  int (*object_dec_ref)(TVMFFIObjectHandle obj);
  /* TVMFFIEnvGetStream: the stream TVM runs a device's work on (CUDA calls run
   * there); NULL where the libtvm_ffi lacks it (the default stream then) */
  void* (*env_get_stream)(int32_t device_type, int32_t device_id);
} kl_tvm_api;

/* Registers every function of the engine that is not registered yet under its
 * name. Returns the number of functions now registered by anyone (>= 0), or -1
 * with a message in err. Idempotent; the api is copied. */
int kl_tvm_register(const kl_tvm_api* api, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
