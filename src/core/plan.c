/* The per-call plan (engine.h, kl_plan): made once per call from the run's
 * arguments (thread count and split, batch order, buffers), then set up layer
 * by layer (inputs, outputs, the input projection's strategy, states). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "scratch.h"
#include "threads.h"

/* Finds how the (t, b) rows of a [T, B, K] strided array form one strided
 * sequence for the GEMM: row (t, b) = t*gt + b*gb, row stride *ld. */
static int row_layout(int64_t T, int64_t B, int64_t s_t, int64_t s_b, int64_t K, int64_t* ld,
                      int64_t* gt, int64_t* gb) {
  if (T == 1 && B == 1) { *ld = K; *gt = 0; *gb = 0; }
  else if (B == 1) { *ld = s_t; *gt = 1; *gb = 0; }
  else if (T == 1) { *ld = s_b; *gt = 0; *gb = 1; }
  else if (s_t == B * s_b) { *ld = s_b; *gt = B; *gb = 1; }
  else if (s_b == T * s_t) { *ld = s_t; *gt = 1; *gb = T; }
  else return 0;
  return *ld >= K && *ld <= INT_MAX;
}

int kl_row_layout(int64_t T, int64_t B, int64_t s_t, int64_t s_b, int64_t K, int64_t* ld, int64_t* gt,
                  int64_t* gb) {
  return row_layout(T, B, s_t, s_b, K, ld, gt, gb);
}

int kl_input_layout_ok(int64_t T, int64_t B, int64_t x_st, int64_t x_sb, int64_t input_size) {
  int64_t ld, gt, gb;
  return T >= 1 && B >= 0 && row_layout(T, B, x_st, x_sb, input_size, &ld, &gt, &gb);
}

/* ord = the batch indices by decreasing length, equal lengths in index order
 * (a stable bottom-up merge sort, O(B log B) whatever the lengths' order);
 * tmp: B more indices. */
static void order_by_length(const int64_t* len, int64_t B, int32_t* ord, int32_t* tmp) {
  int32_t *src = ord, *dst = tmp;
  for (int64_t b = 0; b < B; b++) ord[b] = (int32_t)b;
  for (int64_t w = 1; w < B; w *= 2) {
    for (int64_t lo = 0; lo < B; lo += 2 * w) {
      const int64_t mid = lo + w < B ? lo + w : B, hi = lo + 2 * w < B ? lo + 2 * w : B;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) dst[k++] = len[src[j]] > len[src[i]] ? src[j++] : src[i++];
      while (i < mid) dst[k++] = src[i++];
      while (j < hi) dst[k++] = src[j++];
    }
    int32_t* t = src;
    src = dst;
    dst = t;
  }
  if (src != ord) memcpy(ord, src, (size_t)B * sizeof(int32_t));
}

/* Threads of the call (threads.h: the rule and the short-call cap, at most the
 * recurrence's own D x KL_UNIT_SPLIT_SMALL for a short call of a small batch).
 * The thread count never changes results. */
static int call_threads(const kl_lstm* m, const kl_run_args* a) {
  return kl_threads_short_call(kl_threads_cap(a->num_threads), a->T * a->B, a->B < KL_CHUNK,
                               m->D * KL_UNIT_SPLIT_SMALL);
}

/* The input projection's work space: the most any layer's strategy needs. */
static size_t ws_bytes(const kl_lstm* m, const kl_run_args* a) {
  const size_t TB = (size_t)a->T * (size_t)a->B;
  size_t bytes = 0;
  for (int l = 0; l < m->desc.num_layers; l++) {
    const kl_inproj* e = kl_inproj_choose(m, &m->layers[l], TB, l == 0 && a->x_gates, 0);
    const size_t b = e->ws_bytes ? e->ws_bytes(m, &m->layers[l], TB) : 0;
    if (b > bytes) bytes = b;
  }
  return bytes;
}

