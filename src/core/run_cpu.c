/* The CPU backend's run: the packed weights from the cache (cache.c), run by the
 * engine (lstm.c) on the call's tensors in place. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cache.h"
#include "engine.h"
#include "threads.h"

#define KEY_HEADER 11
_Static_assert(KEY_HEADER == KL_CACHE_KEY_OWNER + 1, "the owner token ends the key header");
#define KEY_PER_W 5

/* The cache key (where the weights lie and how they are packed) and the W_ih views. */
static void make_key(const kl_call* c, const kl_lstm_desc* desc, int borrow, int64_t* key, kl_wih_view* views) {
  const kl_forward_args* a = c->args;
  const int64_t header[KEY_HEADER] = {desc->input_size, desc->hidden_size, c->L, c->D, c->P,
                                      c->reverse, c->dtype, c->has_bias,
                                      borrow, a->constant_weights != 0, (int64_t)a->owner};
  memcpy(key, header, sizeof(header));
  const kl_wsrc* w = c->w;
  for (int g = 0; g < c->L * c->D; g++) {
    const void* ptr[5] = {w[g].w_ih, w[g].w_hh, w[g].b_ih, w[g].b_hh, w[g].w_hr};
    const int64_t lds[5] = {w[g].ld_ih, w[g].ld_hh, w[g].s_bi, w[g].s_bh, w[g].ld_hr};
    for (int j = 0; j < 5; j++) {
      const int idx = kl_call_weight_index(a, g, j);
      if (idx < 0) continue;
      const DLTensor* t = a->weights[idx];
      const int nd = j == 2 || j == 3 ? 1 : 2;
      int64_t* kk = key + KEY_HEADER + (size_t)idx * KEY_PER_W;
      kk[0] = (int64_t)(intptr_t)ptr[j];
      kk[1] = t->shape[0];
      kk[2] = nd == 2 ? t->shape[1] : 1;
      kk[3] = lds[j];
      kk[4] = j;
    }
    views[g] = (kl_wih_view){ptr[0], lds[0], desc->hidden_size};
  }
}

/* The cached entry (run, then confirm its weights did not change, else repack and
 * rerun) or a new one. */
static kl_status run_cached(const kl_call* c, const kl_lstm_desc* desc, const kl_run_args* ra, int borrow,
                            const int64_t* key, size_t key_len, const kl_wih_view* views) {
  const kl_forward_args* a = c->args;
  kl_region* regions = malloc((size_t)a->num_weights * sizeof(kl_region));
  if (!regions) return KL_ERR_NOMEM;
  const int nreg = kl_cache_regions(desc, c->w, borrow, regions); /* a borrowed W_ih is read in place: not checked */
  kl_centry* entry = kl_cache_find(key, key_len);
  kl_status s = KL_OK;
  if (entry) {
    s = kl_lstm_run_views(kl_centry_lstm(entry), ra, borrow ? views : NULL);
    if (s != KL_OK) {
      kl_fail("LSTM run failed: %s", kl_status_str(s));
      goto done;
    }
    if (kl_cache_confirm(entry, regions, nreg, ra->num_threads)) goto done;
    kl_cache_release(entry);
    entry = NULL;
  }
  s = kl_cache_pack(key, key_len, desc, c->w, borrow, a->constant_weights != 0, a->keepalive, ra->num_threads, 1,
                    &entry);
  if (s != KL_OK) {
    if (s == KL_ERR_NOMEM) kl_fail("out of memory packing the weights");
    goto done;
  }
  s = kl_lstm_run_views(kl_centry_lstm(entry), ra, borrow ? views : NULL);
  if (s != KL_OK) kl_fail("LSTM run failed: %s", kl_status_str(s));
done:
  kl_cache_release(entry);
  free(regions);
  return s;
}

kl_status kl_cpu_run(const kl_call* c) {
  const kl_forward_args* a = c->args;
  const kl_lstm_desc desc = {(int)c->input_size, (int)c->H, c->L, c->D == 2, c->P, c->reverse, c->dtype};
  const kl_run_args ra = {c->T, c->B, c->x, c->x_st, c->x_sb, c->y, c->y_st, c->y_sb, c->h0, c->c0, c->h_n,
                          c->c_n, c->lengths, kl_threads_resolve(c->num_threads), c->x_gates, c->gate_bias,
                          a->interrupt, a->interrupt_ctx};
  const int borrow = kl_lstm_can_borrow_wih(&desc);
  const size_t key_len = KEY_HEADER + (size_t)a->num_weights * KEY_PER_W;
  int64_t* key = malloc(key_len * sizeof(int64_t));
  kl_wih_view* views = malloc((size_t)(c->L * c->D) * sizeof(kl_wih_view));
  kl_status s = KL_ERR_NOMEM;
  if (key && views) {
    make_key(c, &desc, borrow, key, views);
    s = run_cached(c, &desc, &ra, borrow, key, key_len, views);
  }
  free(key);
  free(views);
  return s;
}
