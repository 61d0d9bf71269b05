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
// IEEE binary16 <-> binary32. Round to nearest even; NaN stays NaN; overflow goes to inf.
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
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
