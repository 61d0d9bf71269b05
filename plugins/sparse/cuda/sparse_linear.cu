// One warp per output row: lanes walk the row's groups (two kept values and a nibble of indices
// each), gather the matching x elements of up to kBatch batch rows and accumulate in f32; a warp
// shuffle reduction finishes each dot product. CUDA cores only: the tensor-core path (mma.sp or
// cuSPARSELt) is not written yet (docs/sparsity.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sparse_linear.cuh"

namespace tessera::sparse_cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kBatch = 8;

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ inline float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ inline void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <typename T>
__global__ void linear_kernel(const T* values, const uint8_t* indices, int64_t rows, int64_t cols, const T* x,
                              int64_t batch, const T* bias, T* y) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t groups = (cols + 3) / 4, index_row = (groups + 1) / 2;
  const T* v = values + row * 2 * groups;
  const uint8_t* idx = indices + row * index_row;
  for (int64_t b0 = 0; b0 < batch; b0 += kBatch) {
    const int nb = batch - b0 < kBatch ? int(batch - b0) : kBatch;
    float acc[kBatch] = {};
    for (int64_t g = lane; g < groups; g += 32) {
      const unsigned nibble = (idx[g / 2] >> (4 * (g % 2))) & 0xfu;
      const int64_t c0 = 4 * g + (nibble & 3u), c1 = 4 * g + ((nibble >> 2) & 3u);
      const float w0 = load(v, 2 * g), w1 = load(v, 2 * g + 1);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (b >= nb) break;
        const T* xb = x + (b0 + b) * cols;
        if (c0 < cols) acc[b] += w0 * load(xb, c0);
        if (c1 < cols) acc[b] += w1 * load(xb, c1);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      float s = acc[b];
      for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
      if (lane == 0 && b < nb) store(y, (b0 + b) * rows + row, s + (bias ? load(bias, row) : 0.f));
    }
  }
}

template <typename T>
cudaError_t launch(const void* values, const uint8_t* indices, int64_t rows, int64_t cols, const void* x,
                   int64_t batch, const void* bias, void* y, cudaStream_t stream) {
  if (rows == 0 || batch == 0) return cudaSuccess;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  linear_kernel<T><<<unsigned(blocks), 32 * kWarpsPerBlock, 0, stream>>>(
      static_cast<const T*>(values), indices, rows, cols, static_cast<const T*>(x), batch,
      static_cast<const T*>(bias), static_cast<T*>(y));
  return cudaGetLastError();
}

}  // namespace

cudaError_t linear(DType dtype, const void* values, const uint8_t* indices, int64_t rows, int64_t cols,
                   const void* x, int64_t batch, const void* bias, void* y, cudaStream_t stream) {
  switch (dtype) {
    case DType::F32: return launch<float>(values, indices, rows, cols, x, batch, bias, y, stream);
    case DType::F16: return launch<__half>(values, indices, rows, cols, x, batch, bias, y, stream);
    case DType::BF16: return launch<__nv_bfloat16>(values, indices, rows, cols, x, batch, bias, y, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tessera::sparse_cuda
