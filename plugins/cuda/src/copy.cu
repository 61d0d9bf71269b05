// copy_ and dtype conversions (launch_copy): one kernel per (source, destination) dtype pair, so
// each element is converted by a few instructions chosen at compile time instead of a run-time
// switch through double. The host plans the copy first (plan_copy, tensor_iter.h: dims coalesced
// and ordered by the destination's strides). A dense copy takes a vectorised kernel (one load of up
// to 16 bytes per operand and step); otherwise an index-computing kernel, with 32-bit index math
// (32-bit division and modulo are several times cheaper than 64-bit ones) when the element count
// and offsets fit, 64-bit otherwise. Copies without a conversion move bit patterns of the element
// size (4 instantiations serve the 10 same-dtype pairs); 90 conversion pairs.
#include "cuda_common.cuh"
#include "tensor_iter.h"

namespace tessera::cuda {
namespace {

template <int32_t kDt> struct Storage;
template <> struct Storage<kDtBool> { using type = uint8_t; };
template <> struct Storage<kDtU8> { using type = uint8_t; };
template <> struct Storage<kDtI8> { using type = int8_t; };
template <> struct Storage<kDtI16> { using type = int16_t; };
template <> struct Storage<kDtI32> { using type = int32_t; };
template <> struct Storage<kDtI64> { using type = int64_t; };
template <> struct Storage<kDtF16> { using type = __half; };
template <> struct Storage<kDtBF16> { using type = __nv_bfloat16; };
template <> struct Storage<kDtF32> { using type = float; };
template <> struct Storage<kDtF64> { using type = double; };
template <int32_t kDt> using storage_t = typename Storage<kDt>::type;

constexpr bool is_floating_dt(int32_t dt) { return dt >= kDtF16; }

// Note [CUDA copy conversions]
// The conversions of the CPU backend (plugins/cpu/src/common.cpp, convert_one), element by element:
// - to bool: nonzero is true (NaN and 0.5 included); from bool: 0 or 1;
// - between integers: wrapping;
// - integers to floating types: rounded once to the nearest value (an int64 goes straight to float,
//   never through double); to float16/bfloat16 through float, like the CPU backend and PyTorch;
// - float64 to float16/bfloat16 through float (the CPU backend's and PyTorch's double rounding);
//   float16/bfloat16 to float and double exactly (intrinsics);
// - floating types to integers: Note [Floating to integral conversion] (scalar_convert.h): no
//   undefined behaviour for NaN, infinities or out-of-range values (CUDA's own conversion
//   saturates, x86-64 and so the CPU reference do not).
template <int32_t kSrc>
__device__ __forceinline__ auto widen(storage_t<kSrc> v) {
  if constexpr (kSrc == kDtF16) return __half2float(v);
  else if constexpr (kSrc == kDtBF16) return __bfloat162float(v);
  else if constexpr (kSrc == kDtBool) return int32_t(v != 0);
  else return v;
}

template <typename F>
__device__ __forceinline__ int64_t floating_to_int64(F x) {
  if constexpr (sizeof(F) == 4) return x >= -0x1p63f && x < 0x1p63f ? int64_t(x) : INT64_MIN;
  else return x >= -0x1p63 && x < 0x1p63 ? int64_t(x) : INT64_MIN;
}
template <typename F>
__device__ __forceinline__ int32_t floating_to_int32(F x) {
  if constexpr (sizeof(F) == 4) return x >= -0x1p31f && x < 0x1p31f ? int32_t(x) : INT32_MIN;
  else return x > -2147483649.0 && x < 0x1p31 ? int32_t(x) : INT32_MIN;
}

template <int32_t kSrc, int32_t kDst>
__device__ __forceinline__ storage_t<kDst> convert(storage_t<kSrc> v) {
  using D = storage_t<kDst>;
  const auto w = widen<kSrc>(v);  // float for the 16-bit floats, int32 0/1 for bool
  if constexpr (kDst == kDtBool) {
    return D(w != 0 ? 1 : 0);
  } else if constexpr (kDst == kDtF16) {
    if constexpr (kSrc == kDtF16) return v;
    else return __float2half_rn(float(w));
  } else if constexpr (kDst == kDtBF16) {
    if constexpr (kSrc == kDtBF16) return v;
    else return __float2bfloat16_rn(float(w));
  } else if constexpr (is_floating_dt(kDst)) {
    return D(w);
  } else if constexpr (is_floating_dt(kSrc)) {
    if constexpr (kDst == kDtI64) return floating_to_int64(w);
    else return D(floating_to_int32(w));
  } else {
    return D(w);
  }
}

// Element offsets of the two operands for a row-major linear index over the plan's dims.
template <typename Index>
struct CopyOffsets {
  int32_t ndim;
  Index sizes[kMaxDims];
  Index dst_strides[kMaxDims], src_strides[kMaxDims];

