// The fixed text at the top of every generated source (Note [Generated loops]).
#pragma once

namespace tessera::compiler::codegen {

// Scalar bf16 load/store (round to nearest even, NaN kept quiet) for per-row values. The math and
// the lane interface the loops are written in follow it: tessera/vecmath/vecmath.h, pasted after
// this text (Note [One vector math]).
inline constexpr const char* kPrelude = R"PRELUDE(
#include <cmath>
#include <cstddef>
#include <cstdint>
#define TG_INLINE static inline __attribute__((always_inline))
TG_INLINE float tg_bits_f(uint32_t u) { return __builtin_bit_cast(float, u); }
TG_INLINE uint32_t tg_f_bits(float f) { return __builtin_bit_cast(uint32_t, f); }
TG_INLINE float tg_ld_bf16(uint16_t h) { return tg_bits_f(uint32_t(h) << 16); }
TG_INLINE uint16_t tg_st_bf16(float f) {
  const uint32_t u = tg_f_bits(f);
  const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return f != f ? uint16_t(0x7FC0) : uint16_t(r);
}
)PRELUDE";

}  // namespace tessera::compiler::codegen
