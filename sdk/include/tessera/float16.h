/* float <-> IEEE binary16 and bfloat16 bit patterns: the one conversion of the project.
 *
 * Header-only C++ for plugins (which never link libtessera), the core's Half and BFloat16, and
 * host code of device plugins. Round to nearest even; a NaN becomes the quiet NaN with its sign
 * (PyTorch's c10::Half gives the same bits); overflow goes to inf; subnormals both ways. Integer
 * arithmetic only, so the result does not depend on the floating-point environment (flush-to-zero,
 * rounding mode) or on -ffast-math.
 *
 * The functions have internal linkage (`static inline`): a kernel library compiles the same
 * header once per instruction set (-mavx2, -mavx512f ...), and with ordinary inline functions the
 * linker would keep one of those copies for all of them (Note [No shared inline code in ISA
 * copies] in plugins/cpu). */
#ifndef TESSERA_FLOAT16_H
#define TESSERA_FLOAT16_H

#include <cstdint>
#include <cstring>

namespace tessera::fp16 {

static inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t float_to_half_bits(float f) {
  uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (u >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf (and inf itself)
  if (u < 0x38800000u) {                                  // below the smallest normal half (2^-14)
    if (u < 0x33000000u) return sign;                     // <= 2^-25: rounds to zero
    const uint32_t e = u >> 23, m = (u & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 .. 24: value / 2^-24 = m * 2^(e - 126)
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  uint32_t r = (u >> 13) - (112u << 10);
  const uint32_t rem = u & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return uint16_t(sign | r);
}

// Exact: every binary16 value is a float.
static inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    int e = -1;  // subnormal: normalise
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    return bits_float(sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13));
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

static inline uint16_t float_to_bfloat16_bits(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

static inline float bfloat16_bits_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

}  // namespace tessera::fp16

#endif  // TESSERA_FLOAT16_H
