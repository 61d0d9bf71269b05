// See Note [Loading cuBLASLt] in cublaslt_loader.h.
#include "cublaslt_loader.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <mutex>
#include <vector>

#ifndef TESSERA_CUDA_TOOLKIT_LIBDIR
#define TESSERA_CUDA_TOOLKIT_LIBDIR "/usr/local/cuda/lib64"
#endif

namespace tessera::cuda {
namespace {

template <typename Fn>
bool resolve(void* lib, const char* name, Fn* out, std::string* error) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!*out) {
    *error += std::string("symbol ") + name + " missing; ";
    return false;
  }
  return true;
}

CublasLtApi load() {
  CublasLtApi api;
  const std::string soname = "libcublasLt.so." + std::to_string(CUDART_VERSION / 1000);
  std::vector<std::string> candidates;
  if (const char* env = secure_getenv("TESSERA_CUDA_CUBLASLT"); env && *env) candidates.emplace_back(env);
  candidates.push_back(soname);
  candidates.emplace_back("libcublasLt.so");
  candidates.push_back(std::string(TESSERA_CUDA_TOOLKIT_LIBDIR) + "/" + soname);
  candidates.push_back("/usr/local/cuda/lib64/" + soname);
  void* lib = nullptr;
  for (const std::string& c : candidates) {
    lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      api.path = c;
      break;
    }
    const char* why = dlerror();
    api.error += c + ": " + (why ? why : "not found") + "; ";
  }
  if (!lib) {
    api.error = "cuBLASLt not found (tried " + api.error + "): install the CUDA Toolkit's libcublas or set "
                "TESSERA_CUDA_CUBLASLT to the library's path";
    return api;
  }
  std::string missing;
  bool ok = resolve(lib, "cublasLtCreate", &api.create, &missing);
  ok &= resolve(lib, "cublasLtDestroy", &api.destroy, &missing);
  ok &= resolve(lib, "cublasLtGetVersion", &api.get_version, &missing);
  ok &= resolve(lib, "cublasLtMatmulDescCreate", &api.matmul_desc_create, &missing);
  ok &= resolve(lib, "cublasLtMatmulDescDestroy", &api.matmul_desc_destroy, &missing);
  ok &= resolve(lib, "cublasLtMatmulDescSetAttribute", &api.matmul_desc_set_attribute, &missing);
  ok &= resolve(lib, "cublasLtMatrixLayoutCreate", &api.matrix_layout_create, &missing);
  ok &= resolve(lib, "cublasLtMatrixLayoutDestroy", &api.matrix_layout_destroy, &missing);
  ok &= resolve(lib, "cublasLtMatrixLayoutSetAttribute", &api.matrix_layout_set_attribute, &missing);
  ok &= resolve(lib, "cublasLtMatmulPreferenceCreate", &api.preference_create, &missing);
  ok &= resolve(lib, "cublasLtMatmulPreferenceDestroy", &api.preference_destroy, &missing);
  ok &= resolve(lib, "cublasLtMatmulPreferenceSetAttribute", &api.preference_set_attribute, &missing);
  ok &= resolve(lib, "cublasLtMatmulAlgoGetHeuristic", &api.algo_get_heuristic, &missing);
  ok &= resolve(lib, "cublasLtMatmul", &api.matmul, &missing);
  if (!ok) {
    api.error = api.path + " is not a usable cuBLASLt: " + missing;
    dlclose(lib);
    return api;
  }
  api.version = api.get_version();
  api.error.clear();
  api.loaded = true;
  return api;
}

}  // namespace

const CublasLtApi& cublaslt_api() {
  static const CublasLtApi api = load();
  return api;
}

}  // namespace tessera::cuda
