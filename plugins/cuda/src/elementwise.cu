// Elementwise kernels: binary (with broadcasting through zero strides, and an operand that is one
// number passed by value), unary and fill_ (copy_ is in copy.cu).
// Each family has a vectorised contiguous path (one 128-bit load per operand and thread step) and
// an index-computing strided path. The operator is a launch argument (a uniform branch inside the
// kernel) rather than a template parameter, to keep the number of instantiations, and the nvcc
// compile time, small.
#include <cmath>

#include "cuda_common.cuh"
#include "nan_math.h"
#include "tessera/int_division.h"
#include "tessera/random.h"

namespace tessera::cuda {
namespace {

// Integer pow as PyTorch and the CPU kernel compute it: squaring modulo 2^64 (wrapping, no signed
// overflow), and for a negative exponent 1 for base 1, +-1 for base -1, 0 otherwise.
template <typename C>
__device__ __forceinline__ C integer_pow(C x, C y) {
  if constexpr (std::is_signed_v<C>) {
    if (y < 0) return x == C(1) ? C(1) : (x == C(-1) ? (y % 2 == 0 ? C(1) : C(-1)) : C(0));
  }
  uint64_t r = 1, b = uint64_t(int64_t(x));
  for (C e = y; e > 0; e >>= 1) {
    if (e & 1) r *= b;
    b *= b;
  }
  return C(r);
}

// PyTorch's floor division of floats (div_floor_floating), as the CPU kernel: exact for
// representable quotients, a / b for b == 0.
template <typename C>
__device__ __forceinline__ C floor_divide_float(C a, C b) {
  if (b == C(0)) return a / b;
  const C mod = fmod(a, b);
  C div = (a - mod) / b;
  if (mod != C(0) && (b < C(0)) != (mod < C(0))) div -= C(1);
  if (div == C(0)) return copysign(C(0), a / b);
  C floordiv = floor(div);
  if (div - floordiv > C(0.5)) floordiv += C(1);
  return floordiv;
}

// The ops of docs/pointwise-ops.md: floating ones for floating C; bitwise ones, remainder, fmod and
// floor_divide for integers.
template <typename C>
__device__ __forceinline__ C binary_onnx(BinaryOp op, C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case BinaryOp::Remainder: {
        C mod = fmod(a, b);
        if (mod != C(0) && (b < C(0)) != (mod < C(0))) mod += b;
        return mod;
      }
      case BinaryOp::Fmod: return fmod(a, b);
      case BinaryOp::FloorDivide: return floor_divide_float(a, b);
      case BinaryOp::Atan2: return atan2(a, b);
      default: return a > C(0) ? a : b * a;  // Prelu: b is the weight
    }
  } else {
    constexpr int64_t kWidth = int64_t(sizeof(C) * 8);
    const int64_t x = int64_t(a), y = int64_t(b);
    switch (op) {
      // tessera/int_division.h, the CPU's rule; a zero divisor was refused on the host (0 here).
      case BinaryOp::Remainder:
        return y == 0 ? C(0) : C(tessera::int_division::remainder(x, y));
      case BinaryOp::Fmod:
        return y == 0 ? C(0) : C(tessera::int_division::fmod(x, y));
      case BinaryOp::FloorDivide:
        return y == 0 ? C(0) : C(tessera::int_division::floor_divide(x, y));
      case BinaryOp::BitAnd: return C(x & y);
      case BinaryOp::BitOr: return C(x | y);
      case BinaryOp::BitXor: return C(x ^ y);
      // PyTorch's shifts: a shift below 0 or at least the width gives 0 (left) or the sign fill
      // (right; 0 for unsigned types).
      case BinaryOp::LeftShift: return (y < 0 || y >= kWidth) ? C(0) : C(uint64_t(x) << y);
      default: {
        constexpr int64_t kMaxShift = kWidth - (std::is_signed_v<C> ? 1 : 0);
        return (y < 0 || y >= kMaxShift) ? C(x >> kMaxShift) : C(x >> y);
      }
    }
  }
}

