// Device-side helpers shared by the plugin's .cu files: 16-bit float conversions, the dtype switch,
// the offset calculator of the strided paths and warp/block reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "launch.h"

namespace tessera::cuda {

constexpr int kThreads = 256;

// Arithmetic type of a storage type: fp32 for the 16-bit floats.
template <typename T> struct OpMath { using type = T; };
template <> struct OpMath<__half> { using type = float; };
template <> struct OpMath<__nv_bfloat16> { using type = float; };
template <typename T> using opmath_t = typename OpMath<T>::type;

template <typename T> __device__ __forceinline__ opmath_t<T> to_op(T v) { return v; }
template <> __device__ __forceinline__ float to_op<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_op<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_op(opmath_t<T> v) { return T(v); }
template <> __device__ __forceinline__ __half from_op<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_op<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T> __device__ __forceinline__ float to_float(T v) { return float(to_op(v)); }

// A vector of N elements loaded or stored with one instruction (N * sizeof(T) <= 16 bytes).
template <typename T, int N>
struct alignas(sizeof(T) * N) AlignedVector {
  T v[N];
};

// Offsets of up to kArity operands for a row-major linear index.
template <int kArity>
struct OffsetCalculator {
  int32_t ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[kArity][kMaxDims];

  __device__ __forceinline__ void get(int64_t linear, int64_t (&offsets)[kArity]) const {
#pragma unroll
    for (int k = 0; k < kArity; ++k) offsets[k] = 0;
#pragma unroll
    for (int j = 0; j < kMaxDims; ++j) {
      if (j >= ndim) break;
      const int d = ndim - 1 - j;
      const int64_t coord = linear % sizes[d];
      linear /= sizes[d];
#pragma unroll
      for (int k = 0; k < kArity; ++k) offsets[k] += coord * strides[k][d];
    }
  }
};

template <int kArity>
inline OffsetCalculator<kArity> make_offset_calculator(const IterShape& shape, const Operand* const (&ops)[kArity]) {
  OffsetCalculator<kArity> oc{};
  oc.ndim = shape.ndim;
  for (int d = 0; d < shape.ndim; ++d) {
    oc.sizes[d] = shape.sizes[d];
    for (int k = 0; k < kArity; ++k) oc.strides[k][d] = ops[k]->strides[d];
  }
  return oc;
}

inline unsigned grid_for(int64_t work_items, int threads = kThreads) {
  int64_t blocks = (work_items + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535 * 8) blocks = 65535 * 8;
  return unsigned(blocks);
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A floating value stored into a floating dtype chosen at run time (reduction outputs).
__device__ __forceinline__ void store_double(char* p, int32_t dt, double v) {
  switch (dt) {
    case kDtF16: *reinterpret_cast<__half*>(p) = __float2half_rn(float(v)); break;
    case kDtBF16: *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(float(v)); break;
    case kDtF32: *reinterpret_cast<float*>(p) = float(v); break;
    default: *reinterpret_cast<double*>(p) = v; break;
  }
}

__host__ __device__ constexpr int dtype_itemsize(int32_t dt) {
  return dt == kDtI64 || dt == kDtF64 ? 8 : (dt == kDtI32 || dt == kDtF32 ? 4 : (dt == kDtI16 || dt == kDtF16 || dt == kDtBF16 ? 2 : 1));
}

}  // namespace tessera::cuda

// Calls the statement with `scalar_t` bound to the storage type of `dtype`.
#define TESSERA_CUDA_CASE(id, type, ...) \
  case id: {                             \
    using scalar_t = type;               \
    __VA_ARGS__;                         \
    break;                               \
  }
#define TESSERA_CUDA_DISPATCH_FLOAT_AND_F64(dtype, ...)                     \
  switch (dtype) {                                                          \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtF32, float, __VA_ARGS__)          \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtF16, __half, __VA_ARGS__)         \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtBF16, __nv_bfloat16, __VA_ARGS__) \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtF64, double, __VA_ARGS__)         \
    default: return cudaErrorInvalidValue;                                  \
  }
#define TESSERA_CUDA_DISPATCH_ALL(dtype, ...)                                   \
  switch (dtype) {                                                              \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtF32, float, __VA_ARGS__)              \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtF16, __half, __VA_ARGS__)             \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtBF16, __nv_bfloat16, __VA_ARGS__)     \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtU8, uint8_t, __VA_ARGS__)             \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtI8, int8_t, __VA_ARGS__)              \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtI16, int16_t, __VA_ARGS__)            \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtI32, int32_t, __VA_ARGS__)            \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtI64, int64_t, __VA_ARGS__)            \
    TESSERA_CUDA_CASE(::tessera::cuda::kDtF64, double, __VA_ARGS__)             \
    default: return cudaErrorInvalidValue;                                      \
  }
// Calls the statement with `bits_t` bound to the unsigned integer of `itemsize` bytes (kernels that
// move element bit patterns: index_select, scatter, tril / triu).
#define TESSERA_CUDA_DISPATCH_BITS(itemsize, ...) \
  switch (itemsize) {                             \
    case 1: { using bits_t = uint8_t; __VA_ARGS__; break; }  \
    case 2: { using bits_t = uint16_t; __VA_ARGS__; break; } \
    case 4: { using bits_t = uint32_t; __VA_ARGS__; break; } \
    case 8: { using bits_t = uint64_t; __VA_ARGS__; break; } \
    default: return cudaErrorInvalidValue;        \
  }
