// Capture (export_program) and running an exported program (ExportedProgram::run).
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/compiler/export.h"
#include "tessera/tessera.h"

namespace {

using tessera::Dim;
using tessera::ExportOptions;
using tessera::Tensor;
using tessera::compiler::ExportedProgram;

std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(tessera::Device("cpu")).to(tessera::DType::Float64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

TEST(Capture, PointwiseProgramPrintsAndRuns) {
  Tensor w = tessera::randn({4});
  ExportOptions opts;
  opts.parameters["scale"] = w;
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 64}}}};
  opts.input_names = {"x"};
  ExportedProgram ep = tessera::export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::relu(in[0] * w + 1.5)}; },
      {tessera::randn({3, 4})}, opts);
  EXPECT_EQ(ep.graph_string(),
            "graph(%x: f32[batch, 4] cpu, %scale: f32[4] cpu parameter):\n"
            "  %2: f32[batch, 4] cpu = mul.Tensor(%x, %scale)\n"
            "  %3: f32[batch, 4] cpu = add.Tensor(%2, 1.5, 1)\n"
            "  %4: f32[batch, 4] cpu = relu(%3)\n"
            "  return (%4)\n"
            "ranges: batch in [1, 64]\n");
  for (int64_t b : {1, 5, 9}) {
    Tensor x = tessera::randn({b, 4});
    std::vector<Tensor> out = ep.run({x});
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].sizes().vec(), (std::vector<int64_t>{b, 4}));
    std::vector<double> xs = values(x), ws = values(w), got = values(out[0]);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        double want = std::max(0.0, double(float(float(xs[size_t(i * 4 + j)]) * float(ws[size_t(j)])) + 1.5f));
        EXPECT_NEAR(got[size_t(i * 4 + j)], want, 1e-6);
      }
  }
}

}  // namespace
