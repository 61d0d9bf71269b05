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

// The message of the tessera::Error `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const tessera::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Capture, ReadingATensorValueFailsNamingTheCallAndTheOp) {
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor s = in[0].sum();
    return std::vector<Tensor>{s.item().to_double() > 0 ? in[0] : -in[0]};
  };
  const std::string msg = error_of([&] { tessera::export_program(fn, {tessera::randn({3})}); });
  EXPECT_NE(msg.find("export: item() reads the value of a traced tensor (the output of 'sum'"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("data-dependent control flow cannot be captured"), std::string::npos) << msg;
  // The process keeps working: eager ops and a later capture run normally.
  Tensor x = tessera::ones({2});
  EXPECT_EQ(values(x + x), (std::vector<double>{2, 2}));
  ExportedProgram ep = tessera::export_program(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + in[0]}; }, {x});
  EXPECT_EQ(values(ep.run({x})[0]), (std::vector<double>{2, 2}));
}

TEST(Capture, DataPtrOfATracedInputFailsNamingTheInput) {
  auto fn = [](const std::vector<Tensor>& in) {
    (void)in[0].data_ptr<float>();
    return in;
  };
  ExportOptions opts;
  opts.input_names = {"x"};
  const std::string msg = error_of([&] { tessera::export_program(fn, {tessera::randn({3})}, opts); });
  EXPECT_NE(msg.find("export: data_ptr() reads the value of a traced tensor (program input %x)"), std::string::npos)
      << msg;
}

TEST(Capture, RunRejectsASizeOutsideTheDeclaredRange) {
  ExportOptions opts;
  opts.input_names = {"x"};
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 8}}}};
  ExportedProgram ep = tessera::export_program(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::exp(in[0])}; },
      {tessera::randn({4, 2})}, opts);
  EXPECT_EQ(error_of([&] { ep.run({tessera::randn({9, 2})}); }),
            "run: batch = 9 is outside its range [1, 8] declared at export; export again with a wider Dim to accept it");
  EXPECT_EQ(error_of([&] { ep.run({tessera::randn({4, 3})}); }),
            "run: input 'x' has sizes [4, 3], the program expects [batch, 2] (dimension 1 must be 2)");
  EXPECT_EQ(ep.run({tessera::randn({8, 2})})[0].sizes().vec(), (std::vector<int64_t>{8, 2}));
  // An example outside its Dim's range is refused at export.
  const std::string msg = error_of([&] { tessera::export_program([](const std::vector<Tensor>& in) { return in; },
                                                                 {tessera::randn({9, 2})}, opts); });
  EXPECT_NE(msg.find("outside the range [1, 8] of Dim 'batch'"), std::string::npos) << msg;
}

TEST(Capture, ExamplesOfSizeZeroAndOneDoNotSpecialiseDynamicDims) {
  Tensor w = tessera::randn({3});
  Tensor m = tessera::randn({3, 2});
  ExportOptions opts;
  opts.input_names = {"x"};
  opts.dynamic_shapes = {{{0, Dim{"batch", 0, 32}}, {1, Dim{"seq", 0, 32}}}};
  auto fn = [&](const std::vector<Tensor>& in) {
    // Broadcasting against w asks "is this dim 1?" for batch and seq; matmul and sum keep them.
    Tensor y = tessera::matmul(in[0] * w, m);
    return std::vector<Tensor>{y, tessera::sum(y, {1})};
  };
  for (int64_t example : {0, 1}) {
    ExportedProgram ep = tessera::export_program(fn, {tessera::randn({example, example, 3})}, opts);
    const std::string text = ep.graph_string();
    EXPECT_NE(text.find("f32[batch, seq, 2] cpu = matmul"), std::string::npos) << text;
    EXPECT_NE(text.find("f32[batch, 2] cpu = sum"), std::string::npos) << text;
    for (auto [b, l] : {std::pair<int64_t, int64_t>{3, 5}, {1, 1}, {2, 4}}) {
      Tensor x = tessera::randn({b, l, 3});
      std::vector<Tensor> out = ep.run({x});
      ASSERT_EQ(out[0].sizes().vec(), (std::vector<int64_t>{b, l, 2})) << "example " << example;
      ASSERT_EQ(out[1].sizes().vec(), (std::vector<int64_t>{b, 2}));
      // Naive reference in double.
      std::vector<double> xs = values(x), ws = values(w), ms = values(m), got = values(out[0]);
      for (int64_t i = 0; i < b * l; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < 3; ++k) acc += xs[size_t(i * 3 + k)] * ws[size_t(k)] * ms[size_t(k * 2 + j)];
          EXPECT_NEAR(got[size_t(i * 2 + j)], acc, 1e-4);
        }
    }
  }
}

