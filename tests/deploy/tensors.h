// Tensor helpers of the C++ runners (run_artifact.cc, kokoro_tts.cc): host allocation,
// a Relax function's result as a flat list, copies between the host and a device.
#ifndef KL_DEPLOY_TENSORS_H
#define KL_DEPLOY_TENSORS_H

#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace kl_deploy {

namespace ffi = tvm::ffi;

struct CPUAlloc {
  void AllocData(DLTensor* t) {
    size_t n = ffi::GetDataSize(*t);
    t->data = std::malloc(n ? n : 1);
    if (t->data == nullptr) throw std::bad_alloc();
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

// A function's result, a tensor or (nested) tuples of tensors, as a list.
inline void Flatten(const ffi::Any& v, std::vector<ffi::Tensor>* out) {
  if (auto t = v.as<ffi::Tensor>()) {
    out->push_back(*t);
  } else if (auto a = v.as<ffi::Array<ffi::Any>>()) {
    for (const ffi::Any& x : *a) Flatten(x, out);
  } else {
    throw std::runtime_error("output of type " + v.GetTypeKey() +
                             " is neither a tensor nor a tuple");
  }
}

// A copy of `t` on `dev` (through TVM's device API; a copy to the host synchronizes), or `t`
// itself when it is there already.
inline ffi::Tensor CopyTo(const ffi::Tensor& t, DLDevice dev) {
  const DLTensor& d = *t.GetDLTensorPtr();
  if (d.device.device_type == dev.device_type && d.device.device_id == dev.device_id) return t;
  ffi::Tensor out;
  ffi::ShapeView shape(d.shape, d.ndim);
  if (dev.device_type == kDLCPU) {
    out = ffi::Tensor::FromNDAlloc(CPUAlloc(), shape, d.dtype, dev);
  } else {
    static const ffi::Function alloc =
        ffi::Function::GetGlobalRequired("runtime.TVMTensorAllocWithScope");
    out = alloc(ffi::Shape(d.shape, d.shape + d.ndim), d.dtype, dev, ffi::Optional<ffi::String>())
              .cast<ffi::Tensor>();
  }
  static const ffi::Function copy = ffi::Function::GetGlobalRequired("runtime.TVMTensorCopyFromTo");
  copy(t, out);
  if (dev.device_type == kDLCPU) {
    static const ffi::Function sync = ffi::Function::GetGlobalRequired("runtime.Device_StreamSync");
    sync(d.device, static_cast<int64_t>(0));
  }
  return out;
}

}  // namespace kl_deploy

#endif  // KL_DEPLOY_TENSORS_H