template <typename C>
__device__ __forceinline__ C binary_arith(BinaryOp op, C a, C b, C alpha) {
  if (op >= BinaryOp::Remainder) return binary_onnx(op, a, b);
  switch (op) {
    case BinaryOp::Add: return a + alpha * b;
    case BinaryOp::Sub: return a - alpha * b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return b == C(0) && !std::is_floating_point_v<C> ? C(0) : a / b;
    case BinaryOp::Maximum: return nan_max(a, b);
    case BinaryOp::Pow:
      if constexpr (std::is_floating_point_v<C>) return pow(a, b);  // powf for float
      else return integer_pow(a, b);
    default: return nan_min(a, b);
  }
}
template <typename C>
__device__ __forceinline__ bool binary_compare(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    default: return a >= b;
  }
}

template <typename T, typename OutT>
__device__ __forceinline__ OutT binary_apply(BinaryOp op, opmath_t<T> a, opmath_t<T> b, opmath_t<T> alpha) {
  if constexpr (std::is_same_v<OutT, bool>) {
    return binary_compare(op, a, b);
  } else {
    return from_op<T>(binary_arith(op, a, b, alpha));
  }
}

// Operand k (1 = a, 2 = b) read from memory, or the number passed by value when `scalar_operand`
// names it (a uniform branch: the same for every thread of the launch).
template <typename T>
__device__ __forceinline__ opmath_t<T> operand_value(int k, int scalar_operand, opmath_t<T> scalar, const T* p,
                                                     int64_t i) {
  return scalar_operand == k ? scalar : to_op(p[i]);
}

// Note [Vectors in flight]
// A contiguous binary op moves kVec elements per 16-byte load; each thread of the vectorised path
// takes kUnroll vectors a block step (vector base + u * blockDim + thread, so a warp's loads stay
// coalesced) and issues every load before the first store. With one vector a thread, `x * number`
// (a single input stream) kept too few bytes in flight to reach copy bandwidth on the H200 (0.79x
// PyTorch for float16, issue 29); four give each thread 64 bytes outstanding, the way PyTorch's
// vectorised elementwise kernel unrolls.
template <typename T, typename OutT, int kVec>
__global__ void binary_contiguous_kernel(BinaryOp op, int64_t n, OutT* __restrict__ out, const T* __restrict__ a,
                                         const T* __restrict__ b, int scalar_operand, opmath_t<T> scalar,
                                         opmath_t<T> alpha) {
  constexpr int kUnroll = kVec > 1 ? 4 : 1;
  const int64_t nvec = n / kVec;
  using InVec = AlignedVector<T, kVec>;
  using OutVec = AlignedVector<OutT, kVec>;
  const int64_t chunk = int64_t(blockDim.x) * kUnroll;
  for (int64_t base = int64_t(blockIdx.x) * chunk; base < nvec; base += int64_t(gridDim.x) * chunk) {
    InVec va[kUnroll], vb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = base + int64_t(u) * blockDim.x + threadIdx.x;
      if (v < nvec) {
        if (scalar_operand != 1) va[u] = reinterpret_cast<const InVec*>(a)[v];
        if (scalar_operand != 2) vb[u] = reinterpret_cast<const InVec*>(b)[v];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = base + int64_t(u) * blockDim.x + threadIdx.x;
      if (v < nvec) {
        OutVec vo;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const opmath_t<T> x = scalar_operand == 1 ? scalar : to_op(va[u].v[j]);
          const opmath_t<T> y = scalar_operand == 2 ? scalar : to_op(vb[u].v[j]);
          vo.v[j] = binary_apply<T, OutT>(op, x, y, alpha);
        }
        reinterpret_cast<OutVec*>(out)[v] = vo;
      }
    }
  }
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = nvec * kVec + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = binary_apply<T, OutT>(op, operand_value(1, scalar_operand, scalar, a, i),
                                   operand_value(2, scalar_operand, scalar, b, i), alpha);
}

