// 2:4 semi-structured linear on CUDA over the canonical form (Note [2:4 canonical form] in
// tessera/semi_structured.h). Built only when nvcc is found (plugins/sparse/cuda/CMakeLists.txt).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mma_layout.h"

namespace tessera::sparse_cuda {

enum class DType { F32, F16, BF16 };

// y (batch, rows) = x (batch, cols) * W^T (+ bias (rows)), all device pointers, row-major
// contiguous, of `dtype`. `values` and `indices` are the canonical parts of W (groups =
// ceil(cols / 4)). Accumulates in f32. Asynchronous on `stream`; returns the launch status.
cudaError_t linear(DType dtype, const void* values, const uint8_t* indices, int64_t rows, int64_t cols,
                   const void* x, int64_t batch, const void* bias, void* y, cudaStream_t stream);

// The same for f16 / bf16 on the tensor cores (mma.sp m16n8k32, sm_80 and later), over the layout
// of Note [CUDA mma.sp layout]: `layout` is the device copy of the block build_mma_layout made
// (`plan` its header, read on the host), x, bias and y device pointers as above. Any batch, rows
// and cols: the tails are guarded inside. Returns cudaErrorInvalidValue for F32 (use linear).
cudaError_t linear_mma(DType dtype, const void* layout, const MmaLayout& plan, const void* x, int64_t batch,
                       const void* bias, void* y, cudaStream_t stream);

}  // namespace tessera::sparse_cuda