TEST(Capture, ForcingTwoDynamicDimsEqualFailsWithTheRelationAndTheFix) {
  ExportOptions opts;
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 64}}}, {{0, Dim{"seq", 1, 64}}}};
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + in[1]}; };
  const std::string msg =
      error_of([&] { tessera::export_program(fn, {tessera::randn({3, 4}), tessera::randn({3, 4})}, opts); });
  EXPECT_EQ(msg,
            "export: 'add.Tensor' requires batch == seq (batch in [1, 64], seq in [1, 64]), which relates dimensions "
            "declared independent; batch == seq: use the same Dim for both dimensions");
  // With one Dim for both, the same program exports and runs.
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 64}}}, {{0, Dim{"batch", 1, 64}}}};
  ExportedProgram ep = tessera::export_program(fn, {tessera::randn({3, 4}), tessera::randn({3, 4})}, opts);
  EXPECT_EQ(ep.run({tessera::ones({5, 4}), tessera::ones({5, 4})})[0].sizes().vec(), (std::vector<int64_t>{5, 4}));
  EXPECT_NE(error_of([&] { ep.run({tessera::ones({5, 4}), tessera::ones({6, 4})}); }).find("but batch is 5"),
            std::string::npos);
}

TEST(Capture, ForcingADynamicDimToAConstantFailsNamingTheOp) {
  Tensor bias = tessera::randn({3, 4});
  ExportOptions opts;
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 64}}}};
  auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + bias}; };
  EXPECT_EQ(error_of([&] { tessera::export_program(fn, {tessera::randn({3, 4})}, opts); }),
            "export: 'add.Tensor' requires batch == 3 (batch in [1, 64]), which fixes a dynamic dimension to a "
            "constant; the program only works when batch is 3: declare that dimension static (drop Dim 'batch') "
            "or change the program");
}

TEST(Capture, UnnamedClosedOverTensorsGetStableNamesInFirstUseOrder) {
  Tensor a = tessera::randn({2}), b = tessera::randn({2});
  ExportOptions opts;
  opts.input_names = {"x"};
  ExportedProgram ep = tessera::export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{(in[0] * b) + a + b}; },
      {tessera::randn({2})}, opts);
  EXPECT_EQ(ep.graph_string(),
            "graph(%x: f32[2] cpu, %weight_0: f32[2] cpu parameter, %weight_1: f32[2] cpu parameter):\n"
            "  %2: f32[2] cpu = mul.Tensor(%x, %weight_0)\n"
            "  %4: f32[2] cpu = add.Tensor(%2, %weight_1, 1)\n"
            "  %5: f32[2] cpu = add.Tensor(%4, %weight_0, 1)\n"
            "  return (%5)\n");
  EXPECT_EQ(values(ep.weights.at("weight_0")), values(b));
  EXPECT_EQ(values(ep.weights.at("weight_1")), values(a));
}

TEST(Capture, ASliceViewIsRefusedWithTheGeometry) {
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::exp(in[0].slice(0, 1, 3))}; };
  const std::string msg = error_of([&] { tessera::export_program(fn, {tessera::randn({4, 2})}); });
  EXPECT_NE(msg.find("export: a view of sizes [2, 2], strides [2, 1] and offset 2 of %x0 cannot be captured"),
            std::string::npos)
      << msg;
}

TEST(Capture, RunUsesTheCurrentWeightsOnEachDevice) {
  Tensor w = tessera::full({2}, 3.0);
  ExportOptions opts;
  opts.parameters["w"] = w;
  ExportedProgram ep = tessera::export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * w}; }, {tessera::ones({2})}, opts);
  for (const char* device : {"cpu", "my_hardware_device"}) {
    Tensor x = tessera::full({2}, 2.0).to(device);
    EXPECT_EQ(values(ep.run({x})[0]), (std::vector<double>{6, 6})) << device;
    EXPECT_EQ(values(ep.run({x})[0]), (std::vector<double>{6, 6})) << device;  // from the cached copy
  }
  // Replacing a weight replaces its cached copies.
  ep.weights["w"] = tessera::full({2}, 5.0);
  EXPECT_EQ(values(ep.run({tessera::full({2}, 2.0).to("my_hardware_device")})[0]), (std::vector<double>{10, 10}));
  EXPECT_EQ(values(ep.run({tessera::full({2}, 2.0)})[0]), (std::vector<double>{10, 10}));
}

TEST(Capture, ATracingTensorKeptPastTheCaptureThrowsInsteadOfComputing) {
  Tensor escaped;
  tessera::export_program(
      [&](const std::vector<Tensor>& in) {
        escaped = tessera::exp(in[0]);
        return std::vector<Tensor>{escaped};
      },
      {tessera::randn({2})});
  const std::string msg = error_of([&] { (void)(escaped + escaped); });
  EXPECT_NE(msg.find("has unusable storage"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { (void)escaped.item(); }), "");
}

}  // namespace
