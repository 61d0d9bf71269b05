// tessera_cuda_compiler: a plugin of kind "compiler" for the device type cuda (Note [Compiler plugin
// ABI]). It takes chains of elementwise ops (Note [Fused CUDA kernels]) and makes each ONE kernel:
// the source is generated, compiled by NVRTC for the device's architecture (Note [Loading NVRTC]),
// kept in a disk cache (cubin_cache.h), loaded with cudaLibraryLoadData and launched on the stream
// the runtime passes. Matmul, attention, reductions and every other node stay with the dispatcher
// (cuBLASLt, the CUDA plugin's kernels). The CUDA runtime is linked statically, like plugins/cuda:
// the plugin loads on machines without a driver and takes no partition there (no cuda inputs).
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <tessera/sdk.hpp>

#include "cubin_cache.h"
#include "cuda_compiler_ext.h"
#include "device_context.h"
#include "fused_program.h"
#include "nvrtc_loader.h"

#define CUDA_COMPILER "tessera_cuda_compiler"

namespace {

namespace cf = tessera::cuda_fuser;
using tessera::sdk::Error;
using tessera::sdk::GraphView;
using tessera::sdk::TensorSpan;

constexpr int kThreads = 256;

std::atomic<uint64_t> g_launches{0}, g_compiles{0}, g_cache_hits{0};

std::optional<cf::FDType> fused_dtype(int32_t dtype) {
  switch (dtype) {
    case TESSERA_DTYPE_FLOAT32:
      return cf::FDType::Float32;
    case TESSERA_DTYPE_FLOAT64:
      return cf::FDType::Float64;
    case TESSERA_DTYPE_FLOAT16:
      return cf::FDType::Float16;
    case TESSERA_DTYPE_BFLOAT16:
      return cf::FDType::BFloat16;
    default:
      return std::nullopt;
  }
}

// gelu's `approximate` argument ("none" when absent).
std::string approximate_of(const GraphView& g, int32_t node) {
  if (std::strcmp(g.target(node), "gelu") != 0 || g.num_args(node) < 2) return "none";
  const std::optional<tessera_value_t> v = g.arg_constant(node, 1);
  return v && v->kind == TESSERA_VALUE_STRING && v->u.s ? v->u.s : "?";
}

// Whether `operand` broadcasts to `out` (sizes right-aligned, equal or 1), symbolic sizes compared
// as expressions.
bool broadcasts_to(const GraphView& g, int32_t operand, int32_t out) {
  const int32_t r = g.rank(operand), ro = g.rank(out);
  if (r > ro) return false;
  for (int32_t d = 0; d < r; ++d) {
    const tessera_graph_size_t s = g.size(operand, d), so = g.size(out, ro - r + d);
    if (std::strcmp(s.expr, so.expr) != 0 && std::strcmp(s.expr, "1") != 0) return false;
  }
  return true;
}

// The node as a fused op: its op, and for each argument whether it is a tensor operand, a number
// operand or a number attribute the op takes; nullopt when the plugin does not take it.
std::optional<cf::FOp> fusable(const GraphView& g, int32_t node) {
  if (!g.is_call(node) || g.num_outputs(node) != 1) return std::nullopt;
  const std::optional<cf::FOp> op = cf::fused_op(g.target(node), approximate_of(g, node));
  if (!op) return std::nullopt;
  const int32_t out = g.output(node);
  if (!fused_dtype(g.dtype(out)) || g.rank(out) > cf::kMaxRank) return std::nullopt;
  const int32_t operands = cf::is_binary(*op) ? 2 : 1;
  if (g.num_args(node) < operands) return std::nullopt;
  for (int32_t a = 0; a < g.num_args(node); ++a) {
    if (a < operands && g.arg_kind(node, a) == TESSERA_ARG_TENSOR) {
      const int32_t v = g.arg_value(node, a);
      if (g.dtype(v) != g.dtype(out) || !broadcasts_to(g, v, out)) return std::nullopt;
    } else if (*op == cf::FOp::GeluErf || *op == cf::FOp::GeluTanh) {
      if (a >= operands) continue;  // the approximate string, read above
      return std::nullopt;
    } else if (!g.arg_number(node, a)) {
      return std::nullopt;  // alpha, the exponent and constant operands are numbers
    }
  }
  return op;
}

// The output type of a node as text: dtype and size expressions (one partition, one type).
std::string output_type(const GraphView& g, int32_t node) {
  const int32_t v = g.output(node);
  std::string t = std::to_string(g.dtype(v));
  for (int32_t d = 0; d < g.rank(v); ++d) t += std::string(",") + g.size(v, d).expr;
  return t;
}

int device_arch(int device, int* sm_count) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    throw Error(TESSERA_STATUS_UNAVAILABLE,
                CUDA_COMPILER ": cannot read the properties of cuda:" + std::to_string(device));
  }
  *sm_count = prop.multiProcessorCount;
  return prop.major * 10 + prop.minor;
}

