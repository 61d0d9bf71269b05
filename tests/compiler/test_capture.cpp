// Capture (export_program) and running an exported program (ExportedProgram::run).
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/compiler/export.h"
#include "tessera/compiler/passes.h"
#include "tessera/compiler/program_file.h"
#include "tessera/tessera.h"

namespace {

using tessera::Dim;
using tessera::ExportOptions;
using tessera::Tensor;
using tessera::compiler::ExportedProgram;
using tessera::compiler::Guard;

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

// The profiler's summary shows the ops export traced as "capture", not as kernel runs on the CPU.
TEST(Capture, TheProfilerCountsTracedOpsAsCaptureNotAsKernelRuns) {
  tessera::profiler_enable("summary");
  tessera::profiler_clear();
  tessera::export_program([](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::exp(in[0]) * 3.0}; },
                          {tessera::randn({4, 5})});
  tessera::exp(tessera::randn({2, 2}));  // one real run, for contrast
  const std::string summary = tessera::profiler_summary();
  tessera::profiler_enable("");
  auto row = [&](const std::string& op, const std::string& resolution) {
    for (size_t at = summary.find(op); at != std::string::npos; at = summary.find(op, at + 1)) {
      const size_t end = summary.find('\n', at);
      const std::string line = summary.substr(at, end - at);
      if (line.rfind(op + " ", 0) == 0 && line.find(" " + resolution + " ") != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(row("exp", "capture")) << summary;
  EXPECT_TRUE(row("mul.Tensor", "capture")) << summary;
  EXPECT_TRUE(row("exp", "kernel")) << summary;
  EXPECT_FALSE(row("mul.Tensor", "kernel")) << summary;
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

// Note [Factories of a traced size]: zeros_like and ones_like are the op full_like, so a capture
// keeps their sizes symbolic (a factory given x.sizes() would fix batch to the example's 4).
TEST(Capture, ZerosLikeAndOnesLikeKeepADynamicSize) {
  ExportOptions opts;
  opts.input_names = {"x"};
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 16}}}};
  ExportedProgram ep = tessera::export_program(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{tessera::maximum(in[0], tessera::zeros_like(in[0])) + tessera::ones_like(in[0])};
      },
      {tessera::randn({4, 3})}, opts);
  EXPECT_NE(ep.graph_string().find("f32[batch, 3] cpu = full_like(%x, 0, None)"), std::string::npos) << ep.graph_string();
  for (int64_t b : {1, 7, 16}) {
    Tensor x = tessera::randn({b, 3});
    const std::vector<double> xs = values(x), got = values(ep.run({x})[0]);
    ASSERT_EQ(got.size(), size_t(b * 3));
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], double(std::max(float(xs[i]), 0.0f) + 1.0f)) << "batch " << b;
  }
}

