/* What the dense operators share (see dense_internal.h). */
#include <pthread.h>
#include <string.h>

#include "dense_internal.h"

/* One row per ISA level, filled the first time an operator runs at that level. */
static struct {
  atomic_int ready;
  kl_dense_kernels k;
} g_kernels[KL_ISA_COUNT];
static pthread_mutex_t g_kernels_lock = PTHREAD_MUTEX_INITIALIZER;

kl_dense_kernels kl_dense_kernels_active(void) {
  const kl_isa isa = kl_isa_active();
  if (atomic_load_explicit(&g_kernels[isa].ready, memory_order_acquire)) return g_kernels[isa].k;
  pthread_mutex_lock(&g_kernels_lock);
  kl_dense_kernels k = g_kernels[isa].k;
  if (!atomic_load_explicit(&g_kernels[isa].ready, memory_order_relaxed)) {
    k = (kl_dense_kernels){kl_select_f32_pgemm(), kl_select_vgelu(), kl_select_softmax()};
    /* kept for isa only if no kl_isa_set came in between (else picked again next time) */
    if (kl_isa_active() == isa) {
      g_kernels[isa].k = k;
      atomic_store_explicit(&g_kernels[isa].ready, 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&g_kernels_lock);
  return k;
}

void kl_dense_transpose(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t m, int64_t n) {
  for (int64_t i0 = 0; i0 < m; i0 += 16) {
    const int64_t i1 = i0 + 16 < m ? i0 + 16 : m;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
      const int64_t j1 = j0 + 16 < n ? j0 + 16 : n;
      for (int64_t j = j0; j < j1; j++)
        for (int64_t i = i0; i < i1; i++) dst[j * ldd + i] = src[i * lds + j];
    }
  }
}


kl_status kl_conv_len(const char* name, int64_t v, int64_t lo) {
  if (v < lo)
    return kl_fail("invalid config (stride, padding or dilation): %s must be >= %lld, got %lld", name,
                   (long long)lo, (long long)v);
  if (v > KL_CONV_MAX_LEN)
    return kl_fail("%s %lld too large (at most %d)", name, (long long)v, KL_CONV_MAX_LEN);
  return KL_OK;
}

kl_status kl_conv_config(const int64_t* w_panels, int64_t stride, int64_t dilation, int64_t pad_l,
                         const int64_t* pad_r, int64_t num_threads, int* nth) {
  kl_status st;
  if (w_panels && *w_panels != 0 && *w_panels != 1)
    return kl_fail("unknown w layout in the config (w_panels must be 0 or 1, got %lld)",
                   (long long)*w_panels);
  if ((st = kl_conv_len("stride", stride, 1)) || (st = kl_conv_len("dilation", dilation, 1)) ||
      (st = kl_conv_len("pad_l", pad_l, 0)) || (pad_r && (st = kl_conv_len("pad_r", *pad_r, 0))))
    return st;
  return kl_check_threads(num_threads, nth);
}

kl_status kl_conv_reach(int64_t win, int64_t stride, int64_t ksize, int64_t dilation) {
  int64_t last, reach;
  if (kl_mul(win > 0 ? win - 1 : 0, stride, &last) || kl_mul(ksize - 1, dilation, &reach) ||
      kl_add(last, reach, &last))
    return kl_fail("x's %lld steps at stride %lld with ksize %lld and dilation %lld overflow 64-bit "
                   "positions", (long long)win, (long long)stride, (long long)ksize, (long long)dilation);
  return KL_OK;
}

kl_status kl_scratch_size(const char* what, int64_t n1, int64_t n2, int64_t n3, int64_t n4) {
  int64_t p;
  if (kl_mul(n1, n2, &p) || kl_mul(p, n3, &p) || kl_mul(p, n4, &p) || kl_mul(p, 4, &p))
    return kl_fail("%s: %lld x %lld x %lld x %lld floats overflow 64-bit sizes", what,
                   (long long)n1, (long long)n2, (long long)n3, (long long)n4);
  return KL_OK;
}

kl_status kl_conv_tensors(const DLTensor* xt, const DLTensor* wt, const DLTensor* bt,
                          const DLTensor* yt, kl_view* x, kl_view* w, kl_view* b, kl_view* y) {
  kl_status st;
  if ((st = kl_view_on(xt, "x", kDLFloat, 32, 3, 3, x)) || (st = kl_view_on(wt, "w", kDLFloat, 32, 3, 3, w)) ||
      (bt && (st = kl_view_on(bt, "bias", kDLFloat, 32, 1, KL_VIEW_MAXD, b))) ||
      (st = kl_view_on(yt, "y", kDLFloat, 32, 3, 3, y)))
    return st;
  const DLDevice d = xt->device;
  if (d.device_type != kDLCPU && d.device_type != kDLCUDA)
    return kl_fail("x must be on the CPU or a CUDA device, got device type %d", (int)d.device_type);
  const DLTensor* ts[3] = {wt, yt, bt};
  static const char* const tnames[3] = {"w", "y", "bias"};
  for (int i = 0; i < 3; i++)
    if (ts[i] && (ts[i]->device.device_type != d.device_type || ts[i]->device.device_id != d.device_id))
      return kl_fail("%s must be on x's device (type %d id %d), got type %d id %d", tnames[i], (int)d.device_type,
                     (int)d.device_id, (int)ts[i]->device.device_type, (int)ts[i]->device.device_id);
  const kl_view* all[4] = {x, w, y, bt ? b : NULL};
  static const char* const names[4] = {"x", "w", "y", "bias"};
  for (int i = 0; i < 4; i++)
    if (all[i] && !kl_view_compact(all[i])) return kl_fail("%s must be compact", names[i]);
  if (x->shape[0] != y->shape[0])
    return kl_fail("x and y batch sizes differ (%lld and %lld)", (long long)x->shape[0],
                   (long long)y->shape[0]);
  if (x->shape[1] < 1) return kl_fail("x has no channels: its channel count must be >= 1");
  const DLTensor* outs[1] = {yt};
  const DLTensor* ins[3] = {xt, wt, bt};
  static const char* const out_names[1] = {"y"};
  static const char* const in_names[3] = {"x", "w", "bias"};
  return kl_check_disjoint(outs, out_names, 1, ins, in_names, 3);
}

kl_status kl_conv_cpu(const DLTensor* xt) {
  if (xt && xt->device.device_type != kDLCPU)
    return kl_fail("x must be a CPU tensor, got device type %d", (int)xt->device.device_type);
  return KL_OK;
}

void kl_conv_data(const kl_view* x, const kl_view* w, const kl_view* bias, const kl_view* y,
                  const float** xp, const float** wp, const float** bp, float** yp) {
  *xp = kl_cdata(x);
  *wp = kl_cdata(w);
  *bp = bias ? kl_cdata(bias) : NULL;
  *yp = kl_wdata(y);
}
