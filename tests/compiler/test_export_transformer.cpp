// The done-when workload of export: the demo's transformer block (samples/demo) with a dynamic batch
// and sequence length exports once and runs on cpu, the reference accelerator and opencl for three
// input sizes, giving eager's outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "tessera/compiler/npy.h"
#include "tessera/compiler/passes.h"
#include "tessera/compiler/program_file.h"
#include "tessera/tessera.h"

namespace {

using tessera::Dim;
using tessera::Tensor;

constexpr int64_t kModel = 32, kHeads = 4, kMlp = 64;

struct Weights {
  Tensor ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2;
  std::vector<Tensor*> all() {
    return {&ln1_w, &ln1_b, &wq, &bq, &wk, &bk, &wv, &bv, &wo, &bo, &ln2_w, &ln2_b, &w1, &b1, &w2, &b2};
  }
};

Tensor param(std::vector<int64_t> sizes, double scale, double offset = 0) {
  return tessera::randn(sizes) * scale + offset;
}

Weights make_weights() {
  const double s = 1.0 / std::sqrt(double(kModel)), s2 = 1.0 / std::sqrt(double(kMlp));
  return {param({kModel}, 0.1, 1.0), param({kModel}, 0.1), param({kModel, kModel}, s), param({kModel}, 0.1),
          param({kModel, kModel}, s), param({kModel}, 0.1), param({kModel, kModel}, s), param({kModel}, 0.1),
          param({kModel, kModel}, s), param({kModel}, 0.1), param({kModel}, 0.1, 1.0), param({kModel}, 0.1),
          param({kMlp, kModel}, s), param({kMlp}, 0.1), param({kModel, kMlp}, s2), param({kModel}, 0.1)};
}

// samples/demo's block, with the batch taken from the input instead of fixed at 1.
Tensor block(const Weights& w, const Tensor& x) {
  using namespace tessera;
  const int64_t b = x.size(0), l = x.size(1), dh = kModel / kHeads;
  Tensor h = layer_norm(x, {kModel}, w.ln1_w, w.ln1_b);
  Tensor q = linear(h, w.wq, w.bq).view({b, l, kHeads, dh}).transpose(1, 2);
  Tensor k = linear(h, w.wk, w.bk).view({b, l, kHeads, dh}).transpose(1, 2);
  Tensor v = linear(h, w.wv, w.bv).view({b, l, kHeads, dh}).transpose(1, 2);
  Tensor a = scaled_dot_product_attention(q, k, v, std::nullopt, /*is_causal=*/true);
  a = a.transpose(1, 2).reshape({b, l, kModel});
  Tensor x1 = x + linear(a, w.wo, w.bo);
  Tensor h2 = layer_norm(x1, {kModel}, w.ln2_w, w.ln2_b);
  return x1 + linear(gelu(linear(h2, w.w1, w.b1)), w.w2, w.b2);
}

std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(tessera::Device("cpu")).to(tessera::DType::Float64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

tessera::compiler::ExportedProgram export_block(const Weights& w, tessera::ExportOptions* opts_out = nullptr) {
  tessera::ExportOptions opts;
  opts.input_names = {"x"};
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 16}}, {1, Dim{"seq", 1, 64}}}};
  const char* names[] = {"ln1.weight", "ln1.bias", "q.weight", "q.bias", "k.weight", "k.bias", "v.weight",
                         "v.bias", "out.weight", "out.bias", "ln2.weight", "ln2.bias", "fc1.weight", "fc1.bias",
                         "fc2.weight", "fc2.bias"};
  Weights copy = w;
  std::vector<Tensor*> all = copy.all();
  for (size_t i = 0; i < all.size(); ++i) opts.parameters[names[i]] = *all[i];
  if (opts_out) *opts_out = opts;
  return tessera::export_program([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{block(w, in[0])}; },
                                 {tessera::randn({2, 5, kModel})}, opts);
}

