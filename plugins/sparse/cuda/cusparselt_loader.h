// cuSPARSELt, loaded with dlopen at first use. Note [Loading cuSPARSELt]
// The sparse_cuda plugin does not link cuSPARSELt (a 230 MB library that pip's nvidia-cusparselt-cu13
// ships, not the CUDA Toolkit): the first semi-structured linear that would take the cuSPARSELt path
// opens it, so the plugin loads and its own kernels run where the library is absent; the reason is
// logged once under TESSERA_LOG=sparse and reported by the plugin's status extension. Search order:
// $TESSERA_CUDA_CUSPARSELT (a full path), libcusparseLt.so.0 and libcusparseLt.so through the
// normal loader path. A library older than 0.6 (no descriptor-based Compress2) is refused. The GPU
// checks point TESSERA_CUDA_CUSPARSELT at PyTorch's copy (nvidia-cusparselt).
#pragma once

#include <string>
#include <vector>

#include "cusparselt_api.h"

namespace tessera::sparse_cuda {

struct CusparseLtApi {
  bool loaded = false;
  std::string path;   // the file that was opened
  std::string error;  // why loading failed (every place tried)
  int major = 0, minor = 0, patch = 0;

  lt::InitFn init = nullptr;
  lt::DestroyFn destroy = nullptr;
  lt::GetPropertyFn get_property = nullptr;
  lt::GetErrorStringFn get_error_string = nullptr;
  lt::DenseDescriptorInitFn dense_descriptor_init = nullptr;
  lt::StructuredDescriptorInitFn structured_descriptor_init = nullptr;
  lt::MatDescriptorDestroyFn mat_descriptor_destroy = nullptr;
  lt::MatmulDescriptorInitFn matmul_descriptor_init = nullptr;
  lt::MatmulDescSetAttributeFn matmul_desc_set_attribute = nullptr;
  lt::MatmulAlgSelectionInitFn alg_selection_init = nullptr;
  lt::MatmulAlgSelectionDestroyFn alg_selection_destroy = nullptr;
  lt::MatmulPlanInitFn plan_init = nullptr;
  lt::MatmulPlanDestroyFn plan_destroy = nullptr;
  lt::MatmulGetWorkspaceFn get_workspace = nullptr;
  lt::MatmulFn matmul = nullptr;
  lt::CompressedSize2Fn compressed_size2 = nullptr;
  lt::Compress2Fn compress2 = nullptr;

  // "cuSPARSELt 0.8.1 (path)" when loaded, else the error.
  std::string describe() const;
};

// Opens the first of `candidates` that dlopen accepts and resolves the entry points; `loaded`
// false with `error` saying what was tried and how to fix it otherwise. Each call opens afresh
// (for tests); the plugin uses cusparselt_api().
CusparseLtApi load_cusparselt_from(const std::vector<std::string>& candidates);

// Loads once (thread-safe) from the search order of Note [Loading cuSPARSELt]; the library stays
// open for the life of the process.
const CusparseLtApi& cusparselt_api();

}  // namespace tessera::sparse_cuda
