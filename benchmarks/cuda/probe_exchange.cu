// probe_exchange: the per-step floor of the cluster recurrence's synchronization.
//
//   nvcc -O3 -arch=sm_90a -o probe_exchange probe_exchange.cu && ./probe_exchange [T]
//
// Two clusters (one per direction) of C CTAs x 512 threads (C = 8 is how
// kl_lstm_cluster runs Kokoro's shape, H = 256, B = 1; 2, 4 and 16 for comparison)
// repeat T steps of a part of its step with no arithmetic: (0) the cluster barrier
// alone; (1) + each CTA's H / C h values stored to all C CTAs' shared memory
// (DSMEM); (2) + the CTA barrier and the shared-memory reads of the gate
// reduction. Prints microseconds per step (median of 21 launches, launch overhead
// included once per T steps).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int NT = 512, R = 256;

// the engine's own PTX helpers (kl_cluster_rank, kl_map_rank)
#define KL_C 1
#include "../../src/cuda/ptx.cuh"

template <int C, int MODE>
__global__ void __launch_bounds__(NT, 1) probe(int T, float* out) {
  constexpr int HU = R / C;
  __shared__ __align__(16) float hs[2 * R];
  __shared__ float red[4 * 4 * HU * 4];
  const int tid = threadIdx.x;
  const unsigned rank = kl_cluster_rank();
  for (int i = tid; i < 2 * R; i += NT) hs[i] = 0.0f;
  unsigned dst[C];
  const unsigned base = (unsigned)__cvta_generic_to_shared(hs + rank * HU + tid % HU);
#pragma unroll
  for (int r = 0; r < C; r++) dst[r] = kl_map_rank(base, r);
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  float h = tid * 1e-3f, acc = 0.0f;
  for (int s = 0; s < T; s++) {
    const int cur = s & 1;
    if (MODE >= 2) {
      red[tid] = hs[cur * R + (tid % R)];
      __syncthreads();
      if (tid < HU) h += red[tid] + red[tid + 128] + red[tid + 256] + red[tid + 384];
    }
    if (MODE >= 1 && tid < HU) {
      const unsigned off = (unsigned)((cur ^ 1) * R * sizeof(float));
#pragma unroll
      for (int r = 0; r < C; r++)
        asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(dst[r] + off), "f"(h) : "memory");
    }
    if (MODE >= 3) {
      // the storing threads publish their stores; every thread arrives relaxed
      if (MODE == 3 && tid < HU) asm volatile("fence.acq_rel.cluster;" ::: "memory");
      asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    } else {
      asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    }
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    acc += hs[(cur ^ 1) * R + tid % R];
  }
  if (acc == 12345.0f) out[0] = acc;  // keeps the loop
}

template <int C, int MODE>
static float us_per_step(int T, float* out) {
  cudaFuncSetAttribute(probe<C, MODE>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = C;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(2 * C);
  cfg.blockDim = dim3(NT);
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms;
  for (int i = 0; i < 22; i++) {
    cudaEventRecord(a);
    cudaLaunchKernelEx(&cfg, probe<C, MODE>, T, out);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0.0f;
    cudaEventElapsedTime(&t, a, b);
    if (i) ms.push_back(t);  // the first launch warms up
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2] * 1000.0f / T;
}

int main(int argc, char** argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 8192;
  float* out;
  cudaMalloc(&out, sizeof(float));
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  std::printf("%s, T = %d, 2 clusters of C CTAs x %d threads, us/step:\n", p.name, T, NT);
  std::printf(" C  barrier  +DSMEM  +CTA barrier and reads  (3) relaxed arrive, storers fence  (4) no fence\n");
  std::printf(" 2  %7.3f %7.3f %7.3f %7.3f %7.3f\n", us_per_step<2, 0>(T, out), us_per_step<2, 1>(T, out), us_per_step<2, 2>(T, out),
              us_per_step<2, 3>(T, out), us_per_step<2, 4>(T, out));
  std::printf(" 4  %7.3f %7.3f %7.3f %7.3f %7.3f\n", us_per_step<4, 0>(T, out), us_per_step<4, 1>(T, out), us_per_step<4, 2>(T, out),
              us_per_step<4, 3>(T, out), us_per_step<4, 4>(T, out));
  std::printf(" 8  %7.3f %7.3f %7.3f %7.3f %7.3f\n", us_per_step<8, 0>(T, out), us_per_step<8, 1>(T, out), us_per_step<8, 2>(T, out),
              us_per_step<8, 3>(T, out), us_per_step<8, 4>(T, out));
  std::printf("16  %7.3f %7.3f %7.3f %7.3f %7.3f\n", us_per_step<16, 0>(T, out), us_per_step<16, 1>(T, out), us_per_step<16, 2>(T, out),
              us_per_step<16, 3>(T, out), us_per_step<16, 4>(T, out));
  cudaFree(out);
  return 0;
}
