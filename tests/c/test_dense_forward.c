/* The dense operators' entries over DLTensors (kl_<op>_forward): the bits of the
 * kernel they run, and a refusal before any memory is touched. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dense.h"
#include "harness.h"
#include "tests.h"

/* A compact float32 CPU tensor over data. */
static DLTensor f32(float* data, int ndim, int64_t* shape) {
  DLTensor t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

void test_dense_forward(void) {
  enum { NB = 2, M = 3, K = 4, N = 5 };
  float A[NB * M * K], B[N * K], bias[N], C[NB * M * N], R[NB * M * N];
  uint32_t st = 11;
  for (int i = 0; i < NB * M * K; i++) A[i] = frand(&st);
  for (int i = 0; i < N * K; i++) B[i] = frand(&st);
  for (int i = 0; i < N; i++) bias[i] = frand(&st);
  int64_t sa[3] = {NB, M, K}, sb[2] = {N, K}, sbias[1] = {N}, sc[3] = {NB, M, N};
  DLTensor tA = f32(A, 3, sa), tB = f32(B, 2, sb), tbias = f32(bias, 1, sbias), tC = f32(C, 3, sc);
  const kl_matmul_config cfg = {1, KL_ACT_GELU_TANH, 0, 2};
  kl_matmul_args m;
  memset(&m, 0, sizeof(m));
  m.batch = NB, m.M = M, m.N = N, m.K = K, m.a = A, m.lda = K, m.sa = M * K, m.b = B, m.ldb = K;
  m.trans_b = 1, m.bias = bias, m.sbias = 1, m.c = R, m.ldc = N, m.sc = M * N;
  m.act = KL_ACT_GELU_TANH, m.num_threads = 2;
  const kl_status s1 = kl_f32_matmul(&m), s2 = kl_matmul_forward(&cfg, &tA, &tB, &tbias, &tC);
  check(s1 == KL_OK && s2 == KL_OK && memcmp(C, R, sizeof(C)) == 0,
        "[dense] kl_matmul_forward gives kl_f32_matmul's bits (%d, %d)", (int)s1, (int)s2);
  for (int i = 0; i < NB * M * N; i++) C[i] = NAN;
  int64_t sover[3] = {NB, M, K - 1}; /* an output over A's memory */
  DLTensor tover = f32(A, 3, sover);
  const kl_matmul_config plain = {0, KL_ACT_NONE, 0, 0};
  int64_t skn[2] = {K, K - 1};
  DLTensor tW = f32(B, 2, skn);
  const kl_status s3 = kl_matmul_forward(&plain, &tA, &tW, NULL, &tover);
  check(s3 == KL_ERR_ARG && strstr(kl_last_error(), "overlap") != NULL,
        "[dense] kl_matmul_forward refuses an output over its input: %s", kl_last_error());
  int64_t sbad[3] = {NB, M, N + 1};
  DLTensor tbad = f32(C, 3, sbad);
  const kl_status s4 = kl_matmul_forward(&cfg, &tA, &tB, &tbias, &tbad);
  int untouched = 1;
  for (int i = 0; i < NB * M * N; i++) untouched &= isnan(C[i]) != 0;
  check(s4 == KL_ERR_ARG && untouched && strstr(kl_last_error(), "shapes do not match") != NULL,
        "[dense] kl_matmul_forward refuses mismatched shapes before writing: %s", kl_last_error());
  float x[2 * 7], y[2 * 7];
  for (int i = 0; i < 14; i++) x[i] = frand(&st);
  int64_t sx[2] = {2, 7}, sy[2] = {2, 6};
  DLTensor tx = f32(x, 2, sx), ty = f32(y, 2, sy);
  const kl_softmax_config scfg = {1};
  check(kl_softmax_forward(&scfg, &tx, &ty) == KL_ERR_ARG &&
            strstr(kl_last_error(), "same shape") != NULL,
        "[dense] kl_softmax_forward refuses y of another shape: %s", kl_last_error());
  /* convolutions: their CPU entries refuse a CUDA x; the check wants one device */
  float cx[1 * 2 * 6], cw[3 * 2 * 3], cy[1 * 3 * 4];
  int64_t scx[3] = {1, 2, 6}, scw[3] = {3, 2, 3}, scy[3] = {1, 3, 4};
  DLTensor tcx = f32(cx, 3, scx), tcw = f32(cw, 3, scw), tcy = f32(cy, 3, scy);
  const kl_conv1d_config ccfg = {1, 0, 0, 1, 0, 1};
  kl_conv1d_args ca;
  tcw.device.device_type = kDLCUDA;
  check(kl_conv1d_check(&ccfg, &tcx, &tcw, NULL, &tcy, &ca) == KL_ERR_ARG &&
            strstr(kl_last_error(), "w must be on x's device") != NULL,
        "[dense] kl_conv1d_check refuses tensors on two devices: %s", kl_last_error());
  tcx.device.device_type = tcy.device.device_type = kDLCUDA;
  check(kl_conv1d_check(&ccfg, &tcx, &tcw, NULL, &tcy, &ca) == KL_OK && ca.cout == 3 && ca.wout == 4,
        "[dense] kl_conv1d_check takes CUDA tensors (for kl_cuda_conv1d): %s", kl_last_error());
  check(kl_conv1d_forward(&ccfg, &tcx, &tcw, NULL, &tcy) == KL_ERR_ARG &&
            strstr(kl_last_error(), "x must be a CPU tensor") != NULL,
        "[dense] kl_conv1d_forward (the CPU kernels) refuses a CUDA x: %s", kl_last_error());
}