template <typename T, typename OutT>
__global__ void binary_strided_kernel(BinaryOp op, int64_t n, OffsetCalculator<3> oc, OutT* out, const T* a,
                                      const T* b, int scalar_operand, opmath_t<T> scalar, opmath_t<T> alpha) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[3];
    oc.get(i, off);
    out[off[0]] = binary_apply<T, OutT>(op, operand_value(1, scalar_operand, scalar, a, off[1]),
                                        operand_value(2, scalar_operand, scalar, b, off[2]), alpha);
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// A number made by to_compute_scalar as a value of T's compute type.
template <typename T>
opmath_t<T> compute_value(const ComputeScalar& s) {
  using C = opmath_t<T>;
  if constexpr (std::is_floating_point_v<C>) return C(s.f);
  else return C(s.i);
}

template <typename T, typename OutT>
cudaError_t run_binary(BinaryOp op, const IterShape& shape, const Operand& out, const Operand& a, const Operand& b,
                       int scalar_operand, const ComputeScalar& scalar, const ComputeScalar& alpha, bool contiguous,
                       cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  auto* o = static_cast<OutT*>(out.data);
  auto* pa = static_cast<const T*>(a.data);
  auto* pb = static_cast<const T*>(b.data);
  const opmath_t<T> sv = compute_value<T>(scalar), al = compute_value<T>(alpha);
  if (shape.numel == 0) return cudaSuccess;
  // A number operand is never read: its (host) address does not decide the path.
  if (contiguous && aligned(o, sizeof(OutT) * kVec) && (scalar_operand == 1 || aligned(pa, 16)) &&
      (scalar_operand == 2 || aligned(pb, 16))) {
    // Four vectors a thread (Note [Vectors in flight]); at least one block for the tail.
    binary_contiguous_kernel<T, OutT, kVec><<<grid_for((shape.numel + 4 * kVec - 1) / (4 * kVec)), kThreads, 0, stream>>>(
        op, shape.numel, o, pa, pb, scalar_operand, sv, al);
  } else if (contiguous) {
    binary_contiguous_kernel<T, OutT, 1>
        <<<grid_for(shape.numel), kThreads, 0, stream>>>(op, shape.numel, o, pa, pb, scalar_operand, sv, al);
  } else {
    const Operand* ops[3] = {&out, &a, &b};
    binary_strided_kernel<T, OutT><<<grid_for(shape.numel), kThreads, 0, stream>>>(
        op, shape.numel, make_offset_calculator<3>(shape, ops), o, pa, pb, scalar_operand, sv, al);
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------- unary

template <typename C>
__device__ __forceinline__ C unary_apply_op(UnaryOp op, C x, C pa, C pb, C pc) {
  if constexpr (std::is_floating_point_v<C>) {
    // float (f32, and f16/bf16 computed in float) or double (f64): CUDA's overloads of the math
    // functions, expf and friends for float.
    switch (op) {
      case UnaryOp::Neg: return -x;
      case UnaryOp::Abs: return fabs(x);
      case UnaryOp::Exp: return exp(x);
      case UnaryOp::Log: return log(x);
      case UnaryOp::Sqrt: return sqrt(x);
      case UnaryOp::Rsqrt: return rsqrt(x);
      case UnaryOp::Sin: return sin(x);
      case UnaryOp::Cos: return cos(x);
      case UnaryOp::Tanh: return tanh(x);
      case UnaryOp::Sigmoid: return C(1) / (C(1) + exp(-x));
      case UnaryOp::Relu: return x < C(0) ? C(0) : x;  // NaN stays NaN
      case UnaryOp::Gelu: return C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752)));
      case UnaryOp::GeluTanh: {
        const C inner = C(0.79788456080286536) * (x + C(0.044715) * x * x * x);
        return C(0.5) * x * (C(1) + tanh(inner));
      }
      case UnaryOp::Silu: return x / (C(1) + exp(-x));
      case UnaryOp::Erf: return erf(x);
      case UnaryOp::Tan: return tan(x);
      case UnaryOp::Asin: return asin(x);
      case UnaryOp::Acos: return acos(x);
      case UnaryOp::Atan: return atan(x);
      case UnaryOp::Sinh: return sinh(x);
      case UnaryOp::Cosh: return cosh(x);
      case UnaryOp::Asinh: return asinh(x);
      case UnaryOp::Acosh: return acosh(x);
      case UnaryOp::Atanh: return atanh(x);
      case UnaryOp::Log1p: return log1p(x);
      case UnaryOp::Expm1: return expm1(x);
      case UnaryOp::Reciprocal: return C(1) / x;
      case UnaryOp::Softsign: return x / (C(1) + fabs(x));
      case UnaryOp::Mish: return x * tanh(log1p(exp(x)));
      case UnaryOp::Hardsigmoid:
      case UnaryOp::Hardswish: {
        C v = x + C(3);  // min(max(x + 3, 0), 6) by comparisons: a NaN stays NaN
        v = v < C(0) ? C(0) : v;
        v = v > C(6) ? C(6) : v;
        return op == UnaryOp::Hardswish ? x * v / C(6) : v / C(6);
      }
      case UnaryOp::LeakyRelu: return x > C(0) ? x : x * pa;
      case UnaryOp::Elu: return x <= C(0) ? expm1(x * pc) * pa : x * pb;
      case UnaryOp::Softplus: return x * pa > pb ? x : log1p(exp(x * pa)) / pa;
      case UnaryOp::Floor: return floor(x);
      case UnaryOp::Ceil: return ceil(x);
      case UnaryOp::Trunc: return trunc(x);
      case UnaryOp::Round: return rint(x);  // halves to even
      case UnaryOp::Sign: return C(int(C(0) < x) - int(x < C(0)));  // NaN and -0.0 give 0
      default: return x;
    }
  } else {
    if constexpr (std::is_signed_v<C>) {
      switch (op) {
        case UnaryOp::Neg: return C(-x);
        case UnaryOp::Abs: return x < 0 ? C(-x) : x;
        case UnaryOp::Relu: return x < 0 ? C(0) : x;
        case UnaryOp::Sign: return C(int(C(0) < x) - int(x < C(0)));
        case UnaryOp::BitwiseNot: return C(~x);
        default: return x;  // floor, ceil, trunc, round: integers are integral already
      }
    } else {
      switch (op) {
        case UnaryOp::Neg: return C(-x);
        case UnaryOp::Sign: return C(x != C(0));
        case UnaryOp::BitwiseNot: return C(~x);
        default: return x;  // abs, relu, floor, ceil, trunc, round: the identity on unsigned values
      }
    }
  }
}
// The activation parameters in T's compute type.
template <typename T>
struct UnaryConsts {
  opmath_t<T> a, b, c;
};
template <typename T>
__device__ __forceinline__ T unary_apply(UnaryOp op, T x, const UnaryConsts<T>& k) {
  return from_op<T>(unary_apply_op(op, to_op(x), k.a, k.b, k.c));
}

