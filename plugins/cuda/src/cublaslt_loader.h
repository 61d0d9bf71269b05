// cuBLASLt, loaded with dlopen at first use. Note [Loading cuBLASLt]
// The plugin links the CUDA runtime statically and does NOT link libcublasLt: the library is opened
// the first time a matmul needs it, so the plugin loads (and reports its devices) on machines where
// cuBLAS is absent or not on the loader path; only matmul/linear then fall back to the CPU, with the
// reason logged once. Search order: $TESSERA_CUDA_CUBLASLT (a full path), the soname
// libcublasLt.so.<CUDA major> and libcublasLt.so through the normal loader path, then the
// toolkit's library folder known at build time and /usr/local/cuda/lib64.
#pragma once
#include <cublasLt.h>

#include <string>

namespace tessera::cuda {

struct CublasLtApi {
  bool loaded = false;
  std::string path;   // the file that was opened
  std::string error;  // why loading failed (every place tried)
  size_t version = 0;

  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtGetVersion) get_version = nullptr;
  decltype(&cublasLtMatmulDescCreate) matmul_desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) matmul_desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) matrix_layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) matrix_layout_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) matrix_layout_set_attribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

// Loads once (thread-safe) and returns the table; `loaded` says whether it can be used. The
// library stays open for the life of the process.
const CublasLtApi& cublaslt_api();

}  // namespace tessera::cuda
