/* Layer 0's gate input given or augmented by the caller (kl_lstm_forward's
 * gate_bias and x_gates), and its argument checks. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "kokoro_lstm_testing.h"

/* kl_lstm_forward, seq-major x of feat features (row stride ldx), contiguous
 * outputs; gate_bias and x_gates as given. */
static kl_status gate_forward(const dl_model* f, const model* m, kl_dtype dt, int64_t T,
                              int64_t B, const void* x, int64_t feat, int64_t ldx, int x_gates,
                              const void* gb, const void* h0, const void* c0,
                              const int64_t* len, void* y, void* hn, void* cn, int nth) {
  const tcase* c = m->c;
  const int64_t LD = (int64_t)c->L * m->D, DR = (int64_t)m->D * m->R;
  const DLDataType io = {kDLFloat, (uint8_t)(io_size(dt) * 8), 1};
  const DLDevice cpu = {kDLCPU, 0};
  int64_t sx[3] = {T, B, feat}, stx[3] = {B * ldx, ldx, 1}, sy[3] = {T, B, DR};
  int64_t sh[3] = {LD, B, m->R}, sc[3] = {LD, B, c->H}, sl[1] = {B};
  int64_t sg[3] = {m->D, B, 4 * (int64_t)c->H};
  DLTensor tx = {(void*)x, cpu, 3, io, sx, stx, 0}, ty = {y, cpu, 3, io, sy, NULL, 0};
  DLTensor th0 = {(void*)h0, cpu, 3, io, sh, NULL, 0}, tc0 = {(void*)c0, cpu, 3, io, sc, NULL, 0};
  DLTensor thn = {hn, cpu, 3, io, sh, NULL, 0}, tcn = {cn, cpu, 3, io, sc, NULL, 0};
  DLTensor tl = {(void*)len, cpu, 1, {kDLInt, 64, 1}, sl, NULL, 0};
  DLTensor tg = {(void*)gb, cpu, 3, io, sg, NULL, 0};
  kl_forward_args fa = forward_args(f, m, dt, nth);
  fa.x = &tx, fa.y = &ty, fa.h_n = &thn, fa.c_n = &tcn;
  fa.lengths = len ? &tl : NULL;
  fa.h0 = h0 ? &th0 : NULL, fa.c0 = c0 ? &tc0 : NULL;
  fa.gate_bias = gb ? &tg : NULL;
  fa.x_gates = x_gates;
  return kl_lstm_forward(&fa);
}

/* The last NS input features made constant over time (Kokoro's style at batch
 * 1): the reference on that input against the entry on the other features with
 * W_ih's style columns folded into gate_bias; then the same given as gates
 * (x_gates), with and without the bias; threads bitwise. */
