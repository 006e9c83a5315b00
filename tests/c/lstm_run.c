/* The engine under test on one case: kl_lstm_create / kl_lstm_run, and
 * kl_lstm_forward on the weights as strided DLTensors (lstm.h). */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lstm.h"

kl_status create_engine(const model* m, kl_dtype dt, kl_lstm** out) {
  const tcase* c = m->c;
  kl_weights w[MAXW];
  memset(w, 0, sizeof(w));
  void* owned[MAXW * 5];
  int n_owned = 0;
  const size_t H = (size_t)c->H, R = (size_t)m->R;
  for (int i = 0; i < c->L * m->D; i++) {
    owned[n_owned++] = (void*)(w[i].w_ih = to_io(m->w_ih[i], 4 * H * (size_t)m->in_size[i], dt));
    owned[n_owned++] = (void*)(w[i].w_hh = to_io(m->w_hh[i], 4 * H * R, dt));
    owned[n_owned++] = (void*)(w[i].b_ih = to_io(m->b_ih[i], 4 * H, dt));
    owned[n_owned++] = (void*)(w[i].b_hh = to_io(m->b_hh[i], 4 * H, dt));
    owned[n_owned++] = (void*)(w[i].w_hr = to_io(m->w_hr[i], (size_t)c->P * H, dt));
  }
  kl_lstm_desc desc = {c->I, c->H, c->L, c->bidir, c->P, c->reverse, dt};
  const kl_status st = kl_lstm_create(&desc, w, out);
  /* the packed object must not depend on the caller's arrays */
  for (int i = 0; i < n_owned; i++) {
    if (owned[i]) memset(owned[i], 0xA5, 1); /* scribble before freeing */
    free(owned[i]);
  }
  return st;
}

static void dl_add(dl_model* f, kl_dtype dt, const double* a, int64_t rows, int64_t cols,
                   int64_t ld, int one_d) {
  const size_t esz = io_size(dt), n = (size_t)(rows * ld);
  void* b = xcalloc(n, esz);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < ld; c++) {
      const double v = c < cols ? a[r * cols + c] : 1e30; /* padding: never read */
      if (dt == KL_F64) ((double*)b)[r * ld + c] = v;
      else ((float*)b)[r * ld + c] = (float)v;
    }
  const int k = f->n++;
  f->buf[k] = b;
  DLTensor* t = &f->t[k];
  memset(t, 0, sizeof(*t));
  t->data = b;
  t->device.device_type = kDLCPU;
  t->dtype = (DLDataType){kDLFloat, (uint8_t)(esz * 8), 1};
  if (one_d) { /* a vector of rows elements with stride ld */
    t->ndim = 1;
    f->shape[k][0] = rows * cols;
    f->strides[k][0] = ld;
  } else {
    t->ndim = 2;
    f->shape[k][0] = rows;
    f->shape[k][1] = cols;
    f->strides[k][0] = ld;
    f->strides[k][1] = 1;
  }
  t->shape = f->shape[k];
  t->strides = f->strides[k];
  f->ptrs[k] = t;
}

void dl_model_init(dl_model* f, const model* m, kl_dtype dt) {
  const tcase* c = m->c;
  memset(f, 0, sizeof(*f));
  const int64_t H = c->H, R = m->R;
  for (int i = 0; i < c->L * m->D; i++) {
    dl_add(f, dt, m->w_ih[i], 4 * H, m->in_size[i], m->in_size[i] + 3, 0);
    dl_add(f, dt, m->w_hh[i], 4 * H, R, R + 1, 0);
    if (c->bias) {
      dl_add(f, dt, m->b_ih[i], 4 * H, 1, 2, 1);
      dl_add(f, dt, m->b_hh[i], 4 * H, 1, 3, 1);
    }
    if (c->P) dl_add(f, dt, m->w_hr[i], c->P, H, H + 2, 0);
  }
}

void dl_model_free(dl_model* f) {
  for (int i = 0; i < f->n; i++) free(f->buf[i]);
}

int g_fwd_constant;

kl_forward_args forward_args(const dl_model* f, const model* m, kl_dtype dt, int nth) {
  const tcase* c = m->c;
  kl_forward_args fa;
  memset(&fa, 0, sizeof(fa));
  fa.num_layers = c->L;
  fa.bidirectional = c->bidir;
  fa.reverse = c->reverse;
  fa.has_bias = c->bias != 0;
  fa.proj_size = c->P;
  fa.dtype = dt;
  fa.num_threads = nth;
  fa.constant_weights = g_fwd_constant;
  fa.weights = f->ptrs;
  fa.num_weights = f->n;
  return fa;
}

