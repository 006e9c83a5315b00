// kokoro_tts: the whole Kokoro, token ids to a WAV file, from compiled TVM artifacts and
// no Python (the job of kokoro-tvm's Rust runtime).
//
//   kokoro_tts DIR --tokens 0,50,83,...,0 --style REF_S.f32 -o out.wav
//              [--speed S] [--seed N] [--float] [--threads N] [--trace DIR2] [--repeat N]
//              [--device cpu|cuda[:N]]
//
// DIR holds what `kokoro-lstm port-encoder --component all` writes (bert, duration, f0n,
// text_encoder: {name}_compiled.so and {name}_report.json, whose "inputs" give each
// function's static shapes) and the decoder of `kokoro-lstm port-decoder`:
// decoder_compiled_seq{F}.so per frame bucket F, or decoder_compiled.so (its frame count
// from decoder_report.json). Every library is loaded with tvm-ffi and run on the Relax VM
// (libtvm_runtime deserializes the VM executable: link it --no-as-needed) on --device:
// `cpu` (the default) or `cuda[:N]`, the artifacts of `--target cuda`. Each report's
// "target_kind" (missing: "llvm") must fit the device. On cuda, TVM's CUDA runtime
// (libtvm_runtime_cuda.so, beside libtvm_runtime.so or on LD_LIBRARY_PATH) is loaded with
// dlopen, the VM runs on the GPU with the CPU as host device (shape functions), each
// function's inputs are copied from the host and its outputs back: the glue stays on the
// host, as on the CPU.
//
// The glue is KModel.forward_with_tokens's, with ids padded to the static text length:
//   bert(ids, attention_mask) -> d_en; duration(d_en, s, n, mask) -> (logits, d);
//   pred_dur[i] = max(1, round(sum_j sigmoid(logits[i, j]) / speed)) for the n tokens;
//   frame f copies token tok(f) (repeat_interleave(arange(n), pred_dur)), F frames;
//   f0n(en = d^T @ alignment, s, F) or f0n(d, tok, s, F) -> (F0, N);
//   text_encoder(ids, n, mask) -> t_en; asr = t_en @ alignment;
//   decoder(asr, F0, N, ref_s[:, :128] [, seed]) -> audio, F * samples-per-frame samples,
// where s = ref_s[:, 128:]. The audio equals KModel's when every static length is exact:
// f0n's and the decoder's frame counts equal to F (their instance norms see every frame);
// a longer one is zero-padded as kokoro-tvm does and the runner says the result is
// approximate. Text lengths may exceed n: the encoder's LSTMs are packed and bert masks.
//
// --tokens: comma-separated ids, or @FILE (ids separated by commas or white space).
// --style: raw little-endian float32, 256 values (ref_s) or a voice pack of k x 256, whose
// row min(n - 3, k - 1) is taken (KPipeline's pack[len(phonemes) - 1], n counting the two
// 0s around the phonemes). --seed: call decoder_forward_seeded with that seed (the same
// noise as kokoro_lstm.noise.counter_noise(model, seed)); without it decoder_forward
// draws fresh noise. --float: 32-bit float WAV (default 16-bit PCM, clipped to [-1, 1]).
// --threads: TVM's thread pool and KOKORO_LSTM_NUM_THREADS (set before any library loads).
// --trace (created if missing): raw float32/int64 files of the intermediates (pred_dur, d_en, logits, d, en,
// F0, N, t_en, asr, audio) and trace.txt (name dtype shape per line).
// --encoder-only: stop before the decoder (no decoder needed, no WAV): --trace only.
// --repeat N: synthesize N times; prints one JSON line with each call's milliseconds and
// the last call's per-stage milliseconds (the device synchronized before each clock read).
// Exit status: 0 success, 1 a failed run, 2 a usage, file or artifact error.
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include "tensors.h"

#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ffi = tvm::ffi;
using kl_deploy::CopyTo;
using kl_deploy::CPUAlloc;
using kl_deploy::Flatten;

