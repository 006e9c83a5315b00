// run_artifact: run a function of an exported TVM Relax library without Python.
//
//   run_artifact LIB.so FUNC MANIFEST [TOL [DEVICE]]
//
// Loads LIB.so with tvm-ffi (the Relax VM executable is deserialized by TVM's runtime
// library, libtvm_runtime, which must be loaded: link it with --no-as-needed), creates
// the Relax VM on DEVICE (`cpu`, the default, or `cuda[:N]`) with the pooled allocator
// (what tvm.relax.VirtualMachine does), calls FUNC on the input tensors of MANIFEST
// (copied to DEVICE) and compares every output with the expected values of MANIFEST:
// prints the max abs error of each output, exits 0 when all are within TOL (default
// 1e-5), 1 otherwise (2 on a usage or load error). `cuda` loads TVM's CUDA runtime,
// libtvm_runtime_cuda.so, with dlopen (found like any shared library: LD_LIBRARY_PATH).
//
// MANIFEST: one tensor per line, in argument / output order; blank lines and lines
// starting with '#' are ignored:
//
//   in  FILE DTYPE NDIM D0 D1 ...     an input tensor
//   out FILE DTYPE NDIM D0 D1 ...     an expected output
//
// FILE: raw little-endian, C-contiguous data, relative to the manifest's directory.
// DTYPE: float32, float64, int32 or int64. The outputs of FUNC (a single tensor, or a
// tuple, flattened depth first) must match the `out` lines in number, dtype and shape.
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include "tensors.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace ffi = tvm::ffi;
using kl_deploy::CopyTo;
using kl_deploy::CPUAlloc;
using kl_deploy::Flatten;

namespace {

struct Entry {
  std::string role, file, dtype;
  std::vector<int64_t> shape;
};

DLDataType ParseDType(const std::string& s) {
  if (s == "float32") return DLDataType{kDLFloat, 32, 1};
  if (s == "float64") return DLDataType{kDLFloat, 64, 1};
  if (s == "int32") return DLDataType{kDLInt, 32, 1};
  if (s == "int64") return DLDataType{kDLInt, 64, 1};
  throw std::runtime_error("unsupported dtype '" + s + "'");
}

std::string DTypeName(DLDataType t) {
  if (t.lanes == 1 && t.code == kDLFloat && (t.bits == 32 || t.bits == 64))
    return "float" + std::to_string(t.bits);
  if (t.lanes == 1 && t.code == kDLInt && (t.bits == 32 || t.bits == 64))
    return "int" + std::to_string(t.bits);
  return "dtype(code=" + std::to_string(t.code) + ",bits=" + std::to_string(t.bits) +
         ",lanes=" + std::to_string(t.lanes) + ")";
}

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + ")";
}

std::vector<Entry> ReadManifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open manifest " + path);
  std::string dir = ".";
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos) dir = path.substr(0, slash);
  std::vector<Entry> out;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::istringstream ss(line);
    Entry e;
    if (!(ss >> e.role) || e.role[0] == '#') continue;
    int64_t ndim = -1;
    if (!(ss >> e.file >> e.dtype >> ndim) || (e.role != "in" && e.role != "out") || ndim < 0)
      throw std::runtime_error(path + ":" + std::to_string(lineno) + ": bad line '" + line + "'");
    for (int64_t i = 0; i < ndim; ++i) {
      int64_t d;
      if (!(ss >> d) || d < 0)
        throw std::runtime_error(path + ":" + std::to_string(lineno) + ": bad shape");
      e.shape.push_back(d);
    }
    ParseDType(e.dtype);
    if (e.file[0] != '/') e.file = dir + "/" + e.file;
    out.push_back(e);
  }
  return out;
}

// A CPU tensor of `e`'s dtype and shape holding the file's bytes.
ffi::Tensor LoadTensor(const Entry& e) {
  ffi::ShapeView shape(e.shape.data(), e.shape.size());
  ffi::Tensor t =
      ffi::Tensor::FromNDAlloc(CPUAlloc(), shape, ParseDType(e.dtype), DLDevice{kDLCPU, 0});
  size_t nbytes = ffi::GetDataSize(*t.GetDLTensorPtr());
  std::ifstream f(e.file, std::ios::binary | std::ios::ate);
  if (!f) throw std::runtime_error("cannot open " + e.file);
  if (static_cast<size_t>(f.tellg()) != nbytes)
    throw std::runtime_error(e.file + ": " + std::to_string(static_cast<size_t>(f.tellg())) +
                             " bytes, expected " + std::to_string(nbytes) + " for " + e.dtype +
                             ShapeStr(e.shape));
  f.seekg(0);
  f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(nbytes));
  return t;
}

double Elem(const DLTensor& t, int64_t i) {
  const char* p = static_cast<const char*>(t.data) + t.byte_offset;
  if (t.dtype.code == kDLFloat && t.dtype.bits == 32) return reinterpret_cast<const float*>(p)[i];
  if (t.dtype.code == kDLFloat && t.dtype.bits == 64) return reinterpret_cast<const double*>(p)[i];
  if (t.dtype.code == kDLInt && t.dtype.bits == 32) return reinterpret_cast<const int32_t*>(p)[i];
  if (t.dtype.code == kDLInt && t.dtype.bits == 64)
    return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
  throw std::runtime_error("unsupported dtype " + DTypeName(t.dtype));
}

