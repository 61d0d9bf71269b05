// Host-side float <-> float16 / bfloat16 bit patterns, round to nearest even (fill_ values, numbers
// passed to kernels by value). Plain C++ so that the unit tests check it without a GPU; the plugin
// cannot use the core's tessera::Half conversion (it never links libtessera).
#pragma once
#include <cstdint>
#include <cstring>

namespace tessera::cuda {

inline uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (rounds to inf) or inf
  if (absx < 0x38800000u) {  // a subnormal half or zero
    if (absx < 0x33000000u) return uint16_t(sign);  // below half the smallest subnormal: rounds to zero
    const int e = int(absx >> 23);
    const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const int rshift = 126 - e;  // 14..24: value / 2^-24 = mant * 2^(e - 126)
    const uint32_t q = mant >> rshift;
    const uint32_t rem = mant & ((1u << rshift) - 1), half = 1u << (rshift - 1);
    const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return uint16_t(sign | r);
  }
  uint32_t h = ((absx - 0x38000000u) >> 13);
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// Exact (every float16 and bfloat16 value is a float).
inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  } else {  // zero or subnormal: mant * 2^-24, exact in float
    float f = float(mant) * 5.9604644775390625e-8f;
    std::memcpy(&u, &f, 4);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace tessera::cuda
