/* The cell, projection and fingerprint kernels against the scalar kernel of their
 * type, and what the kernel tests share (kernels.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels.h"

/* Both NaN, both the same infinity, or |a - b| <= tol * max(1, |b|). */
int close_f(float a, float b, double tol) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs((double)a - (double)b) <= tol * fmax(1.0, fabs((double)b));
}

/* Worst mismatch of n floats: returns 1 if all close, else records the first. */
int all_close(const float* a, const float* b, size_t n, double tol, char* why, size_t wn,
              const char* what) {
  for (size_t i = 0; i < n; i++)
    if (!close_f(a[i], b[i], tol)) {
      snprintf(why, wn, " (%s[%zu]: %.9g vs scalar %.9g)", what, i, (double)a[i], (double)b[i]);
      return 0;
    }
  return 1;
}

/* A fingerprint kernel of the list: the same integers as the scalar kernel; one
 * flipped bit anywhere changes them. */
void test_fp_kernel(const kl_fp_entry* e) {
  enum { NB = 64 * 37 };
  unsigned char* buf = xcalloc(NB, 1);
  for (size_t i = 0; i < NB; i++) buf[i] = (unsigned char)(urand(0, 256));
  uint64_t as[8] = {0}, av[8] = {0};
  kl_u64_fingerprint__scalar(buf, NB, as);
  e->fn(buf, NB, av);
  int ok = memcmp(as, av, sizeof(as)) == 0;
  for (size_t bit = 0; bit < NB * 8 && ok; bit += 97) {
    uint64_t a2[8] = {0};
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    e->fn(buf, NB, a2);
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    if (memcmp(a2, as, sizeof(as)) == 0) ok = 0;
  }
  check(ok, "[list %s] == scalar, and every flipped bit tried changes it", e->name);
  free(buf);
}

const char* wtype_name(kl_wtype wt) {
  switch (wt) {
    case KL_W_F32: return "f32";
    case KL_W_F64: return "f64";
    case KL_W_BF16: return "bf16";
    case KL_W_F16: return "f16";
  }
  return "?";
}

/* Panel elements of nblk 16-unit blocks over R inputs (cell), and their size. */
static size_t panel_elems(kl_wtype wt, size_t R, size_t nblk) {
  return wt == KL_W_BF16 ? nblk * ((R + 1) / 2) * 128 : nblk * R * 64;
}
static size_t wsize(kl_wtype wt) { return wt == KL_W_F64 ? 8 : wt == KL_W_F32 ? 4 : 2; } /* bf16, f16: 2 */

/* Random panel values in [-0.5, 0.5) stored in the weight type; the pad k of each
 * bfloat16 pair is zero for odd R, as the core packs it. */
static void* random_panel(kl_wtype wt, size_t R, size_t nblk) {
  const size_t n = panel_elems(wt, R, nblk), npair = (R + 1) / 2;
  void* w = aligned_alloc(64, (n * wsize(wt) + 63) / 64 * 64);
  if (!w) exit(2);
  for (size_t i = 0; i < n; i++) {
    const float v = (float)urand(-0.5, 0.5);
    if (wt == KL_W_BF16) ((uint16_t*)w)[i] = (wt == KL_W_BF16 && (R & 1) && (i & 1) &&
                                              (i / 128) % npair == npair - 1) ? 0 : kl_f32_to_bf16(v);
    else if (wt == KL_W_F16) ((uint16_t*)w)[i] = kl_f32_to_f16(v);
    else if (wt == KL_W_F64) ((double*)w)[i] = v;
    else ((float*)w)[i] = v;
  }
  return w;
}

const kl_lstmcell_entry* scalar_cell(kl_wtype wt) {
  for (size_t i = 0; i < kl_lstmcell_count; i++)
    if (kl_lstmcell_list[i].wt == wt && kl_lstmcell_list[i].arch == 0) return &kl_lstmcell_list[i];
  return NULL;
}
const kl_lstmproj_entry* scalar_proj(kl_wtype wt) {
  for (size_t i = 0; i < kl_lstmproj_count; i++)
    if (kl_lstmproj_list[i].wt == wt && kl_lstmproj_list[i].arch == 0) return &kl_lstmproj_list[i];
  return NULL;
}

/* Kernels that round h to bfloat16 (BF16 dot-product instructions) are looser. */
static double kernel_tol(kl_wtype wt, const char* isa) {
  return wt == KL_W_BF16 && (strstr(isa, "bf16") || strcmp(isa, "avx512amx") == 0) ? 2e-2 : 2e-5;
}

#define KNB 16 /* batch rows: 1, 3, 6, 8, 13, 16 (tiles of up to 4 or 6 rows, split evenly) */
#define KR 40 /* largest R */