// Note [Views as slices of a reshape]: select and narrow of a tensor with dynamic sizes (q, k, v out
// of one projection) are captured as view, slice_copy and view, keeping batch and seq symbolic; the
// values are checked against the inputs read by hand at other sizes.
TEST(Capture, SelectAndNarrowOfADynamicTensorKeepItsSizesSymbolic) {
  ExportOptions opts;
  opts.input_names = {"x"};
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 16}}, {1, Dim{"seq", 1, 16}}}};
  ExportedProgram ep = tessera::export_program(
      [](const std::vector<Tensor>& in) {
        const Tensor y = in[0] * 2.0;  // [b, s, 12]
        const Tensor all = y.reshape({y.size(0), y.size(1), 3, 4}).permute({2, 0, 1, 3});
        return std::vector<Tensor>{all.select(0, 1) + 1.0, y.narrow(2, 7, 5)};
      },
      {tessera::randn({2, 3, 12})}, opts);
  const std::string text = ep.graph_string();
  EXPECT_NE(text.find("slice_copy.Tensor"), std::string::npos) << text;
  EXPECT_EQ(text.find("index_select"), std::string::npos) << text;
  EXPECT_NE(text.find("f32[batch, seq, 4] cpu = add.Tensor"), std::string::npos) << text;
  for (auto [b, sq] : std::vector<std::pair<int64_t, int64_t>>{{2, 3}, {5, 1}, {1, 7}, {16, 16}}) {
    Tensor x = tessera::randn({b, sq, 12});
    const std::vector<double> xs = values(x);
    const std::vector<Tensor> out = ep.run({x});
    ASSERT_EQ(out[0].sizes(), tessera::IntArrayRef({b, sq, 4}));
    ASSERT_EQ(out[1].sizes(), tessera::IntArrayRef({b, sq, 5}));
    const std::vector<double> q = values(out[0]), n = values(out[1]);
    for (int64_t i = 0; i < b * sq; ++i) {
      for (int64_t j = 0; j < 4; ++j)
        EXPECT_EQ(q[size_t(i * 4 + j)], double(float(xs[size_t(i * 12 + 4 + j)]) * 2.0f + 1.0f)) << b << "x" << sq;
      for (int64_t j = 0; j < 5; ++j)
        EXPECT_EQ(n[size_t(i * 5 + j)], double(float(xs[size_t(i * 12 + 7 + j)]) * 2.0f)) << b << "x" << sq;
    }
  }
}

// An expand of an op's output (the broadcast a sum's backward makes) is captured as view +
// expand_copy, not as an index_select of a constant index as large as the expand.
TEST(Capture, AnExpandOfAnOpOutputIsAnExpandCopy) {
  ExportedProgram ep = tessera::export_program(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{tessera::sum(in[0], {1}, true).expand({4, 3}) + in[0]};
      },
      {tessera::randn({4, 3})});
  const std::string g = ep.graph_string();
  EXPECT_NE(g.find("expand_copy"), std::string::npos) << g;
  EXPECT_EQ(g.find("index_select"), std::string::npos) << g;
  Tensor x = tessera::randn({4, 3});
  const std::vector<double> xs = values(x), got = values(ep.run({x})[0]);
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = 0; j < 3; ++j) {
      const float row = float(xs[i * 3]) + float(xs[i * 3 + 1]) + float(xs[i * 3 + 2]);
      EXPECT_NEAR(got[i * 3 + j], double(row + float(xs[i * 3 + j])), 1e-5);
    }
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

// A slice of a dynamic tensor is a slice_copy (Note [Views as slices of a reshape]); a view whose
// elements overlap does not nest in its base and is refused, naming its geometry.
TEST(Capture, ASliceOfADynamicTensorRunsAndAnOverlappingViewIsRefused) {
  auto slice = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::exp(in[0].slice(0, 1, 3))}; };
  ExportOptions opts;
  opts.dynamic_shapes = {{{1, Dim{"n", 1, 64}}}};
  ExportedProgram ep = tessera::export_program(slice, {tessera::randn({4, 2})}, opts);
  Tensor x = tessera::randn({4, 5});
  const std::vector<double> xs = values(x), got = values(ep.run({x})[0]);
  ASSERT_EQ(got.size(), 10u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], std::exp(xs[5 + i]), 4e-7 * std::exp(xs[5 + i]));  // exp's 2 ulp
  auto overlap = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tessera::exp(in[0].as_strided({2, 2}, {1, 1}, 0))};
  };
  const std::string msg = error_of([&] { tessera::export_program(overlap, {tessera::randn({4, 2})}, opts); });
  EXPECT_NE(msg.find("export: a view of sizes [2, 2], strides [1, 1] and offset 0 of %x0 cannot be captured"),
            std::string::npos)
      << msg;
}

