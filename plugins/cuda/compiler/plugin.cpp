// tessera_cuda_compiler: a plugin of kind "compiler" for the device type cuda (Note [Compiler plugin
// ABI]). It takes chains of elementwise ops (Note [Fused CUDA kernels]) and last-dim reductions with
// the steps around them (Note [Fused row reductions]; lowering.h says which nodes) and makes each
// ONE kernel: the source is generated, compiled by NVRTC for the device's architecture (Note
// [Loading NVRTC]), kept in a disk cache (cubin_cache.h), loaded with cudaLibraryLoadData and
// launched on the stream the runtime passes. Matmul, attention and every other node stay with the
// dispatcher (cuBLASLt, the CUDA plugin's kernels). The CUDA runtime is linked statically, like plugins/cuda:
// the plugin loads on machines without a driver and takes no partition there (no cuda inputs).
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <tessera/sdk.hpp>

#include "cubin_cache.h"
#include "cuda_compiler_ext.h"
#include "device_context.h"
#include "fused_program.h"
#include "lowering.h"
#include "nvrtc_loader.h"

#define CUDA_COMPILER "tessera_cuda_compiler"

namespace {

namespace cf = tessera::cuda_fuser;
using tessera::sdk::Error;
using tessera::sdk::GraphView;
using tessera::sdk::TensorSpan;

std::atomic<uint64_t> g_launches{0}, g_compiles{0}, g_cache_hits{0};

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

  void get_capability(const GraphView& g, const char* device, int32_t* out) override {
    const bool mine = tessera::sdk::device_index_of(device, "cuda") >= 0;
    const std::vector<int32_t> groups =
        mine ? cf::plan_groups(g) : std::vector<int32_t>(size_t(g.node_count()), -1);
    for (int32_t i = 0, n = g.node_count(); i < n; ++i) out[i] = groups[size_t(i)];
  }

  std::unique_ptr<Fused> compile(const GraphView& g, const char* device) override {
    auto f = std::make_unique<Fused>();
    f->device = tessera::sdk::device_index_of(device, "cuda");
    f->program = cf::lower(g);
    f->dtype = int32_t(f->program.dtype);  // FDType spells tessera_dtype_t's codes
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
    // plan_launch checks the counts, the shapes and the sizes against the program (fill_args).
    std::vector<cf::ArgTensor> ins, outs;
    auto arg = [&](const tessera::sdk::TensorView& t, const std::string& what) {
      TESSERA_SDK_CHECK(
          t.dtype() == f.dtype && t.device_type() == TESSERA_DEVICE_CUDA && t.device_index() == f.device,
          CUDA_COMPILER ": " + what + " is not of the compiled dtype and device");
      cf::ArgTensor a;
      a.data = static_cast<const char*>(t.handle()) + t.byte_offset();
      for (int32_t d = 0; d < t.ndim(); ++d) {
        a.sizes.push_back(t.size(d));
        a.strides.push_back(t.stride(d));
      }
      return a;
    };
    for (int32_t k = 0; k < inputs.size(); ++k) ins.push_back(arg(inputs[k], "input " + std::to_string(k)));
    for (int32_t o = 0; o < outputs.size(); ++o) {
      // Outputs differ in size in a row program (a row value, an element): each is checked alone.
      TESSERA_SDK_CHECK(outputs[o].is_contiguous(), CUDA_COMPILER ": output " + std::to_string(o) + " is not contiguous");
      outs.push_back(arg(outputs[o], "output " + std::to_string(o)));
    }
    cf::LaunchPlan plan;
    try {
      plan = cf::plan_launch(f.program, ins, outs, f.sm_count);
    } catch (const std::invalid_argument& e) {
      throw Error(TESSERA_STATUS_INVALID_ARGUMENT, CUDA_COMPILER ": " + std::string(e.what()));
    }
    if (plan.blocks == 0) return;
    DeviceGuard guard(f.device);
    void* args[] = {&plan.args};
    const cudaError_t err =
        cudaLaunchKernel(reinterpret_cast<const void*>(f.kernel), dim3(unsigned(plan.blocks)),
                         dim3(unsigned(plan.threads)), args, 0, static_cast<cudaStream_t>(stream));
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

tessera_status_t source(void*, const tessera_graph_t* partition, int32_t host, char* buffer, size_t capacity,
                        size_t* length) {
  return tessera::sdk::status_of([&] {
    TESSERA_SDK_CHECK(partition && length, CUDA_COMPILER ": source needs a graph and a length to write");
    const cf::FusedProgram p = cf::lower(GraphView(partition));
    const std::string text = host ? cf::host_source(p) : cf::cuda_source(p);
    *length = text.size();
    if (buffer && capacity) std::memcpy(buffer, text.data(), std::min(capacity, text.size()));
  });
}

tessera_proc_t get_proc_address(void*, const char* name) {
  return tessera::sdk::find_extension(
      name, {tessera::sdk::compiler_extension<g_compiler>(),
             tessera::sdk::extension(TESSERA_EXT_CUDA_COMPILER_STATS,
                                     static_cast<tessera_ext_cuda_compiler_stats_fn_t>(&stats)),
             tessera::sdk::extension(TESSERA_EXT_CUDA_COMPILER_SOURCE,
                                     static_cast<tessera_ext_cuda_compiler_source_fn_t>(&source))});
}

const tessera_plugin_t plugin_header = tessera::sdk::plugin_header(CUDA_COMPILER, "0.1.0", &get_proc_address);

}  // namespace

TESSERA_PLUGIN_ENTRY(&plugin_header) {
  (void)host;
  tessera::sdk::require_graph_abi(CUDA_COMPILER);
}
