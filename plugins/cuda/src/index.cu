// index_select, embedding and gather: each output element copies the bits of the source element its index
// names (index_math.h has the offsets); scatter the other way round. Indices out of range write zeros and are reported through
// an error slot the host reads after the launch (ops.cpp, Note [Index errors on the GPU]).
#include <cmath>
#include <limits>

#include "cuda_common.cuh"
#include "index_math.h"
#include "nan_math.h"

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

// ---------------------------------------------------------------- scatter_reduce
// Note [scatter_reduce on the GPU]
// out starts as a copy of self. Without include_self, a first pass sets every element an index
// names to the reduction's identity (0, 1, -inf / the lowest value, +inf / the highest), which is
// what "the first scattered value replaces self" amounts to. The second pass folds each source value
// into its element with a compare-and-swap loop on the element's own 4- or 8-byte word, or on the
// aligned 4-byte word holding a 1- or 2-byte element, computing in the opmath type and rounding
// into the storage type at every step (as PyTorch's CUDA atomics do: float16 sums round per add);
// integer sums and products wrap, amax / amin keep a NaN (nan_max / nan_min). mean also counts the
// values per element (int32 atomics, starting at 1 with include_self) and a third pass divides, a
// floor division for integers as PyTorch. The order of the folds is unspecified, so floating sums
// may differ from the CPU's in the last bits.

template <typename T>
__device__ __forceinline__ T from_bits(uint64_t bits) {
  T v;
  memcpy(&v, &bits, sizeof(T));  // little-endian: the low bytes
  return v;
}
template <typename T>
__device__ __forceinline__ uint64_t to_bits(T v) {
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  return bits;
}

// *addr = f(*addr), atomically.
template <typename T, typename F>
__device__ void atomic_apply(T* addr, F f) {
  if constexpr (sizeof(T) == 8) {
    auto* p = reinterpret_cast<unsigned long long*>(addr);
    unsigned long long old = *p, assumed;
    do {
      assumed = old;
      old = atomicCAS(p, assumed, static_cast<unsigned long long>(to_bits(f(from_bits<T>(assumed)))));
    } while (assumed != old);
  } else if constexpr (sizeof(T) == 4) {
    auto* p = reinterpret_cast<unsigned int*>(addr);
    unsigned int old = *p, assumed;
    do {
      assumed = old;
      old = atomicCAS(p, assumed, static_cast<unsigned int>(to_bits(f(from_bits<T>(assumed)))));
    } while (assumed != old);
  } else {
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    auto* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t(3));
    const unsigned offset = unsigned(a & 3);
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      const T current = from_bits<T>(subword_get(assumed, offset, sizeof(T)));
      old = atomicCAS(word, assumed, subword_set(assumed, offset, sizeof(T), uint32_t(to_bits(f(current)))));
    } while (assumed != old);
  }
}

template <typename T>
__device__ __forceinline__ T scatter_identity(ScatterReduce r) {
  using C = opmath_t<T>;
  switch (r) {
    case ScatterReduce::Prod: return from_op<T>(C(1));
    case ScatterReduce::Max:
      if constexpr (std::is_floating_point_v<C>) return from_op<T>(C(-INFINITY));
      else return std::numeric_limits<T>::lowest();
    case ScatterReduce::Min:
      if constexpr (std::is_floating_point_v<C>) return from_op<T>(C(INFINITY));
      else return std::numeric_limits<T>::max();
    default: return from_op<T>(C(0));
  }
}

template <typename T>
__device__ __forceinline__ T scatter_fold(ScatterReduce r, T current, opmath_t<T> v) {
  using C = opmath_t<T>;
  const C a = to_op(current);
  switch (r) {
    case ScatterReduce::Prod:
      if constexpr (std::is_integral_v<C>) return T(uint64_t(int64_t(a)) * uint64_t(int64_t(v)));
      else return from_op<T>(a * v);
    case ScatterReduce::Max: return from_op<T>(nan_max(a, v));
    case ScatterReduce::Min: return from_op<T>(nan_min(a, v));
    default:  // Sum, Mean
      if constexpr (std::is_integral_v<C>) return T(uint64_t(int64_t(a)) + uint64_t(int64_t(v)));
      else return from_op<T>(a + v);
  }
}