// The call's device current for the scope (tessera::cuda::ScopedDevice, device_context.h).
struct DeviceGuard : tessera::cuda::ScopedDevice<Error (*)(const std::string&)> {
  explicit DeviceGuard(int device)
      : ScopedDevice(device, [](const std::string& why) {
          return Error(TESSERA_STATUS_INTERNAL, CUDA_COMPILER ": " + why);
        }) {}
};

struct Fused {
  int device = 0;
  int32_t dtype = 0;
  int sm_count = 1;
  cf::FusedProgram program;
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
};

class Compiler final : public tessera::sdk::CompilerBase<Fused> {
 public:
  Compiler() : CompilerBase("cuda") {}

  // Consecutive nodes the plugin takes form a group while their outputs keep one type, up to
  // kMaxGroupNodes nodes: each node adds at most two inputs and one output, so a group always fits
  // the kernel's 16 inputs and 8 outputs and compile never refuses one the plugin took.
  static constexpr int32_t kMaxGroupNodes = cf::kMaxOutputs;
  void get_capability(const GraphView& g, const char* device, int32_t* out) override {
    int32_t group = -1, nodes = 0;
    std::string type;
    const bool mine = tessera::sdk::device_index_of(device, "cuda") >= 0;
    for (int32_t i = 0, n = g.node_count(); i < n; ++i) {
      out[i] = -1;
      if (!g.is_call(i)) continue;
      if (!mine || !fusable(g, i)) {
        type.clear();
        continue;
      }
      const std::string t = output_type(g, i);
      if (t != type || nodes == kMaxGroupNodes) {
        ++group;
        type = t;
        nodes = 0;
      }
      ++nodes;
      out[i] = group;
    }
  }

  std::unique_ptr<Fused> compile(const GraphView& g, const char* device) override {
    auto f = std::make_unique<Fused>();
    f->device = tessera::sdk::device_index_of(device, "cuda");
    const std::vector<int32_t> reg = g.value_registers();
    f->program.num_inputs = g.input_count();
    bool first = true;
    for (int32_t node = 0; node < g.node_count(); ++node) {
      if (!g.is_call(node)) continue;
      const std::optional<cf::FOp> op = fusable(g, node);
      if (!op)
        throw Error(TESSERA_STATUS_UNIMPLEMENTED,
                    CUDA_COMPILER ": cannot fuse " + std::string(g.target(node)));
      if (first) f->dtype = g.dtype(g.output(node));
      first = false;
      if (g.dtype(g.output(node)) != f->dtype)
        throw Error(TESSERA_STATUS_UNIMPLEMENTED, CUDA_COMPILER ": a partition of more than one dtype");
      if (reg.at(size_t(g.output(node))) != f->program.num_inputs + int32_t(f->program.steps.size()))
        throw Error(TESSERA_STATUS_INTERNAL, CUDA_COMPILER ": unexpected register numbering");
      cf::Step s;
      s.op = *op;
      const int32_t operands = cf::is_binary(*op) ? 2 : 1;
      for (int32_t k = 0; k < operands; ++k) {
        cf::Operand& o = k ? s.b : s.a;
        if (g.arg_kind(node, k) == TESSERA_ARG_TENSOR)
          o.reg = reg.at(size_t(g.arg_value(node, k)));
        else
          o.number = *g.arg_number(node, k);
      }
      if ((*op == cf::FOp::Add || *op == cf::FOp::Sub) && g.num_args(node) > 2)
        s.alpha = *g.arg_number(node, 2);
      if (*op == cf::FOp::PowScalar) s.b.number = *g.arg_number(node, 1);
      f->program.steps.push_back(s);
    }
    for (int32_t value : g.output_values()) f->program.output_regs.push_back(reg.at(size_t(value)));
    f->program.dtype = *fused_dtype(f->dtype);
    if (const std::string why = cf::check_program(f->program); !why.empty())
      throw Error(TESSERA_STATUS_UNIMPLEMENTED, CUDA_COMPILER ": " + why);

    const cf::NvrtcApi& nvrtc = cf::nvrtc_api();
    if (!nvrtc.loaded) throw Error(TESSERA_STATUS_UNAVAILABLE, CUDA_COMPILER ": " + nvrtc.error);
    DeviceGuard guard(f->device);
    const int arch = device_arch(f->device, &f->sm_count);
    const std::string source = cf::cuda_source(f->program);
    const std::string key = cf::hash_hex(source + '\0' + "sm_" + std::to_string(arch) + '\0' + "nvrtc " +
                                         std::to_string(nvrtc.major) + "." + std::to_string(nvrtc.minor) +
                                         '\0' + "tessera-cuda-fuser 1");
    auto make = [&](std::string* error) {
      const cf::Cubin c = cf::compile_cubin(nvrtc, source, arch);
      *error = c.error;
      g_compiles.fetch_add(1, std::memory_order_relaxed);
      return c.image;
    };
    std::string dir_error;
    cf::CacheLookup image;
    if (const std::optional<std::string> dir = cf::cache_directory(&dir_error)) {
      image = cf::cached_image(*dir, key, make);
    } else {
      static std::once_flag warned;
      std::call_once(warned, [&] {
        tessera::sdk::log(TESSERA_LOG_WARNING, "compile",
                          CUDA_COMPILER ": " + dir_error + "; kernels are not cached");
      });
      image.image = make(&image.error);
    }
    if (image.image.empty()) throw Error(TESSERA_STATUS_INTERNAL, CUDA_COMPILER ": " + image.error);
    if (image.hit) g_cache_hits.fetch_add(1, std::memory_order_relaxed);
    cudaError_t err =
        cudaLibraryLoadData(&f->library, image.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (err == cudaSuccess) err = cudaLibraryGetKernel(&f->kernel, f->library, "tessera_fused");
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw Error(TESSERA_STATUS_INTERNAL,
                  CUDA_COMPILER ": cannot load the compiled kernel: " + std::string(cudaGetErrorString(err)));
    }
    return f;
  }

