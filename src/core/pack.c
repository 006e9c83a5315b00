/* Packing: the caller's weights into a kl_lstm (layouts in engine.h), and the
 * handle API's create and free. The input projection's own forms of W_ih are
 * packed by its strategies (inproj.c). */
#include <stdlib.h>
#include <string.h>

#include "engine.h"

size_t kl_dtype_io_size(kl_dtype dt) { return dt == KL_F64 ? sizeof(double) : sizeof(float); }

const kl_lstm_desc* kl_lstm_get_desc(const kl_lstm* m) { return &m->desc; }

void* kl_xalloc(size_t bytes) {
  if (bytes == 0) bytes = 64;
  void* p = aligned_alloc(64, kl_round_up(bytes, 64));
  if (p) memset(p, 0, kl_round_up(bytes, 64));
  return p;
}

/* kl_xalloc, counted in m->bytes. */
static void* malloc_packed(kl_lstm* m, size_t bytes) {
  m->bytes += kl_round_up(bytes ? bytes : 64, 64);
  return kl_xalloc(bytes);
}

size_t kl_lstm_packed_bytes(const kl_lstm* m) { return m->bytes; }

/* Reads element i of an io-typed array as double (packing is not hot). */
static double ld(const void* a, size_t i, size_t esz) {
  return esz == sizeof(double) ? ((const double*)a)[i] : (double)((const float*)a)[i];
}
static void st(void* a, size_t i, double v, size_t esz) {
  if (esz == sizeof(double)) ((double*)a)[i] = v;
  else ((float*)a)[i] = (float)v;
}
/* Copies element i of an io-typed array into a weight-typed panel slot. */
static void pack_one(void* dst, size_t di, kl_wtype wt, const void* src, size_t si) {
  switch (wt) {
    case KL_W_F64: ((double*)dst)[di] = ((const double*)src)[si]; break;
    case KL_W_BF16: ((uint16_t*)dst)[di] = kl_f32_to_bf16(((const float*)src)[si]); break;
    case KL_W_F16: ((uint16_t*)dst)[di] = kl_f32_to_f16(((const float*)src)[si]); break;
    default: ((float*)dst)[di] = ((const float*)src)[si]; break;
  }
}

/* W_hh [4H, R] (row stride ld) -> panels. */
static void* pack_whh(kl_lstm* m, const void* w, size_t ld) {
  const size_t H = m->H, R = m->R, nblk = m->Hp / KL_NR;
  if (m->wt == KL_W_BF16) {
    const size_t npair = (R + 1) / 2;
    uint16_t* p = malloc_packed(m, nblk * npair * 128 * sizeof(uint16_t));
    if (!p) return NULL;
    for (size_t blk = 0; blk < nblk; blk++)
      for (size_t k = 0; k < R; k++)
        for (size_t g = 0; g < 4; g++)
          for (size_t l = 0; l < KL_NR; l++) {
            const size_t u = blk * KL_NR + l;
            if (u < H)
              pack_one(p, ((blk * npair + k / 2) * 4 + g) * 32 + l * 2 + (k & 1), m->wt, w,
                       (g * H + u) * ld + k);
          }
    return p;
  }
  void* p = malloc_packed(m, nblk * R * 64 * m->wesz);
  if (!p) return NULL;
  for (size_t blk = 0; blk < nblk; blk++)
    for (size_t k = 0; k < R; k++)
      for (size_t g = 0; g < 4; g++)
        for (size_t l = 0; l < KL_NR; l++) {
          const size_t u = blk * KL_NR + l;
          if (u < H) pack_one(p, (blk * R + k) * 64 + g * 16 + l, m->wt, w, (g * H + u) * ld + k);
        }
  return p;
}