#define NS 2
void test_gate_input(const model* m, kl_dtype dt, const double* x, const int64_t* len,
                     int use_len, const double* h0, const double* c0, const char* tag) {
  const tcase* c = m->c;
  const int64_t T = c->T, B = c->B, I = c->I, IX = I - NS, H = c->H, D = m->D;
  const int64_t LD = (int64_t)c->L * D, DR = (int64_t)D * m->R, G4 = 4 * H;
  const size_t ny = (size_t)(T * B * DR), nh = (size_t)(LD * B * m->R), nc = (size_t)(LD * B * H);
  const size_t ng = (size_t)(T * B * D * G4), nb = (size_t)(D * B * G4);
  const int to_float = dt != KL_F64;
  double* xc = xcalloc((size_t)(T * B * I), sizeof(double));
  for (int64_t t = 0; t < T; t++)
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < I; i++)
        xc[(t * B + b) * I + i] = x[((i < IX ? t : 0) * B + b) * I + i];
  double *yr = xcalloc(ny, sizeof(double)), *hr = xcalloc(nh, sizeof(double)),
         *cr = xcalloc(nc, sizeof(double));
  ref_lstm(m, T, B, xc, len, h0, c0, yr, hr, cr);
  if (!use_len) len = NULL; /* every length T: the entry runs without lengths */
  /* gb[d][b][j] = W_s s_b; g[t][b][d*4H + j] = W_x x_t; gf = g + gb */
  double *gb = xcalloc(nb, sizeof(double)), *g = xcalloc(ng, sizeof(double)),
         *gf = xcalloc(ng, sizeof(double));
  for (int64_t d = 0; d < D; d++)
    for (int64_t b = 0; b < B; b++)
      for (int64_t j = 0; j < G4; j++) {
        double a = 0.0;
        for (int64_t k = IX; k < I; k++) a += m->w_ih[d][j * I + k] * xc[b * I + k];
        gb[(d * B + b) * G4 + j] = round_if(a, to_float);
        for (int64_t t = 0; t < T; t++) {
          double v = 0.0;
          for (int64_t k = 0; k < IX; k++) v += m->w_ih[d][j * I + k] * xc[(t * B + b) * I + k];
          const size_t at = (size_t)((t * B + b) * D * G4 + d * G4 + j);
          g[at] = round_if(v, to_float);
          gf[at] = round_if(v + a, to_float);
        }
      }
  void *xio = to_io(xc, (size_t)(T * B * I), dt), *gbio = to_io(gb, nb, dt);
  void *gio = to_io(g, ng, dt), *gfio = to_io(gf, ng, dt);
  void *h0io = to_io(h0, nh, dt), *c0io = to_io(c0, nc, dt);
  const size_t esz = io_size(dt);
  void *y = xcalloc(ny, esz), *hn = xcalloc(nh, esz), *cn = xcalloc(nc, esz);
  void* y3 = xcalloc(ny, esz);
  double *yd = xcalloc(ny, sizeof(double)), *hd = xcalloc(nh, sizeof(double)),
         *cd = xcalloc(nc, sizeof(double));
  dl_model f;
  dl_model_init(&f, m, dt);
  const int per = 2 + 2 * (c->bias != 0) + (c->P > 0);
  for (int d = 0; d < D; d++) f.shape[d * per][1] = IX; /* layer 0's W_x: the first IX columns */
  const double tol = 2 * tolerance(dt);
  static const char* what[3] = {"gate_bias (style folded)", "x_gates + gate_bias",
                                "x_gates (full projection)"};
  for (int k = 0; k < 3; k++) {
    kl_status st;
    if (k == 0)
      st = gate_forward(&f, m, dt, T, B, xio, IX, I, 0, gbio, h0io, c0io, len, y, hn, cn, 1);
    else
      st = gate_forward(&f, m, dt, T, B, k == 1 ? gio : gfio, D * G4, D * G4, 1,
                        k == 1 ? gbio : NULL, h0io, c0io, len, y, hn, cn, 1);
    for (size_t i = 0; i < ny; i++) yd[i] = io_get(y, i, dt);
    for (size_t i = 0; i < nh; i++) hd[i] = io_get(hn, i, dt);
    for (size_t i = 0; i < nc; i++) cd[i] = io_get(cn, i, dt);
    const double ey = max_err(yd, yr, ny), eh = max_err(hd, hr, nh), ec = max_err(cd, cr, nc);
    check(st == KL_OK && ey <= tol && eh <= tol && ec <= tol,
          "%s %s vs double reference: %s max|dy|=%.3g max|dh_n|=%.3g max|dc_n|=%.3g (tol %.0e)%s%s",
          tag, what[k], kl_status_str(st), ey, eh, ec, tol, st ? " " : "", st ? kl_last_error() : "");
    st = gate_forward(&f, m, dt, T, B, k == 0 ? xio : k == 1 ? gio : gfio, k ? D * G4 : IX,
                      k ? D * G4 : I, k != 0, k < 2 ? gbio : NULL, h0io, c0io, len, y3, hn, cn, 3);
    check(st == KL_OK && memcmp(y, y3, ny * esz) == 0, "%s %s: num_threads 1 and 3 bitwise",
          tag, what[k]);
  }
  dl_model_free(&f);
  free(xc), free(yr), free(hr), free(cr), free(gb), free(g), free(gf);
  free(xio), free(gbio), free(gio), free(gfio), free(h0io), free(c0io);
  free(y), free(hn), free(cn), free(y3), free(yd), free(hd), free(cd);
}