template <typename T, int kVec>
__global__ void unary_contiguous_kernel(UnaryOp op, int64_t n, T* __restrict__ out, const T* __restrict__ in,
                                        UnaryConsts<T> k) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / kVec;
  using Vec = AlignedVector<T, kVec>;
  for (int64_t v = first; v < nvec; v += stride) {
    Vec x = reinterpret_cast<const Vec*>(in)[v];
#pragma unroll
    for (int j = 0; j < kVec; ++j) x.v[j] = unary_apply(op, x.v[j], k);
    reinterpret_cast<Vec*>(out)[v] = x;
  }
  for (int64_t i = nvec * kVec + first; i < n; i += stride) out[i] = unary_apply(op, in[i], k);
}

template <typename T>
__global__ void unary_strided_kernel(UnaryOp op, int64_t n, OffsetCalculator<2> oc, T* out, const T* in,
                                     UnaryConsts<T> k) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[2];
    oc.get(i, off);
    out[off[0]] = unary_apply(op, in[off[1]], k);
  }
}

template <typename T>
cudaError_t run_unary(UnaryOp op, const IterShape& shape, const Operand& out, const Operand& in, bool contiguous,
                      cudaStream_t stream, const UnaryArgs& args) {
  constexpr int kVec = 16 / sizeof(T);
  using C = opmath_t<T>;
  const UnaryConsts<T> k{C(args.a), C(args.b), C(args.c)};
  auto* o = static_cast<T*>(out.data);
  auto* pi = static_cast<const T*>(in.data);
  if (shape.numel == 0) return cudaSuccess;
  if (contiguous && aligned(o, 16) && aligned(pi, 16)) {
    unary_contiguous_kernel<T, kVec><<<grid_for((shape.numel + kVec - 1) / kVec), kThreads, 0, stream>>>(op, shape.numel, o, pi, k);
  } else if (contiguous) {
    unary_contiguous_kernel<T, 1><<<grid_for(shape.numel), kThreads, 0, stream>>>(op, shape.numel, o, pi, k);
  } else {
    const Operand* ops[2] = {&out, &in};
    unary_strided_kernel<T><<<grid_for(shape.numel), kThreads, 0, stream>>>(op, shape.numel, make_offset_calculator<2>(shape, ops), o, pi, k);
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------- fill_

template <typename U>
__global__ void fill_kernel(int64_t n, OffsetCalculator<1> oc, bool contiguous, U* out, U value) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (contiguous) {
      out[i] = value;
    } else {
      int64_t off[1];
      oc.get(i, off);
      out[off[0]] = value;
    }
  }
}