TEST(ExportTransformer, GraphIsSymbolicInBatchAndSeq) {
  Weights w = make_weights();
  tessera::compiler::ExportedProgram ep = export_block(w);
  const std::string text = ep.graph_string();
  EXPECT_NE(text.find("%x: f32[batch, seq, 32] cpu"), std::string::npos) << text;
  EXPECT_NE(text.find("%q.weight: f32[32, 32] cpu parameter"), std::string::npos) << text;
  EXPECT_NE(text.find("scaled_dot_product_attention"), std::string::npos) << text;
  EXPECT_NE(text.find("f32[batch, 4, seq, 8] cpu = permute"), std::string::npos) << text;
  EXPECT_NE(text.find("ranges: batch in [1, 16], seq in [1, 64]"), std::string::npos) << text;
  EXPECT_EQ(ep.weights.size(), 16u);
  // No size of the example (2, 5) leaked into the graph as a constant.
  EXPECT_EQ(text.find("[2, "), std::string::npos) << text;
  EXPECT_EQ(text.find(", 5, "), std::string::npos) << text;
}

void expect_matches_eager(const std::string& device_name) {
  ASSERT_GT(tessera::device_count(device_name), 0) << "the build provides " << device_name << "; it must be present";
  Weights w = make_weights();
  tessera::compiler::ExportedProgram ep = export_block(w);
  tessera::Device dev(device_name);
  Weights wd = w;
  for (Tensor* t : wd.all()) *t = t->to(dev);
  const std::pair<int64_t, int64_t> sizes[] = {{1, 7}, {3, 2}, {4, 9}};
  for (auto [b, l] : sizes) {
    Tensor x = tessera::randn({b, l, kModel}).to(dev);
    Tensor want = block(wd, x);
    std::vector<Tensor> got = ep.run({x});
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].device(), want.device());
    ASSERT_EQ(got[0].sizes().vec(), (std::vector<int64_t>{b, l, kModel}));
    std::vector<double> g = values(got[0]), e = values(want);
    double worst = 0;
    for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - e[i]));
    EXPECT_LT(worst, 1e-5) << device_name << " batch " << b << " seq " << l;
  }
}

TEST(ExportTransformer, RunEqualsEagerOnCpu) { expect_matches_eager("cpu"); }
TEST(ExportTransformer, RunEqualsEagerOnReferenceAccelerator) { expect_matches_eager("my_hardware_device"); }
TEST(ExportTransformer, RunEqualsEagerOnOpenCl) { expect_matches_eager("opencl"); }

TEST(ExportTransformer, DefaultPassPipelineKeepsTheOutputs) {
  Weights w = make_weights();
  tessera::compiler::ExportedProgram ep = export_block(w);
  tessera::compiler::verify(ep);
  ASSERT_TRUE(tessera::compiler::PassManager::default_pipeline().run(ep));
  const std::string text = ep.graph_string();
  EXPECT_EQ(text.find("= linear("), std::string::npos) << text;  // decomposed into matmul + add
  EXPECT_NE(text.find("= matmul("), std::string::npos) << text;
  for (auto [b, l] : {std::pair<int64_t, int64_t>{2, 3}, {5, 4}}) {
    Tensor x = tessera::randn({b, l, kModel});
    std::vector<double> got = values(ep.run({x})[0]), want = values(block(w, x));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4);
  }
}

// The whole done-when path: the block exports, saves to a .tsr file, and `tessera run` in a fresh
// process loads it and runs it on each device for three (batch, seq) sizes, giving eager's outputs.
TEST(ExportTransformer, SavedProgramRunsInAFreshProcessLikeEager) {
  Weights w = make_weights();
  tessera::compiler::ExportedProgram ep = export_block(w);
  char dir_template[] = "/tmp/tessera_fresh_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, model = dir + "/block.tsr";
  tessera::save(ep, model);
  const std::pair<int64_t, int64_t> sizes[] = {{1, 7}, {3, 2}, {4, 9}};
  for (const char* device : {"cpu", "my_hardware_device", "opencl"}) {
    ASSERT_GT(tessera::device_count(device), 0) << "the build provides " << device << "; it must be present";
    for (auto [b, l] : sizes) {
      Tensor x = tessera::randn({b, l, kModel});
      const std::string in = dir + "/x.npy", out = dir + "/out.npz";
      tessera::compiler::write_npy(in, x);
      std::remove(out.c_str());
      const std::string cmd = std::string(TESSERA_CLI) + " run " + model + " --device " + device + " --input " + in +
                              " --output " + out;
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      auto outputs = tessera::compiler::read_npz(out);
      ASSERT_EQ(outputs.size(), 1u);
      ASSERT_EQ(outputs[0].second.sizes().vec(), (std::vector<int64_t>{b, l, kModel}));
      std::vector<double> got = values(outputs[0].second), want = values(block(w, x));
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      EXPECT_LT(worst, 1e-5) << device << " batch " << b << " seq " << l;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