/* W_hr [P, H] (row stride ld) -> panels. */
static void* pack_whr(kl_lstm* m, const void* w, size_t ld) {
  const size_t H = m->H, P = m->P, nblk = m->Pp / KL_NR;
  if (m->wt == KL_W_BF16) {
    const size_t npair = (H + 1) / 2;
    uint16_t* p = malloc_packed(m, nblk * npair * 32 * sizeof(uint16_t));
    if (!p) return NULL;
    for (size_t blk = 0; blk < nblk; blk++)
      for (size_t j = 0; j < H; j++)
        for (size_t l = 0; l < KL_NR && blk * KL_NR + l < P; l++)
          pack_one(p, (blk * npair + j / 2) * 32 + l * 2 + (j & 1), m->wt, w,
                   (blk * KL_NR + l) * ld + j);
    return p;
  }
  void* p = malloc_packed(m, nblk * H * 16 * m->wesz);
  if (!p) return NULL;
  for (size_t blk = 0; blk < nblk; blk++)
    for (size_t j = 0; j < H; j++)
      for (size_t l = 0; l < KL_NR && blk * KL_NR + l < P; l++)
        pack_one(p, (blk * H + j) * 16 + l, m->wt, w, (blk * KL_NR + l) * ld + j);
  return p;
}

void kl_lstm_free(kl_lstm* m) {
  if (!m) return;
  if (m->layers) {
    for (int l = 0; l < m->desc.num_layers; l++) {
      kl_layer* L = &m->layers[l];
      free(L->w_ih);
      for (int f = 0; f < KL_WIH_FORMS; f++) free(L->w_ih_form[f]);
      for (int d = 0; d < 2; d++) {
        free(L->w_hh[d]);
        free(L->bias[d]);
        free(L->w_hr[d]);
      }
    }
    free(m->layers);
  }
  free(m);
}

static int desc_ok(const kl_lstm_desc* desc) {
  return desc->input_size >= 1 && desc->hidden_size >= 1 && desc->num_layers >= 1 &&
         (desc->bidirectional == 0 || desc->bidirectional == 1) && desc->proj_size >= 0 &&
         desc->proj_size < desc->hidden_size && desc->dtype >= KL_F32 && desc->dtype <= KL_F16 &&
         !(desc->reverse && desc->bidirectional);
}

static kl_wtype weight_type(kl_dtype dt) {
  return dt == KL_F64 ? KL_W_F64 : dt == KL_BF16 ? KL_W_BF16 : dt == KL_F16 ? KL_W_F16 : KL_W_F32;
}

int kl_lstm_can_borrow_wih(const kl_lstm_desc* desc) {
  return kl_select_kernels(weight_type(desc->dtype)).gemm == NULL;
}

kl_status kl_lstm_create(const kl_lstm_desc* desc, const kl_weights* weights, kl_lstm** out) {
  if (!desc || !weights || !out) return KL_ERR_ARG;
  *out = NULL;
  if (!desc_ok(desc)) return KL_ERR_ARG; /* before sizing the array below */
  const int D = desc->bidirectional ? 2 : 1, n = desc->num_layers * D;
  const int64_t R = desc->proj_size ? desc->proj_size : desc->hidden_size;
  kl_wsrc* w = calloc((size_t)n, sizeof(kl_wsrc));
  if (!w) return KL_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    w[i] = (kl_wsrc){weights[i].w_ih, weights[i].w_hh, weights[i].b_ih, weights[i].b_hh,
                     weights[i].w_hr, i < D ? desc->input_size : D * R, R, desc->hidden_size, 1, 1};
  }
  kl_status s = kl_lstm_pack(desc, w, 0, out);
  free(w);
  return s;
}

/* Direction d of a layer: W_ih's copy (unless borrowed), the bias, the
 * strategies' forms of W_ih, W_hh and W_hr. 0 when out of memory. */