TEST(Capture, SliceNarrowSelectAndExpandOfStaticTensorsAreCapturedAsIndexSelect) {
  ExportOptions opts;
  opts.input_names = {"x"};
  auto fn = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];  // [3, 4]
    return std::vector<Tensor>{tessera::exp(x.slice(1, 1, 4, 2)), x.narrow(0, 1, 2) * 2.0,
                               tessera::relu(x.select(0, 2)), x.select(1, 0).unsqueeze(1).expand({3, 2}) + 0.0};
  };
  ExportedProgram ep = tessera::export_program(fn, {tessera::randn({3, 4})}, opts);
  const std::string text = ep.graph_string();
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "graph(%x: f32[3, 4] cpu, %constant_0: i64[6] cpu constant, %constant_1: i64[8] cpu constant, "
            "%constant_2: i64[4] cpu constant, %constant_3: i64[6] cpu constant):")
      << text;
  EXPECT_NE(text.find("= index_select(%"), std::string::npos) << text;
  // x.slice(1, 1, 4, 2) reads columns 1 and 3 of each row: storage positions 1, 3, 5, 7, 9, 11.
  EXPECT_EQ(values(ep.weights.at("constant_0")), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  tessera::compiler::verify(ep);
  const std::string path = ::testing::TempDir() + "capture_views.tsr";
  tessera::save(ep, path);
  ExportedProgram loaded = tessera::load_program(path);
  EXPECT_EQ(loaded.graph_string(), text);
  Tensor x = tessera::randn({3, 4});
  std::vector<double> xs = values(x);
  for (auto [device, program] : {std::pair<const char*, const ExportedProgram*>{"cpu", &ep},
                                 {"my_hardware_device", &ep}, {"cpu", &loaded}}) {
    std::vector<Tensor> out = program->run({x.to(device)});
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(out[0].sizes().vec(), (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(out[1].sizes().vec(), (std::vector<int64_t>{2, 4}));
    EXPECT_EQ(out[2].sizes().vec(), (std::vector<int64_t>{4}));
    EXPECT_EQ(out[3].sizes().vec(), (std::vector<int64_t>{3, 2}));
    std::vector<double> o0 = values(out[0]), o1 = values(out[1]), o2 = values(out[2]), o3 = values(out[3]);
    for (size_t i = 0; i < 3; ++i)
      for (size_t j = 0; j < 2; ++j) {
        EXPECT_NEAR(o0[i * 2 + j], std::exp(double(float(xs[i * 4 + 1 + 2 * j]))), 1e-5) << device;
        EXPECT_EQ(o3[i * 2 + j], xs[i * 4]) << device;
      }
    for (size_t i = 0; i < 2; ++i)
      for (size_t j = 0; j < 4; ++j) EXPECT_EQ(o1[i * 4 + j], 2 * xs[(i + 1) * 4 + j]) << device;
    for (size_t j = 0; j < 4; ++j) EXPECT_EQ(o2[j], std::max(0.0, xs[8 + j])) << device;
  }
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

// conv2d over a dynamic height asks whether the height covers the kernel; the range [1, 64] does not
// decide it, so the example (6) does and the answer is a guard.
ExportedProgram conv_program(const Tensor& w) {
  ExportOptions opts;
  opts.input_names = {"x"};
  opts.parameters["w"] = w;
  opts.dynamic_shapes = {{{2, Dim{"h", 1, 64}}}};
  return tessera::export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::conv2d(in[0], w)}; },
      {tessera::randn({1, 1, 6, 5})}, opts);
}

// Naive valid 3x3 convolution of a (1, 1, h, wd) input in double.
std::vector<double> conv_reference(const std::vector<double>& x, int64_t h, int64_t wd, const std::vector<double>& k) {
  std::vector<double> out;
  for (int64_t i = 0; i + 3 <= h; ++i)
    for (int64_t j = 0; j + 3 <= wd; ++j) {
      double acc = 0;
      for (int64_t a = 0; a < 3; ++a)
        for (int64_t b = 0; b < 3; ++b) acc += x[size_t((i + a) * wd + j + b)] * k[size_t(a * 3 + b)];
      out.push_back(acc);
    }
  return out;
}