void test_cell_kernel(const kl_lstmcell_entry* k) {
  const kl_lstmcell_entry* ref = scalar_cell(k->wt);
  char why[200] = "";
  if (!ref) {
    check(0, "[kernel %s] has a scalar kernel of its type to compare with", k->name);
    return;
  }
  const double tol = kernel_tol(k->wt, k->isa);
  const size_t Rs[] = {1, 2, 3, 17, 33, KR}, nbs[] = {1, 3, 6, 8, 13, KNB};
  int ok = 1;
  for (size_t ri = 0; ri < sizeof(Rs) / sizeof(Rs[0]) && ok; ri++)
    for (size_t ni = 0; ni < sizeof(nbs) / sizeof(nbs[0]) && ok; ni++)
      for (int special = 0; special < 4 && ok; special++) { /* none, +-inf in h, NaN in h, NaN/inf in gx and c */
        const size_t R = Rs[ri], nblk = 2, Hp = nblk * KL_NR, nb = nbs[ni];
        void* w = random_panel(k->wt, R, nblk);
        float bias[4 * 32], gx[KNB][4 * 32], h[KNB][KR], c_s[KNB][32], c_v[KNB][32], o_s[KNB][32],
            o_v[KNB][32], c_in[KNB][32];
        for (size_t i = 0; i < 4 * Hp; i++) bias[i] = (float)urand(-1.0, 1.0);
        for (size_t e = 0; e < nb; e++) {
          for (size_t i = 0; i < 4 * Hp; i++) gx[e][i] = (float)urand(-2.0, 2.0);
          for (size_t i = 0; i < KR; i++) h[e][i] = (float)urand(-1.0, 1.0);
          for (size_t i = 0; i < Hp; i++) c_in[e][i] = c_s[e][i] = c_v[e][i] = (float)urand(-1.0, 1.0);
          for (size_t i = 0; i < Hp; i++) o_s[e][i] = o_v[e][i] = 12345.0f;
        }
        if (special == 1) { h[0][R - 1] = INFINITY; h[nb - 1][R / 2] = -INFINITY; }
        if (special == 2) h[nb / 2][R / 3] = NAN;
        if (special == 3) {
          gx[0][5] = NAN;
          gx[nb - 1][Hp + 17] = INFINITY; /* forget gate of unit 17 saturates */
          c_s[nb - 1][17] = c_v[nb - 1][17] = -INFINITY;
          gx[nb / 2][2 * Hp + 3] = -INFINITY;
        }
        kl_cell_row rs[KNB], rv[KNB];
        for (size_t e = 0; e < nb; e++) {
          rs[e] = (kl_cell_row){gx[e], h[e], c_s[e], o_s[e]};
          rv[e] = (kl_cell_row){gx[e], h[e], c_v[e], o_v[e]};
        }
        ref->fn(R, Hp, 0, nblk, w, bias, nb, rs);
        k->fn(R, Hp, 0, nblk, w, bias, nb, rv);
        for (size_t e = 0; e < nb && ok; e++)
          ok = all_close(c_v[e], c_s[e], Hp, tol, why, sizeof(why), "c") &&
               all_close(o_v[e], o_s[e], Hp, tol, why, sizeof(why), "h");
        /* the engine deals rows to threads and tiles by count: a row's bits must
         * not depend on the rows beside it (each row alone, finite inputs) */
        for (size_t e = 0; e < nb && ok && special == 0; e++) {
          float c1[32], o1[32];
          memcpy(c1, c_in[e], sizeof(c1));
          kl_cell_row r1 = {gx[e], h[e], c1, o1};
          k->fn(R, Hp, 0, nblk, w, bias, 1, &r1);
          if (memcmp(c1, c_v[e], Hp * sizeof(float)) || memcmp(o1, o_v[e], Hp * sizeof(float))) {
            ok = 0;
            snprintf(why, sizeof(why), " row %zu alone differs from the same row among %zu", e, nb);
          }
        }
        if (!ok)
          snprintf(why + strlen(why), sizeof(why) - strlen(why), " R=%zu nb=%zu special=%d", R, nb,
                   special);
        free(w);
      }
  check(ok, "[kernel %s] %s cell vs %s: R = 1, 2, 3, 17, 33, 40, 1/3/6/8/13/16 rows, +-inf / NaN in h, "
        "NaN / inf in gates and c (tol %.0e); each row alone gives the same bits%s", k->name,
        wtype_name(k->wt), ref->name, tol, why);
}

void test_proj_kernel(const kl_lstmproj_entry* k) {
  const kl_lstmproj_entry* ref = scalar_proj(k->wt);
  char why[200] = "";
  if (!ref) {
    check(0, "[kernel %s] has a scalar kernel of its type to compare with", k->name);
    return;
  }
  const double tol = kernel_tol(k->wt, k->isa);
  const size_t Hs[] = {1, 2, 3, 17, 33, KR};
  int ok = 1;
  for (size_t hi = 0; hi < sizeof(Hs) / sizeof(Hs[0]) && ok; hi++)
    for (size_t nb = 1; nb <= 9 && ok; nb += 4) /* 1, 5, 9: the 8-row tile and remainders */
      for (int special = 0; special < 3 && ok; special++) {
        const size_t H = Hs[hi], nblk = 2;
        void* w = random_panel(k->wt, H, nblk); /* larger than the projection needs */
        float h[9][KR], o_s[9][32], o_v[9][32];
        const void* hin[9];
        void *ps[9], *pv[9];
        for (size_t e = 0; e < nb; e++) {
          for (size_t i = 0; i < KR; i++) h[e][i] = (float)urand(-1.0, 1.0);
          for (size_t i = 0; i < 32; i++) o_s[e][i] = o_v[e][i] = 12345.0f;
          hin[e] = h[e];
          ps[e] = o_s[e];
          pv[e] = o_v[e];
        }
        if (special == 1) { h[0][H - 1] = INFINITY; h[nb - 1][H / 2] = -INFINITY; }
        if (special == 2) h[nb / 2][H / 3] = NAN;
        ref->fn(H, 0, nblk, w, nb, hin, ps);
        k->fn(H, 0, nblk, w, nb, hin, pv);
        for (size_t e = 0; e < nb && ok; e++) ok = all_close(o_v[e], o_s[e], 32, tol, why, sizeof(why), "proj");
        if (!ok) snprintf(why + strlen(why), sizeof(why) - strlen(why), " H=%zu nb=%zu special=%d", H, nb, special);
        free(w);
      }
  check(ok, "[kernel %s] %s projection vs %s: H = 1, 2, 3, 17, 33, 40, 1/5/9 rows, +-inf / NaN "
        "(tol %.0e)%s", k->name, wtype_name(k->wt), ref->name, tol, why);
}
