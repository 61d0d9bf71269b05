// Helpers of the quantization tests: fresh seeds, random inputs, the values of a tensor, the calls
// of a program, and PyTorch's rounding and quantize_val for the references the tests write.
#pragma once

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tessera/compiler/export.h"
#include "tessera/tessera.h"

namespace tessera::quant_test {

// The message of the tessera::Error that `f` throws, or "no error".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// A seed from random_device; the tests print it through SCOPED_TRACE.
inline uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) | std::random_device{}(); }

// float32 values drawn uniformly from [lo, hi).
inline Tensor uniform_tensor(std::mt19937_64& g, std::vector<int64_t> sizes, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(compute_numel(sizes)));
  for (float& x : v) x = d(g);
  return tensor(v, sizes);
}

// float32 values drawn from the normal distribution (mean, stddev).
inline Tensor normal_tensor(std::mt19937_64& g, std::vector<int64_t> sizes, float mean, float stddev) {
  std::normal_distribution<float> d(mean, stddev);
  std::vector<float> v(static_cast<size_t>(compute_numel(sizes)));
  for (float& x : v) x = d(g);
  return tensor(v, sizes);
}

// The elements of `t` as float32, in row-major order, read on the CPU.
inline std::vector<float> values_of(const Tensor& t) {
  Tensor h = t.cpu().to(kFloat32).contiguous();
  return std::vector<float>(h.data_ptr<float>(), h.data_ptr<float>() + h.numel());
}

// The call nodes of `ep` whose op, without its overload, is `op`, in graph order.
inline std::vector<const compiler::Node*> calls_of(const compiler::ExportedProgram& ep, const std::string& op) {
  std::vector<const compiler::Node*> r;
  for (const compiler::Node& n : ep.graph.nodes)
    if (n.kind == compiler::NodeKind::Call && n.target.substr(0, n.target.find('.')) == op) r.push_back(&n);
  return r;
}

inline double round_half_even(double v) {
  std::fesetround(FE_TONEAREST);
  return std::nearbyint(v);
}

// PyTorch's quantize_val: the product by 1/scale and the rounding in float32.
inline int64_t quantize_value(float x, double scale, int64_t zp, int64_t qmin, int64_t qmax) {
  const float inv = 1.0f / float(scale);
  return std::clamp(int64_t(round_half_even(double(x * inv))) + zp, qmin, qmax);
}

}  // namespace tessera::quant_test
