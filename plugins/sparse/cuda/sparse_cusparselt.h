// The cuSPARSELt path of semi-structured linear on cuda (Note [2:4 on cuSPARSELt] in
// cusparselt_plan.h): per-device handles, the compressed-weight and plan caches, one call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "mma_layout.h"

namespace tessera::sparse_cuda {

struct LtCall {
  int device = 0;  // the current CUDA device
  cudaStream_t stream = nullptr;
  int32_t dtype = 0;             // tessera_dtype_t: float16 or bfloat16
  const void* layout = nullptr;  // the weight's mma.sp layout on the device
  uint64_t version = 0;          // its storage version (0: unknown, not cached)
  int64_t rows = 0, cols = 0;    // the weight
  int64_t batch = 0;             // n
  const void* x = nullptr;       // linear: x (batch, cols) row-major; matmul: x (cols, batch) row-major
  const void* bias = nullptr;    // (rows) or null
  void* y = nullptr;             // linear: y (batch, rows) row-major; matmul: y (rows, batch) row-major
  bool matmul_layout = false;
};

// Runs the call; empty on success, else why cuSPARSELt could not (nothing was written to y; the
// caller runs another path). Refusals of a shape by the library are remembered.
std::string cusparselt_run(const LtCall& call);

struct LtStats {
  uint64_t matmuls = 0;       // cusparseLtMatmul calls that were enqueued
  uint64_t compressions = 0;  // weights compressed
  uint64_t cached_weights = 0;
};
LtStats cusparselt_stats();

}  // namespace tessera::sparse_cuda