TEST(Capture, AComparisonTheExamplesDecideIsRecordedAsAGuardAndCheckedAtRun) {
  Tensor w = tessera::randn({1, 1, 3, 3});
  ExportedProgram ep = conv_program(w);
  ASSERT_EQ(ep.guards.size(), 1u);
  EXPECT_EQ(ep.guards[0].str(), "h - 2 > 0");
  EXPECT_EQ(ep.guards[0].op, "conv2d");
  EXPECT_EQ(ep.guards[0].source, "h = 6");
  EXPECT_EQ(ep.graph_string(),
            "graph(%x: f32[1, 1, h, 5] cpu, %w: f32[1, 1, 3, 3] cpu parameter):\n"
            "  %2: f32[1, 1, h - 2, 3] cpu = conv2d(%x, %w, None, [1, 1], [0, 0], [1, 1], 1)\n"
            "  return (%2)\n"
            "ranges: h in [1, 64]\n"
            "guards: h - 2 > 0\n");
  for (int64_t h : {3, 9}) {
    Tensor x = tessera::randn({1, 1, h, 5});
    std::vector<Tensor> out = ep.run({x});
    ASSERT_EQ(out[0].sizes().vec(), (std::vector<int64_t>{1, 1, h - 2, 3}));
    std::vector<double> want = conv_reference(values(x), h, 5, values(w)), got = values(out[0]);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << "h = " << h << " at " << i;
  }
  // h = 2 is inside the range but breaks the guard: refused before any op runs, naming the guard and the op.
  EXPECT_EQ(error_of([&] { ep.run({tessera::randn({1, 1, 2, 5})}); }),
            "run: guard h - 2 > 0 of 'conv2d' fails for h = 2; the program was exported with examples where it "
            "holds (h = 6): export again with examples of these sizes or declare the dims so that the shape rule "
            "need not compare them");
  // A range that decides the comparison leaves no guard, and the text keeps no guards line.
  ExportOptions opts;
  opts.parameters["w"] = w;
  opts.dynamic_shapes = {{{2, Dim{"h", 3, 64}}}};
  ExportedProgram decided = tessera::export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::conv2d(in[0], w)}; },
      {tessera::randn({1, 1, 6, 5})}, opts);
  EXPECT_TRUE(decided.guards.empty());
  EXPECT_EQ(decided.graph_string().find("guards:"), std::string::npos) << decided.graph_string();
}

TEST(Capture, GuardsParseBackFromTheirText) {
  for (const char* text : {"batch != seq", "h - 2 > 0", "2*batch <= seq + 1", "batch == 4"})
    EXPECT_EQ(Guard::parse(text).str(), text);
  const Guard g = Guard::parse("batch != seq");
  EXPECT_TRUE(g.holds({{"batch", 2}, {"seq", 3}}));
  EXPECT_FALSE(g.holds({{"batch", 3}, {"seq", 3}}));
  EXPECT_EQ(error_of([] { Guard::parse("batch ~ seq"); }),
            "guard 'batch ~ seq' has no relation; expected 'a == b', 'a != b', 'a <= b' or 'a > b'");
  EXPECT_NE(error_of([] { Guard::parse("batch != se$q"); }), "");
}