/* The call's buffers; 0 when out of memory (kl_plan_free releases what was taken). */
static int plan_alloc(kl_plan* x, const kl_run_args* a) {
  const kl_lstm* m = x->m;
  const int D = m->D, nl = m->desc.num_layers;
  const size_t esz = m->esz, Rs = m->Rs, Hp = m->Hp, B = (size_t)x->B, nth = (size_t)x->nth;
  const size_t TB = (size_t)x->T * B, ldg = (size_t)D * 4 * Hp, DR = (size_t)D * m->R;
  /* fully written by the input projection; not needed when layer 0 reads its
   * gates in place and is the only layer */
  if (!(x->gates_in_place && nl == 1) && !(x->Gbuf = kl_scratch_take(TB * ldg * esz, &x->G_cap))) return 0;
  const size_t ws = ws_bytes(m, a);
  if (ws && !(x->ws = kl_scratch_take(ws, &x->ws_cap))) return 0;
  x->state = kl_xalloc((size_t)D * B * (2 * Rs + 2 * Hp) * esz);
  x->len = malloc(B * sizeof(int64_t));
  x->ord = malloc(2 * B * sizeof(int32_t)); /* the order, then order_by_length's buffer */
  /* a per-step barrier per (direction, chunk group), then one for all threads */
  const size_t nbar = (size_t)D * (size_t)x->sp.cg + 1;
  x->bar = aligned_alloc(64, kl_round_up(nbar * sizeof(kl_barrier), 64));
  x->slots = aligned_alloc(64, ((nbar - 1) * (size_t)x->sp.u + nth) * sizeof(kl_barrier_slot));
  x->rows = malloc(nth * B * sizeof(kl_cell_row));
  x->ptrs = malloc(nth * 3 * B * sizeof(void*));
  x->mine = malloc(nth * B * sizeof(int32_t));
  x->gstop = calloc(nbar, sizeof(int));
  if (!x->state || !x->len || !x->ord || !x->bar || !x->slots || !x->rows || !x->ptrs || !x->mine || !x->gstop)
    return 0;
  x->gbar = x->bar + nbar - 1;
  /* layer outputs between layers: every row is written (zeros past a length) */
  for (int i = 0; i < (nl > 2 ? 2 : nl - 1); i++)
    if (!(x->inter[i] = kl_scratch_take(TB * DR * esz, &x->inter_cap[i]))) return 0;
  return 1;
}

kl_status kl_plan_make(kl_plan* x, const kl_lstm* m, const kl_run_args* a, const kl_wih_view* wih) {
  memset(x, 0, sizeof(*x));
  const int64_t T = a->T, B = a->B;
  const int D = m->D;
  if (a->lengths)
    for (int64_t b = 0; b < B; b++)
      if (a->lengths[b] < 1 || a->lengths[b] > T) return KL_ERR_ARG;
  /* layer 0 reads x as its input rows, or (x_gates) as its gates: read in place
   * when they already have the padded layout and nothing is added */
  const int64_t K0 = a->x_gates ? (int64_t)D * 4 * (int64_t)m->H : (int64_t)m->layers[0].in_size;
  if (!row_layout(T, B, a->x_st, a->x_sb, K0, &x->ld0, &x->gt0, &x->gb0)) return KL_ERR_ARG;
  if ((double)T * (double)B > (double)INT_MAX || (double)D * 4 * (double)m->Hp * (double)T * (double)B > 1e15)
    return KL_ERR_ARG;
  x->m = m;
  x->wih = wih;
  x->T = T;
  x->B = B;
  x->nth = call_threads(m, a);
  x->sp = kl_plan_split(kl_threads_per_direction(x->nth, D), B, m->Hp);
  x->gates_in_place = a->x_gates && !a->gate_bias && m->Hp == m->H;
  x->interrupt = a->interrupt;
  x->interrupt_ctx = a->interrupt_ctx;
  x->caller = pthread_self();
  x->stop = &x->stop_flag;
  atomic_init(&x->stop_flag, 0);
  if (!plan_alloc(x, a)) {
    kl_plan_free(x);
    return KL_ERR_NOMEM;
  }
  for (int64_t b = 0; b < B; b++) x->len[b] = a->lengths ? a->lengths[b] : T;
  order_by_length(x->len, B, x->ord, x->ord + B);
  for (int d = 0; d < D; d++) {
    char* s = x->state + (size_t)d * (size_t)B * (2 * m->Rs + 2 * m->Hp) * m->esz;
    x->hbuf[d] = s;
    x->c[d] = s + 2 * (size_t)B * m->Rs * m->esz;
    x->hfull[d] = x->c[d] + (size_t)B * m->Hp * m->esz;
  }
  return KL_OK;
}

void kl_plan_free(kl_plan* x) {
  kl_scratch_give(x->Gbuf, x->G_cap);
  kl_scratch_give(x->inter[0], x->inter_cap[0]);
  kl_scratch_give(x->inter[1], x->inter_cap[1]);
  kl_scratch_give(x->ws, x->ws_cap);
  free(x->state);
  free(x->len);
  free(x->ord);
  free(x->bar);
  free(x->slots);
  free(x->rows);
  free(x->ptrs);
  free(x->mine);
  free(x->gstop);
  memset(x, 0, sizeof(*x));
}