namespace {

// A usage, file or artifact error (exit 2); anything else thrown is a failed run (1).
// show_usage: print the usage after the message (argument errors, not device errors).
struct UsageError : std::runtime_error {
  explicit UsageError(const std::string& what, bool usage = true)
      : std::runtime_error(what), show_usage(usage) {}
  bool show_usage;
};

constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kI64{kDLInt, 64, 1};
constexpr DLDataType kBool{kDLBool, 8, 1};

ffi::Tensor Empty(std::vector<int64_t> shape, DLDataType dt) {
  ffi::ShapeView s(shape.data(), shape.size());
  ffi::Tensor t = ffi::Tensor::FromNDAlloc(CPUAlloc(), s, dt, DLDevice{kDLCPU, 0});
  std::memset(t.data_ptr(), 0, ffi::GetDataSize(*t.GetDLTensorPtr()));
  return t;
}

template <typename T>
T* Data(const ffi::Tensor& t) {
  const DLTensor* d = t.GetDLTensorPtr();
  return reinterpret_cast<T*>(static_cast<char*>(d->data) + d->byte_offset);
}

std::vector<int64_t> Shape(const ffi::Tensor& t) {
  const DLTensor* d = t.GetDLTensorPtr();
  return std::vector<int64_t>(d->shape, d->shape + d->ndim);
}

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

// `t` as a contiguous float32 CPU tensor of `shape`, or a failed run naming `what`.
ffi::Tensor Expect(const ffi::Tensor& t, const std::vector<int64_t>& shape, const char* what) {
  const DLTensor* d = t.GetDLTensorPtr();
  if (d->device.device_type != kDLCPU || d->dtype.code != kDLFloat || d->dtype.bits != 32 ||
      d->dtype.lanes != 1 || !ffi::IsContiguous(*d) || Shape(t) != shape)
    throw std::runtime_error(std::string(what) + ": expected a contiguous float32 CPU tensor " +
                             ShapeStr(shape) + ", got shape " + ShapeStr(Shape(t)));
  return t;
}

// Waits for the work queued on `dev`'s default stream (the VM's kernels and copies).
void Sync(DLDevice dev) {
  if (dev.device_type == kDLCPU) return;
  static const ffi::Function sync = ffi::Function::GetGlobalRequired("runtime.Device_StreamSync");
  sync(dev, static_cast<int64_t>(0));
}

std::string DeviceName(DLDevice dev) {
  return dev.device_type == kDLCPU ? "cpu" : "cuda:" + std::to_string(dev.device_id);
}

// `cpu`, `cuda` or `cuda:N`.
DLDevice ParseDevice(const std::string& s) {
  if (s == "cpu") return DLDevice{kDLCPU, 0};
  if (s == "cuda") return DLDevice{kDLCUDA, 0};
  const std::string num = s.rfind("cuda:", 0) == 0 ? s.substr(5) : "";
  if (num.empty() || num.size() > 4 || num.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError("bad --device '" + s + "' (cpu, cuda or cuda:N)");
  return DLDevice{kDLCUDA, std::stoi(num)};
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

// Loads TVM's CUDA runtime (the CUDA device API and the loader of the artifacts' CUDA
// modules) and checks that `dev` exists: libtvm_runtime_cuda.so beside the
// libtvm_runtime.so this process runs, else wherever dlopen finds it (LD_LIBRARY_PATH).
void OpenCuda(DLDevice dev) {
  std::string lib = "libtvm_runtime_cuda.so";
  if (void* rt = dlopen("libtvm_runtime.so", RTLD_NOW | RTLD_NOLOAD)) {
    struct link_map* lm = nullptr;
    if (dlinfo(rt, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && lm->l_name != nullptr) {
      std::string path = lm->l_name;
      size_t slash = path.find_last_of('/');
      std::string beside = (slash == std::string::npos ? "." : path.substr(0, slash)) + "/" + lib;
      if (std::ifstream(beside).good()) lib = beside;
    }
    dlclose(rt);
  }
  if (dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* why = dlerror();
    throw UsageError("no CUDA device: cannot load TVM's CUDA runtime: " +
                     FirstLine(why ? why : lib), false);
  }
  static const ffi::Function attr = ffi::Function::GetGlobalRequired("runtime.GetDeviceAttr");
  std::string why = "no such GPU, or no usable driver";
  try {
    constexpr int kExist = 0;
    if (attr(static_cast<int>(kDLCUDA), dev.device_id, kExist).cast<int64_t>() != 0) return;
  } catch (const ffi::Error& e) {
    why = FirstLine(std::string(e.message()));
  }
  throw UsageError("no CUDA device: " + DeviceName(dev) + ": " + why, false);
}

bool FileExists(const std::string& p) { return std::ifstream(p).good(); }

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A function of an exported Relax library on a VM of `dev` with pooled allocators (what
// tvm.relax.VirtualMachine(lib, dev) does: on cuda the CPU follows as the host device).
// It takes and gives host tensors: the inputs are copied to `dev`, the outputs back.
struct VMFunction {
  DLDevice dev;
  ffi::Module vm;
  ffi::Function fn;

  VMFunction(const std::string& lib_path, const std::string& func, DLDevice dev_)
      : dev(dev_), vm(LoadVM(lib_path, dev_)), fn(Get(vm, lib_path, func)) {}

  static ffi::Module LoadVM(const std::string& lib_path, DLDevice dev) {
    ffi::Module lib = ffi::Module::LoadFromFile(lib_path);
    ffi::Optional<ffi::Function> load = lib->GetFunction("vm_load_executable", true);
    if (!load) throw UsageError(lib_path + " has no vm_load_executable: not a Relax VM library");
    ffi::Module vm = (*load)().cast<ffi::Module>();
    constexpr int kPooledAllocator = 2;
    ffi::Optional<ffi::Function> init = vm->GetFunction("vm_initialization", false);
    if (!init) throw UsageError(lib_path + ": the VM has no vm_initialization");
    (*init)(static_cast<int>(dev.device_type), dev.device_id, kPooledAllocator,
            static_cast<int>(kDLCPU), 0, kPooledAllocator);
    return vm;
  }

  static ffi::Function Get(const ffi::Module& vm, const std::string& lib_path,
                           const std::string& func) {
    ffi::Optional<ffi::Function> f = vm->GetFunction(func, false);
    if (!f) throw UsageError(lib_path + " has no function '" + func + "'");
    return *f;
  }

  std::vector<ffi::Tensor> operator()(const std::vector<ffi::Tensor>& in) const {
    std::vector<ffi::Tensor> on_dev;
    for (const ffi::Tensor& t : in) on_dev.push_back(CopyTo(t, dev));
    std::vector<ffi::AnyView> args(on_dev.begin(), on_dev.end());
    ffi::Any result;
    fn.CallPacked(args.data(), static_cast<int32_t>(args.size()), &result);
    std::vector<ffi::Tensor> out;
    Flatten(result, &out);
    for (ffi::Tensor& t : out) t = CopyTo(t, DLDevice{kDLCPU, 0});
    return out;
  }
};

// One input of a component as its report lists it.
struct InputSpec {
  std::string name, dtype;
  std::vector<int64_t> shape;
};

// What a report says its library was compiled for: "target_kind" ("llvm" when it does not
// say) and, for cuda, "target_arch" (sm_XY or sm_XYa; "" when it does not say).
struct Target {
  std::string kind = "llvm", arch;
};

struct Component {
  std::string name;
  std::vector<InputSpec> inputs;
  std::string f0n_input = "en";
  Target target;
  VMFunction* fn = nullptr;
};

int64_t AsInt(const ffi::Any& v, const std::string& where) {
  if (auto i = v.as<int64_t>()) return *i;
  throw UsageError(where + ": expected an integer");
}

ffi::Map<ffi::String, ffi::Any> ReadJsonObject(const std::string& path) {
  ffi::String err;
  ffi::json::Value v = ffi::json::Parse(ReadText(path), &err);
  if (!err.empty()) throw UsageError(path + ": " + std::string(err));
  auto obj = v.as<ffi::Map<ffi::String, ffi::Any>>();
  if (!obj) throw UsageError(path + ": not a JSON object");
  return *obj;
}

Target ReadTarget(const ffi::Map<ffi::String, ffi::Any>& report, const std::string& path) {
  Target t;
  for (auto [key, field] : {std::pair{"target_kind", &t.kind}, std::pair{"target_arch", &t.arch}}) {
    if (!report.count(key) || report.at(key) == nullptr) continue;
    auto v = report.at(key).as<ffi::String>();
    if (!v) throw UsageError(path + ": \"" + key + "\" is not a string");
    *field = std::string(*v);
  }
  return t;
}

// The GPU's architecture, sm_XY (TVM's kComputeVersion "X.Y").
std::string GpuArch(DLDevice dev) {
  static const ffi::Function attr = ffi::Function::GetGlobalRequired("runtime.GetDeviceAttr");
  constexpr int kComputeVersion = 4;
  std::string v = attr(static_cast<int>(kDLCUDA), dev.device_id, kComputeVersion).cast<ffi::String>();
  v.erase(std::remove(v.begin(), v.end(), '.'), v.end());
  return "sm_" + v;
}

// Whether cubin for `arch` loads on a GPU of `gpu` (sm_XY): sm_XYa only on XY itself, sm_XY
// on the same major at minor Y or later.
bool ArchRuns(const std::string& arch, const std::string& gpu) {
  if (arch.size() < 5 || arch.compare(0, 3, "sm_") != 0) return true;  // unknown: let it try
  const bool specific = arch.back() == 'a' || arch.back() == 'f';
  const std::string num = specific ? arch.substr(3, arch.size() - 4) : arch.substr(3);
  const std::string have = gpu.substr(3);
  if (specific || num.size() != have.size()) return num == have;
  return num[0] == have[0] && num.substr(1) <= have.substr(1);
}

// A library compiled for another device than `dev`, or for an architecture this GPU lacks:
// a one-line artifact error.
void CheckTarget(const std::string& lib, const Target& t, DLDevice dev) {
  const std::string want = dev.device_type == kDLCPU ? "llvm" : "cuda";
  if (t.kind == want) {
    if (want == "cuda" && !t.arch.empty()) {
      const std::string gpu = GpuArch(dev);
      if (!ArchRuns(t.arch, gpu))
        throw UsageError(lib + " was compiled for " + t.arch + ", which " + DeviceName(dev) +
                         " (" + gpu + ") cannot run: port it again with --target \"cuda -arch=" +
                         gpu + (gpu == "sm_90" ? "a" : "") + "\"", false);
    }
    return;
  }
  if (t.kind == "llvm" || t.kind == "cuda")
    throw UsageError(lib + " was compiled for " + t.kind + ": run with --device " +
                     (t.kind == "llvm" ? "cpu" : "cuda"), false);
  throw UsageError(lib + " was compiled for " + t.kind + ": kokoro_tts runs llvm (--device cpu) "
                   "and cuda (--device cuda) artifacts", false);
}

// {name}_report.json's input names, dtypes and static shapes (and f0n's input form).
Component ReadReport(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name + "_report.json";
  if (!FileExists(path))
    throw UsageError("missing " + path + " (kokoro-lstm port-encoder writes it next to " +
                     name + "_compiled.so; it gives the static shapes)");
  const ffi::Map<ffi::String, ffi::Any> obj = ReadJsonObject(path);
  if (!obj.count("inputs")) throw UsageError(path + ": no \"inputs\"");
  Component c;
  c.name = name;
  c.target = ReadTarget(obj, path);
  auto inputs = obj.at("inputs").as<ffi::Array<ffi::Any>>();
  if (!inputs) throw UsageError(path + ": \"inputs\" is not a list");
  for (const ffi::Any& x : *inputs) {
    auto m = x.as<ffi::Map<ffi::String, ffi::Any>>();
    if (!m || !m->count("name") || !m->count("shape") || !m->count("dtype"))
      throw UsageError(path + ": an input without name, shape and dtype");
    InputSpec s;
    s.name = std::string(m->at("name").cast<ffi::String>());
    s.dtype = std::string(m->at("dtype").cast<ffi::String>());
    auto shape = m->at("shape").as<ffi::Array<ffi::Any>>();
    if (!shape) throw UsageError(path + ": the shape of " + s.name + " is not a list");
    for (const ffi::Any& d : *shape) s.shape.push_back(AsInt(d, path));
    c.inputs.push_back(s);
  }
  if (obj.count("f0n_input")) {
    if (auto s = obj.at("f0n_input").as<ffi::String>()) c.f0n_input = std::string(*s);
  }
  return c;
}

const InputSpec& Input(const Component& c, size_t i, const char* name, size_t ndim) {
  if (i >= c.inputs.size() || c.inputs[i].name != name || c.inputs[i].shape.size() != ndim)
    throw UsageError(c.name + "_report.json: input " + std::to_string(i) + " is not '" + name +
                     "' of rank " + std::to_string(ndim) + " (not a port-encoder report?)");
  return c.inputs[i];
}

struct Decoder {
  int64_t frames;
  std::string path;
  Target target;
};

// The decoder libraries of DIR: decoder_compiled_seq{F}.so, else decoder_compiled.so with
// its frame count from decoder_report.json; target kinds from their reports
// (decoder_seq{F}_report.json; a bucket without one counts as llvm).
std::vector<Decoder> FindDecoders(const std::string& dir) {
  std::vector<Decoder> out;
  DIR* d = opendir(dir.c_str());
  if (!d) throw UsageError("cannot open the artifact folder " + dir);
  const std::string pre = "decoder_compiled_seq", suf = ".so";
  while (struct dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > pre.size() + suf.size() && n.compare(0, pre.size(), pre) == 0 &&
        n.compare(n.size() - suf.size(), suf.size(), suf) == 0) {
      std::string num = n.substr(pre.size(), n.size() - pre.size() - suf.size());
      if (!num.empty() && num.find_first_not_of("0123456789") == std::string::npos &&
          num.size() < 9)
        out.push_back({std::stoll(num), dir + "/" + n, Target{}});
    }
  }
  closedir(d);
  for (Decoder& dec : out) {
    const std::string report = dir + "/decoder_seq" + std::to_string(dec.frames) + "_report.json";
    if (FileExists(report)) dec.target = ReadTarget(ReadJsonObject(report), report);
  }
  if (out.empty() && FileExists(dir + "/decoder_compiled.so")) {
    Component c = ReadReport(dir, "decoder");
    const InputSpec& asr = Input(c, 0, "asr", 3);
    out.push_back({asr.shape[2], dir + "/decoder_compiled.so", c.target});
  }
  if (out.empty())
    throw UsageError("no decoder in " + dir + " (decoder_compiled.so or "
                     "decoder_compiled_seq{F}.so: kokoro-lstm port-decoder)");
  std::sort(out.begin(), out.end(), [](const Decoder& a, const Decoder& b) {
    return a.frames < b.frames;
  });
  return out;
}

std::vector<int64_t> ParseTokens(std::string s) {
  if (!s.empty() && s[0] == '@') s = ReadText(s.substr(1));
  for (char& c : s)
    if (c == ',' || c == '\n' || c == '\t' || c == '\r') c = ' ';
  std::istringstream ss(s);
  std::vector<int64_t> ids;
  std::string tok;
  while (ss >> tok) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(tok.c_str(), &end, 10);
    if (errno || *end != '\0' || v < 0) throw UsageError("bad token id '" + tok + "'");
    ids.push_back(v);
  }
  if (ids.empty()) throw UsageError("no token ids");
  return ids;
}

// ref_s [256] from a raw float32 file (one style, or a voice pack of k x 256).
std::vector<float> ReadStyle(const std::string& path, size_t n_tokens) {
  std::string bytes = ReadText(path);
  const size_t row = 256 * sizeof(float);
  if (bytes.empty() || bytes.size() % row)
    throw UsageError(path + ": " + std::to_string(bytes.size()) +
                     " bytes, not a multiple of 256 float32 (1024 bytes)");
  size_t k = bytes.size() / row;
  size_t pick = n_tokens >= 3 ? std::min(n_tokens - 3, k - 1) : 0;
  std::vector<float> s(256);
  std::memcpy(s.data(), bytes.data() + pick * row, row);
  for (float v : s)
    if (!std::isfinite(v)) throw UsageError(path + ": the style vector is not finite");
  return s;
}

void PutLE(std::string* out, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A mono RIFF/WAVE file at `rate`: 16-bit PCM (clipped to [-1, 1]; NaN is written as 0,
// PCM has no NaN) or IEEE float32 (format 3, with the fact chunk it requires).
void WriteWav(const std::string& path, const std::vector<float>& audio, int rate, bool as_float) {
  const uint32_t n = static_cast<uint32_t>(audio.size());
  const uint16_t bits = as_float ? 32 : 16, block = bits / 8;
  const uint32_t data_bytes = n * block;
  std::string h = "RIFF";
  const uint32_t fmt_size = as_float ? 18 : 16;
  const uint32_t riff = 4 + (8 + fmt_size) + (as_float ? 12 : 0) + 8 + data_bytes;
  PutLE(&h, riff, 4);
  h += "WAVEfmt ";
  PutLE(&h, fmt_size, 4);
  PutLE(&h, as_float ? 3 : 1, 2);  // WAVE_FORMAT_IEEE_FLOAT / WAVE_FORMAT_PCM
  PutLE(&h, 1, 2);                 // channels
  PutLE(&h, static_cast<uint32_t>(rate), 4);
  PutLE(&h, static_cast<uint32_t>(rate) * block, 4);  // bytes per second
  PutLE(&h, block, 2);
  PutLE(&h, bits, 2);
  if (as_float) {
    PutLE(&h, 0, 2);  // cbSize
    h += "fact";
    PutLE(&h, 4, 4);
    PutLE(&h, n, 4);
  }
  h += "data";
  PutLE(&h, data_bytes, 4);
  std::string body;
  body.reserve(data_bytes);
  for (float x : audio) {
    if (as_float) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      PutLE(&body, u, 4);
    } else {
      float c = std::isnan(x) ? 0.0f : std::min(1.0f, std::max(-1.0f, x));
      PutLE(&body, static_cast<uint16_t>(static_cast<int16_t>(std::lrint(c * 32767.0f))), 2);
    }
  }
  std::ofstream f(path, std::ios::binary);
  if (!f) throw UsageError("cannot write " + path);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  f.write(body.data(), static_cast<std::streamsize>(body.size()));
  if (!f) throw UsageError("cannot write " + path);
}

struct Trace {
  std::string dir;
  std::string index;
  void Put(const std::string& name, const void* data, size_t bytes, const char* dtype,
           const std::vector<int64_t>& shape) {
    if (dir.empty()) return;
    std::ofstream f(dir + "/" + name + ".bin", std::ios::binary);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    if (!f) throw UsageError("cannot write " + dir + "/" + name + ".bin");
    index += name + " " + dtype;
    for (int64_t d : shape) index += " " + std::to_string(d);
    index += "\n";
  }
  void Put(const std::string& name, const ffi::Tensor& t) {
    Put(name, Data<char>(t), ffi::GetDataSize(*t.GetDLTensorPtr()), "float32", Shape(t));
  }
  void Finish() {
    if (dir.empty()) return;
    std::ofstream f(dir + "/trace.txt");
    f << index;
    if (!f) throw UsageError("cannot write " + dir + "/trace.txt");
  }
};

struct Pipeline {
  Component bert, duration, f0n, text;
  std::vector<Decoder> decoders;
  std::map<int64_t, VMFunction> decoder_fns;
  std::vector<VMFunction> fns;  // bert, duration, f0n, text_encoder
  bool seeded = false;
  DLDevice dev;

  // Every report is read and its target kind checked before any library loads.
  Pipeline(const std::string& dir, bool seeded_, bool with_decoder, DLDevice dev_)
      : seeded(seeded_), dev(dev_) {
    const char* names[4] = {"bert", "duration", "f0n", "text_encoder"};
    Component* comps[4] = {&bert, &duration, &f0n, &text};
    for (int i = 0; i < 4; ++i) {
      *comps[i] = ReadReport(dir, names[i]);
      const std::string lib = dir + "/" + names[i] + "_compiled.so";
      if (!FileExists(lib)) throw UsageError("missing " + lib + " (kokoro-lstm port-encoder)");
      CheckTarget(lib, comps[i]->target, dev);
    }
    if (with_decoder) {
      decoders = FindDecoders(dir);
      for (const Decoder& d : decoders) CheckTarget(d.path, d.target, dev);
    }
    fns.reserve(4);
    for (int i = 0; i < 4; ++i)
      fns.emplace_back(dir + "/" + names[i] + "_compiled.so", std::string(names[i]) + "_forward",
                       dev);
    for (int i = 0; i < 4; ++i) comps[i]->fn = &fns[i];
    Input(bert, 0, "input_ids", 2);
    Input(duration, 0, "d_en", 3);
    Input(text, 0, "tokens", 2);
    if (f0n.f0n_input == "d") {
      Input(f0n, 1, "frame_token", 2);
      if (Input(f0n, 0, "d", 3).shape[1] != TextLen())
        throw UsageError("f0n takes d of " + std::to_string(f0n.inputs[0].shape[1]) +
                         " tokens, duration gives " + std::to_string(TextLen()) +
                         ": export them with the same --seq-len");
    } else
      Input(f0n, 0, "en", 3);
  }

  int64_t TextLen() const { return text.inputs[0].shape[1]; }
  int64_t BertLen() const { return bert.inputs[0].shape[1]; }
  int64_t Hidden() const { return duration.inputs[0].shape[1]; }
  int64_t F0nFrames() const {
    return f0n.f0n_input == "d" ? f0n.inputs[1].shape[1] : f0n.inputs[0].shape[2];
  }

  const VMFunction& DecoderFor(int64_t frames, int64_t* bucket) {
    for (const Decoder& d : decoders) {
      if (d.frames >= frames) {
        *bucket = d.frames;
        auto it = decoder_fns.find(d.frames);
        if (it == decoder_fns.end())
          it = decoder_fns
                   .emplace(std::piecewise_construct, std::forward_as_tuple(d.frames),
                            std::forward_as_tuple(d.path,
                                                  seeded ? "decoder_forward_seeded"
                                                         : "decoder_forward",
                                                  dev))
                   .first;
        return it->second;
      }
    }
    throw UsageError(std::to_string(frames) + " frames exceed the largest decoder bucket (" +
                     std::to_string(decoders.back().frames) +
                     "): export one with kokoro-lstm port-decoder --seq-len " +
                     std::to_string(frames));
  }
};

struct Result {
  std::vector<float> audio;
  int64_t frames = 0, decoder_frames = 0;
  bool exact = true;
  std::map<std::string, double> stage_ms;
};

double Ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Result Synthesize(Pipeline& p, const std::vector<int64_t>& ids, const std::vector<float>& ref_s,
                  float speed, const int64_t* seed, Trace* trace, bool encoder_only) {
  using clock = std::chrono::steady_clock;
  Result r;
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t T = p.TextLen(), Tb = p.BertLen(), H = p.Hidden();
  if (n > T || n > Tb)
    throw UsageError(std::to_string(n) + " tokens exceed the static text length (" +
                     std::to_string(std::min(T, Tb)) + "): re-export with a larger --seq-len");
  ffi::Tensor style = Empty({1, 128}, kF32);  // s = ref_s[:, 128:]
  std::memcpy(Data<float>(style), ref_s.data() + 128, 128 * sizeof(float));

  // bert(input_ids, attention_mask) -> d_en [1, H, Tb]
  auto t0 = clock::now();
  ffi::Tensor bert_ids = Empty({1, Tb}, kI64), attn = Empty({1, Tb}, kI64);
  for (int64_t i = 0; i < n; ++i) {
    Data<int64_t>(bert_ids)[i] = ids[i];
    Data<int64_t>(attn)[i] = 1;
  }
  ffi::Tensor d_en_b = Expect((*p.bert.fn)({bert_ids, attn}).at(0), {1, H, Tb}, "bert's d_en");
  // d_en at the text length T (bert's valid columns; duration masks the rest)
  ffi::Tensor d_en = Empty({1, H, T}, kF32);
  for (int64_t c = 0; c < H; ++c)
    std::memcpy(Data<float>(d_en) + c * T, Data<float>(d_en_b) + c * Tb,
                std::min(n, Tb) * sizeof(float));
  r.stage_ms["bert"] = Ms(t0);

  // duration(d_en, s, lengths, mask) -> (logits [1, T, max_dur], d [1, T, H + 128])
  t0 = clock::now();
  ffi::Tensor lengths = Empty({1}, kI64), mask = Empty({1, T}, kBool);
  Data<int64_t>(lengths)[0] = n;
  for (int64_t i = n; i < T; ++i) Data<uint8_t>(mask)[i] = 1;  // True at padding
  std::vector<ffi::Tensor> dur = (*p.duration.fn)({d_en, style, lengths, mask});
  if (dur.size() != 2) throw std::runtime_error("duration_forward: expected 2 outputs");
  std::vector<int64_t> ls = Shape(dur[0]);
  if (ls.size() != 3 || ls[0] != 1 || ls[1] != T) throw std::runtime_error("duration logits");
  const int64_t max_dur = ls[2], D = H + 128;
  ffi::Tensor logits = Expect(dur[0], {1, T, max_dur}, "duration logits");
  ffi::Tensor d = Expect(dur[1], {1, T, D}, "duration's d");
  r.stage_ms["duration"] = Ms(t0);

  // pred_dur = round(sum(sigmoid(logits)) / speed).clamp(min=1): float32 as in torch;
  // nearbyint rounds half to even, as torch.round does.
  t0 = clock::now();
  std::vector<int64_t> pred(n), tok;
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0.0f;
    for (int64_t j = 0; j < max_dur; ++j)
      sum += 1.0f / (1.0f + std::exp(-Data<float>(logits)[i * max_dur + j]));
    float v = std::nearbyint(sum / speed);
    if (std::isnan(v)) throw std::runtime_error("duration: NaN logits");
    pred[i] = std::max<int64_t>(1, static_cast<int64_t>(std::min(v, 1e7f)));
    tok.insert(tok.end(), pred[i], i);
  }
  const int64_t F = static_cast<int64_t>(tok.size());
  r.frames = F;
  const int64_t Ff = p.F0nFrames();
  if (F > Ff)
    throw UsageError(std::to_string(F) + " frames exceed f0n's static length (" +
                     std::to_string(Ff) + "): re-export it with --aligned-len " +
                     std::to_string(F) + " or more");
  r.exact = r.exact && F == Ff;

  // f0n: en = d^T @ alignment [1, D, Ff] (zero past F), or (d, frame_token)
  std::vector<ffi::Tensor> f0n_in;
  ffi::Tensor en;
  ffi::Tensor frame_len = Empty({1}, kI64);
  Data<int64_t>(frame_len)[0] = F;
  if (p.f0n.f0n_input == "d") {
    ffi::Tensor ft = Empty({1, Ff}, kI64);
    for (int64_t f = 0; f < Ff; ++f) Data<int64_t>(ft)[f] = f < F ? tok[f] : n - 1;
    f0n_in = {d, ft, style, frame_len};
  } else {
    en = Empty({1, D, Ff}, kF32);
    for (int64_t c = 0; c < D; ++c)
      for (int64_t f = 0; f < F; ++f)
        Data<float>(en)[c * Ff + f] = Data<float>(d)[tok[f] * D + c];
    f0n_in = {en, style, frame_len};
  }
  r.stage_ms["glue"] = Ms(t0);
  t0 = clock::now();
  std::vector<ffi::Tensor> f0n = (*p.f0n.fn)(f0n_in);
  if (f0n.size() != 2) throw std::runtime_error("f0n_forward: expected 2 outputs");
  ffi::Tensor F0 = Expect(f0n[0], {1, 2 * Ff}, "f0n's F0"), N = Expect(f0n[1], {1, 2 * Ff}, "N");
  r.stage_ms["f0n"] = Ms(t0);

  // text_encoder(tokens, lengths, mask) -> t_en [1, 512, T]
  t0 = clock::now();
  ffi::Tensor tokens = Empty({1, T}, kI64);
  std::copy(ids.begin(), ids.end(), Data<int64_t>(tokens));
  ffi::Tensor t_en_any = (*p.text.fn)({tokens, lengths, mask}).at(0);
  std::vector<int64_t> ts = Shape(t_en_any);
  if (ts.size() != 3) throw std::runtime_error("text_encoder: t_en is not [1, C, T]");
  const int64_t C = ts[1];
  ffi::Tensor t_en = Expect(t_en_any, {1, C, T}, "text_encoder's t_en");
  r.stage_ms["text_encoder"] = Ms(t0);

  // decoder(asr [1, C, Fd], F0 [1, 2Fd], N, ref_s[:, :128] [, seed]): zero past F
  t0 = clock::now();
  int64_t Fd = F;
  const VMFunction* dec = encoder_only ? nullptr : &p.DecoderFor(F, &Fd);
  r.decoder_frames = Fd;
  r.exact = r.exact && Fd == F;
  ffi::Tensor asr = Empty({1, C, Fd}, kF32);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t f = 0; f < F; ++f)
      Data<float>(asr)[c * Fd + f] = Data<float>(t_en)[c * T + tok[f]];
  ffi::Tensor F0d = Empty({1, 2 * Fd}, kF32), Nd = Empty({1, 2 * Fd}, kF32);
  std::memcpy(Data<float>(F0d), Data<float>(F0), 2 * F * sizeof(float));
  std::memcpy(Data<float>(Nd), Data<float>(N), 2 * F * sizeof(float));
  ffi::Tensor dstyle = Empty({1, 128}, kF32);
  std::memcpy(Data<float>(dstyle), ref_s.data(), 128 * sizeof(float));
  std::vector<ffi::Tensor> dec_in = {asr, F0d, Nd, dstyle};
  if (seed != nullptr) {
    ffi::Tensor st = Empty({1}, kI64);
    Data<int64_t>(st)[0] = *seed;
    dec_in.push_back(st);
  }
  r.stage_ms["glue"] += Ms(t0);
  if (trace != nullptr && !trace->dir.empty()) {
    trace->Put("pred_dur", pred.data(), pred.size() * 8, "int64", {n});
    trace->Put("d_en", d_en);
    trace->Put("logits", logits);
    trace->Put("d", d);
    if (en.defined()) trace->Put("en", en);
    trace->Put("F0", F0);
    trace->Put("N", N);
    trace->Put("t_en", t_en);
    trace->Put("asr", asr);
  }
  if (encoder_only) {
    if (trace != nullptr) trace->Finish();
    return r;
  }
  t0 = clock::now();
  std::vector<ffi::Tensor> out = (*dec)(dec_in);
  r.stage_ms["decoder"] = Ms(t0);
  if (out.size() != 1) throw std::runtime_error("decoder: expected one output");
  const DLTensor* a = out[0].GetDLTensorPtr();
  if (a->dtype.code != kDLFloat || a->dtype.bits != 32 || !ffi::IsContiguous(*a))
    throw std::runtime_error("decoder: the audio is not contiguous float32");
  int64_t samples = 1;
  for (int64_t s : Shape(out[0])) samples *= s;
  if (samples % Fd) throw std::runtime_error("decoder: samples not a multiple of the frames");
  const int64_t keep = samples / Fd * F;
  r.audio.assign(Data<float>(out[0]), Data<float>(out[0]) + keep);

  if (trace != nullptr && !trace->dir.empty()) {
    trace->Put("audio", r.audio.data(), r.audio.size() * 4, "float32",
               {static_cast<int64_t>(r.audio.size())});
    trace->Finish();
  }
  return r;
}

const char* kUsage =
    "usage: kokoro_tts DIR --tokens IDS|@FILE --style FILE -o OUT.wav [--speed S] [--seed N]\n"
    "                  [--float] [--threads N] [--trace DIR] [--repeat N]\n"
    "                  [--device cpu|cuda[:N]]\n"
    "       kokoro_tts DIR --tokens IDS|@FILE --style FILE --encoder-only --trace DIR ...\n";

int Run(int argc, char** argv) {
  if (argc < 2) throw UsageError("no artifact folder");
  std::string dir = argv[1], tokens_arg, style_path, out_path, trace_dir;
  float speed = 1.0f;
  bool as_float = false, has_seed = false, encoder_only = false;
  int64_t seed = 0, threads = 0, repeat = 0;
  DLDevice dev{kDLCPU, 0};
  auto num = [](const std::string& flag, const char* v) {
    char* end = nullptr;
    errno = 0;
    double x = std::strtod(v, &end);
    if (errno || end == v || *end != '\0' || !std::isfinite(x))
      throw UsageError(flag + ": not a number: '" + v + "'");
    return x;
  };
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--float" || a == "--encoder-only") {
      (a == "--float" ? as_float : encoder_only) = true;
      continue;
    }
    if (i + 1 >= argc) throw UsageError(a + " needs a value (or is unknown)");
    const char* v = argv[++i];
    if (a == "--tokens") tokens_arg = v;
    else if (a == "--style") style_path = v;
    else if (a == "-o" || a == "--output") out_path = v;
    else if (a == "--trace") trace_dir = v;
    else if (a == "--device") dev = ParseDevice(v);
    else if (a == "--speed") speed = static_cast<float>(num(a, v));
    else if (a == "--seed") {
      double s = num(a, v);
      if (s != std::floor(s) || std::fabs(s) > 9.0e15) throw UsageError("--seed: an integer");
      seed = static_cast<int64_t>(s);
      has_seed = true;
    } else if (a == "--threads") {
      double t = num(a, v);
      if (t != std::floor(t) || t < 1 || t > 512) throw UsageError("--threads: 1..512");
      threads = static_cast<int64_t>(t);
    } else if (a == "--repeat") {
      double t = num(a, v);
      if (t != std::floor(t) || t < 1 || t > 100000) throw UsageError("--repeat: 1..100000");
      repeat = static_cast<int64_t>(t);
    } else {
      throw UsageError("unknown option " + a);
    }
  }
  if (tokens_arg.empty() || style_path.empty())
    throw UsageError("--tokens and --style are required");
  if (encoder_only ? trace_dir.empty() : out_path.empty())
    throw UsageError(encoder_only ? "--encoder-only writes only --trace DIR: give it"
                                  : "-o OUT.wav is required");
  if (!(speed > 0.0f) || !std::isfinite(speed)) throw UsageError("--speed must be positive");
  std::vector<int64_t> ids = ParseTokens(tokens_arg);
  std::vector<float> ref_s = ReadStyle(style_path, ids.size());
  if (threads > 0) {
    // read by the engine when its pool starts and by TVM's pool: before any call
    setenv("KOKORO_LSTM_NUM_THREADS", std::to_string(threads).c_str(), 1);
    setenv("TVM_NUM_THREADS", std::to_string(threads).c_str(), 1);
  }

