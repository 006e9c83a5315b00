/* The LSTM cases, their parameters and the double-precision reference (lstm.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lstm.h"

const char* const layout_name[] = {"seq-major", "batch-major", "seq-major-padded"};

const tcase CASES[] = {
    /* name              I   H  L bi P rev  T  B len st bias layout */
    {"uni-h7", 5, 7, 1, 0, 0, 0, 6, 3, 0, 0, 1, LAYOUT_SEQ},
    {"uni-h33", 5, 33, 1, 0, 0, 0, 7, 3, 0, 1, 1, LAYOUT_SEQ},
    {"uni-h33-lengths", 5, 33, 1, 0, 0, 0, 7, 5, 1, 1, 1, LAYOUT_SEQ},
    {"uni-h33-wide-batch", 5, 33, 1, 0, 0, 0, 5, 11, 1, 0, 1, LAYOUT_SEQ},
    {"uni-h33-reverse", 5, 33, 1, 0, 0, 1, 6, 4, 1, 1, 1, LAYOUT_BATCH},
    {"uni-h33-proj", 5, 33, 1, 0, 20, 0, 6, 3, 1, 1, 1, LAYOUT_SEQ},
    {"uni-h7-nobias", 5, 7, 1, 0, 0, 0, 4, 2, 0, 0, 0, LAYOUT_SEQ},
    {"bi-h7", 5, 7, 1, 1, 0, 0, 6, 3, 0, 0, 1, LAYOUT_SEQ},
    {"bi-h7-proj", 5, 7, 1, 1, 3, 0, 6, 3, 1, 1, 1, LAYOUT_BATCH},
    {"bi-h33-lengths", 5, 33, 1, 1, 0, 0, 7, 6, 1, 1, 1, LAYOUT_SEQ},
    {"bi-h33-short", 5, 33, 1, 1, 0, 0, 6, 5, 2, 0, 1, LAYOUT_SEQ_PADDED},
    {"bi-h33-proj-lengths", 5, 33, 1, 1, 17, 0, 6, 9, 1, 1, 1, LAYOUT_SEQ_PADDED},
    {"bi-h33-proj-2layer", 5, 33, 2, 1, 16, 0, 5, 4, 1, 1, 1, LAYOUT_SEQ},
    {"uni-h33-3layer", 5, 33, 3, 0, 0, 0, 5, 3, 1, 1, 1, LAYOUT_BATCH},
    {"uni-h33-T1", 5, 33, 1, 0, 0, 0, 1, 3, 0, 1, 1, LAYOUT_SEQ},
    {"bi-h33-B1", 5, 33, 1, 1, 0, 0, 6, 1, 0, 1, 1, LAYOUT_SEQ_PADDED},
    {"bi-h7-T1-B1", 5, 7, 1, 1, 0, 0, 1, 1, 0, 1, 1, LAYOUT_SEQ},
    /* H a multiple of 16: given gates (x_gates) are read in place */
    {"bi-h16-lengths", 5, 16, 1, 1, 0, 0, 6, 3, 1, 0, 1, LAYOUT_SEQ},
    {"bi-h16-2layer", 5, 16, 2, 1, 0, 0, 5, 2, 1, 1, 1, LAYOUT_BATCH},
    /* B >= 16: threads share out whole batch chunks instead of hidden units */
    {"uni-h7-B16", 5, 7, 1, 0, 0, 0, 4, 16, 0, 1, 1, LAYOUT_SEQ_PADDED},
    {"uni-h33-B37-lengths", 5, 33, 1, 0, 0, 0, 5, 37, 1, 1, 1, LAYOUT_SEQ},
    {"bi-h33-proj-B20-short", 5, 33, 1, 1, 17, 0, 4, 20, 2, 0, 1, LAYOUT_BATCH},
    {"bi-h33-proj-2layer-B35", 5, 33, 2, 1, 9, 0, 4, 35, 1, 1, 1, LAYOUT_SEQ},
    /* T * B >= KL_X6_MIN_M: float32 input projections on AMX tiles at avx512-amx
     * (kl_f32_amx_set(1) below); odd I, a row tail of the 32-row blocks */
    {"bi-h17-2layer-T32-B32", 9, 17, 2, 1, 0, 0, 32, 32, 1, 1, 1, LAYOUT_SEQ},
    {"uni-h20-proj-T33-B33", 37, 20, 1, 0, 7, 1, 33, 33, 2, 0, 1, LAYOUT_BATCH},
};
const int NCASES = (int)(sizeof(CASES) / sizeof(CASES[0]));

double round_if(double v, int to_float) { return to_float ? (double)(float)v : v; }

double* rand_array(size_t n, double scale, int to_float) {
  double* a = xcalloc(n, sizeof(double));
  for (size_t i = 0; i < n; i++) a[i] = round_if(urand(-scale, scale), to_float);
  return a;
}

void model_init(model* m, const tcase* c, int to_float) {
  memset(m, 0, sizeof(*m));
  m->c = c;
  m->D = c->bidir ? 2 : 1;
  m->R = c->P ? c->P : c->H;
  const double k = 1.0 / sqrt((double)c->H); /* torch's init range */
  const size_t H = (size_t)c->H, R = (size_t)m->R;
  for (int l = 0; l < c->L; l++)
    for (int d = 0; d < m->D; d++) {
      const int w = l * m->D + d;
      m->in_size[w] = l == 0 ? c->I : m->D * m->R;
      m->w_ih[w] = rand_array(4 * H * (size_t)m->in_size[w], k, to_float);
      m->w_hh[w] = rand_array(4 * H * R, k, to_float);
      if (c->bias) {
        m->b_ih[w] = rand_array(4 * H, k, to_float);
        m->b_hh[w] = rand_array(4 * H, k, to_float);
      }
      if (c->P) m->w_hr[w] = rand_array((size_t)c->P * H, k, to_float);
    }
}

