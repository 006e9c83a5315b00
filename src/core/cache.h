/* The weight cache (cache.c), used by the CPU backend (run_cpu.c). */
#ifndef KL_CACHE_H
#define KL_CACHE_H
#include "engine.h"

typedef struct kl_centry kl_centry;

/* Index of the owner token in a key (run_cpu.c builds the keys). */
#define KL_CACHE_KEY_OWNER 10

/* The cached entry for this key (a reference the caller releases), or NULL. */
kl_centry* kl_cache_find(const int64_t* key, size_t key_len);
/* After a run with a found entry: 1 if its weights are still those it was packed
 * from (trusted entries always), else 0 and the entry leaves the cache (the call
 * must pack again and rerun). Counts a hit or a repack. */
int kl_cache_confirm(kl_centry* e, const kl_region* regions, int nregions, int nth);
/* The regions of w that an untrusted entry fingerprints (at most 5 per
 * (layer, direction) group): every tensor but a borrowed W_ih, which each run
 * reads in place. Returns their count. */
int kl_cache_regions(const kl_lstm_desc* desc, const kl_wsrc* w, int borrow_wih, kl_region* out);
/* Packs the weights into a new entry, cached under key, returned with a
 * reference for the caller. Unless trusted, the weights are read once into a
 * copy that is both fingerprinted and packed (without memory for the copy:
 * packed from w and run uncached). */
kl_status kl_cache_pack(const int64_t* key, size_t key_len, const kl_lstm_desc* desc,
                        const kl_wsrc* w, int borrow_wih, int trusted, const kl_keepalive* ka,
                        int nth, int count_miss, kl_centry** out);
void kl_cache_release(kl_centry* e);
const kl_lstm* kl_centry_lstm(const kl_centry* e);
/* Empties the cache: the CPU row of kl_cache_clear (backend.c). */
void kl_cache_clear_cpu(void);

#endif
