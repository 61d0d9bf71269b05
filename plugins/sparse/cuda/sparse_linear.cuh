// 2:4 semi-structured linear on CUDA over the canonical form (Note [2:4 canonical form] in
// tessera/semi_structured.h). Built only when nvcc is found (plugins/sparse/cuda/CMakeLists.txt).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mma_layout.h"

namespace tessera::sparse_cuda {

enum class DType { F32, F16, BF16 };

// Where x and y elements lie, in elements: x(n, k) at x[n * x_n + k * x_k], y(n, r) at
// y[n * y_n + r * y_r] (n a batch row, k a column of W, r a row of W). Null means row-major
// contiguous: x_n = cols, x_k = 1, y_n = rows, y_r = 1. matmul(W, x) passes x (cols, p) and y
// (rows, p) as x_n = 1, x_k = p, y_n = 1, y_r = p.
struct Strides {
  int64_t x_n, x_k, y_n, y_r;
};

// y (batch, rows) = x (batch, cols) * W^T (+ bias (rows)), all device pointers, row-major
// contiguous, of `dtype`. `values` and `indices` are the canonical parts of W (groups =
// ceil(cols / 4)). Accumulates in f32. Asynchronous on `stream`; returns the launch status.
cudaError_t linear(DType dtype, const void* values, const uint8_t* indices, int64_t rows, int64_t cols,
                   const void* x, int64_t batch, const void* bias, void* y, cudaStream_t stream,
                   const Strides* strides = nullptr);

// The same for f16 / bf16 on the tensor cores (mma.sp m16n8k32, sm_80 and later), over the layout
// of Note [CUDA mma.sp layout]: `layout` is the device copy of the block build_mma_layout made
// (`plan` its header, read on the host), x, bias and y device pointers as above. Any batch, rows
// and cols: the tails are guarded inside. Returns cudaErrorInvalidValue for F32 (use linear).
cudaError_t linear_mma(DType dtype, const void* layout, const MmaLayout& plan, const void* x, int64_t batch,
                       const void* bias, void* y, cudaStream_t stream, const Strides* strides = nullptr);

// Writes the dense pruned weight (plan.rows, plan.cols) row-major into `dense` (a device buffer of
// rows * cols 16-bit elements) from the device copy of an f16/bf16 mma.sp layout: zeros, then
// each kept value where mma_slot_position puts it. The input cuSPARSELt compresses (Note [2:4 on
// cuSPARSELt]). Asynchronous on `stream`; returns the launch status.
cudaError_t expand_mma_layout(const void* layout, const MmaLayout& plan, void* dense, cudaStream_t stream);

}  // namespace tessera::sparse_cuda