  __device__ __forceinline__ void get(Index linear, Index* dst, Index* src) const {
    Index d = 0, s = 0;
#pragma unroll
    for (int j = kMaxDims - 1; j >= 0; --j) {
      if (j >= ndim) continue;
      const Index coord = linear % sizes[j];
      linear /= sizes[j];
      d += coord * dst_strides[j];
      s += coord * src_strides[j];
    }
    *dst = d;
    *src = s;
  }
};

template <typename Index>
CopyOffsets<Index> make_copy_offsets(const CopyPlan& p) {
  CopyOffsets<Index> oc{};
  oc.ndim = p.ndim;
  for (int j = 0; j < p.ndim; ++j) {
    oc.sizes[j] = Index(p.sizes[j]);
    oc.dst_strides[j] = Index(p.dst_strides[j]);
    oc.src_strides[j] = Index(p.src_strides[j]);
  }
  return oc;
}

template <int32_t kSrc, int32_t kDst, int kVec>
__global__ void copy_contiguous_kernel(int64_t n, storage_t<kDst>* __restrict__ out,
                                       const storage_t<kSrc>* __restrict__ in) {
  using InVec = AlignedVector<storage_t<kSrc>, kVec>;
  using OutVec = AlignedVector<storage_t<kDst>, kVec>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / kVec;
  for (int64_t v = first; v < nvec; v += stride) {
    const InVec x = reinterpret_cast<const InVec*>(in)[v];
    OutVec y;
#pragma unroll
    for (int j = 0; j < kVec; ++j) y.v[j] = convert<kSrc, kDst>(x.v[j]);
    reinterpret_cast<OutVec*>(out)[v] = y;
  }
  for (int64_t i = nvec * kVec + first; i < n; i += stride) out[i] = convert<kSrc, kDst>(in[i]);
}

template <int32_t kSrc, int32_t kDst, typename Index>
__global__ void copy_strided_kernel(Index n, CopyOffsets<Index> oc, storage_t<kDst>* out, const storage_t<kSrc>* in) {
  const Index stride = Index(gridDim.x) * blockDim.x;
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    Index d, s;
    oc.get(i, &d, &s);
    out[d] = convert<kSrc, kDst>(in[s]);
  }
}

bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Note [Tiled transposed copies] (launch.h). Block (32, 8): a 32 x 32 tile per (b tile, a tile,
// batch item), each thread moving 4 elements in and 4 out; the tile's row padding (33) keeps the
// column-wise reads of the write phase free of bank conflicts.
template <int32_t kSrc, int32_t kDst>
__global__ void transpose_copy_kernel(TransposePlan t, storage_t<kDst>* __restrict__ out,
                                      const storage_t<kSrc>* __restrict__ in) {
  __shared__ storage_t<kSrc> tile[32][33];
  const int64_t a0 = int64_t(blockIdx.y) * 32, b0 = int64_t(blockIdx.x) * 32;
  for (int64_t z = blockIdx.z; z < t.batch_count; z += gridDim.z) {
    int64_t src_base = 0, dst_base = 0, r = z;
    for (int d = t.batch_ndim - 1; d >= 0; --d) {
      const int64_t c = r % t.batch_sizes[d];
      r /= t.batch_sizes[d];
      src_base += c * t.batch_src_strides[d];
      dst_base += c * t.batch_dst_strides[d];
    }
    for (int j = threadIdx.y; j < 32; j += 8) {  // read along a: the source's contiguous dim
      const int64_t a = a0 + threadIdx.x, b = b0 + j;
      if (a < t.size_a && b < t.size_b) tile[j][threadIdx.x] = in[src_base + a + b * t.src_stride_b];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += 8) {  // write along b: the destination's contiguous dim
      const int64_t a = a0 + j, b = b0 + threadIdx.x;
      if (a < t.size_a && b < t.size_b) out[dst_base + a * t.dst_stride_a + b] = convert<kSrc, kDst>(tile[threadIdx.x][j]);
    }
    __syncthreads();
  }
}

template <int32_t kSrc, int32_t kDst>
cudaError_t run_copy(const CopyPlan& p, void* dst, const void* src, cudaStream_t stream) {
  using S = storage_t<kSrc>;
  using D = storage_t<kDst>;
  constexpr int kVec = 16 / (sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D));
  auto* out = static_cast<D*>(dst);
  auto* in = static_cast<const S*>(src);
  // Same-dtype copies (as bit patterns) and conversions between floating dtypes take tiles.
  if constexpr (kSrc == kDst || (is_floating_dt(kSrc) && is_floating_dt(kDst))) {
    TransposePlan t;
    if (plan_transpose(p, &t)) {
      const dim3 grid{unsigned((t.size_b + 31) / 32), unsigned((t.size_a + 31) / 32),
                      unsigned(t.batch_count < 65535 ? t.batch_count : 65535)};
      transpose_copy_kernel<kSrc, kDst><<<grid, dim3(32, 8), 0, stream>>>(t, out, in);
      return cudaGetLastError();
    }
  }
  if (p.contiguous && aligned_to(out, sizeof(D) * kVec) && aligned_to(in, sizeof(S) * kVec)) {
    copy_contiguous_kernel<kSrc, kDst, kVec>
        <<<grid_for((p.numel + kVec - 1) / kVec), kThreads, 0, stream>>>(p.numel, out, in);
  } else if (p.index32) {
    // Grid-stride indices stay below numel + gridDim.x * blockDim.x < 2^32 (grid_for's cap).
    copy_strided_kernel<kSrc, kDst, uint32_t>
        <<<grid_for(p.numel), kThreads, 0, stream>>>(uint32_t(p.numel), make_copy_offsets<uint32_t>(p), out, in);
  } else {
    copy_strided_kernel<kSrc, kDst, int64_t>
        <<<grid_for(p.numel), kThreads, 0, stream>>>(p.numel, make_copy_offsets<int64_t>(p), out, in);
  }
  return cudaGetLastError();
}

// A conversion between two different dtypes (same-dtype copies take the bit-pattern kernels, so
// the diagonal is never instantiated).
template <int32_t kSrc, int32_t kDst>
cudaError_t run_conversion(const CopyPlan& p, void* dst, const void* src, cudaStream_t stream) {
  if constexpr (kSrc == kDst) return cudaErrorInvalidValue;
  else return run_copy<kSrc, kDst>(p, dst, src, stream);
}

template <int32_t kSrc>
cudaError_t copy_from(const CopyPlan& p, void* dst, int32_t dst_dtype, const void* src, cudaStream_t stream) {
  switch (dst_dtype) {
    case kDtBool: return run_conversion<kSrc, kDtBool>(p, dst, src, stream);
    case kDtU8: return run_conversion<kSrc, kDtU8>(p, dst, src, stream);
    case kDtI8: return run_conversion<kSrc, kDtI8>(p, dst, src, stream);
    case kDtI16: return run_conversion<kSrc, kDtI16>(p, dst, src, stream);
    case kDtI32: return run_conversion<kSrc, kDtI32>(p, dst, src, stream);
    case kDtI64: return run_conversion<kSrc, kDtI64>(p, dst, src, stream);
    case kDtF16: return run_conversion<kSrc, kDtF16>(p, dst, src, stream);
    case kDtBF16: return run_conversion<kSrc, kDtBF16>(p, dst, src, stream);
    case kDtF32: return run_conversion<kSrc, kDtF32>(p, dst, src, stream);
    case kDtF64: return run_conversion<kSrc, kDtF64>(p, dst, src, stream);
    default: return cudaErrorInvalidValue;
  }
}

// The integer dtype whose elements have the size of `dt`'s: same-dtype copies move bit patterns.
int32_t bits_dtype(int32_t dt) {
  switch (dtype_itemsize(dt)) {
    case 1: return kDtU8;
    case 2: return kDtI16;
    case 4: return kDtI32;
    default: return kDtI64;
  }
}

}  // namespace

