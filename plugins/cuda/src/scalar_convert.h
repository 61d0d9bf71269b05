// Host-side conversion of one number into a kernel's compute type (Note [Wrapped numbers on the
// GPU], ops.cpp): the value of a 0-dim CPU operand or of a Scalar attribute (alpha, fill value) is
// read in its own dtype and converted once, straight into the compute type. Plain C++ (no CUDA
// call), unit-tested without a GPU (tests/cuda/test_host_decisions.cpp).
#pragma once
#include <cstdint>
#include <cstring>

#include "half_bits.h"
#include "launch.h"

namespace tessera::cuda {

// A number in its own kind: integral (bool as 0/1) in `i`, floating in `f` (exact: every float16,
// bfloat16, float32 and float64 value is a double).
struct HostNumber {
  bool floating = false;
  double f = 0.0;
  int64_t i = 0;
};
inline HostNumber integral_number(int64_t v) { return HostNumber{false, 0.0, v}; }
inline HostNumber floating_number(double v) { return HostNumber{true, v, 0}; }

// The element at `p` of dtype `dtype` (a tensor's host memory; no alignment needed). False for an
// unknown dtype code.
inline bool read_host_number(const void* p, int32_t dtype, HostNumber* out) {
  auto read = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (dtype) {
    case kDtBool: *out = integral_number(read(uint8_t()) != 0 ? 1 : 0); return true;
    case kDtU8: *out = integral_number(read(uint8_t())); return true;
    case kDtI8: *out = integral_number(read(int8_t())); return true;
    case kDtI16: *out = integral_number(read(int16_t())); return true;
    case kDtI32: *out = integral_number(read(int32_t())); return true;
    case kDtI64: *out = integral_number(read(int64_t())); return true;
    case kDtF16: *out = floating_number(half_bits_to_float(read(uint16_t()))); return true;
    case kDtBF16: *out = floating_number(bf16_bits_to_float(read(uint16_t()))); return true;
    case kDtF32: *out = floating_number(read(float())); return true;
    case kDtF64: *out = floating_number(read(double())); return true;
    default: return false;
  }
}

// The compute type of kernels over storage dtype `dtype` (PyTorch's opmath).
inline int32_t compute_dtype_of(int32_t dtype) {
  return dtype == kDtF16 || dtype == kDtBF16 ? kDtF32 : dtype;
}

// Note [Floating to integral conversion] (plugins/opencl/kernel_sources.cpp): PyTorch's results on
// x86-64. To int64, NaN and values outside the int64 range become INT64_MIN; to int32 and narrower
// types the value goes through int32 (outside its range and NaN: INT32_MIN) and then wraps.
inline int64_t floating_to_int64(double v) {
  constexpr double kTwo63 = 9223372036854775808.0;
  return v >= -kTwo63 && v < kTwo63 ? int64_t(v) : INT64_MIN;
}
inline int32_t floating_to_int32(double v) { return v > -2147483649.0 && v < 2147483648.0 ? int32_t(v) : INT32_MIN; }

// `v` as a value of integral dtype `dtype` (wrapping, as every conversion between integer types).
inline int64_t wrap_to_integral(int32_t dtype, int64_t v) {
  switch (dtype) {
    case kDtBool: return v != 0 ? 1 : 0;
    case kDtU8: return uint8_t(v);
    case kDtI8: return int8_t(v);
    case kDtI16: return int16_t(v);
    case kDtI32: return int32_t(v);
    default: return v;
  }
}

// `n` in the compute type of storage dtype `dtype`. The conversion rounds once, straight from n's own
// kind (an int64 becomes the nearest float, not the float nearest to the nearest double), unless
// `through_storage` asks for PyTorch's comparison rule: the number is first converted to `dtype`
// itself (float16 65519 == 65504, uint8 300 == 44), then into the compute type.
inline ComputeScalar to_compute_scalar(const HostNumber& n, int32_t dtype, bool through_storage = false) {
  ComputeScalar s;
  s.dtype = compute_dtype_of(dtype);
  switch (s.dtype) {
    case kDtF32: {
      float x = n.floating ? float(n.f) : float(n.i);
      if (through_storage && dtype == kDtF16) x = half_bits_to_float(float_to_half_bits(x));
      if (through_storage && dtype == kDtBF16) x = bf16_bits_to_float(float_to_bf16_bits(x));
      s.f = x;
      break;
    }
    case kDtF64: s.f = n.floating ? n.f : double(n.i); break;
    case kDtBool: s.i = (n.floating ? n.f != 0.0 : n.i != 0) ? 1 : 0; break;  // NaN is true
    default: {
      int64_t v = n.i;
      if (n.floating) v = dtype == kDtI64 ? floating_to_int64(n.f) : int64_t(floating_to_int32(n.f));
      s.i = wrap_to_integral(dtype, v);
      break;
    }
  }
  return s;
}

}  // namespace tessera::cuda
