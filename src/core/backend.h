/* The backends of kl_lstm_forward (backend.c), one row each: which tensors they
 * take, how they run a validated call, what they keep until kl_cache_clear. */
#ifndef KL_BACKEND_H
#define KL_BACKEND_H

#include "call.h"

typedef struct kl_backend {
  const char* name;
  DLDeviceType device_type; /* x's device */
  /* KL_OK when the backend runs the call's dtype, else a message */
  kl_status (*supports)(const kl_forward_args* a);
  kl_status (*run)(const kl_call* c);
  /* count int64 from the device's memory into dst (lengths shape a call); NULL: host memory */
  kl_status (*read_int64)(int device_id, void* stream, const int64_t* src, size_t count, int64_t* dst);
  /* 1 while the stream is being captured into a CUDA graph (nothing can be read then) */
  int (*capturing)(int device_id, void* stream);
  void (*clear)(void); /* frees what the backend keeps between calls */
} kl_backend;

/* The row for x's device (the CPU's when x is NULL: validation names it), else
 * NULL and a message. */
const kl_backend* kl_backend_for(const DLTensor* x);

/* The CPU row's run (run_cpu.c). */
kl_status kl_cpu_run(const kl_call* c);

#endif /* KL_BACKEND_H */