/* Layer l's initial states (padded lanes zero) and the zeros of its output
 * past each sequence's length. */
static void load_states(kl_plan* x, const kl_run_args* a, int l) {
  const kl_lstm* m = x->m;
  const size_t esz = m->esz, R = m->R, Rs = m->Rs, H = m->H, Hp = m->Hp, DR = (size_t)m->D * R;
  const int64_t T = x->T, B = x->B;
  memset(x->state, 0, (size_t)m->D * (size_t)B * (2 * Rs + 2 * Hp) * esz);
  for (int d = 0; d < m->D; d++)
    for (int64_t b = 0; b < B; b++) {
      const size_t sl = ((size_t)(l * m->D + d) * (size_t)B + (size_t)b);
      if (a->h0) memcpy(x->hbuf[d] + (size_t)b * Rs * esz, (const char*)a->h0 + sl * R * esz, R * esz);
      if (a->c0) memcpy(x->c[d] + (size_t)b * Hp * esz, (const char*)a->c0 + sl * H * esz, H * esz);
    }
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = x->len[b]; t < T; t++)
      memset(x->out + (size_t)(t * x->out_st + b * x->out_sb) * esz, 0, DR * esz);
}

void kl_plan_layer(kl_plan* x, const kl_run_args* a, int l) {
  const kl_lstm* m = x->m;
  const int D = m->D, nl = m->desc.num_layers;
  const size_t Hp = m->Hp, DR = (size_t)D * m->R;
  const kl_layer* L = &m->layers[l];
  x->L = L;
  if (m->borrowed) {
    x->wv = x->wih + (size_t)l * (size_t)D;
  } else {
    for (int d = 0; d < D; d++)
      x->own[d] = (kl_wih_view){(const char*)L->w_ih + (size_t)d * 4 * Hp * L->in_size * m->esz,
                                (int64_t)L->in_size, (int64_t)Hp};
    x->wv = x->own;
  }
  if (l == 0) {
    x->in = a->x;
    x->lda = x->ld0;
    x->gt = x->gt0;
    x->gb = x->gb0;
  } else { /* seq-major [T, B, DR] */
    x->in = x->inter[(l - 1) & 1];
    x->lda = (int64_t)DR;
    x->gt = x->B;
    x->gb = 1;
  }
  if (l == nl - 1) {
    x->out = a->y;
    x->out_st = a->y_st;
    x->out_sb = a->y_sb;
  } else {
    x->out = x->inter[l & 1];
    x->out_st = x->B * (int64_t)DR;
    x->out_sb = (int64_t)DR;
  }
  x->in_gates = l == 0 && a->x_gates;
  x->gate_bias = l == 0 ? (const char*)a->gate_bias : NULL;
  if (l == 0 && x->gates_in_place) { /* the caller's gates are read where they lie */
    x->G = (const char*)a->x;
    x->Gw = NULL;
    x->ldg = (size_t)x->ld0;
  } else {
    x->G = x->Gw = x->Gbuf;
    x->ldg = (size_t)D * 4 * Hp;
  }
  const size_t TB = (size_t)x->T * (size_t)x->B;
  x->ip = kl_inproj_choose(m, L, TB, x->in_gates, 0);
  x->ip_next = kl_inproj_choose(m, L, TB, x->in_gates, (size_t)(x->ip - kl_inproj_list) + 1);
  if (x->ip->begin) x->ip->begin(x);
  load_states(x, a, l);
  for (size_t i = 0; i + 1 < (size_t)D * (size_t)x->sp.cg + 1; i++)
    kl_barrier_init(&x->bar[i], x->sp.u, x->slots + i * (size_t)x->sp.u);
  kl_barrier_init(x->gbar, x->nth, x->slots + (size_t)D * (size_t)x->sp.cg * (size_t)x->sp.u);
}

void kl_plan_store_states(const kl_plan* x, const kl_run_args* a, int l) {
  const kl_lstm* m = x->m;
  const size_t esz = m->esz, R = m->R, Rs = m->Rs, H = m->H, Hp = m->Hp;
  for (int d = 0; d < m->D; d++)
    for (int64_t b = 0; b < x->B; b++) {
      const size_t sl = ((size_t)(l * m->D + d) * (size_t)x->B + (size_t)b);
      if (a->h_n)
        memcpy((char*)a->h_n + sl * R * esz,
               x->hbuf[d] + ((size_t)(x->len[b] & 1) * (size_t)x->B + (size_t)b) * Rs * esz, R * esz);
      if (a->c_n) memcpy((char*)a->c_n + sl * H * esz, x->c[d] + (size_t)b * Hp * esz, H * esz);
    }
}
