/* The weight cache (cache.c), used by kl_lstm_forward (forward.c). */
#ifndef KL_CACHE_H
#define KL_CACHE_H
#include "internal.h"

typedef struct kl_centry kl_centry;

/* Index of the owner token in a key (forward.c builds the keys). */
#define KL_CACHE_KEY_OWNER 10

/* The packed LSTM for these weights, from the cache when still valid, else
 * packed now (and cached). key identifies the weights' memory and the packing;
 * regions are the bytes that packing copies (fingerprinted unless trusted).
 * Release the entry with kl_cache_release after the run. */
kl_status kl_cache_acquire(const int64_t* key, size_t key_len, const kl_lstm_desc* desc,
                           const kl_wsrc* w, int borrow_wih, const kl_region* regions,
                           int nregions, int trusted, const kl_keepalive* ka, int nth,
                           kl_centry** out);
void kl_cache_release(kl_centry* e);
const kl_lstm* kl_centry_lstm(const kl_centry* e);

#endif
