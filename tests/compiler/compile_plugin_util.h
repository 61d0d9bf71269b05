// Helpers of the tests of tessera::compile through compiler plugins (test_compile_plugin.cpp,
// test_compile_priority.cpp): the function they compile, options that name the backend, and the
// comparison of a result with the eager one.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tessera/compiler/compile.h"
#include "tessera/tessera.h"

namespace tessera::compile_plugin_test {

inline CompileOptions with_backend(std::string backend) {
  CompileOptions o;
  o.backend = std::move(backend);
  return o;
}

// Same sizes and, element by element in float64, within 1e-5 relative; compared on the CPU.
inline void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << what;
  Tensor g = got.to(Device("cpu")).to(DType::Float64).contiguous();
  Tensor w = want.to(Device("cpu")).to(DType::Float64).contiguous();
  for (int64_t i = 0; i < g.numel(); ++i)
    ASSERT_NEAR(g.data_ptr<double>()[i], w.data_ptr<double>()[i], 1e-5 * (1 + std::abs(w.data_ptr<double>()[i])))
        << what << " at " << i;
}

// sigmoid(x * y + 0.5), a linear layer, then tanh(g) * 2 - g: two chains of elementwise ops around
// one linear.
struct Chains {
  Tensor w = randn({6, 8}) * 0.3;
  ExportFn fn = [this](const std::vector<Tensor>& in) {
    Tensor h = sigmoid(in[0] * in[1] + 0.5);
    Tensor g = linear(h, w.to(in[0].device()));
    return std::vector<Tensor>{tanh(g) * 2.0 - g, h};
  };
};

}  // namespace tessera::compile_plugin_test
