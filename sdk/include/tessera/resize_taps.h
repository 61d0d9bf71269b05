// Where each output element of a resized dim reads from: the one rule of the _resize kernels of
// every plugin (the CPU's loops, the CUDA plugin's tables). ONNX Resize as onnx.reference computes
// it (op_resize.py), one dim at a time: an output index maps to an input coordinate by the
// coordinate transformation mode, then to one source index (nearest) or to 2 (linear) or 4 (cubic)
// weighted taps. The weights of several dims multiply, so an N-linear resize is N 1-D passes.
// Header-only C++ (host code).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tessera::resize {

enum class Coord {
  HalfPixel,
  HalfPixelSymmetric,
  PytorchHalfPixel,
  AlignCorners,
  Asymmetric,
  TfHalfPixelForNearest
};
enum class Nearest { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };

// The attribute strings as _resize's shape rule accepts them (it rejects any other).
inline Coord coord_mode(std::string_view s) {
  return s == "pytorch_half_pixel"          ? Coord::PytorchHalfPixel
         : s == "half_pixel_symmetric"      ? Coord::HalfPixelSymmetric
         : s == "align_corners"             ? Coord::AlignCorners
         : s == "asymmetric"                ? Coord::Asymmetric
         : s == "tf_half_pixel_for_nearest" ? Coord::TfHalfPixelForNearest
                                            : Coord::HalfPixel;
}
inline Nearest nearest_mode(std::string_view s) {
  return s == "round_prefer_ceil" ? Nearest::RoundPreferCeil
         : s == "floor"           ? Nearest::Floor
         : s == "ceil"            ? Nearest::Ceil
                                  : Nearest::RoundPreferFloor;
}

// The input coordinate of output index o along a dim of `in` elements resized to `out` with `scale`
// (ONNX's output_width is scale * in, which differs from `out` when in * scale is not an integer).
inline double source_coord(Coord m, int64_t o, int64_t in, int64_t out, double scale) {
  const double width = scale * double(in);
  switch (m) {
    case Coord::HalfPixel:
      return (double(o) + 0.5) / scale - 0.5;
    case Coord::HalfPixelSymmetric: {
      const double offset = double(in) / 2 * (1 - double(out) / width);
      return offset + (double(o) + 0.5) / scale - 0.5;
    }
    case Coord::PytorchHalfPixel:
      return width == 1 ? -0.5 : (double(o) + 0.5) / scale - 0.5;
    case Coord::AlignCorners:
      return width == 1 ? 0.0 : double(o) * double(in - 1) / (width - 1);
    case Coord::Asymmetric:
      return double(o) / scale;
    case Coord::TfHalfPixelForNearest:
      return (double(o) + 0.5) / scale;
  }
  return 0.0;
}

// The source index of nearest mode: x itself when integral, else by nearest_mode; edges clamp.
inline int64_t nearest_index(Nearest m, double x, int64_t in) {
  const double f = std::floor(x), ratio = x - f;
  double r = f;
  if (ratio != 0) {
    switch (m) {
      case Nearest::RoundPreferFloor:
        r = ratio <= 0.5 ? f : f + 1;
        break;
      case Nearest::RoundPreferCeil:
        r = ratio < 0.5 ? f : f + 1;
        break;
      case Nearest::Floor:
        r = f;
        break;
      case Nearest::Ceil:
        r = f + 1;
        break;
    }
  }
  return std::clamp<int64_t>(int64_t(std::clamp(r, -1.0, double(in))), 0, in - 1);
}

// The taps of a resized dim: for output index o, `n` source indices index[o * n + t] (clamped to the
// edges, as onnx.reference pads the input with its edge values) with weights weight[o * n + t].
struct Taps {
  int n = 1;  // 1 nearest, 2 linear, 4 cubic
  std::vector<int64_t> index;
  std::vector<double> weight;
};

namespace detail {
inline void add_taps(Taps& t, double x, int64_t in, bool cubic, double a, bool exclude_outside) {
  // The base index with ratio = x - base in (0, 1]: integral x takes the pixel on its left.
  double base = std::floor(x);
  double ratio = x - base;
  if (ratio == 0) {
    base -= 1;
    ratio = 1;
  }
  double w[4];
  int64_t at[4];
  int n = 0;
  if (!cubic) {
    w[0] = 1 - ratio, w[1] = ratio;
    at[0] = int64_t(base), at[1] = int64_t(base) + 1;
    n = 2;
  } else {
    const double r1 = ratio + 1, q = 1 - ratio, q1 = q + 1;
    w[0] = ((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a;
    w[1] = ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1;
    w[2] = ((a + 2) * q - (a + 3)) * q * q + 1;
    w[3] = ((a * q1 - 5 * a) * q1 + 8 * a) * q1 - 4 * a;
    for (int i = 0; i < 4; ++i) at[i] = int64_t(base) - 1 + i;
    n = 4;
  }
  if (exclude_outside) {
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      if (at[i] < 0 || at[i] >= in) w[i] = 0;
      sum += w[i];
    }
    for (int i = 0; i < n; ++i) w[i] = sum != 0 ? w[i] / sum : 0;
  }
  for (int i = 0; i < n; ++i) {
    t.index.push_back(std::clamp<int64_t>(at[i], 0, in - 1));
    t.weight.push_back(w[i]);
  }
  t.n = n;
}
}  // namespace detail

// The taps of a dim of `in` elements resized to `out` with `scale` (> 0; out / in when the caller
// has no scales). mode: "nearest", "linear" or "cubic" (the shape rule checked it).
inline Taps dim_taps(std::string_view mode, Coord coord, Nearest nearest, int64_t in, int64_t out,
                     double scale, double cubic_a, bool exclude_outside) {
  Taps t;
  const bool is_nearest = mode == "nearest" || mode.empty(), cubic = mode == "cubic";
  t.index.reserve(size_t(out) * (is_nearest ? 1 : cubic ? 4 : 2));
  t.weight.reserve(t.index.capacity());
  for (int64_t o = 0; o < out; ++o) {
    const double s = source_coord(coord, o, in, out, scale);
    if (is_nearest) {
      t.index.push_back(nearest_index(nearest, s, in));
      t.weight.push_back(1.0);
    } else {
      detail::add_taps(t, s, in, cubic, cubic_a, exclude_outside);
    }
  }
  t.n = is_nearest ? 1 : cubic ? 4 : 2;
  return t;
}

}  // namespace tessera::resize
