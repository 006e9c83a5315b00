/* How a CUDA call runs (plan.c): the recurrence's path, the cluster geometry, the
 * module's -D options, the launch groups, shared memory and the work memory's
 * parts. Pure functions of the call's shape and the device's facts: testable
 * without a GPU (tests/c/test_cuda_plan.c, the compile check). */
#ifndef KL_CUDA_PLAN_H
#define KL_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "call.h"

#define KL_CUDA_COMMON_DEFINES 4
typedef struct kl_cuda_defs {
#define KL_CUDA_DEFINE(name) int name;
#include "kernels.def"
#undef KL_CUDA_DEFINE
} kl_cuda_defs;
#define KL_CUDA_NUM_DEFINES ((int)(sizeof(kl_cuda_defs) / sizeof(int)))

/* What the plan reads of a call. wt: recurrent weights 0 float32, 1 rounded to
 * bfloat16, 2 to float16; lengths: whether the call has them. */
typedef struct kl_cuda_shape {
  int64_t T, B;
  int L, D, H, R, x_gates, wt, lengths;
} kl_cuda_shape;

/* What the plan reads of a device. cluster_launch: the device and the driver can
 * launch clusters (and query their occupancy). */
typedef struct kl_cuda_facts {
  int major, cluster_launch, smem_optin;
} kl_cuda_facts;

enum { KL_CUDA_AUTO, KL_CUDA_CLUSTER, KL_CUDA_STEP };  /* the recurrence asked for */
enum { KL_CUDA_XCHG_BARRIER, KL_CUDA_XCHG_MBARRIER }; /* the cluster's exchange of h */

typedef struct kl_cuda_plan {
  int cluster;      /* 1: the cluster recurrence, 0: the step path */
  int C, ntw, nt;   /* CTAs per cluster, threads holding W_hh, threads (whole warps) */
  unsigned groups;  /* clusters per direction, of defs.NB batch rows each */
  size_t smem;      /* the cluster kernel's dynamic shared memory, bytes */
  kl_cuda_defs defs;
  int ndefs;        /* the module's options: KL_CUDA_COMMON_DEFINES or all */
  /* work memory in floats, 256-byte aligned parts: gates at 0, the outputs of
   * inner layers (two), the step path's h, c and m */
  size_t ws_floats, off_out[2], off_h, off_c, off_m;
} kl_cuda_plan;

kl_cuda_shape kl_cuda_shape_of(const kl_call* c);
/* The limits of the kernels' int indices and of the lengths carried. */
kl_status kl_cuda_plan_check(const kl_cuda_shape* s);
/* The path, cluster geometry (with defs.NB = 1), options and work memory.
 * KL_ERR_ARG when force asks for the cluster path and it cannot run, or the
 * exchange is unknown (< 0) on the cluster path. */
kl_status kl_cuda_plan_path(kl_cuda_plan* p, const kl_cuda_shape* s, const kl_cuda_facts* f, int force,
                            int exchange);
/* Batch rows per cluster: the batch spread over the clusters resident at once
 * (max_clusters: the occupancy query's count at NB = 1), at most 16 and within the shared memory. */
void kl_cuda_plan_batch(kl_cuda_plan* p, const kl_cuda_shape* s, int max_clusters, int smem_optin);
/* p's -D options as strings in buf; out[i] points at them. Returns their count. */
int kl_cuda_plan_defines(const kl_cuda_plan* p, char buf[][32], const char** out);
/* The cluster recurrence's shape for (H, R): the fewest CTAs per cluster (*C)
 * whose share of W_hh fits in registers at <= 64 floats a thread and <= 512
 * threads (*ntw). 0 if none. */
int kl_cuda_cluster_shape(int H, int R, int* C, int* ntw);
size_t kl_cuda_cluster_smem(int NB, int R, int ntw);
/* Rows up to which the input projection runs on kl_gemm_few. */
#define KL_CUDA_GEMM_FEW_ROWS 64
/* The input projection's tile (every kernel gives the same bits): KL_FEW_TILE
 * (kl_gemm_few) for at most KL_CUDA_GEMM_FEW_ROWS rows where its shared memory
 * fits (smem_optin), 128 when the 128x128 tiles fill the GPU and the rows allow
 * 16-byte loads (aligned), else 64. */
int kl_cuda_gemm_tile(int64_t M, int N, int D, int sms, int aligned, int smem_optin);

#endif /* KL_CUDA_PLAN_H */
