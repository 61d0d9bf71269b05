// index_select, embedding and gather: each output element copies the bits of the source element its index
// names (index_math.h has the offsets); scatter the other way round. Indices out of range write zeros and are reported through
// an error slot the host reads after the launch (ops.cpp, Note [Index errors on the GPU]).
#include "cuda_common.cuh"
#include "index_math.h"

namespace tessera::cuda {
namespace {

__device__ __forceinline__ int64_t load_index(const void* p, int32_t dtype, int64_t i) {
  return dtype == kDtI32 ? int64_t(static_cast<const int32_t*>(p)[i]) : static_cast<const int64_t*>(p)[i];
}

template <typename U>
__global__ void index_select_kernel(IndexSelectParams p) {
  const int64_t grid = int64_t(gridDim.x) * blockDim.x;
  U* out = static_cast<U*>(p.out);
  const U* src = static_cast<const U*>(p.src);
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < p.numel; o += grid) {
    const IndexedElement e = indexed_element(p, o);
    const int64_t raw = load_index(p.index, p.index_dtype, e.index_offset);
    int64_t i = 0;
    if (wrap_index(raw, p.src_dim_size, &i)) {
      out[e.out_offset] = src[e.src_partial + i * p.src_strides[p.dim]];
    } else {
      out[e.out_offset] = U(0);
      p.error[1] = raw;  // any one of the bad indices
      p.error[0] = 1;
    }
  }
}

template <typename U>
__global__ void scatter_kernel(ScatterParams s) {
  const IndexSelectParams& p = s.geometry;
  const int64_t grid = int64_t(gridDim.x) * blockDim.x;
  U* out = static_cast<U*>(s.out);
  const U* values = static_cast<const U*>(s.values);
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < p.numel; o += grid) {
    const IndexedElement e = indexed_element(p, o);
    const int64_t raw = load_index(p.index, p.index_dtype, e.index_offset);
    int64_t i = 0;
    if (wrap_index(raw, p.src_dim_size, &i)) {
      out[e.src_partial + i * p.src_strides[p.dim]] = values[e.out_offset];
    } else {
      p.error[1] = raw;
      p.error[0] = 1;
    }
  }
}

}  // namespace

cudaError_t launch_scatter(const ScatterParams& s, cudaStream_t stream) {
  const IndexSelectParams& p = s.geometry;
  if (cudaError_t err = cudaMemsetAsync(p.error, 0, 2 * sizeof(int64_t), stream); err != cudaSuccess) return err;
  if (p.numel == 0) return cudaSuccess;
  const unsigned grid = grid_for(p.numel);
  switch (p.itemsize) {
    case 1: scatter_kernel<uint8_t><<<grid, kThreads, 0, stream>>>(s); break;
    case 2: scatter_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(s); break;
    case 4: scatter_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(s); break;
    case 8: scatter_kernel<uint64_t><<<grid, kThreads, 0, stream>>>(s); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_index_select(const IndexSelectParams& p, cudaStream_t stream) {
  if (cudaError_t err = cudaMemsetAsync(p.error, 0, 2 * sizeof(int64_t), stream); err != cudaSuccess) return err;
  if (p.numel == 0) return cudaSuccess;
  const unsigned grid = grid_for(p.numel);
  switch (p.itemsize) {
    case 1: index_select_kernel<uint8_t><<<grid, kThreads, 0, stream>>>(p); break;
    case 2: index_select_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(p); break;
    case 4: index_select_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(p); break;
    case 8: index_select_kernel<uint64_t><<<grid, kThreads, 0, stream>>>(p); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tessera::cuda
