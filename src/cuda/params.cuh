/* The parameters of the CUDA kernels, one definition for both sides: the host C
 * (launch.c) fills them, and kl_build.py prepends this file to the kernels'
 * NVRTC source. Plain C with no includes on the device side. */
#ifndef KL_CUDA_PARAMS_CUH
#define KL_CUDA_PARAMS_CUH

/* The host's lengths array; a module carries KL_LCAP of them (64, 1024 or this). */
#define KL_LCAP_MAX 4096
#ifdef __CUDACC__
#ifndef KL_LCAP
#define KL_LCAP 0
#endif
#define KL_LEN_CAP (KL_LCAP > 0 ? KL_LCAP : 1)
#else
#define KL_LEN_CAP KL_LCAP_MAX /* the driver copies only the kernel's KL_LCAP */
#endif

/* Gate input rows: g + t*g_st + b*g_sb + dir*4H + gate*H + unit. */
typedef struct kl_gates_in {
  const float* g;
  long long g_st, g_sb;
  const float* b_ih[2]; /* [4H] per direction, stride sb_*; NULL: none */
  const float* b_hh[2];
  long long sb_ih[2], sb_hh[2];
  const float* gate_bias; /* [D, B, 4H] or NULL (layer 0 only) */
} kl_gates_in;

typedef struct kl_rec_args {
  kl_gates_in gi;
  const float* w_hh[2]; /* [4H, R] rows of stride ld_hh, per direction */
  long long ld_hh[2];
  const float* w_hr[2]; /* [R, H] rows of stride ld_hr (proj_size > 0) */
  long long ld_hr[2];
  const float* h0; /* [D, B, R] or NULL */
  const float* c0; /* [D, B, H] or NULL */
  float* y;        /* y + t*y_st + b*y_sb + dir*R + j */
  long long y_st, y_sb;
  float* h_n; /* [D, B, R] or NULL */
  float* c_n; /* [D, B, H] or NULL */
  /* step path state: h [2][D][B][R] (double buffer), c [D][B][H], m [D][B][H] */
  float* hbuf;
  float* cbuf;
  float* mbuf;
  int T, B, reverse; /* reverse: a unidirectional LSTM run backwards */
  int step;          /* step path: the step this launch computes */
  const long long* len_dev; /* lengths read by the kernels, len_dev[b * len_st], or NULL: len */
  long long len_st;
  int len[KL_LEN_CAP];
} kl_rec_args;

/* The input projection: C[m, dir*N + n] = sum_k A[m, k] W_dir[n, k]. */
typedef struct kl_gemm_args {
  const float* a;
  long long lda;
  const float* w[2];
  long long ldw[2];
  float* c;
  long long ldc;
  int M, N, K;
} kl_gemm_args;

/* kl_gemm_few: KL_FEW_TILE outputs n by KL_FEW_TILE rows m per CTA, k staged in
 * chunks of KL_FEW_KC (rows padded to KL_FEW_KC + 4 floats) for both operands. */
#define KL_FEW_TILE 16
#define KL_FEW_KC 640
#define KL_FEW_SMEM (2 * KL_FEW_TILE * (KL_FEW_KC + 4) * 4)

#endif /* KL_CUDA_PARAMS_CUH */