static int pack_direction(kl_lstm* m, kl_layer* L, int d, const kl_wsrc* w) {
  const size_t H = m->H, Hp = m->Hp;
  const size_t ld_ih = (size_t)w->ld_ih;
  if (L->w_ih)
    for (size_t g = 0; g < 4; g++)
      for (size_t u = 0; u < H; u++)
        memcpy((char*)L->w_ih + (((size_t)d * 4 * Hp + g * Hp + u) * L->in_size) * m->esz,
               (const char*)w->w_ih + ((g * H + u) * ld_ih) * m->esz, L->in_size * m->esz);
  L->bias[d] = malloc_packed(m, 4 * Hp * m->esz);
  if (!L->bias[d]) return 0;
  for (size_t g = 0; g < 4; g++)
    for (size_t u = 0; u < H; u++) {
      const double bi = w->b_ih ? ld(w->b_ih, (g * H + u) * (size_t)w->s_bi, m->esz) : 0.0;
      const double bh = w->b_hh ? ld(w->b_hh, (g * H + u) * (size_t)w->s_bh, m->esz) : 0.0;
      st(L->bias[d], g * Hp + u, bi + bh, m->esz);
    }
  for (size_t i = 0; i < kl_inproj_count; i++) {
    const kl_inproj* e = &kl_inproj_list[i];
    if (e->form >= 0 && L->w_ih_form[e->form]) e->pack(m, L, d, w);
  }
  L->w_hh[d] = pack_whh(m, w->w_hh, (size_t)w->ld_hh);
  if (!L->w_hh[d]) return 0;
  if (m->P && !(L->w_hr[d] = pack_whr(m, w->w_hr, (size_t)w->ld_hr))) return 0;
  return 1;
}

kl_status kl_lstm_pack(const kl_lstm_desc* desc, const kl_wsrc* weights, int flags,
                       kl_lstm** out) {
  if (!desc || !weights || !out) return KL_ERR_ARG;
  *out = NULL;
  if (!desc_ok(desc)) return KL_ERR_ARG;
  const int D = desc->bidirectional ? 2 : 1;
  for (int i = 0; i < desc->num_layers * D; i++) {
    if (!weights[i].w_ih || !weights[i].w_hh) return KL_ERR_ARG;
    if ((weights[i].w_hr != NULL) != (desc->proj_size > 0)) return KL_ERR_ARG;
  }
  kl_lstm* m = calloc(1, sizeof(*m));
  if (!m) return KL_ERR_NOMEM;
  m->desc = *desc;
  m->D = D;
  m->H = (size_t)desc->hidden_size;
  m->Hp = kl_round_up(m->H, KL_NR);
  m->P = (size_t)desc->proj_size;
  m->Pp = kl_round_up(m->P, KL_NR);
  m->R = m->P ? m->P : m->H;
  m->Rs = kl_round_up(m->R, KL_NR);
  m->esz = kl_dtype_io_size(desc->dtype);
  m->wt = weight_type(desc->dtype);
  m->wesz = m->wt == KL_W_F64 ? 8 : (m->wt == KL_W_BF16 || m->wt == KL_W_F16) ? 2 : 4;
  m->k = kl_select_kernels(m->wt);
  m->borrowed = (flags & KL_PACK_BORROW_WIH) && m->k.gemm == NULL;
  m->layers = calloc((size_t)desc->num_layers, sizeof(kl_layer));
  if (!m->layers) goto nomem;
  for (int l = 0; l < desc->num_layers; l++) {
    kl_layer* L = &m->layers[l];
    L->in_size = l == 0 ? (size_t)desc->input_size : (size_t)D * m->R;
    if (!m->borrowed && !(L->w_ih = malloc_packed(m, (size_t)D * 4 * m->Hp * L->in_size * m->esz)))
      goto nomem;
    for (size_t i = 0; i < kl_inproj_count; i++) { /* zeroed: padding units stay 0 */
      const kl_inproj* e = &kl_inproj_list[i];
      if (e->form >= 0 && e->holds(m, flags) &&
          !(L->w_ih_form[e->form] = malloc_packed(m, e->form_bytes(m, L->in_size))))
        goto nomem;
    }
    for (int d = 0; d < D; d++)
      if (!pack_direction(m, L, d, &weights[l * D + d])) goto nomem;
  }
  *out = m;
  return KL_OK;
nomem:
  kl_lstm_free(m);
  return KL_ERR_NOMEM;
}