// ---------------------------------------------------------------- where

// U: an unsigned integer of the dtype's item size. The condition is bool (one byte, 0 or 1).
template <typename U>
__global__ void where_kernel(int64_t n, OffsetCalculator<4> oc, U* out, const bool* cond, const U* a, const U* b,
                             uint32_t value_mask, U a_bits, U b_bits) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[4];
    oc.get(i, off);
    if (cond[off[1]]) out[off[0]] = (value_mask & 2u) ? a_bits : a[off[2]];
    else out[off[0]] = (value_mask & 4u) ? b_bits : b[off[3]];
  }
}

template <typename U>
cudaError_t run_where(const IterShape& shape, const Operand& out, const Operand& cond, const Operand& a,
                      const Operand& b, uint32_t value_mask, uint64_t a_bits, uint64_t b_bits, cudaStream_t stream) {
  const Operand* ops[4] = {&out, &cond, &a, &b};
  where_kernel<U><<<grid_for(shape.numel), kThreads, 0, stream>>>(
      shape.numel, make_offset_calculator<4>(shape, ops), static_cast<U*>(out.data),
      static_cast<const bool*>(cond.data), static_cast<const U*>(a.data), static_cast<const U*>(b.data), value_mask,
      U(a_bits), U(b_bits));
  return cudaGetLastError();
}

// ---------------------------------------------------------------- arange

template <typename T>
__global__ void arange_kernel(T* out, int64_t n, int64_t stride, double start, double step, int64_t istart,
                              int64_t istep) {
  const int64_t grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += grid) {
    if constexpr (std::is_floating_point_v<opmath_t<T>>) {
      // Rounded product, then rounded sum, as the CPU kernel computes it: no contraction into an fma.
      out[i * stride] = from_op<T>(opmath_t<T>(__dadd_rn(start, __dmul_rn(double(i), step))));
    } else {
      // int64 arithmetic wraps as two's complement in the conversion (the shape rule bounds it).
      out[i * stride] = T(uint64_t(istart) + uint64_t(i) * uint64_t(istep));
    }
  }
}

// ---------------------------------------------------------------- uniform_, normal_

// Element i (row-major) = a + (b - a) * uniform(seed, offset + i) or a + b * normal(seed, offset +
// i), in double with no fma (Note [Reproducible random numbers], tessera/random.h: the CPU's
// numbers; uniform bit for bit, normal within the GPU's logf / cosf), rounded once into float for
// the 16-bit floats as the CPU stores them.
template <typename T>
__global__ void random_kernel(T* out, int64_t n, bool normal, double a, double b, uint64_t seed, uint64_t offset) {
  const int64_t grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += grid) {
    const double u = normal ? double(philox::normal(seed, offset + uint64_t(i))) : double(philox::uniform(seed, offset + uint64_t(i)));
    const double v = normal ? __dadd_rn(a, __dmul_rn(b, u)) : __dadd_rn(a, __dmul_rn(__dsub_rn(b, a), u));
    if constexpr (std::is_same_v<T, double>) out[i] = v;
    else out[i] = from_op<T>(float(v));
  }
}

}  // namespace

