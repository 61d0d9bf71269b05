// Host-side float <-> float16 / bfloat16 bit patterns (fill_ values, numbers passed to kernels by
// value): the SDK's conversion (tessera/float16.h) under the names the CUDA plugin uses. Plain C++,
// so that the unit tests check it without a GPU.
#pragma once
#include <cstdint>

#include "tessera/float16.h"

namespace tessera::cuda {

inline uint16_t float_to_half_bits(float f) { return fp16::float_to_half_bits(f); }
inline uint16_t float_to_bf16_bits(float f) { return fp16::float_to_bfloat16_bits(f); }
inline float half_bits_to_float(uint16_t h) { return fp16::half_bits_to_float(h); }
inline float bf16_bits_to_float(uint16_t b) { return fp16::bfloat16_bits_to_float(b); }

}  // namespace tessera::cuda
