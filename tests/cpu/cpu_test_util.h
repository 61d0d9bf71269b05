// Helpers of the CPU op tests: random inputs, an independent reader of tensor memory and naive
// double references with broadcasting.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tessera/tessera.h"
#include "test_seed.h"

namespace tessera::cpu_test {

inline std::mt19937_64& rng() {
  static std::mt19937_64 g(test_seed());
  return g;
}

// A dense row-major array of doubles with broadcasting reads.
struct Ref {
  std::vector<int64_t> sizes;
  std::vector<double> v;
  int64_t numel() const {
    int64_t n = 1;
    for (auto s : sizes) n *= s;
    return n;
  }
  // Element at the multi-index `idx` of a (broadcast) output of rank idx.size().
  double at(const std::vector<int64_t>& idx) const {
    const size_t off = idx.size() - sizes.size();
    int64_t lin = 0;
    for (size_t d = 0; d < sizes.size(); ++d) lin = lin * sizes[d] + (sizes[d] == 1 ? 0 : idx[d + off]);
    return v[size_t(lin)];
  }
};

inline std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (int d = int(sizes.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = i % sizes[size_t(d)];
    i /= sizes[size_t(d)];
  }
  return idx;
}

inline std::vector<int64_t> broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t sa = i < a.size() ? a[a.size() - 1 - i] : 1, sb = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[n - 1 - i] = sa == 1 ? sb : sa;
  }
  return out;
}

// 16-bit float decoding and rounding written independently of the runtime and the plugin: the
// compiler's _Float16 for IEEE half, bit arithmetic for bfloat16.
inline double bf16_bits_to_double(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline double round_bf16(double v) {
  const float f = float(v);
  if (std::isnan(f)) return f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lsb = (u >> 16) & 1u;
  u = (u + 0x7fffu + lsb) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// Reads any CPU tensor (any dtype, any strides) element by element from its memory, without
// running a kernel.
inline Ref read(const Tensor& t) {
  Ref r;
  r.sizes.assign(t.sizes().begin(), t.sizes().end());
  const int64_t n = t.numel();
  r.v.resize(size_t(n));
  const char* base = static_cast<const char*>(t.raw_const_data_ptr());
  const size_t es = t.itemsize();
  for (int64_t i = 0; i < n; ++i) {
    const auto idx = unravel(i, r.sizes);
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    const char* p = base + off * int64_t(es);
    double v = 0;
    switch (t.dtype()) {
      case kBool: v = *reinterpret_cast<const uint8_t*>(p) != 0; break;
      case kUInt8: v = *reinterpret_cast<const uint8_t*>(p); break;
      case kInt8: v = *reinterpret_cast<const int8_t*>(p); break;
      case kInt16: v = *reinterpret_cast<const int16_t*>(p); break;
      case kInt32: v = *reinterpret_cast<const int32_t*>(p); break;
      case kInt64: v = double(*reinterpret_cast<const int64_t*>(p)); break;
      case kFloat16: { _Float16 h; std::memcpy(&h, p, 2); v = double(h); break; }
      case kBFloat16: { uint16_t b; std::memcpy(&b, p, 2); v = bf16_bits_to_double(b); break; }
      case kFloat32: v = *reinterpret_cast<const float*>(p); break;
      case kFloat64: v = *reinterpret_cast<const double*>(p); break;
      case kQInt8:
      case kQUInt8:
      case kQInt32:
        ADD_FAILURE() << "reference values of a quantized tensor: dequantize() it first";
        return r;
    }
    r.v[size_t(i)] = v;
  }
  return r;
}

// `t` converted to `dtype` through copy_ (the conversion kernel under test in CpuCopy).
inline Tensor cast(const Tensor& t, DType dtype) {
  Tensor out = empty(t.sizes(), TensorOptions().dtype(dtype));
  out.copy_(t);
  return out;
}

// A contiguous tensor of `dtype` with values uniform in [lo, hi) (integers: rounded).
inline Tensor random_tensor(const std::vector<int64_t>& sizes, DType dtype, double lo = -2, double hi = 2) {
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) {
    x = dist(rng());
    if (!is_floating(dtype)) x = std::round(x);
    if (dtype == kBool) x = x > (lo + hi) / 2;
  }
  Tensor t = sizes.empty() ? scalar_tensor(v[0], TensorOptions().dtype(kFloat64)) : tensor(v, sizes);
  if (dtype == kFloat64) return t;
  Tensor out = empty(sizes, TensorOptions().dtype(dtype));
  out.copy_(t);
  return out;
}

struct Tol {
  double rtol, atol;
};
inline Tol tol(DType d) {
  switch (d) {
    case kFloat64: return {1e-12, 1e-12};
    case kFloat32: return {1e-5, 1e-6};
    case kFloat16: return {2e-3, 1e-3};
    case kBFloat16: return {1.6e-2, 1e-2};
    default: return {0, 0};
  }
}

// Rounds a reference value to what storing it in `d` would give.
inline double round_to(double v, DType d) {
  switch (d) {
    case kFloat32: return double(float(v));
    case kFloat16: return double(_Float16(v));
    case kBFloat16: return round_bf16(v);
    case kBool: return v != 0;
    default: return v;
  }
}

// a [m, k] @ b [k, n] in double from the tensors' current values, rounded to `out`.
inline std::vector<double> matmul_ref(const Tensor& a, const Tensor& b, DType out) {
  const Ref A = read(a), B = read(b);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<double> c(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t q = 0; q < k; ++q) {
      const double x = A.v[size_t(i * k + q)];
      for (int64_t j = 0; j < n; ++j) c[size_t(i * n + j)] += x * B.v[size_t(q * n + j)];
    }
  for (double& v : c) v = round_to(v, out);
  return c;
}

// x [m, k] @ w^T (w [n, k]) + bias [n], in double from the tensors' current values, rounded to
// x's dtype.
inline std::vector<double> linear_ref(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const Ref X = read(x), W = read(w), B = read(bias);
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  std::vector<double> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = B.v[size_t(j)];
      for (int64_t q = 0; q < k; ++q) s += X.v[size_t(i * k + q)] * W.v[size_t(j * k + q)];
      y[size_t(i * n + j)] = round_to(s, x.dtype());
    }
  return y;
}

// Compares `got` against reference values `want` (already in output order) with the dtype's
// tolerance; `extra_atol`, when given, widens each element's absolute tolerance by its own amount
// (an error bound that depends on the element, such as a dot product's accumulation bound).
inline ::testing::AssertionResult close(const Tensor& got, const std::vector<double>& want, Tol t,
                                        const std::string& what, const std::vector<double>* extra_atol = nullptr) {
  const Ref g = read(got);
  if (g.v.size() != want.size())
    return ::testing::AssertionFailure() << what << ": numel " << g.v.size() << " != " << want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    const double a = g.v[i], b = want[i];
    if (std::isnan(b) && std::isnan(a)) continue;
    if (std::isinf(b) && a == b) continue;
    const double extra = extra_atol ? (*extra_atol)[i] : 0.0;
    if (!(std::fabs(a - b) <= t.atol + extra + t.rtol * std::fabs(b)))
      return ::testing::AssertionFailure() << what << ": element " << i << " got " << a << " expected " << b
                                           << " (rtol " << t.rtol << ", atol " << t.atol << " + " << extra << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::cpu_test