TEST(Capture, GuardsRoundTripThroughTheProgramFile) {
  ExportedProgram ep = conv_program(tessera::randn({1, 1, 3, 3}));
  const std::string path = ::testing::TempDir() + "capture_guards.tsr";
  tessera::save(ep, path);
  ExportedProgram back = tessera::load_program(path);
  ASSERT_EQ(back.guards.size(), 1u);
  EXPECT_EQ(back.guards[0].str(), "h - 2 > 0");
  EXPECT_EQ(back.graph_string(), ep.graph_string());
  EXPECT_EQ(error_of([&] { back.run({tessera::randn({1, 1, 2, 5})}); }),
            "run: guard h - 2 > 0 fails for h = 2; the program was exported with examples where it holds: export "
            "again with examples of these sizes or declare the dims so that the shape rule need not compare them");
  EXPECT_EQ(back.run({tessera::randn({1, 1, 4, 5})})[0].sizes().vec(), (std::vector<int64_t>{1, 1, 2, 3}));

  // A file without "guards" (older files, programs without guards) loads with none.
  ExportOptions opts;
  opts.input_names = {"x", "y"};
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 64}}}, {{0, Dim{"seq", 1, 64}}}};
  ExportedProgram two = tessera::export_program(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::exp(in[0]), tessera::exp(in[1])}; },
      {tessera::randn({3, 2}), tessera::randn({4, 2})}, opts);
  const std::string text = tessera::compiler::program_json(two);
  EXPECT_EQ(text.find("guards"), std::string::npos);
  EXPECT_TRUE(tessera::compiler::parse_program_json(text).guards.empty());
  // A "batch != seq" guard in the file is checked at run.
  const std::string closing = "\n}";
  ASSERT_EQ(text.substr(text.size() - closing.size()), closing);
  ExportedProgram guarded = tessera::compiler::parse_program_json(
      text.substr(0, text.size() - closing.size()) + ",\n \"guards\": [\"batch != seq\"]\n}");
  guarded.weights = two.weights;
  ASSERT_EQ(guarded.guards.size(), 1u);
  EXPECT_EQ(guarded.graph_string(), two.graph_string() + "guards: batch != seq\n");
  EXPECT_EQ(guarded.run({tessera::randn({3, 2}), tessera::randn({4, 2})}).size(), 2u);
  EXPECT_EQ(error_of([&] { guarded.run({tessera::randn({4, 2}), tessera::randn({4, 2})}); }),
            "run: guard batch != seq fails for batch = 4, seq = 4; the program was exported with examples where it "
            "holds: export again with examples of these sizes or declare the dims so that the shape rule need not "
            "compare them");
  // Malformed guards name the entry.
  for (const char* bad : {"[\"batch ~ seq\"]", "[\"batch != other\"]", "[3]", "\"batch != seq\""}) {
    const std::string m = error_of([&] {
      tessera::compiler::parse_program_json(text.substr(0, text.size() - closing.size()) + ",\n \"guards\": " + bad +
                                            "\n}");
    });
    EXPECT_NE(m.find("program.json: guards"), std::string::npos) << bad << ": " << m;
  }
}

// The live buffers of the reference accelerator's device 0.
uint64_t accelerator_live_buffers() {
  tessera::MemoryStats s = tessera::memory_stats(tessera::Device("my_hardware_device:0"));
  EXPECT_TRUE(s.reported);
  return s.num_allocations;
}

TEST(Capture, WeightsAreCopiedToADeviceOnceAndCached) {
  Tensor w = tessera::full({4}, 3.0), b = tessera::full({4}, 0.5);
  ExportOptions opts;
  opts.parameters["w"] = w;
  opts.parameters["b"] = b;
  // The program returns its weight as well: the tensor run hands back is the device copy it used.
  ExportedProgram ep = tessera::export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * w + b, w}; }, {tessera::ones({4})},
      opts);
  Tensor x = tessera::full({4}, 2.0).to("my_hardware_device");
  const uint64_t before = accelerator_live_buffers();
  std::vector<std::vector<Tensor>> outs;
  for (int i = 0; i < 3; ++i) {
    outs.push_back(ep.run({x}));
    EXPECT_EQ(values(outs.back()[0]), (std::vector<double>{6.5, 6.5, 6.5, 6.5}));
    ASSERT_EQ(outs.back()[1].device().str(), "my_hardware_device:0");
    EXPECT_TRUE(outs.back()[1].is_same(outs[0][1])) << "run " << i << " made a new copy of w";
  }
  // Two weights copied once, kept between runs, plus one result per run (mul's intermediate is freed).
  EXPECT_EQ(accelerator_live_buffers() - before, 2u + 3u);
  outs.clear();
  EXPECT_EQ(accelerator_live_buffers() - before, 2u);  // the cache holds the copies
  ep.run({x});
  EXPECT_EQ(accelerator_live_buffers() - before, 2u);
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
