// Gradient checking against central finite differences in float64: an independent reference for
// every backward formula (PyTorch's gradcheck, in C++).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tessera/autograd.h"
#include "tessera/ops.h"

namespace tessera::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// A float64 CPU tensor of `sizes` with values uniform in [lo, hi) from `rng`.
inline Tensor uniform64(std::mt19937& rng, std::vector<int64_t> sizes, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return tensor(v, sizes);
}
// The same values as a non-contiguous tensor (the transpose of a contiguous one), for dims >= 2.
inline Tensor noncontiguous(const Tensor& t) {
  if (t.dim() < 2) return t;
  Tensor c = t.transpose(-2, -1).contiguous().transpose(-2, -1);
  EXPECT_FALSE(c.is_contiguous());
  return c;
}

// The message of the exception `f` throws, "" when it throws none (tests of error messages).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(kFloat64).contiguous().cpu();
  const double* p = c.const_data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// Checks d(sum(f(inputs) * w))/d(inputs[i]) for every i in `wrt` against central differences
// with step `eps`. Inputs are float64 CPU tensors; they may be non-contiguous.
inline void gradcheck(const Fn& f, std::vector<Tensor> inputs, std::vector<size_t> wrt, double eps = 1e-6,
                      double atol = 1e-5, double rtol = 1e-4, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::vector<Tensor> leaves;
  for (size_t i : wrt) {
    autograd::set_requires_grad(inputs[i]);
    leaves.push_back(inputs[i]);
  }
  Tensor out = f(inputs);
  ASSERT_TRUE(autograd::requires_grad(out)) << "the output does not require grad";
  Tensor w = uniform64(rng, {out.numel()}).reshape(out.sizes());
  if (out.dtype() != kFloat64) w = w.to(out.dtype());
  std::vector<Tensor> analytic = autograd::grad({out}, leaves, {w});
  const std::vector<double> wv = values(w);
  autograd::NoGradGuard no_grad;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const size_t i = wrt[k];
    ASSERT_TRUE(analytic[k].defined()) << "no gradient for input " << i;
    ASSERT_EQ(analytic[k].sizes(), inputs[i].sizes()) << "input " << i;
    const std::vector<double> a = values(analytic[k]);
    Tensor base = inputs[i].contiguous().clone();
    const int64_t n = base.numel();
    for (int64_t j = 0; j < n; ++j) {
      auto eval = [&](double delta) {
        Tensor x = base.clone();
        x.data_ptr<double>()[j] += delta;
        std::vector<Tensor> in = inputs;
        in[i] = x;
        std::vector<double> y = values(f(in));
        double s = 0;
        for (size_t e = 0; e < y.size(); ++e) s += y[e] * wv[e];
        return s;
      };
      const double numeric = (eval(eps) - eval(-eps)) / (2 * eps);
      EXPECT_NEAR(a[size_t(j)], numeric, atol + rtol * std::abs(numeric))
          << "input " << i << " element " << j << " (sizes " << inputs[i].sizes() << ")";
    }
  }
}

}  // namespace tessera::testing
