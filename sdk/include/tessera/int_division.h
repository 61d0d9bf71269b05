// Integer remainder, fmod and floor_divide as PyTorch computes them, in int64: the one rule of the
// CPU kernels and the CUDA plugin's. The divisor is not 0 (each caller reports a zero divisor before
// it computes). INT64_MIN / -1 wraps, as in PyTorch. Header-only; __host__ __device__ under nvcc.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_INT_DIVISION_HD __host__ __device__ inline
#else
#define TESSERA_INT_DIVISION_HD inline
#endif

namespace tessera::int_division {

// x / y and x % y truncating, without the INT64_MIN / -1 overflow.
TESSERA_INT_DIVISION_HD int64_t truncated_div(int64_t x, int64_t y) {
  return y == -1 ? int64_t(0 - uint64_t(x)) : x / y;
}
TESSERA_INT_DIVISION_HD int64_t truncated_mod(int64_t x, int64_t y) { return y == -1 ? 0 : x % y; }

// fmod: the sign of the dividend (C's %).
TESSERA_INT_DIVISION_HD int64_t fmod(int64_t x, int64_t y) { return truncated_mod(x, y); }
// remainder: the sign of the divisor (Python's %).
TESSERA_INT_DIVISION_HD int64_t remainder(int64_t x, int64_t y) {
  int64_t r = truncated_mod(x, y);
  if (r != 0 && (r < 0) != (y < 0)) r += y;
  return r;
}
// floor_divide: rounded toward -inf.
TESSERA_INT_DIVISION_HD int64_t floor_divide(int64_t x, int64_t y) {
  const int64_t q = truncated_div(x, y);
  return ((x < 0) != (y < 0) && truncated_mod(x, y) != 0) ? q - 1 : q;
}

}  // namespace tessera::int_division
