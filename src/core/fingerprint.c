/* 128-bit fingerprint of strided byte regions, for the weight cache.
 *
 * The byte stream is cut into pieces (a contiguous region whole, else each
 * row) and pieces into chunks of KL_FP_CHUNK bytes; each chunk is folded by
 * the fingerprint kernel (kernels/u64-fingerprint) and finalized with its
 * index and length, and the chunk digests are combined in order. Chunks are
 * dealt to the thread pool; the result does not depend on the thread count.
 * kl_fingerprint_copy also copies the bytes, chunk by chunk, and digests the
 * copy: the fingerprint is then that of the copy's bytes, whatever a writer does
 * to the source meanwhile. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define KL_FP_CHUNK ((int64_t)1 << 16)

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer (a bijection) */
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

typedef struct fp_item {
  const unsigned char* p;
  unsigned char* copy; /* where the chunk is copied to and read from, or NULL */
  int64_t n;
} fp_item;

typedef struct fp_ctx {
  const fp_item* items;
  kl_fp128* out;
  int64_t n;
  kl_fp_ukernel_fn fold;
} fp_ctx;

static kl_fp128 digest(kl_fp_ukernel_fn fold, const unsigned char* p, int64_t n, int64_t index) {
  uint64_t acc[8] = {0};
  const int64_t body = n & ~(int64_t)63;
  if (body) fold(p, (size_t)body, acc);
  if (n > body) {
    unsigned char tail[64] = {0};
    memcpy(tail, p + body, (size_t)(n - body));
    fold(tail, 64, acc);
  }
  uint64_t lo = mix64((uint64_t)index * 0x9E3779B97F4A7C15ull ^ (uint64_t)n);
  uint64_t hi = mix64(lo ^ 0xD1B54A32D192ED03ull);
  for (int i = 0; i < 8; i++) {
    lo = mix64(lo ^ acc[i]);
    hi = mix64(hi + acc[i] * 0xAEF17502108EF2D9ull + (uint64_t)i);
  }
  return (kl_fp128){lo, hi};
}

static void fp_task(void* vctx, int ith, int nth) {
  fp_ctx* c = vctx;
  for (int64_t i = ith; i < c->n; i += nth) {
    const fp_item* it = &c->items[i];
    if (it->copy) memcpy(it->copy, it->p, (size_t)it->n);
    c->out[i] = digest(c->fold, it->copy ? it->copy : it->p, it->n, i);
  }
}

/* A region is cut into pieces of `bytes` contiguous bytes, `stride` apart:
 * one piece when its rows are contiguous, else one per row. */
static void pieces_of(const kl_region* r, int64_t* pieces, int64_t* bytes) {
  const int whole = r->rows <= 1 || r->stride_bytes == r->row_bytes;
  *pieces = whole ? 1 : r->rows;
  *bytes = whole ? r->rows * r->row_bytes : r->row_bytes;
}

size_t kl_fingerprint_bytes(const kl_region* r, int nr) {
  size_t bytes = 0;
  for (int k = 0; k < nr; k++) bytes += (size_t)(r[k].rows * r[k].row_bytes);
  return bytes;
}

kl_status kl_fingerprint_copy(const kl_region* r, int nr, int nth, void* copy, kl_fp128* result) {
  int64_t n = 0, pieces, bytes;
  for (int k = 0; k < nr; k++) {
    pieces_of(&r[k], &pieces, &bytes);
    n += pieces * ((bytes + KL_FP_CHUNK - 1) / KL_FP_CHUNK);
  }
  fp_item* items = malloc((size_t)(n ? n : 1) * sizeof(fp_item));
  kl_fp128* out = malloc((size_t)(n ? n : 1) * sizeof(kl_fp128));
  if (!items || !out) {
    free(items);
    free(out);
    return KL_ERR_NOMEM;
  }
  int64_t i = 0;
  unsigned char* dst = copy; /* region k's rows back to back */
  for (int k = 0; k < nr; k++) {
    pieces_of(&r[k], &pieces, &bytes);
    for (int64_t piece = 0; piece < pieces; piece++)
      for (int64_t off = 0; off < bytes; off += KL_FP_CHUNK) {
        items[i].p = (const unsigned char*)r[k].p + piece * r[k].stride_bytes + off;
        items[i].copy = dst ? dst + piece * bytes + off : NULL;
        items[i].n = bytes - off < KL_FP_CHUNK ? bytes - off : KL_FP_CHUNK;
        i++;
      }
    if (dst) dst += r[k].rows * r[k].row_bytes;
  }
  fp_ctx c = {items, out, n, kl_select_fp()};
  if (nth > n) nth = (int)(n > 0 ? n : 1);
  if (kl_pool_run(nth, fp_task, &c) != KL_OK) fp_task(&c, 0, 1);
  kl_fp128 h = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull};
  for (int64_t j = 0; j < n; j++) {
    h.lo = mix64(h.lo ^ out[j].lo);
    h.hi = mix64(h.hi ^ out[j].hi);
  }
  free(items);
  free(out);
  *result = h;
  return KL_OK;
}

kl_status kl_fingerprint(const kl_region* r, int nr, int nth, kl_fp128* result) {
  return kl_fingerprint_copy(r, nr, nth, NULL, result);
}
