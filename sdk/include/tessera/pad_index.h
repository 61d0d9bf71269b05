// Where an element of a reflect / replicate / circular pad reads from: the one rule of the pad
// kernels of every plugin (the CPU's, the CUDA plugin's index tables). Header-only C++.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

enum class PadMode { Reflect, Replicate, Circular };

inline std::optional<PadMode> pad_mode(std::string_view name) {
  if (name == "reflect") return PadMode::Reflect;
  if (name == "replicate") return PadMode::Replicate;
  if (name == "circular") return PadMode::Circular;
  return std::nullopt;
}

// Output index o of a padded dim of input size n with `lo` before and `hi` after: the input index.
// Reflect and replicate read the whole input and then crop (a negative amount only shifts or
// drops output indices); circular crops first and wraps within what is left, as PyTorch and ONNX
// Runtime do (Note [Circular pad crops first] in dispatcher/src/meta_structural.cpp). A result
// outside [0, n) means the padding is too large for the dim (the caller reports it).
inline int64_t pad_source(int64_t o, int64_t lo, int64_t hi, int64_t n, PadMode mode) {
  if (mode == PadMode::Circular) {
    const int64_t crop_lo = std::max<int64_t>(-lo, 0);
    const int64_t m = n - crop_lo - std::max<int64_t>(-hi, 0);
    if (m <= 0) return -1;
    const int64_t j = o - std::max<int64_t>(lo, 0);
    return crop_lo + ((j % m) + m) % m;
  }
  int64_t i = o - lo;
  if (mode == PadMode::Reflect) {
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
    return i;
  }
  return std::clamp<int64_t>(i, 0, n - 1);
}

}  // namespace tessera
