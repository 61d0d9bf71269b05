// See Note [Loading cuBLASLt] in cublaslt_loader.h.
#include "cublaslt_loader.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>

#include <mutex>
#include <vector>

#include "dl_open.h"

#ifndef TESSERA_CUDA_TOOLKIT_LIBDIR
#define TESSERA_CUDA_TOOLKIT_LIBDIR "/usr/local/cuda/lib64"
#endif

namespace tessera::cuda {
namespace {

CublasLtApi load() {
  CublasLtApi api;
  const std::string soname = "libcublasLt.so." + std::to_string(CUDART_VERSION / 1000);
  std::vector<std::string> candidates;
  if (const char* env = secure_getenv("TESSERA_CUDA_CUBLASLT"); env && *env) candidates.emplace_back(env);
  candidates.push_back(soname);
  candidates.emplace_back("libcublasLt.so");
  candidates.push_back(std::string(TESSERA_CUDA_TOOLKIT_LIBDIR) + "/" + soname);
  candidates.push_back("/usr/local/cuda/lib64/" + soname);
  std::string tried;
  void* lib = dlopen_first(candidates, &api.path, &tried);
  if (!lib) {
    api.error = "cuBLASLt not found (tried " + tried + "): install the CUDA Toolkit's libcublas or set "
                "TESSERA_CUDA_CUBLASLT to the library's path";
    return api;
  }
  std::string missing;
  bool ok = resolve_symbol(lib, "cublasLtCreate", &api.create, &missing);
  ok &= resolve_symbol(lib, "cublasLtDestroy", &api.destroy, &missing);
  ok &= resolve_symbol(lib, "cublasLtGetVersion", &api.get_version, &missing);
  ok &= resolve_symbol(lib, "cublasLtMatmulDescCreate", &api.matmul_desc_create, &missing);
  ok &= resolve_symbol(lib, "cublasLtMatmulDescDestroy", &api.matmul_desc_destroy, &missing);
  ok &= resolve_symbol(lib, "cublasLtMatmulDescSetAttribute", &api.matmul_desc_set_attribute, &missing);
  ok &= resolve_symbol(lib, "cublasLtMatrixLayoutCreate", &api.matrix_layout_create, &missing);
  ok &= resolve_symbol(lib, "cublasLtMatrixLayoutDestroy", &api.matrix_layout_destroy, &missing);
  ok &= resolve_symbol(lib, "cublasLtMatrixLayoutSetAttribute", &api.matrix_layout_set_attribute, &missing);
  ok &= resolve_symbol(lib, "cublasLtMatmulPreferenceCreate", &api.preference_create, &missing);
  ok &= resolve_symbol(lib, "cublasLtMatmulPreferenceDestroy", &api.preference_destroy, &missing);
  ok &= resolve_symbol(lib, "cublasLtMatmulPreferenceSetAttribute", &api.preference_set_attribute, &missing);
  ok &= resolve_symbol(lib, "cublasLtMatmulAlgoGetHeuristic", &api.algo_get_heuristic, &missing);
  ok &= resolve_symbol(lib, "cublasLtMatmul", &api.matmul, &missing);
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
