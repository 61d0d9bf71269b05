// See Note [Loading NVRTC] in nvrtc_loader.h.
#include "nvrtc_loader.h"

#include <stdlib.h>

#include "dl_open.h"

#ifndef TESSERA_CUDA_TOOLKIT_LIBDIR
#define TESSERA_CUDA_TOOLKIT_LIBDIR "/usr/local/cuda/lib64"
#endif
#ifndef TESSERA_CUDA_NVRTC_SONAME
#define TESSERA_CUDA_NVRTC_SONAME "libnvrtc.so.13"
#endif

namespace tessera::cuda_fuser {

NvrtcApi load_nvrtc_from(const std::vector<std::string>& candidates) {
  NvrtcApi api;
  std::string tried;
  void* lib = tessera::cuda::dlopen_first(candidates, &api.path, &tried);
  if (!lib) {
    api.error = "NVRTC not found (tried " + tried +
                "): install the CUDA Toolkit's NVRTC or set TESSERA_CUDA_NVRTC to libnvrtc.so's path";
    return api;
  }
  using tessera::cuda::resolve_symbol;
  std::string missing;
  bool ok = resolve_symbol(lib, "nvrtcVersion", &api.version, &missing);
  ok &= resolve_symbol(lib, "nvrtcGetErrorString", &api.get_error_string, &missing);
  ok &= resolve_symbol(lib, "nvrtcCreateProgram", &api.create_program, &missing);
  ok &= resolve_symbol(lib, "nvrtcDestroyProgram", &api.destroy_program, &missing);
  ok &= resolve_symbol(lib, "nvrtcCompileProgram", &api.compile_program, &missing);
  ok &= resolve_symbol(lib, "nvrtcGetProgramLogSize", &api.get_log_size, &missing);
  ok &= resolve_symbol(lib, "nvrtcGetProgramLog", &api.get_log, &missing);
  ok &= resolve_symbol(lib, "nvrtcGetCUBINSize", &api.get_cubin_size, &missing);
  ok &= resolve_symbol(lib, "nvrtcGetCUBIN", &api.get_cubin, &missing);
  if (!ok || api.version(&api.major, &api.minor) != NVRTC_SUCCESS) {
    api.error = api.path + " is not a usable NVRTC: " + (missing.empty() ? "nvrtcVersion failed" : missing);
    dlclose(lib);
    return api;
  }
  api.loaded = true;
  return api;
}

const NvrtcApi& nvrtc_api() {
  static const NvrtcApi api = [] {
    std::vector<std::string> candidates;
    if (const char* env = secure_getenv("TESSERA_CUDA_NVRTC"); env && *env) candidates.emplace_back(env);
    candidates.emplace_back(TESSERA_CUDA_NVRTC_SONAME);
    candidates.emplace_back("libnvrtc.so");
    candidates.emplace_back(std::string(TESSERA_CUDA_TOOLKIT_LIBDIR) + "/" + TESSERA_CUDA_NVRTC_SONAME);
    candidates.emplace_back(std::string("/usr/local/cuda/lib64/") + TESSERA_CUDA_NVRTC_SONAME);
    return load_nvrtc_from(candidates);
  }();
  return api;
}

Cubin compile_cubin(const NvrtcApi& api, const std::string& source, int arch) {
  Cubin out;
  if (!api.loaded) {
    out.error = api.error;
    return out;
  }
  nvrtcProgram prog = nullptr;
  nvrtcResult r = api.create_program(&prog, source.c_str(), "tessera_fused.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) {
    out.error = std::string("nvrtcCreateProgram: ") + api.get_error_string(r);
    return out;
  }
  const std::string arch_option = "--gpu-architecture=sm_" + std::to_string(arch);
  const char* options[] = {arch_option.c_str(), "--std=c++17"};
  r = api.compile_program(prog, 2, options);
  size_t log_size = 0;
  std::string log;
  if (api.get_log_size(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    if (api.get_log(prog, log.data()) != NVRTC_SUCCESS) log.clear();
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  }
  if (r != NVRTC_SUCCESS) {
    out.error = std::string("NVRTC failed for sm_") + std::to_string(arch) + " (" + api.get_error_string(r) +
                "):\n" + log;
  } else {
    size_t size = 0;
    if (api.get_cubin_size(prog, &size) == NVRTC_SUCCESS && size > 0) {
      out.image.resize(size);
      if (api.get_cubin(prog, out.image.data()) != NVRTC_SUCCESS) out.image.clear();
    }
    if (out.image.empty()) out.error = "NVRTC produced no cubin for sm_" + std::to_string(arch);
  }
  api.destroy_program(&prog);
  return out;
}

}  // namespace tessera::cuda_fuser