void model_free(model* m) {
  for (int w = 0; w < MAXW; w++) {
    free(m->w_ih[w]);
    free(m->w_hh[w]);
    free(m->b_ih[w]);
    free(m->b_hh[w]);
    free(m->w_hr[w]);
  }
}

/* ---- the double-precision reference ------------------------------------ */

double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

void ref_lstm(const model* m, int64_t T, int64_t B, const double* x, const int64_t* len,
              const double* h0, const double* c0, double* y, double* hn, double* cn) {
  const tcase* c = m->c;
  const int D = m->D, R = m->R, H = c->H, DR = D * R;
  double* in = xcalloc((size_t)(T * B) * (size_t)(c->I > DR ? c->I : DR), sizeof(double));
  double* out = xcalloc((size_t)(T * B * DR), sizeof(double));
  double* h = xcalloc((size_t)R, sizeof(double));
  double* hf = xcalloc((size_t)H, sizeof(double));
  double* cc = xcalloc((size_t)H, sizeof(double));
  double* gates = xcalloc(4 * (size_t)H, sizeof(double));
  memcpy(in, x, (size_t)(T * B * c->I) * sizeof(double));
  for (int l = 0; l < c->L; l++) {
    const int Il = l == 0 ? c->I : DR;
    memset(out, 0, (size_t)(T * B * DR) * sizeof(double));
    for (int d = 0; d < D; d++) {
      const int w = l * D + d;
      const int rev = d == 1 || c->reverse;
      for (int64_t b = 0; b < B; b++) {
        const size_t sl = (size_t)w * (size_t)B + (size_t)b;
        for (int j = 0; j < R; j++) h[j] = h0 ? h0[sl * (size_t)R + (size_t)j] : 0.0;
        for (int j = 0; j < H; j++) cc[j] = c0 ? c0[sl * (size_t)H + (size_t)j] : 0.0;
        for (int64_t s = 0; s < len[b]; s++) {
          const int64_t t = rev ? len[b] - 1 - s : s;
          const double* xt = in + (size_t)(t * B + b) * (size_t)Il;
          for (int r = 0; r < 4 * H; r++) {
            double acc = 0.0;
            if (m->b_ih[w]) acc += m->b_ih[w][r] + m->b_hh[w][r];
            for (int i = 0; i < Il; i++) acc += m->w_ih[w][(size_t)r * (size_t)Il + (size_t)i] * xt[i];
            for (int k = 0; k < R; k++) acc += m->w_hh[w][(size_t)r * (size_t)R + (size_t)k] * h[k];
            gates[r] = acc;
          }
          for (int u = 0; u < H; u++) {
            const double ig = sigm(gates[u]), fg = sigm(gates[H + u]);
            const double gg = tanh(gates[2 * H + u]), og = sigm(gates[3 * H + u]);
            cc[u] = fg * cc[u] + ig * gg;
            hf[u] = og * tanh(cc[u]);
          }
          if (c->P) {
            for (int p = 0; p < c->P; p++) {
              double acc = 0.0;
              for (int u = 0; u < H; u++) acc += m->w_hr[w][(size_t)p * (size_t)H + (size_t)u] * hf[u];
              h[p] = acc;
            }
          } else {
            memcpy(h, hf, (size_t)H * sizeof(double));
          }
          memcpy(out + (size_t)(t * B + b) * (size_t)DR + (size_t)d * (size_t)R, h,
                 (size_t)R * sizeof(double));
        }
        memcpy(hn + sl * (size_t)R, h, (size_t)R * sizeof(double));
        memcpy(cn + sl * (size_t)H, cc, (size_t)H * sizeof(double));
      }
    }
    memcpy(in, out, (size_t)(T * B * DR) * sizeof(double));
  }
  memcpy(y, out, (size_t)(T * B * DR) * sizeof(double));
  free(in);
  free(out);
  free(h);
  free(hf);
  free(cc);
  free(gates);
}

size_t io_size(kl_dtype dt) { return dt == KL_F64 ? sizeof(double) : sizeof(float); }

void* to_io(const double* a, size_t n, kl_dtype dt) {
  if (!a) return NULL;
  void* p = xcalloc(n, io_size(dt));
  for (size_t i = 0; i < n; i++) {
    if (dt == KL_F64) ((double*)p)[i] = a[i];
    else ((float*)p)[i] = (float)a[i];
  }
  return p;
}

double io_get(const void* p, size_t i, kl_dtype dt) {
  return dt == KL_F64 ? ((const double*)p)[i] : (double)((const float*)p)[i];
}

const char* dtype_name(kl_dtype dt) {
  return dt == KL_F64 ? "float64" : dt == KL_BF16 ? "bfloat16" : dt == KL_F16 ? "float16" : "float32";
}

double tolerance(kl_dtype dt) {
  return dt == KL_F64 ? 1e-12 : dt == KL_BF16 ? 1e-2 : dt == KL_F16 ? 1e-3 : 2e-6;
}
