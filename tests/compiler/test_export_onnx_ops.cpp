// Export with dynamic dims through the structural ops ONNX models use (slice_copy, expand_copy,
// pad, repeat, _resize, topk): their sizes rules keep `batch` and `seq` symbolic, and the exported
// program run at other sizes gives what the eager ops give.
#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "tessera/compiler/export.h"
#include "tessera/dispatcher.h"
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

std::vector<Tensor> program(const std::vector<Tensor>& in) {
  const Tensor& x = in[0];  // [batch, seq, 4]
  Tensor tail = tessera::slice_copy(x, 1, 1, INT64_MAX);                            // [batch, seq - 1, 4]
  Tensor odd = tessera::slice_copy(x, 1, std::nullopt, std::nullopt, -2);           // [batch, ceil(seq / 2), 4]
  Tensor padded = tessera::pad(x, {0, 0, 1, 2}, "reflect");                         // [batch, seq + 3, 4]
  Tensor first = tessera::slice_copy(x, 2, 0, 1);                                   // [batch, seq, 1]
  Tensor wide = tessera::expand_copy(first, {-1, -1, 6});                           // [batch, seq, 6]
  Tensor tiled = tessera::repeat(x, {1, 2, 1});                                     // [batch, 2 * seq, 4]
  Tensor cropped = tessera::pad(x, {-1, 0, 0, 0}, "constant", 3.0);                 // [batch, seq, 3]
  return {tail, odd, padded, wide, tiled, cropped};
}

TEST(ExportOnnxOps, SliceExpandPadRepeatKeepDynamicDims) {
  ExportOptions opts;
  opts.input_names = {"x"};
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 16}}, {1, Dim{"seq", 4, 64}}}};
  ExportedProgram ep = tessera::export_program(program, {tessera::randn({2, 5, 4})}, opts);
  const std::string text = ep.graph_string();
  for (const char* op : {"slice_copy.Tensor", "pad", "expand_copy", "repeat"})
    EXPECT_NE(text.find(std::string(op) + "("), std::string::npos) << op << "\n" << text;
  EXPECT_NE(text.find("f32[batch, seq, 6] cpu = expand_copy"), std::string::npos) << text;
  EXPECT_NE(text.find("f32[batch, seq, 3] cpu = pad"), std::string::npos) << text;
  for (auto [b, s] : {std::pair<int64_t, int64_t>{3, 7}, {1, 4}, {5, 12}}) {
    Tensor x = tessera::randn({b, s, 4});
    std::vector<Tensor> got = ep.run({x});
    std::vector<Tensor> want = program({x});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].sizes().vec(), want[i].sizes().vec()) << "output " << i << " at " << b << "x" << s;
      EXPECT_EQ(values(got[i]), values(want[i])) << "output " << i;
    }
  }
  EXPECT_EQ(ep.run({tessera::randn({2, 9, 4})})[1].sizes().vec(), (std::vector<int64_t>{2, 5, 4}));
}

TEST(ExportOnnxOps, ResizeOfTheSpatialDimsKeepsADynamicBatch) {
  auto fn = [](const std::vector<Tensor>& in) {
    tessera::Dispatcher& d = tessera::Dispatcher::instance();
    tessera::Stack r = d.call_boxed(d.op("_resize"), tessera::Stack{in[0], std::vector<int64_t>{6, 8},
                                                                     std::string("linear"), std::string("half_pixel"),
                                                                     std::string("round_prefer_floor")});
    return std::vector<Tensor>{std::get<Tensor>(r[0])};
  };
  ExportOptions opts;
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 16}}}};
  ExportedProgram ep = tessera::export_program(fn, {tessera::randn({2, 3, 3, 4})}, opts);
  EXPECT_NE(ep.graph_string().find("f32[batch, 3, 6, 8] cpu = _resize"), std::string::npos) << ep.graph_string();
  Tensor x = tessera::randn({5, 3, 3, 4});
  EXPECT_EQ(values(ep.run({x})[0]), values(fn({x})[0]));
}

TEST(ExportOnnxOps, TopkSizesBothOutputsWithADynamicBatch) {
  auto fn = [](const std::vector<Tensor>& in) {
    auto [values, indices] = tessera::topk(in[0], 2);
    return std::vector<Tensor>{values, indices};
  };
  ExportOptions opts;
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 16}}}};
  ExportedProgram ep = tessera::export_program(fn, {tessera::randn({3, 5})}, opts);
  EXPECT_NE(ep.graph_string().find("[batch, 2]"), std::string::npos) << ep.graph_string();
  Tensor x = tessera::randn({6, 5});
  std::vector<Tensor> got = ep.run({x}), want = fn({x});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(values(got[0]), values(want[0]));
  EXPECT_EQ(values(got[1]), values(want[1]));
  EXPECT_EQ(got[1].sizes().vec(), (std::vector<int64_t>{6, 2}));
}

TEST(ExportOnnxOps, ASliceThatCannotStaySymbolicSaysSo) {
  // Slicing a dynamic dim at a fixed end: the length depends on whether seq >= 3, which export
  // records as a guard (and the run refuses a seq that breaks it).
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::slice_copy(in[0], 0, 0, 3)}; };
  ExportOptions opts;
  opts.dynamic_shapes = {{{0, Dim{"seq", 1, 64}}}};
  ExportedProgram ep = tessera::export_program(fn, {tessera::randn({5})}, opts);
  EXPECT_EQ(ep.run({tessera::randn({9})})[0].sizes().vec(), (std::vector<int64_t>{3}));
  EXPECT_ANY_THROW(ep.run({tessera::randn({2})}));
}

}  // namespace
