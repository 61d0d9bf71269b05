// See Note [Loading cuSPARSELt] in cusparselt_loader.h.
#include "cusparselt_loader.h"

#include <stdlib.h>

#include "dl_open.h"

namespace tessera::sparse_cuda {

std::string CusparseLtApi::describe() const {
  if (!loaded) return error;
  return "cuSPARSELt " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch) +
         " (" + path + ")";
}

CusparseLtApi load_cusparselt_from(const std::vector<std::string>& candidates) {
  CusparseLtApi api;
  std::string tried;
  void* lib = tessera::cuda::dlopen_first(candidates, &api.path, &tried);
  if (!lib) {
    api.error = "cuSPARSELt not found (tried " + tried +
                "): install it (pip's nvidia-cusparselt-cu13) and set TESSERA_CUDA_CUSPARSELT to "
                "libcusparseLt.so.0's path, or put its folder on LD_LIBRARY_PATH";
    return api;
  }
  using tessera::cuda::resolve_symbol;
  std::string missing;
  bool ok = resolve_symbol(lib, "cusparseLtInit", &api.init, &missing);
  ok &= resolve_symbol(lib, "cusparseLtDestroy", &api.destroy, &missing);
  ok &= resolve_symbol(lib, "cusparseLtGetProperty", &api.get_property, &missing);
  ok &= resolve_symbol(lib, "cusparseLtGetErrorString", &api.get_error_string, &missing);
  ok &= resolve_symbol(lib, "cusparseLtDenseDescriptorInit", &api.dense_descriptor_init, &missing);
  ok &= resolve_symbol(lib, "cusparseLtStructuredDescriptorInit", &api.structured_descriptor_init, &missing);
  ok &= resolve_symbol(lib, "cusparseLtMatDescriptorDestroy", &api.mat_descriptor_destroy, &missing);
  ok &= resolve_symbol(lib, "cusparseLtMatmulDescriptorInit", &api.matmul_descriptor_init, &missing);
  ok &= resolve_symbol(lib, "cusparseLtMatmulDescSetAttribute", &api.matmul_desc_set_attribute, &missing);
  ok &= resolve_symbol(lib, "cusparseLtMatmulAlgSelectionInit", &api.alg_selection_init, &missing);
  ok &= resolve_symbol(lib, "cusparseLtMatmulAlgSelectionDestroy", &api.alg_selection_destroy, &missing);
  ok &= resolve_symbol(lib, "cusparseLtMatmulPlanInit", &api.plan_init, &missing);
  ok &= resolve_symbol(lib, "cusparseLtMatmulPlanDestroy", &api.plan_destroy, &missing);
  ok &= resolve_symbol(lib, "cusparseLtMatmulGetWorkspace", &api.get_workspace, &missing);
  ok &= resolve_symbol(lib, "cusparseLtMatmul", &api.matmul, &missing);
  ok &= resolve_symbol(lib, "cusparseLtSpMMACompressedSize2", &api.compressed_size2, &missing);
  ok &= resolve_symbol(lib, "cusparseLtSpMMACompress2", &api.compress2, &missing);
  if (!ok) {
    api.error = api.path + " is not a usable cuSPARSELt (0.6 or newer is needed): " + missing;
    dlclose(lib);
    return api;
  }
  if (api.get_property(MAJOR_VERSION, &api.major) != CUSPARSE_STATUS_SUCCESS ||
      api.get_property(MINOR_VERSION, &api.minor) != CUSPARSE_STATUS_SUCCESS ||
      api.get_property(PATCH_LEVEL, &api.patch) != CUSPARSE_STATUS_SUCCESS) {
    api.error = api.path + " does not report its version";
    dlclose(lib);
    return api;
  }
  if (api.major == 0 && api.minor < 6) {
    api.error = api.path + " is cuSPARSELt " + std::to_string(api.major) + "." + std::to_string(api.minor) +
                "; 0.6 or newer is needed";
    dlclose(lib);
    return api;
  }
  api.loaded = true;
  return api;
}

const CusparseLtApi& cusparselt_api() {
  static const CusparseLtApi api = [] {
    std::vector<std::string> candidates;
    if (const char* env = secure_getenv("TESSERA_CUDA_CUSPARSELT"); env && *env) candidates.emplace_back(env);
    candidates.emplace_back("libcusparseLt.so.0");
    candidates.emplace_back("libcusparseLt.so");
    return load_cusparselt_from(candidates);
  }();
  return api;
}

}  // namespace tessera::sparse_cuda
