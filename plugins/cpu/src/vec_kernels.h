// Per-ISA tables of the hot contiguous kernels. See Note [CPU ISA selection] in isa.h.
// vec_kernels_isa.cpp is compiled once per level into namespace isa_default / isa_avx2 / isa_avx512;
// each defines `const VecKernels* table()`. kernels() returns the table of the selected level.
#pragma once

#include <cstdint>

#include "isa.h"

namespace tessera::cpu {

enum class BinaryOp : int { Add, Sub, Mul, Div, Maximum, Minimum, Pow, Count };
enum class UnaryOp : int {
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sin, Cos, Tanh, Sigmoid, Relu, Gelu, GeluTanh, Silu, Erf,
  Mish, Hardsigmoid, Hardswish, Softsign, Count
};
constexpr int kNumBinary = int(BinaryOp::Count);
constexpr int kNumUnary = int(UnaryOp::Count);

// `sa`, `sb` are element strides 0 (broadcast scalar) or 1 (contiguous). `alpha` scales b for
// Add/Sub and is ignored otherwise.
using BinaryF32 = void (*)(const float* a, int64_t sa, const float* b, int64_t sb, float* out, int64_t n,
                           float alpha);
using BinaryF64 = void (*)(const double* a, int64_t sa, const double* b, int64_t sb, double* out, int64_t n,
                           double alpha);
using UnaryF32 = void (*)(const float* x, float* out, int64_t n);

struct VecKernels {
  const char* name;
  BinaryF32 binary_f32[kNumBinary];
  BinaryF64 binary_f64[kNumBinary];
  UnaryF32 unary_f32[kNumUnary];
  // 16-bit float <-> float over contiguous arrays.
  void (*bf16_to_f32)(const uint16_t* x, float* out, int64_t n);
  void (*f32_to_bf16)(const float* x, uint16_t* out, int64_t n);
  void (*f16_to_f32)(const uint16_t* x, float* out, int64_t n);
  void (*f32_to_f16)(const float* x, uint16_t* out, int64_t n);
  // Contiguous reductions. sum_* accumulate in double; max/min propagate NaN.
  double (*sum_f32)(const float* x, int64_t n);
  double (*sum_f64)(const double* x, int64_t n);
  float (*max_f32)(const float* x, int64_t n);
  float (*min_f32)(const float* x, int64_t n);
  // acc[i] += x[i] (column sums of a row-major block, in double).
  void (*accumulate_f32)(double* acc, const float* x, int64_t n);
  void (*accumulate_f64)(double* acc, const double* x, int64_t n);
};

namespace isa_default { const VecKernels* table(); }
namespace isa_avx2 { const VecKernels* table(); }
namespace isa_avx512 { const VecKernels* table(); }

// The table of a level (any level can be asked for; only call one the CPU supports).
const VecKernels* kernels_for(Capability c);
// The table of the selected level.
const VecKernels& kernels();

}  // namespace tessera::cpu