cudaError_t launch_copy(const CopyPlan& plan, void* dst, int32_t dst_dtype, const void* src, int32_t src_dtype,
                        cudaStream_t stream) {
  if (plan.numel == 0) return cudaSuccess;
  if (src_dtype == dst_dtype) {
    const int32_t b = bits_dtype(dst_dtype);
    switch (b) {
      case kDtU8: return run_copy<kDtU8, kDtU8>(plan, dst, src, stream);
      case kDtI16: return run_copy<kDtI16, kDtI16>(plan, dst, src, stream);
      case kDtI32: return run_copy<kDtI32, kDtI32>(plan, dst, src, stream);
      default: return run_copy<kDtI64, kDtI64>(plan, dst, src, stream);
    }
  }
  switch (src_dtype) {
    case kDtBool: return copy_from<kDtBool>(plan, dst, dst_dtype, src, stream);
    case kDtU8: return copy_from<kDtU8>(plan, dst, dst_dtype, src, stream);
    case kDtI8: return copy_from<kDtI8>(plan, dst, dst_dtype, src, stream);
    case kDtI16: return copy_from<kDtI16>(plan, dst, dst_dtype, src, stream);
    case kDtI32: return copy_from<kDtI32>(plan, dst, dst_dtype, src, stream);
    case kDtI64: return copy_from<kDtI64>(plan, dst, dst_dtype, src, stream);
    case kDtF16: return copy_from<kDtF16>(plan, dst, dst_dtype, src, stream);
    case kDtBF16: return copy_from<kDtBF16>(plan, dst, dst_dtype, src, stream);
    case kDtF32: return copy_from<kDtF32>(plan, dst, dst_dtype, src, stream);
    case kDtF64: return copy_from<kDtF64>(plan, dst, dst_dtype, src, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tessera::cuda
