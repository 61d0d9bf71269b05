// 16-bit floating types with round-to-nearest-even conversion from float (tessera/float16.h, the
// SDK header every plugin uses too).
#pragma once
#include <cstdint>
#include <cstring>
#include <ostream>

#include "tessera/float16.h"

namespace tessera {

namespace detail {
// The SDK's conversion (tessera/float16.h), under the names core code has always used.
inline float bits_to_float(uint32_t bits) { return fp16::bits_float(bits); }
inline uint32_t float_to_bits(float f) { return fp16::float_bits(f); }
inline uint16_t float_to_half_bits(float f) { return fp16::float_to_half_bits(f); }
inline float half_bits_to_float(uint16_t h) { return fp16::half_bits_to_float(h); }
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
  static uint16_t from_float(float f) { return fp16::float_to_bfloat16_bits(f); }
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