// `cpu`, `cuda` or `cuda:N`.
DLDevice ParseDevice(const std::string& s) {
  if (s == "cpu") return DLDevice{kDLCPU, 0};
  if (s.rfind("cuda", 0) == 0) {
    int id = 0;
    if (s.size() > 4) {
      char* end = nullptr;
      long v = s[4] == ':' ? std::strtol(s.c_str() + 5, &end, 10) : -1;
      if (v < 0 || v > 1024 || end == s.c_str() + 5 || *end != '\0')
        throw std::runtime_error("bad device '" + s + "' (cpu, cuda or cuda:N)");
      id = static_cast<int>(v);
    }
    return DLDevice{kDLCUDA, id};
  }
  throw std::runtime_error("bad device '" + s + "' (cpu, cuda or cuda:N)");
}

int Run(int argc, char** argv) {
  if (argc < 4 || argc > 6) {
    std::cerr << "usage: " << argv[0] << " LIB.so FUNC MANIFEST [TOL [cpu|cuda[:N]]]\n";
    return 2;
  }
  const std::string lib_path = argv[1], func_name = argv[2];
  const double tol = argc >= 5 ? std::strtod(argv[4], nullptr) : 1e-5;
  const DLDevice dev = ParseDevice(argc == 6 ? argv[5] : "cpu");
  std::vector<Entry> entries = ReadManifest(argv[3]);
  if (dev.device_type == kDLCUDA && !dlopen("libtvm_runtime_cuda.so", RTLD_NOW | RTLD_GLOBAL))
    throw std::runtime_error(std::string("cannot load TVM's CUDA runtime: ") + dlerror());

  // The exported library: its code, the serialized VM executable (deserialized by
  // libtvm_runtime), and the kokoro_lstm engine, whose constructor registers
  // kokoro_lstm.lstm_forward_v2 with tvm-ffi when the library is loaded.
  ffi::Module lib = ffi::Module::LoadFromFile(lib_path);
  ffi::Optional<ffi::Function> load = lib->GetFunction("vm_load_executable", true);
  if (!load)
    throw std::runtime_error(lib_path + " has no vm_load_executable: not a Relax VM executable");
  ffi::Module vm = (*load)().cast<ffi::Module>();
  // vm_initialization(device_type, device_id, allocator, ...): the device, then the CPU
  // (shape functions run there), pooled allocators (2), as tvm.relax.VirtualMachine does.
  constexpr int kPooledAllocator = 2;
  ffi::Optional<ffi::Function> init = vm->GetFunction("vm_initialization", false);
  if (!init) throw std::runtime_error("the VM has no vm_initialization");
  if (dev.device_type == kDLCPU)
    (*init)(static_cast<int>(kDLCPU), 0, kPooledAllocator);
  else
    (*init)(static_cast<int>(dev.device_type), dev.device_id, kPooledAllocator,
            static_cast<int>(kDLCPU), 0, kPooledAllocator);
  ffi::Optional<ffi::Function> func = vm->GetFunction(func_name, false);
  if (!func) throw std::runtime_error("the VM has no function '" + func_name + "'");

  std::vector<ffi::Tensor> inputs;
  std::vector<const Entry*> expected;
  for (const Entry& e : entries) {
    if (e.role == "in") inputs.push_back(CopyTo(LoadTensor(e), dev));
    else expected.push_back(&e);
  }
  std::vector<ffi::AnyView> args(inputs.begin(), inputs.end());
  ffi::Any result;
  func->CallPacked(args.data(), static_cast<int32_t>(args.size()), &result);

  std::vector<ffi::Tensor> outputs;
  Flatten(result, &outputs);
  std::printf("%s on %s: %zu input(s), %zu output(s)\n", func_name.c_str(),
              dev.device_type == kDLCPU ? "cpu" : "cuda", inputs.size(),
              outputs.size());
  if (outputs.size() != expected.size()) {
    std::printf("FAIL: %zu outputs, the manifest expects %zu\n", outputs.size(), expected.size());
    return 1;
  }
  bool ok = true;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Entry& e = *expected[k];
    const DLDevice on = outputs[k].GetDLTensorPtr()->device;
    if (on.device_type != dev.device_type || on.device_id != dev.device_id) {
      std::printf("output %zu: FAIL on device (%d, %d), not the VM's\n", k, on.device_type,
                  on.device_id);
      ok = false;
      continue;
    }
    ffi::Tensor host = CopyTo(outputs[k], DLDevice{kDLCPU, 0});
    const DLTensor& got = *host.GetDLTensorPtr();
    std::vector<int64_t> shape(got.shape, got.shape + got.ndim);
    if (!ffi::IsContiguous(got)) {
      std::printf("output %zu: FAIL not a contiguous tensor\n", k);
      ok = false;
      continue;
    }
    if (DTypeName(got.dtype) != e.dtype || shape != e.shape) {
      std::printf("output %zu: FAIL got %s%s, expected %s%s\n", k, DTypeName(got.dtype).c_str(),
                  ShapeStr(shape).c_str(), e.dtype.c_str(), ShapeStr(e.shape).c_str());
      ok = false;
      continue;
    }
    ffi::Tensor want = LoadTensor(e);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    double max_err = 0.0;
    bool finite = true;
    for (int64_t i = 0; i < n; ++i) {
      double g = Elem(got, i), w = Elem(*want.GetDLTensorPtr(), i);
      if (!std::isfinite(g)) finite = false;
      max_err = std::max(max_err, std::fabs(g - w));
    }
    bool pass = finite && max_err <= tol;
    ok = ok && pass;
    const char* verdict = pass ? "ok" : (finite ? "FAIL" : "FAIL (non-finite)");
    std::printf("output %zu: %s%s max_abs_err=%.3g %s\n", k, e.dtype.c_str(),
                ShapeStr(shape).c_str(), max_err, verdict);
  }
  std::printf("%s (tol %.3g)\n", ok ? "PASS" : "FAIL", tol);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const ffi::Error& e) {
    std::cerr << "error: " << e.kind() << ": " << e.message() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return 2;
}
