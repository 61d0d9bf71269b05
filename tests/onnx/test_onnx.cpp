// The ONNX importer and exporter through the C++ API (tessera/onnx/onnx.h): a captured program
// exported to ONNX bytes and imported back runs with the same results at two batch sizes, on the CPU
// and the reference accelerator; ImportOptions narrow and fix symbolic dims; the imported program
// saves as .tsr and loads again; broken bytes give one-line errors. Models from other tools and
// ONNX Runtime as the reference are in onnx_models_test.py.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "tessera/compiler/export.h"
#include "tessera/compiler/program_file.h"
#include "tessera/onnx/onnx.h"
#include "tessera/tessera.h"

namespace {

using tessera::Tensor;
using tessera::compiler::ExportedProgram;

std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(tessera::Device("cpu")).to(tessera::DType::Float64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const tessera::Error& e) {
    return e.what();
  }
  return "";
}

// y = softmax(gelu(x @ w.T + b) * 0.5, -1), x: [batch, 8]; z = layer_norm(y)
struct Mlp {
  Tensor w = tessera::randn({6, 8}), b = tessera::randn({6});
  ExportedProgram capture() const {
    tessera::ExportOptions opts;
    opts.parameters = {{"w", w}, {"b", b}};
    opts.dynamic_shapes = {{{0, tessera::Dim{"batch", 1, 64}}}};
    opts.input_names = {"x"};
    return tessera::export_program(
        [&](const std::vector<Tensor>& in) {
          Tensor h = tessera::gelu(tessera::linear(in[0], w, b)) * 0.5;
          Tensor y = tessera::softmax(h, -1);
          return std::vector<Tensor>{y, tessera::layer_norm(y, {6})};
        },
        {tessera::randn({3, 8})}, opts);
  }
};

void expect_near(const Tensor& a, const Tensor& b) {
  std::vector<double> x = values(a), y = values(b);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-5 + 1e-4 * std::abs(y[i])) << i;
}

TEST(Onnx, ExportThenImportRunsTheSameAtTwoBatchSizes) {
  Mlp m;
  ExportedProgram original = m.capture();
  ExportedProgram back = tessera::onnx::import_model_bytes(tessera::onnx::export_model_bytes(original));
  ASSERT_EQ(back.ranges.count("batch"), 1u) << back.graph_string();
  EXPECT_EQ(back.ranges.at("batch").min, 1);
  EXPECT_EQ(back.signature.outputs.size(), 2u);
  for (int64_t batch : {2, 11}) {
    Tensor x = tessera::randn({batch, 8});
    std::vector<Tensor> want = original.run({x}), got = back.run({x});
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i) expect_near(got[i], want[i]);
    if (tessera::device_count("my_hardware_device") > 0) {
      std::vector<Tensor> dev = back.run({x.to("my_hardware_device")});
      for (size_t i = 0; i < 2; ++i) expect_near(dev[i], want[i]);
    }
  }
}

TEST(Onnx, ImportOptionsNarrowAndFixDims) {
  Mlp m;
  const std::string bytes = tessera::onnx::export_model_bytes(m.capture());
  tessera::onnx::ImportOptions narrow;
  narrow.ranges["batch"] = {2, 8};
  ExportedProgram ep = tessera::onnx::import_model_bytes(bytes, narrow);
  EXPECT_EQ(ep.ranges.at("batch").min, 2);
  EXPECT_EQ(ep.ranges.at("batch").max, 8);
  EXPECT_NE(error_of([&] { ep.run({tessera::randn({9, 8})}); }), "");
  tessera::onnx::ImportOptions fixed;
  fixed.fixed_dims["batch"] = 4;
  ExportedProgram st = tessera::onnx::import_model_bytes(bytes, fixed);
  EXPECT_TRUE(st.ranges.empty()) << st.graph_string();
  EXPECT_NE(st.graph_string().find("f32[4, 8]"), std::string::npos) << st.graph_string();
}

TEST(Onnx, ImportedProgramSavesAndLoads) {
  Mlp m;
  ExportedProgram ep = tessera::onnx::import_model_bytes(tessera::onnx::export_model_bytes(m.capture()));
  const auto path = std::filesystem::temp_directory_path() / ("onnx_saved_" + std::to_string(::getpid()) + ".tsr");
  tessera::save(ep, path.string());
  ExportedProgram again = tessera::load_program(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(again.graph_string(), ep.graph_string());
  Tensor x = tessera::randn({5, 8});
  expect_near(again.run({x})[1], ep.run({x})[1]);
}

TEST(Onnx, BrokenBytesGiveOneLineErrors) {
  Mlp m;
  const std::string bytes = tessera::onnx::export_model_bytes(m.capture());
  for (size_t cut : {bytes.size() / 3, bytes.size() - 7}) {
    const std::string msg = error_of([&] { tessera::onnx::import_model_bytes(bytes.substr(0, cut)); });
    EXPECT_NE(msg.find("onnx import"), std::string::npos) << cut;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_NE(error_of([&] { tessera::onnx::import_model("/nonexistent/model.onnx"); }).find("cannot open"), std::string::npos);
}

TEST(Onnx, SupportedOpTypesListTheConverters) {
  std::vector<std::string> ops = tessera::onnx::supported_op_types();
  for (const char* op : {"Conv", "Attention", "LayerNormalization", "Reshape", "Shape", "Gemm"})
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
}

}  // namespace
