/* kl_lstm_forward on strided weights and its cache of packed weights: hits,
 * repacks, a racing writer, trusted entries. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "kokoro_lstm_testing.h"
#include "internal.h"

/* A writer racing with a cache miss: one weight holds `other` from just after its
 * bytes were read for the fingerprint until just after packing, `orig` before and
 * after (kl_cache_set_fingerprint_hook, kl_cache_set_pack_hook). */
typedef struct race_ctx {
  char* at;
  char orig[sizeof(double)], other[sizeof(double)];
  size_t esz;
  int flips;
} race_ctx;
static void race_flip(void* ctx) {
  race_ctx* c = ctx;
  memcpy(c->at, c->other, c->esz);
  c->flips++;
}
static void race_restore(void* ctx) {
  race_ctx* c = ctx;
  memcpy(c->at, c->orig, c->esz);
}

/* Whether r holds r1's bits (y, h_n, c_n). */
static int same_bits(const result* r, const result* r1) {
  return r->st == KL_OK && memcmp(r->ybuf, r1->ybuf, r1->ybytes) == 0 &&
         memcmp(r->hn, r1->hn, r1->hnbytes) == 0 && memcmp(r->cn, r1->cn, r1->cnbytes) == 0;
}

/* The cache serves the second call; one recurrent weight changed in place makes
 * the next call repack and differ. Returns with f's weights as r1 saw them. */
static void forward_hit_and_repack(dl_model* f, const run_input* in, const result* r1,
                                   const char* tag) {
  result r;
  int ok = 1;
  for (int call = 0; call < 2 && ok; call++) {
    run_engine(NULL, f, in, 1 + call, &r);
    ok = same_bits(&r, r1);
    if (!ok) printf("  kl_lstm_forward: %s %s\n", kl_status_str(r.st), kl_last_error());
    result_free(&r);
  }
  kl_cache_stats st = kl_cache_get_stats();
  check(ok && st.misses == 1 && st.hits == 1 && st.entries == 1,
        "%s kl_lstm_forward (strided weights) == kl_lstm_run bitwise; cache: 1 miss, 1 hit "
        "(got %lld, %lld)", tag, (long long)st.misses, (long long)st.hits);
  /* change one recurrent weight in place: the next call repacks and differs */
  char* w = f->buf[1];
  char saved[sizeof(double)];
  memcpy(saved, w + io_size(in->dt), io_size(in->dt));
  if (in->dt == KL_F64) ((double*)w)[1] += 0.5;
  else ((float*)w)[1] += 0.5f;
  run_engine(NULL, f, in, 2, &r);
  st = kl_cache_get_stats();
  check(r.st == KL_OK && st.repacks == 1 && st.entries == 1 &&
            memcmp(r.hn, r1->hn, r1->hnbytes) != 0,
        "%s kl_lstm_forward after an in-place weight change: repacked, new result", tag);
  result_free(&r);
  memcpy(w + io_size(in->dt), saved, io_size(in->dt)); /* the weights of r1 again */
}

/* W_hh changed between the fingerprint and the packing, restored after: the
 * racing call may see either value, but the entry it leaves must hold what its
 * fingerprint saw, so the calls after it give r1's bits (a packing of the
 * changed value would pass every check and serve it until kl_cache_clear). */
static void forward_race(const dl_model* f, const run_input* in, const result* r1,
                         const char* tag) {
  char* w = f->buf[1];
  kl_cache_clear();
  race_ctx rc = {w + io_size(in->dt), {0}, {0}, io_size(in->dt), 0};
  memcpy(rc.orig, rc.at, rc.esz);
  if (in->dt == KL_F64) *(double*)(void*)rc.other = *(const double*)(const void*)rc.orig + 0.5;
  else *(float*)(void*)rc.other = *(const float*)(const void*)rc.orig + 0.5f;
  kl_cache_set_fingerprint_hook(race_flip, &rc);
  kl_cache_set_pack_hook(race_restore, &rc);
  result r;
  run_engine(NULL, f, in, 1, &r);
  kl_cache_set_fingerprint_hook(NULL, NULL);
  kl_cache_set_pack_hook(NULL, NULL);
  int race_ok = r.st == KL_OK && rc.flips == 1;
  result_free(&r);
  for (int call = 0; call < 2 && race_ok; call++) {
    run_engine(NULL, f, in, 1 + call, &r);
    race_ok = same_bits(&r, r1);
    result_free(&r);
  }
  check(race_ok, "%s kl_lstm_forward after W_hh changed between fingerprint and packing, then "
        "restored: the next calls give the unchanged weights' bits", tag);
}

/* A trusted entry (constant_weights): float32 W_ih in panels, the f32-pgemm
 * kernels for a float32 input projection (other bits than OpenBLAS's): within the
 * dtype's tolerance of the packed object, the same bits for 1, 2 and 5 threads. */
static void forward_trusted(const dl_model* f, const model* m, const run_input* in,
                            const result* r1, const char* tag) {
  kl_cache_clear();
  g_fwd_constant = 1;
  result t[3];
  const int nths[3] = {1, 2, 5};
  int same = 1;
  double err = 0.0;
  const size_t nyd = (size_t)(in->T * in->B * m->D * m->R);
  for (int i = 0; i < 3; i++) {
    run_engine(NULL, f, in, nths[i], &t[i]);
    same = same && t[i].st == KL_OK;
  }
  if (same) {
    err = fmax(max_err(t[0].y, r1->y, nyd), max_err(t[0].hnd, r1->hnd, r1->hnbytes / io_size(in->dt)));
    for (int i = 1; i < 3; i++)
      same = same && memcmp(t[i].ybuf, t[0].ybuf, r1->ybytes) == 0 &&
             memcmp(t[i].hn, t[0].hn, r1->hnbytes) == 0 && memcmp(t[i].cn, t[0].cn, r1->cnbytes) == 0;
  }
  g_fwd_constant = 0;
  /* W_ih panels where the input projection is float32 (float32; bfloat16 and
   * float16 without a bfloat16 GEMM entry) and the level has a vector pgemm;
   * otherwise the same bits */
  const kl_kernels kk = kl_select_kernels(in->dt == KL_BF16 ? KL_W_BF16 : in->dt == KL_F16 ? KL_W_F16 : KL_W_F32);
  const int panels = in->dt != KL_F64 && kk.pgemm != NULL && kk.gemm == NULL;
  check(same && (panels ? err <= tolerance(in->dt) : err == 0.0),
        "%s kl_lstm_forward on a trusted entry%s: max|d| vs kl_lstm_run %.3g (%s), threads "
        "1/2/5 bitwise equal", tag, panels ? " (W_ih panels)" : "", err,
        panels ? "within the tolerance" : "must be 0");
  for (int i = 0; i < 3; i++) result_free(&t[i]);
}

/* The one entry on strided weights gives the packed object's exact results; the
 * cache serves the second call and repacks after a weight changes in place, and
 * never keeps a packing of other bytes than its fingerprint's. */
void test_forward_entry(const model* m, const run_input* in, const result* r1, const char* tag) {
  dl_model f;
  dl_model_init(&f, m, in->dt);
  kl_cache_clear();
  forward_hit_and_repack(&f, in, r1, tag);
  forward_race(&f, in, r1, tag);
  forward_trusted(&f, m, in, r1, tag);
  kl_cache_clear();
  dl_model_free(&f);
  kl_cache_clear();
}