kl_status run_forward(const dl_model* f, const model* m, kl_dtype dt, const kl_run_args* a) {
  const tcase* c = m->c;
  const int64_t LD = (int64_t)c->L * m->D, DR = (int64_t)m->D * m->R;
  const DLDataType io = {kDLFloat, (uint8_t)(io_size(dt) * 8), 1};
  const DLDevice cpu = {kDLCPU, 0};
  int64_t sx[3] = {a->T, a->B, c->I}, stx[3] = {a->x_st, a->x_sb, 1};
  int64_t sy[3] = {a->T, a->B, DR}, sty[3] = {a->y_st, a->y_sb, 1};
  int64_t sh[3] = {LD, a->B, m->R}, sc[3] = {LD, a->B, c->H}, sl[1] = {a->B};
  DLTensor x = {(void*)a->x, cpu, 3, io, sx, stx, 0}, y = {a->y, cpu, 3, io, sy, sty, 0};
  DLTensor h0 = {(void*)a->h0, cpu, 3, io, sh, NULL, 0}, c0 = {(void*)a->c0, cpu, 3, io, sc, NULL, 0};
  DLTensor hn = {a->h_n, cpu, 3, io, sh, NULL, 0}, cn = {a->c_n, cpu, 3, io, sc, NULL, 0};
  DLTensor len = {(void*)a->lengths, cpu, 1, {kDLInt, 64, 1}, sl, NULL, 0};
  kl_forward_args fa = forward_args(f, m, dt, a->num_threads);
  fa.x = &x, fa.y = &y, fa.h_n = &hn, fa.c_n = &cn;
  fa.lengths = a->lengths ? &len : NULL;
  fa.h0 = a->h0 ? &h0 : NULL, fa.c0 = a->c0 ? &c0 : NULL;
  return kl_lstm_forward(&fa);
}

#define SENTINEL 777.0

void result_free(result* r) {
  free(r->ybuf);
  free(r->hn);
  free(r->cn);
  free(r->y);
  free(r->hnd);
  free(r->cnd);
  memset(r, 0, sizeof(*r));
}

void run_engine(const kl_lstm* lm, const dl_model* f, const run_input* in, int nth, result* r) {
  const model* m = in->m;
  const tcase* c = m->c;
  const kl_dtype dt = in->dt;
  const size_t esz = io_size(dt);
  const int64_t T = in->T, B = in->B, I = c->I, DR = (int64_t)m->D * m->R;
  const int64_t LD = (int64_t)c->L * m->D;
  memset(r, 0, sizeof(*r));
  int64_t xld = I, yld = DR, x_st, x_sb, y_st, y_sb;
  if (c->layout == LAYOUT_SEQ_PADDED) {
    xld = I + 3;
    yld = DR + 5;
  }
  if (c->layout == LAYOUT_BATCH) {
    x_st = xld; x_sb = T * xld;
    y_st = yld; y_sb = T * yld;
  } else {
    x_sb = xld; x_st = B * xld;
    y_sb = yld; y_st = B * yld;
  }
  void* x = xcalloc((size_t)(T * B * xld), esz);
  for (int64_t t = 0; t < T; t++)
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < xld; i++) {
        const double v = i < I ? in->x[(size_t)((t * B + b) * I + i)] : 1e30; /* padding unused */
        const size_t at = (size_t)(t * x_st + b * x_sb + i);
        if (dt == KL_F64) ((double*)x)[at] = v;
        else ((float*)x)[at] = (float)v;
      }
  const size_t ny = (size_t)(T * B * yld);
  r->ybytes = ny * esz;
  r->ybuf = xcalloc(ny, esz);
  for (size_t i = 0; i < ny; i++) {
    if (dt == KL_F64) ((double*)r->ybuf)[i] = SENTINEL;
    else ((float*)r->ybuf)[i] = (float)SENTINEL;
  }
  const size_t nh = (size_t)(LD * B * m->R), nc = (size_t)(LD * B * c->H);
  r->hnbytes = nh * esz;
  r->cnbytes = nc * esz;
  r->hn = xcalloc(nh, esz);
  r->cn = xcalloc(nc, esz);
  void* h0 = to_io(in->h0, nh, dt);
  void* c0 = to_io(in->c0, nc, dt);
  const kl_run_args a = {.T = T, .B = B, .x = x, .x_st = x_st, .x_sb = x_sb,
                         .y = r->ybuf, .y_st = y_st, .y_sb = y_sb, .h0 = h0, .c0 = c0,
                         .h_n = r->hn, .c_n = r->cn, .lengths = in->lengths, .num_threads = nth};
  r->st = lm ? kl_lstm_run(lm, &a) : run_forward(f, m, dt, &a);
  r->y = xcalloc((size_t)(T * B * DR), sizeof(double));
  r->hnd = xcalloc(nh, sizeof(double));
  r->cnd = xcalloc(nc, sizeof(double));
  r->pad_ok = 1;
  for (int64_t t = 0; t < T; t++)
    for (int64_t b = 0; b < B; b++)
      for (int64_t j = 0; j < yld; j++) {
        const double v = io_get(r->ybuf, (size_t)(t * y_st + b * y_sb + j), dt);
        if (j < DR) r->y[(size_t)((t * B + b) * DR + j)] = v;
        else if (v != SENTINEL) r->pad_ok = 0;
      }
  for (size_t i = 0; i < nh; i++) r->hnd[i] = io_get(r->hn, i, dt);
  for (size_t i = 0; i < nc; i++) r->cnd[i] = io_get(r->cn, i, dt);
  free(x);
  free(h0);
  free(c0);
}
