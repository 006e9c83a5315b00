/* Kept work buffers (scratch.c): the engine's and the dense operators' large
 * per-call buffers, kept apart from the weight cache. */
#ifndef KL_SCRATCH_H
#define KL_SCRATCH_H

#include <stddef.h>

/* A call takes a buffer of at least `bytes` (64-byte aligned, contents
 * undefined; *cap its real size) and gives it back; a few of them, at most
 * KL_SCRATCH_KEEP bytes in all, are kept for the next calls, so that those
 * neither fault nor zero fresh pages again. */
#define KL_SCRATCH_KEEP ((size_t)256 << 20)
void* kl_scratch_take(size_t bytes, size_t* cap);
void kl_scratch_give(void* p, size_t cap);
/* Frees the kept buffers (kl_cache_clear). */
void kl_scratch_clear(void);
/* Bytes of the kept buffers. */
size_t kl_scratch_kept_bytes(void);

#endif /* KL_SCRATCH_H */