// pass 0: identities (without include_self); pass 1: the folds (and the counts of mean).
template <typename T>
__global__ void scatter_reduce_kernel(ScatterParams s, int pass) {
  const IndexSelectParams& p = s.geometry;
  const int64_t grid = int64_t(gridDim.x) * blockDim.x;
  T* out = static_cast<T*>(s.out);
  const T* values = static_cast<const T*>(s.values);
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < p.numel; o += grid) {
    const IndexedElement e = indexed_element(p, o);
    const int64_t raw = load_index(p.index, p.index_dtype, e.index_offset);
    int64_t i = 0;
    if (!wrap_index(raw, p.src_dim_size, &i)) {
      p.error[1] = raw;
      p.error[0] = 1;
      continue;
    }
    const int64_t target = e.src_partial + i * p.src_strides[p.dim];
    if (pass == 0) {
      out[target] = scatter_identity<T>(s.reduce);
      continue;
    }
    const opmath_t<T> v = to_op(values[e.out_offset]);
    atomic_apply(out + target, [&](T current) { return scatter_fold<T>(s.reduce, current, v); });
    if (s.counts) atomicAdd(s.counts + target, 1);
  }
}

template <typename T>
__global__ void scatter_mean_kernel(T* out, const int32_t* counts, int64_t n) {
  const int64_t grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += grid) {
    const int32_t k = counts[i];
    if (k <= 0) continue;  // untouched without include_self: self stays
    using C = opmath_t<T>;
    const C v = to_op(out[i]);
    if constexpr (std::is_integral_v<C>) {
      const int64_t x = int64_t(v);
      out[i] = T((x >= 0 ? x : x - (k - 1)) / k);  // floor division
    } else {
      out[i] = from_op<T>(v / C(k));
    }
  }
}

template <typename T>
cudaError_t run_scatter_reduce(const ScatterParams& s, cudaStream_t stream) {
  const unsigned grid = grid_for(s.geometry.numel);
  if (!s.include_self) scatter_reduce_kernel<T><<<grid, kThreads, 0, stream>>>(s, 0);
  scatter_reduce_kernel<T><<<grid, kThreads, 0, stream>>>(s, 1);
  if (s.reduce == ScatterReduce::Mean)
    scatter_mean_kernel<T><<<grid_for(s.out_numel), kThreads, 0, stream>>>(static_cast<T*>(s.out), s.counts, s.out_numel);
  return cudaGetLastError();
}

// ---------------------------------------------------------------- tril, triu

template <typename U>
__global__ void triangle_kernel(TriangleParams p) {
  const int64_t grid = int64_t(gridDim.x) * blockDim.x;
  U* out = static_cast<U*>(p.out);
  const U* in = static_cast<const U*>(p.in);
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < p.numel; o += grid) {
    int64_t r = o, out_off = 0, in_off = 0, i = 0, j = 0;
    for (int d = p.ndim - 1; d >= 0; --d) {
      const int64_t c = r % p.sizes[d];
      r /= p.sizes[d];
      out_off += c * p.out_strides[d];
      in_off += c * p.in_strides[d];
      if (d == p.ndim - 1) j = c;
      if (d == p.ndim - 2) i = c;
    }
    const bool keep = p.upper ? j - i >= p.diagonal : j - i <= p.diagonal;
    out[out_off] = keep ? in[in_off] : U(0);
  }
}

}  // namespace

cudaError_t launch_triangle(const TriangleParams& p, cudaStream_t stream) {
  if (p.numel == 0) return cudaSuccess;
  const unsigned grid = grid_for(p.numel);
  TESSERA_CUDA_DISPATCH_BITS(p.itemsize, triangle_kernel<bits_t><<<grid, kThreads, 0, stream>>>(p))
  return cudaGetLastError();
}

cudaError_t launch_scatter(const ScatterParams& s, cudaStream_t stream) {
  const IndexSelectParams& p = s.geometry;
  if (cudaError_t err = cudaMemsetAsync(p.error, 0, 2 * sizeof(int64_t), stream); err != cudaSuccess) return err;
  if (p.numel == 0) return cudaSuccess;
  if (s.reduce != ScatterReduce::None) {
    TESSERA_CUDA_DISPATCH_ALL(s.dtype, return run_scatter_reduce<scalar_t>(s, stream))
  }
  const unsigned grid = grid_for(p.numel);
  TESSERA_CUDA_DISPATCH_BITS(p.itemsize, scatter_kernel<bits_t><<<grid, kThreads, 0, stream>>>(s))
  return cudaGetLastError();
}

cudaError_t launch_index_select(const IndexSelectParams& p, cudaStream_t stream) {
  if (cudaError_t err = cudaMemsetAsync(p.error, 0, 2 * sizeof(int64_t), stream); err != cudaSuccess) return err;
  if (p.numel == 0) return cudaSuccess;
  const unsigned grid = grid_for(p.numel);
  TESSERA_CUDA_DISPATCH_BITS(p.itemsize, index_select_kernel<bits_t><<<grid, kThreads, 0, stream>>>(p))
  return cudaGetLastError();
}

}  // namespace tessera::cuda
