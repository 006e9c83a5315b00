/* The recurrence of one layer: each direction's threads step through time, one
 * fused cell kernel per step (W_hh h + G + bias -> gates -> c, h), split by
 * batch chunks and hidden-unit blocks (engine.h, kl_split). The cell kernel
 * computes each element with the same instruction sequence whatever its tile or
 * thread, so results never depend on the thread count. A thread's active rows
 * of all its chunks go to the kernel in one call per step, which loads each
 * 16-unit block of W_hh once for all of them. */
#include <string.h>

#include "engine.h"

kl_split kl_plan_split(int p, int64_t B, size_t Hp) {
  const int64_t nch = (B + KL_CHUNK - 1) / KL_CHUNK;
  kl_split s = {p < nch ? p : (int)nch, 1};
  int64_t u = p / s.cg, umax = (int64_t)(Hp / KL_NR);
  if (B < KL_CHUNK && umax > KL_UNIT_SPLIT_SMALL) umax = KL_UNIT_SPLIT_SMALL;
  if (u > umax) u = umax;
  s.u = u < 1 ? 1 : (int)u;
  return s;
}

/* One step for n active elements: gates, then c and h. W_hh is streamed
 * forwards on even steps and backwards on odd ones, so the panels used last
 * are reused first (a W_hh that fills the L2 would otherwise miss on every
 * line of a cyclic sweep). */
static void cell_step(const kl_plan* x, int d, int64_t s, size_t n, kl_cell_row* rows,
                      size_t blk0, size_t blk1) {
  const kl_lstm* m = x->m;
  const void *w = x->L->w_hh[d], *bias = x->L->bias[d];
  const kl_lstmcell_ukernel_fn cell =
      m->k.cell_batch && x->B >= KL_CELL_BATCH_MIN ? m->k.cell_batch : m->k.cell;
  if (!(s & 1)) {
    cell(m->R, m->Hp, blk0, blk1, w, bias, n, rows);
    return;
  }
  for (size_t blk = blk1; blk > blk0; blk--) cell(m->R, m->Hp, blk - 1, blk, w, bias, n, rows);
}

void kl_run_direction(const kl_plan* x, int d, int gi, kl_split sp, int ith) {
  const kl_lstm* m = x->m;
  const size_t esz = m->esz, R = m->R, Rs = m->Rs, Hp = m->Hp;
  const int cgi = gi / sp.u, ui = gi % sp.u, by_units = sp.u > 1;
  if (cgi >= sp.cg) return; /* a leftover thread */
  kl_cell_row* rows = x->rows + (size_t)ith * (size_t)x->B;
  const void** hin = x->ptrs + (size_t)ith * 3 * (size_t)x->B;
  void** hout = (void**)(hin + x->B);
  char** dst = (char**)(hin + 2 * x->B); /* where each active row's h goes in the output */
  int32_t* mine = x->mine + (size_t)ith * (size_t)x->B;
  /* my elements: my chunk group's chunks, each in decreasing-length order */
  int64_t n_mine = 0;
  for (int64_t i = 0; i < x->B; i++)
    if ((i / KL_CHUNK) % sp.cg == cgi) mine[n_mine++] = x->ord[i];
  if (n_mine == 0) return;
  size_t blk0 = 0, blk1 = Hp / KL_NR, pb0 = 0, pb1 = m->Pp / KL_NR;
  if (by_units) {
    kl_share(Hp / KL_NR, ui, sp.u, &blk0, &blk1);
    kl_share(m->Pp / KL_NR, ui, sp.u, &pb0, &pb1);
  }
  /* the slice of h (R values) this thread copies to the output */
  size_t o0 = (m->P ? pb0 : blk0) * KL_NR, o1 = (m->P ? pb1 : blk1) * KL_NR;
  if (o1 > R) o1 = R;
  if (o0 > o1) o0 = o1;
  kl_barrier* bar = &x->bar[(size_t)d * (size_t)sp.cg + (size_t)cgi];
  const int reverse = d == 1 || m->desc.reverse;
  int64_t steps = 0;
  for (int64_t i = 0; i < n_mine; i++)
    if (x->len[mine[i]] > steps) steps = x->len[mine[i]];
  for (int64_t s = 0; s < steps; s++) {
    const int cur = (int)(s & 1), nxt = cur ^ 1;
    size_t nb = 0; /* my rows still running at step s */
    for (int64_t i = 0; i < n_mine; i++) {
      const int64_t b = mine[i];
      if (x->len[b] <= s) continue;
      const int64_t t = reverse ? x->len[b] - 1 - s : s;
      rows[nb].gx = x->G + ((size_t)(t * x->gt + b * x->gb) * x->ldg + (size_t)d * 4 * Hp) * esz;
      rows[nb].h = x->hbuf[d] + ((size_t)cur * (size_t)x->B + (size_t)b) * Rs * esz;
      rows[nb].c = x->c[d] + (size_t)b * Hp * esz;
      char* hn = x->hbuf[d] + ((size_t)nxt * (size_t)x->B + (size_t)b) * Rs * esz;
      rows[nb].h_out = m->P ? x->hfull[d] + (size_t)b * Hp * esz : hn;
      hin[nb] = rows[nb].h_out;
      hout[nb] = hn;
      dst[nb] = x->out + ((size_t)(t * x->out_st + b * x->out_sb) + (size_t)d * R + o0) * esz;
      nb++;
    }
    if (nb) cell_step(x, d, s, nb, rows, blk0, blk1);
    /* The next step's input-gate rows (this thread's units of them) towards L2:
     * G's rows are B apart and long out of cache, which the hardware prefetchers
     * do not follow. Written here, not in a helper: GCC finds a function that
     * only prefetches free of effects and drops its calls. */
    for (int64_t i = 0; i < n_mine; i++) {
      const int64_t b = mine[i];
      if (x->len[b] <= s + 1) continue;
      const int64_t t = reverse ? x->len[b] - 2 - s : s + 1;
      const char* g = x->G + ((size_t)(t * x->gt + b * x->gb) * x->ldg + (size_t)d * 4 * Hp) * esz;
      for (size_t gg = 0; gg < 4; gg++)
        for (size_t o = blk0 * KL_NR * esz; o < blk1 * KL_NR * esz; o += 64)
          __builtin_prefetch(g + gg * Hp * esz + o, 0, 2);
    }
    if (nb == 0) break;
    if (m->P) {
      if (by_units) kl_barrier_wait(bar, ui);
      m->k.proj(m->H, pb0, pb1, x->L->w_hr[d], nb, hin, hout);
    }
    const int poll = s % KL_INTERRUPT_STEPS == KL_INTERRUPT_STEPS - 1;
    if (poll) {
      const int stop = kl_plan_poll(x);
      if (ui == 0) x->gstop[bar - x->bar] = stop;
    }
    if (by_units) kl_barrier_wait(bar, ui);
    for (size_t i = 0; i < nb; i++) memcpy(dst[i], (const char*)hout[i] + o0 * esz, (o1 - o0) * esz);
    if (poll && x->gstop[bar - x->bar]) break; /* read after the barrier: the same for all */
  }
}