/* kl_lstm_forward rejects bad gate_bias / x_gates arguments, naming them. */
void test_gate_args(void) {
  enum { T = 3, B = 2, I = 4, H = 5, D = 2 };
  float wih[4 * H * I] = {0}, whh[4 * H * H] = {0}, x[T * B * I] = {0}, g[T * B * D * 4 * H] = {0};
  float y[T * B * D * H], gb[D * B * 4 * H] = {0};
  const DLDataType f32 = {kDLFloat, 32, 1}, f64 = {kDLFloat, 64, 1};
  const DLDevice cpu = {kDLCPU, 0};
  int64_t swih[2] = {4 * H, I}, swhh[2] = {4 * H, H}, sx[3] = {T, B, I}, sg[3] = {T, B, D * 4 * H};
  int64_t sy[3] = {T, B, D * H}, sgb[3] = {D, B, 4 * H}, sgb_bad[3] = {1, B, 4 * H};
  int64_t sgb2[2] = {D * B, 4 * H}, stgb[3] = {B * 8 * H, 8 * H, 2};
  DLTensor twih = {wih, cpu, 2, f32, swih, NULL, 0}, twhh = {whh, cpu, 2, f32, swhh, NULL, 0};
  const DLTensor* w[4] = {&twih, &twhh, &twih, &twhh};
  DLTensor tx = {x, cpu, 3, f32, sx, NULL, 0}, tg = {g, cpu, 3, f32, sg, NULL, 0};
  DLTensor ty = {y, cpu, 3, f32, sy, NULL, 0}, tgb = {gb, cpu, 3, f32, sgb, NULL, 0};
  kl_forward_args good;
  memset(&good, 0, sizeof(good));
  good.num_layers = 1;
  good.bidirectional = 1;
  good.num_threads = 1;
  good.x = &tx;
  good.weights = w;
  good.num_weights = 4;
  good.y = &ty;
  good.gate_bias = &tgb;
  kl_status st = kl_lstm_forward(&good);
  check(st == KL_OK, "[args] kl_lstm_forward with a gate_bias -> %s %s", kl_status_str(st), kl_last_error());
  kl_forward_args a = good;
  a.x = &tg;
  a.x_gates = 1;
  st = kl_lstm_forward(&a);
  check(st == KL_OK, "[args] kl_lstm_forward with x_gates and a gate_bias -> %s %s",
        kl_status_str(st), kl_last_error());
  struct {
    const char* label;
    const char* want; /* a part of kl_last_error() */
    DLTensor* gbt;
    DLTensor* xt;
    int x_gates;
  } bad[] = {
      {"gate_bias of 1 direction", "gate_bias must have shape (2, 2, 20), got (1, 2, 20)",
       &(DLTensor){gb, cpu, 3, f32, sgb_bad, NULL, 0}, &tx, 0},
      {"gate_bias 2-D", "gate_bias must be 3-D", &(DLTensor){gb, cpu, 2, f32, sgb2, NULL, 0}, &tx, 0},
      {"gate_bias float64", "gate_bias must have dtype float32, got float64",
       &(DLTensor){gb, cpu, 3, f64, sgb, NULL, 0}, &tx, 0},
      {"gate_bias strided", "gate_bias must be contiguous", &(DLTensor){gb, cpu, 3, f32, sgb, stgb, 0},
       &tx, 0},
      {"gate_bias on a GPU", "every tensor of a call must be on one device",
       &(DLTensor){gb, {kDLCUDA, 0}, 3, f32, sgb, NULL, 0}, &tx, 0},
      {"gate_bias without data", "gate_bias has no data", &(DLTensor){NULL, cpu, 3, f32, sgb, NULL, 0},
       &tx, 0},
      {"x_gates 2", "x_gates must be 0 or 1, got 2", NULL, &tg, 2},
      {"x_gates with input-sized x", "must have 40 features (num_directions 2 x 4 x hidden_size 5), got 4",
       NULL, &tx, 1},
      {"gates without x_gates", "weights[0] (w_ih of layer 0) must have shape", NULL, &tg, 0},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    a = good;
    a.gate_bias = bad[i].gbt;
    a.x = bad[i].xt;
    a.x_gates = bad[i].x_gates;
    st = kl_lstm_forward(&a);
    check(st == KL_ERR_ARG && strstr(kl_last_error(), bad[i].want) != NULL,
          "[args] kl_lstm_forward %s -> %s \"%s\" (want KL_ERR_ARG \"%s\")", bad[i].label,
          kl_status_str(st), kl_last_error(), bad[i].want);
  }
  kl_cache_clear();
}