cudaError_t launch_where(const IterShape& shape, const Operand& out, const Operand& condition, const Operand& a,
                         const Operand& b, uint32_t value_mask, uint64_t a_bits, uint64_t b_bits, cudaStream_t stream) {
  if (shape.numel == 0) return cudaSuccess;
  switch (dtype_itemsize(out.dtype)) {
    case 1: return run_where<uint8_t>(shape, out, condition, a, b, value_mask, a_bits, b_bits, stream);
    case 2: return run_where<uint16_t>(shape, out, condition, a, b, value_mask, a_bits, b_bits, stream);
    case 4: return run_where<uint32_t>(shape, out, condition, a, b, value_mask, a_bits, b_bits, stream);
    case 8: return run_where<uint64_t>(shape, out, condition, a, b, value_mask, a_bits, b_bits, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_arange(void* out, int32_t dtype, int64_t n, int64_t stride, double start, double step,
                          int64_t istart, int64_t istep, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TESSERA_CUDA_DISPATCH_ALL(dtype, {
    arange_kernel<scalar_t><<<grid_for(n), kThreads, 0, stream>>>(static_cast<scalar_t*>(out), n, stride, start, step,
                                                                    istart, istep);
    return cudaGetLastError();
  })
  return cudaErrorInvalidValue;
}

cudaError_t launch_binary(BinaryOp op, int32_t dtype, const IterShape& shape, const Operand& out, const Operand& a,
                          const Operand& b, int scalar_operand, const ComputeScalar& scalar,
                          const ComputeScalar& alpha, bool contiguous, cudaStream_t stream) {
  if (is_comparison(op)) {
    TESSERA_CUDA_DISPATCH_ALL(dtype, return run_binary<scalar_t, bool>(op, shape, out, a, b, scalar_operand, scalar,
                                                                       alpha, contiguous, stream))
  }
  TESSERA_CUDA_DISPATCH_ALL(dtype, return run_binary<scalar_t, scalar_t>(op, shape, out, a, b, scalar_operand, scalar,
                                                                         alpha, contiguous, stream))
  return cudaErrorInvalidValue;
}

cudaError_t launch_unary(UnaryOp op, int32_t dtype, const IterShape& shape, const Operand& out, const Operand& in,
                         bool contiguous, cudaStream_t stream, const UnaryArgs& args) {
  TESSERA_CUDA_DISPATCH_ALL(dtype, return run_unary<scalar_t>(op, shape, out, in, contiguous, stream, args))
  return cudaErrorInvalidValue;
}

cudaError_t launch_random(void* out, int32_t dtype, int64_t n, bool normal, double a, double b, uint64_t seed,
                          uint64_t offset, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TESSERA_CUDA_DISPATCH_FLOAT_AND_F64(dtype, {
    random_kernel<scalar_t><<<grid_for(n), kThreads, 0, stream>>>(static_cast<scalar_t*>(out), n, normal, a, b, seed,
                                                                    offset);
    return cudaGetLastError();
  })
  return cudaErrorInvalidValue;
}

cudaError_t launch_fill(const IterShape& shape, const Operand& out, uint64_t bits, cudaStream_t stream) {
  if (shape.numel == 0) return cudaSuccess;
  const Operand* ops[1] = {&out};
  const auto oc = make_offset_calculator<1>(shape, ops);
  const bool contiguous = shape.ndim == 1 && out.strides[0] == 1;
  const unsigned grid = grid_for(shape.numel);
  switch (dtype_itemsize(out.dtype)) {
    case 1: fill_kernel<uint8_t><<<grid, kThreads, 0, stream>>>(shape.numel, oc, contiguous, static_cast<uint8_t*>(out.data), uint8_t(bits)); break;
    case 2: fill_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(shape.numel, oc, contiguous, static_cast<uint16_t*>(out.data), uint16_t(bits)); break;
    case 4: fill_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(shape.numel, oc, contiguous, static_cast<uint32_t*>(out.data), uint32_t(bits)); break;
    default: fill_kernel<uint64_t><<<grid, kThreads, 0, stream>>>(shape.numel, oc, contiguous, static_cast<uint64_t*>(out.data), bits); break;
  }
  return cudaGetLastError();
}

}  // namespace tessera::cuda
