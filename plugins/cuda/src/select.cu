// topk (a bitonic sort of order keys per row, topk_plan.h), the 1-D passes of _resize
// (tessera/resize_taps.h) and fake_quantize (tessera/fake_quantize.h).
#include "cuda_common.cuh"
#include "tessera/fake_quantize.h"
#include "topk_plan.h"

namespace tessera::cuda {
namespace {

// ---------------------------------------------------------------- topk

template <typename T>
__device__ __forceinline__ uint64_t order_key(T v) {
  if constexpr (std::is_same_v<T, double>)
    return topk_key_f64(v);
  else if constexpr (std::is_same_v<T, float>)
    return topk_key_f32(v);
  else if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>)
    return topk_key_f32(to_float(v));
  else if constexpr (std::is_signed_v<T>)
    return topk_key_signed(int64_t(v));
  else
    return topk_key_unsigned(uint64_t(v));
}

template <typename T>
__global__ void topk_keys_kernel(TopkParams p) {
  const T* in = static_cast<const T*>(p.in);
  const int64_t total = p.outer * p.inner * p.padded, grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += grid) {
    const int64_t row = e / p.padded, j = e % p.padded;
    const int64_t o = row / p.inner, i = row % p.inner;
    p.keys[e] = j < p.n ? topk_sort_key(order_key(in[(o * p.n + j) * p.inner + i]), p.largest) : kTopkPadKey;
    p.idx[e] = j;
  }
}

// TileSort (size == 0: every stage up to the tile) or TileMerge(size): a block per tile, in shared
// memory, one barrier per stride (bitonic_tile_stage is the work of pair p).
__global__ void bitonic_tile_kernel(uint64_t* keys, int64_t* idx, int64_t tiles, int64_t padded, int64_t tile,
                                    int64_t size) {
  extern __shared__ unsigned char smem[];
  uint64_t* sk = reinterpret_cast<uint64_t*>(smem);
  int64_t* si = reinterpret_cast<int64_t*>(sk + tile);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t first = t * tile, base = first % padded;
    for (int64_t q = threadIdx.x; q < tile; q += blockDim.x) {
      sk[q] = keys[first + q];
      si[q] = idx[first + q];
    }
    __syncthreads();
    const int64_t from = size == 0 ? 2 : size, to = size == 0 ? tile : size;
    for (int64_t s = from; s <= to; s *= 2)
      for (int64_t j = (size == 0 ? s : tile) / 2; j >= 1; j /= 2) {
        for (int64_t p = threadIdx.x; p < tile / 2; p += blockDim.x)
          bitonic_tile_stage(sk, si, base, tile, s, j, p);
        __syncthreads();
      }
    for (int64_t q = threadIdx.x; q < tile; q += blockDim.x) {
      keys[first + q] = sk[q];
      idx[first + q] = si[q];
    }
    __syncthreads();
  }
}

__global__ void bitonic_global_kernel(uint64_t* keys, int64_t* idx, int64_t rows, int64_t padded,
                                      int64_t size, int64_t stride) {
  const int64_t half = padded / 2, total = rows * half, grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += grid) {
    const int64_t row = p / half, lo = bitonic_lower(p % half, stride);
    bitonic_exchange(keys + row * padded, idx + row * padded, lo, lo + stride, (lo & size) == 0);
  }
}

template <typename U>
__global__ void topk_gather_kernel(TopkParams p) {
  const U* in = static_cast<const U*>(p.in);
  U* values = static_cast<U*>(p.values);
  const int64_t total = p.outer * p.k * p.inner, grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += grid) {
    const int64_t o = e / (p.k * p.inner), r = e % (p.k * p.inner), j = r / p.inner, i = r % p.inner;
    const int64_t s = p.idx[(o * p.inner + i) * p.padded + j];
    values[e] = in[(o * p.n + s) * p.inner + i];
    p.indices[e] = s;
  }
}

// ---------------------------------------------------------------- _resize

template <typename T>
__global__ void resize_taps_kernel(ResizeTapsParams p) {
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  const int64_t total = p.outer * p.n_out * p.inner, grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += grid) {
    const int64_t o = e / (p.n_out * p.inner), r = e % (p.n_out * p.inner), j = r / p.inner, i = r % p.inner;
    const T* src = in + o * p.n_in * p.inner + i;
    T acc = T(0);
    for (int t = 0; t < p.taps; ++t) {
      const int64_t at = j * p.taps + t;
      acc += T(p.weight[at]) * src[p.index[at] * p.inner];
    }
    out[e] = acc;
  }
}

// ---------------------------------------------------------------- fake_quantize

__global__ void fake_quantize_kernel(FakeQuantizeParams p) {
  const int64_t grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < p.numel; e += grid) {
    const int64_t c = p.channels == 1 ? 0 : (e / p.inner) % p.channels;
    p.out[e] =
        fake_quantize_value(p.in[e], p.scale[c], p.inv_scale[c], p.zero_point[c], p.quant_min, p.quant_max);
  }
}

}  // namespace

cudaError_t launch_topk(const TopkParams& p, cudaStream_t stream) {
  const int64_t rows = p.outer * p.inner;
  if (rows == 0 || p.k == 0) return cudaSuccess;
  TESSERA_CUDA_DISPATCH_ALL(
      p.dtype, { topk_keys_kernel<scalar_t><<<grid_for(rows * p.padded), kThreads, 0, stream>>>(p); })
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int64_t tile = bitonic_tile(p.padded), tiles = rows * (p.padded / tile);
  const int threads = int(tile / 2 > 0 ? tile / 2 : 1);
  const size_t smem = size_t(tile) * (sizeof(uint64_t) + sizeof(int64_t));
  const unsigned tile_blocks = unsigned(tiles < 65535 * 8 ? tiles : 65535 * 8);
  for (const BitonicStep& s : plan_bitonic(p.padded)) {
    if (s.kind == BitonicStep::Global)
      bitonic_global_kernel<<<grid_for(rows * (p.padded / 2)), kThreads, 0, stream>>>(
          p.keys, p.idx, rows, p.padded, s.size, s.stride);
    else
      bitonic_tile_kernel<<<tile_blocks, threads, smem, stream>>>(
          p.keys, p.idx, tiles, p.padded, tile, s.kind == BitonicStep::TileSort ? 0 : s.size);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  TESSERA_CUDA_DISPATCH_BITS(dtype_itemsize(p.dtype), {
    topk_gather_kernel<bits_t><<<grid_for(p.outer * p.k * p.inner), kThreads, 0, stream>>>(p);
  })
  return cudaGetLastError();
}

cudaError_t launch_resize_taps(const ResizeTapsParams& p, cudaStream_t stream) {
  const int64_t total = p.outer * p.n_out * p.inner;
  if (total == 0) return cudaSuccess;
  if (p.dtype == kDtF64)
    resize_taps_kernel<double><<<grid_for(total), kThreads, 0, stream>>>(p);
  else if (p.dtype == kDtF32)
    resize_taps_kernel<float><<<grid_for(total), kThreads, 0, stream>>>(p);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t launch_fake_quantize(const FakeQuantizeParams& p, cudaStream_t stream) {
  if (p.numel == 0) return cudaSuccess;
  fake_quantize_kernel<<<grid_for(p.numel), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace tessera::cuda