  void run(Fused& f, TensorSpan inputs, TensorSpan outputs, void* stream) override {
    TESSERA_SDK_CHECK(
        inputs.size() == f.program.num_inputs && outputs.size() == int32_t(f.program.output_regs.size()),
        CUDA_COMPILER ": the partition was called with other inputs or outputs than compiled");
    const int64_t n = outputs[0].numel();
    outputs.require_dense(CUDA_COMPILER ": output", f.dtype, n, f.device);
    cf::TsArgs a{};
    const tessera::sdk::TensorView shape = outputs[0];
    a.n = n;
    a.rank = shape.ndim();
    TESSERA_SDK_CHECK(a.rank <= cf::kMaxRank, CUDA_COMPILER ": rank above 8");
    for (int32_t d = 0; d < shape.ndim(); ++d) a.sizes[d] = shape.size(d);
    for (int32_t k = 0; k < inputs.size(); ++k) {
      const tessera::sdk::TensorView in = inputs[k];
      TESSERA_SDK_CHECK(
          in.dtype() == f.dtype && in.device_type() == TESSERA_DEVICE_CUDA && in.device_index() == f.device &&
              in.ndim() <= shape.ndim(),
          CUDA_COMPILER ": input " + std::to_string(k) + " is not of the compiled dtype and device");
      bool same_shape = in.ndim() == shape.ndim();
      for (int32_t d = 0; d < shape.ndim(); ++d) {
        const int32_t di = d - (shape.ndim() - in.ndim());  // right-aligned
        const int64_t size = di >= 0 ? in.size(di) : 1;
        TESSERA_SDK_CHECK(size == shape.size(d) || size == 1,
                          CUDA_COMPILER ": input " + std::to_string(k) + " does not broadcast to the output");
        same_shape &= size == shape.size(d);
        a.strides[k][d] = di >= 0 && size == shape.size(d) && size != 1 ? in.stride(di) : 0;
      }
      a.contiguous[k] = same_shape && in.is_contiguous();
      a.in[k] = static_cast<const char*>(in.handle()) + in.byte_offset();
    }
    for (int32_t o = 0; o < outputs.size(); ++o)
      a.out[o] = static_cast<char*>(outputs[o].handle()) + outputs[o].byte_offset();
    if (n == 0) return;
    DeviceGuard guard(f.device);
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(f.sm_count) * 16);
    void* args[] = {&a};
    const cudaError_t err = cudaLaunchKernel(reinterpret_cast<const void*>(f.kernel), dim3(unsigned(blocks)),
                                             dim3(kThreads), args, 0, static_cast<cudaStream_t>(stream));
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw Error(TESSERA_STATUS_INTERNAL,
                  CUDA_COMPILER ": launch failed: " + std::string(cudaGetErrorString(err)));
    }
    g_launches.fetch_add(1, std::memory_order_relaxed);
  }

  void release(std::unique_ptr<Fused> f) noexcept override {
    if (f && f->library) cudaLibraryUnload(f->library);
  }

  // "tessera-cuda-fuser 1.0 sm_90": a kernel compiled for one architecture runs on that one.
  std::string compatibility_info(const char* device) override {
    const int index = tessera::sdk::device_index_of(device, "cuda");
    if (index < 0) return {};
    int sms = 0;
    return "tessera-cuda-fuser 1.0 sm_" + std::to_string(device_arch(index, &sms));
  }
} g_compiler;

void stats(void*, tessera_cuda_compiler_stats_t* out) {
  if (!out) return;
  out->launches = g_launches.load(std::memory_order_relaxed);
  out->compiles = g_compiles.load(std::memory_order_relaxed);
  out->cache_hits = g_cache_hits.load(std::memory_order_relaxed);
}

tessera_proc_t get_proc_address(void*, const char* name) {
  return tessera::sdk::find_extension(
      name, {tessera::sdk::compiler_extension<g_compiler>(),
             tessera::sdk::extension(TESSERA_EXT_CUDA_COMPILER_STATS,
                                     static_cast<tessera_ext_cuda_compiler_stats_fn_t>(&stats))});
}

const tessera_plugin_t plugin_header = tessera::sdk::plugin_header(CUDA_COMPILER, "0.1.0", &get_proc_address);

}  // namespace

TESSERA_PLUGIN_ENTRY(&plugin_header) {
  (void)host;
  tessera::sdk::require_graph_abi(CUDA_COMPILER);
}
