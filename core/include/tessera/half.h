// 16-bit floating types with round-to-nearest-even conversion from float.
#pragma once
#include <cstdint>
#include <cstring>
#include <ostream>

namespace tessera {

namespace detail {
inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
// IEEE binary16 <-> binary32. Round to nearest even; NaN stays NaN (quiet, sign and top payload bits
// kept); overflow goes to inf; subnormals both ways. Inline: plugins use this header without linking
// libtessera.
inline uint16_t float_to_half_bits(float f) {
  const uint32_t x = float_to_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // NaN
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf (and inf itself)
  if (ax < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal or zero. Adding 0.5f leaves the value's
    // multiple of 2^-24 in the low mantissa bits of the sum, rounded to nearest even by the FPU
    // (the ulp of 0.5f is 2^-24).
    const float sum = bits_to_float(ax) + 0.5f;
    return uint16_t(sign | uint16_t(float_to_bits(sum) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  ax += (uint32_t(15 - 127) << 23) + 0xfffu + ((ax >> 13) & 1u);
  return uint16_t(sign | uint16_t(ax >> 13));
}
inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    return bits_to_float(sign | float_to_bits(float(mant) * 5.9604644775390625e-8f));  // mant * 2^-24, exact
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
}
}  // namespace detail

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT(google-explicit-constructor)
  operator float() const { return detail::bits_to_float(uint32_t(bits) << 16); }  // NOLINT
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 r;
    r.bits = b;
    return r;
  }
  static uint16_t from_float(float f) {
    uint32_t u = detail::float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                         // round to nearest even
    return uint16_t(u >> 16);
  }
};

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(detail::float_to_half_bits(f)) {}  // NOLINT(google-explicit-constructor)
  operator float() const { return detail::half_bits_to_float(bits); }  // NOLINT
  static Half from_bits(uint16_t b) {
    Half r;
    r.bits = b;
    return r;
  }
};

inline std::ostream& operator<<(std::ostream& os, BFloat16 v) { return os << float(v); }
inline std::ostream& operator<<(std::ostream& os, Half v) { return os << float(v); }

}  // namespace tessera
