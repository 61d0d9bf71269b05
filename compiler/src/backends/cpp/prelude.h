// The fixed text at the top of every generated source (Note [Generated loops]).
#pragma once

namespace tessera::compiler::codegen {

// Branch-free float helpers so that loops calling them vectorise: bf16 load/store (round to
// nearest even, NaN kept quiet), exp (Cephes polynomial, two-step scaling so the whole float range
// including subnormal results is covered), tanh (polynomial near 0, exp elsewhere).
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
TG_INLINE float tg_exp(float x) {
  float xc = x < -103.972f ? -103.972f : x;
  xc = xc > 88.72283f ? 88.72283f : xc;
  const float kn = xc * 1.44269504088896341f + 12582912.0f;
  const float n = kn - 12582912.0f;
  const int32_t ni = int32_t(tg_f_bits(kn) - 0x4B400000u);
  float r = xc - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t h = ni >> 1;
  const float s1 = tg_bits_f(uint32_t(h + 127) << 23);
  const float s2 = tg_bits_f(uint32_t(ni - h + 127) << 23);
  float res = p * s1 * s2;
  res = x > 88.72283f ? __builtin_inff() : res;
  return x < -103.972f ? 0.0f : res;
}
TG_INLINE float tg_tanh(float x) {
  const float a = x < 0.0f ? -x : x;
  const float z = x * x;
  float p = -5.70498872745E-3f;
  p = p * z + 2.06390887954E-2f;
  p = p * z - 5.37397155531E-2f;
  p = p * z + 1.33314422036E-1f;
  p = p * z - 3.33332819422E-1f;
  const float small = p * z * x + x;
  const float big = 1.0f - 2.0f / (tg_exp(2.0f * a) + 1.0f);
  const float sbig = x < 0.0f ? -big : big;
  return a < 0.625f ? small : sbig;
}
TG_INLINE float tg_sigmoid(float x) { return 1.0f / (1.0f + tg_exp(-x)); }
TG_INLINE float tg_max(float a, float b) { return (a > b || a != a) ? a : b; }
TG_INLINE float tg_min(float a, float b) { return (a < b || a != a) ? a : b; }
)PRELUDE";

}  // namespace tessera::compiler::codegen