  if (dev.device_type == kDLCUDA) OpenCuda(dev);  // before any artifact loads its CUDA module
  Pipeline p(dir, has_seed, !encoder_only, dev);
  if (threads > 0) {
    static const ffi::Function config = ffi::Function::GetGlobalRequired("runtime.config_threadpool");
    config(0, static_cast<int>(threads));
  }
  if (!trace_dir.empty() && mkdir(trace_dir.c_str(), 0777) != 0 && errno != EEXIST)
    throw UsageError("cannot create --trace folder " + trace_dir + ": " + std::strerror(errno));
  Trace trace{trace_dir, ""};
  const int64_t* sp = has_seed ? &seed : nullptr;
  std::vector<double> calls;
  Result r;
  for (int64_t k = 0; k < std::max<int64_t>(1, repeat); ++k) {
    Sync(dev);
    auto t0 = std::chrono::steady_clock::now();
    r = Synthesize(p, ids, ref_s, speed, sp, k == 0 ? &trace : nullptr, encoder_only);
    Sync(dev);
    calls.push_back(Ms(t0));
  }
  if (encoder_only) {
    std::printf("%s: encoder only, %lld frames, %zu tokens%s\n", trace_dir.c_str(),
                static_cast<long long>(r.frames), ids.size(),
                r.exact ? "" : "; approximate: f0n ran on zero-padded frames");
  } else {
    WriteWav(out_path, r.audio, 24000, as_float);
    std::printf("%s: %zu samples (%lld frames, %zu tokens, decoder bucket %lld)%s\n",
              out_path.c_str(), r.audio.size(), static_cast<long long>(r.frames), ids.size(),
              static_cast<long long>(r.decoder_frames),
              r.exact ? "" : "; approximate: f0n or the decoder ran on zero-padded frames");
  }
  if (repeat > 0) {
    std::printf("{\"calls_ms\": [");
    for (size_t i = 0; i < calls.size(); ++i) std::printf("%s%.3f", i ? ", " : "", calls[i]);
    std::printf("], \"stage_ms\": {");
    size_t i = 0;
    for (const auto& kv : r.stage_ms)
      std::printf("%s\"%s\": %.3f", i++ ? ", " : "", kv.first.c_str(), kv.second);
    std::printf("}, \"frames\": %lld, \"samples\": %zu}\n", static_cast<long long>(r.frames),
                r.audio.size());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "kokoro_tts: error: " << e.what() << "\n" << (e.show_usage ? kUsage : "");
    return 2;
  } catch (const ffi::Error& e) {
    std::cerr << "kokoro_tts: error: " << e.kind() << ": " << e.message() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "kokoro_tts: error: " << e.what() << "\n";
  }
  return 1;
}
