// tessera::sparse through the runtime and the sparse plugin (loaded from the build tree): the
// refusal message, compression round trips, linear and matmul on semi-structured weights against a
// naive double loop over the densified pruned weight (fresh random inputs, tails, bias / no bias),
// the dense path above the threshold, and the densify fallback for other ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace {

using tessera::Tensor;
namespace sp = tessera::sparse;

Tensor cast(const Tensor& t, tessera::DType dt) { return t.dtype() == dt ? t : t.to(dt); }

std::vector<double> as_doubles(const Tensor& t) {
  Tensor d = t.to(tessera::kFloat64).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// y = x w^T + bias in double, x [b, k], w [n, k].
std::vector<double> reference_linear(const Tensor& x, const Tensor& w, const Tensor* bias) {
  const int64_t b = x.size(0), k = x.size(1), n = w.size(0);
  std::vector<double> xs = as_doubles(x), ws = as_doubles(w), bs = bias ? as_doubles(*bias) : std::vector<double>();
  std::vector<double> y(size_t(b * n));
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? bs[size_t(j)] : 0.0;
      for (int64_t l = 0; l < k; ++l) acc += xs[size_t(i * k + l)] * ws[size_t(j * k + l)];
      y[size_t(i * n + j)] = acc;
    }
  return y;
}

void expect_close(const Tensor& got, const std::vector<double>& want, double tol) {
  std::vector<double> g = as_doubles(got);
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
}

TEST(SparseApi, PluginIsListedAsKernels) {
  tessera::load_plugins_of_kind("kernels");
  bool found = false;
  for (const auto& p : tessera::plugins())
    if (p.name == "sparse") {
      found = true;
      EXPECT_EQ(p.kind, tessera::PluginKind::Kernels);
      EXPECT_EQ(tessera::plugin_status_name(p.status), std::string("loaded")) << p.reason;
    }
  EXPECT_TRUE(found);
}

// Which way linear went, from the profiler's resolution column: the sparse kernel below the
// threshold, the densify fallback (Note [Sparse densify fallback]) from it on.
TEST(SparseApi, PluginKernelRunsBelowTheThresholdOnly) {
  tessera::manual_seed(16);
  Tensor s = sp::to_sparse_semi_structured(sp::prune_2_4(tessera::randn({8, 64})));
  tessera::profiler_clear();
  tessera::profiler_enable("summary");
  tessera::linear(tessera::randn({31, 64}), s);
  std::string below = tessera::profiler_summary();
  tessera::profiler_clear();
  tessera::linear(tessera::randn({32, 64}), s);
  std::string above = tessera::profiler_summary();
  tessera::profiler_enable("");
  tessera::profiler_clear();
  EXPECT_NE(below.find("linear"), std::string::npos) << below;
  EXPECT_EQ(below.find("sparse densify"), std::string::npos) << below;
  EXPECT_NE(above.find("sparse densify"), std::string::npos) << above;
}

// bfloat16 goes dense from batch 4 (Note [Sparse dense threshold]): sparse at 3, dense at 4.
TEST(SparseApi, Bf16TakesTheDensePathFromBatchFour) {
  tessera::manual_seed(17);
  Tensor s = sp::to_sparse_semi_structured(sp::prune_2_4(tessera::randn({8, 64}).to(tessera::kBFloat16)));
  tessera::profiler_clear();
  tessera::profiler_enable("summary");
  tessera::linear(tessera::randn({3, 64}).to(tessera::kBFloat16), s);
  std::string below = tessera::profiler_summary();
  tessera::profiler_clear();
  tessera::linear(tessera::randn({4, 64}).to(tessera::kBFloat16), s);
  std::string above = tessera::profiler_summary();
  tessera::profiler_enable("");
  tessera::profiler_clear();
  EXPECT_NE(below.find("linear"), std::string::npos) << below;
  EXPECT_EQ(below.find("sparse densify"), std::string::npos) << below;
  EXPECT_NE(above.find("sparse densify"), std::string::npos) << above;
}

TEST(SparseApi, PruneKeepsTheTwoLargestMagnitudes) {
  Tensor w = tessera::empty({2, 6});
  const float v[] = {1, -5, 3, 2, 7, -8, /**/ 0, 0, 4, 4, 1, 1};
  std::copy(v, v + 12, w.data_ptr<float>());
  Tensor p = sp::prune_2_4(w);
  const float want[] = {0, -5, 3, 0, 7, -8, /**/ 0, 0, 4, 4, 1, 1};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(p.data_ptr<float>()[i], want[i]) << "at " << i;
  EXPECT_FALSE(sp::is_sparse(p));
}

TEST(SparseApi, RefusesAWeightThatIsNot24) {
  Tensor w = tessera::zeros({3, 8});
  w.data_ptr<float>()[2 * 8 + 4] = 1.f;
  w.data_ptr<float>()[2 * 8 + 5] = 2.f;
  w.data_ptr<float>()[2 * 8 + 6] = 3.f;
  try {
    sp::to_sparse_semi_structured(w);
    FAIL() << "expected an error";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the weight is not 2:4 sparse: row 2, group 1 (columns 4..7) has more than "
                                         "two non-zeros; prune it first with tessera::sparse::prune_2_4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(sp::to_sparse_semi_structured(tessera::zeros({8})), tessera::Error);
}

TEST(SparseApi, RoundTripsThroughTheCompressedForm) {
  tessera::manual_seed(11);
  for (tessera::DType dt : {tessera::kFloat32, tessera::kBFloat16, tessera::kFloat16}) {
    Tensor w = sp::prune_2_4(cast(tessera::randn({5, 13}), dt));
    Tensor s = sp::to_sparse_semi_structured(w);
    EXPECT_TRUE(sp::is_sparse(s));
    EXPECT_EQ(s.sizes(), w.sizes());
    EXPECT_EQ(s.dtype(), dt);
    expect_close(sp::to_dense(s), as_doubles(w), 0);
    EXPECT_NE(sp::describe(s).find("SparseSemiStructuredTensor(shape=[5, 13]"), std::string::npos) << sp::describe(s);
  }
}

TEST(SparseApi, LinearMatchesDoubleLoop) {
  tessera::manual_seed(12);
  for (tessera::DType dt : {tessera::kFloat32, tessera::kBFloat16})
    for (int64_t n : {1, 7, 64})
      for (int64_t k : {5, 64, 100})
        for (int64_t batch : {1, 3, 15, 16, 33})
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE(std::string(tessera::dtype_name(dt)) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                         " batch " + std::to_string(batch) + (with_bias ? " bias" : ""));
            Tensor w = sp::prune_2_4(cast(tessera::randn({n, k}), dt));
            Tensor x = cast(tessera::randn({batch, k}), dt), b = cast(tessera::randn({n}), dt);
            Tensor s = sp::to_sparse_semi_structured(w);
            Tensor y = with_bias ? tessera::linear(x, s, b) : tessera::linear(x, s);
            EXPECT_EQ(y.sizes(), (std::vector<int64_t>{batch, n}));
            expect_close(y, reference_linear(x, w, with_bias ? &b : nullptr),
                         dt == tessera::kBFloat16 ? 2e-2 : 1e-4 * std::sqrt(double(k)));
          }
}

TEST(SparseApi, LinearAboveTheThresholdTakesTheDensePath) {
  tessera::manual_seed(13);
  Tensor w = sp::prune_2_4(tessera::randn({33, 70}));
  Tensor x = tessera::randn({40, 70}), b = tessera::randn({33});
  Tensor y = tessera::linear(x, sp::to_sparse_semi_structured(w), b);
  expect_close(y, reference_linear(x, w, &b), 1e-4 * std::sqrt(70.0));
}

TEST(SparseApi, Int8LinearWrapsLikeTheDenseKernel) {
  tessera::manual_seed(18);
  Tensor w = sp::prune_2_4((tessera::randn({6, 40}) * 40).to(tessera::kInt8));
  Tensor x = (tessera::randn({3, 40}) * 40).to(tessera::kInt8), b = (tessera::randn({6}) * 40).to(tessera::kInt8);
  Tensor y = tessera::linear(x, sp::to_sparse_semi_structured(w), b);
  ASSERT_EQ(y.dtype(), tessera::kInt8);
  std::vector<double> xs = as_doubles(x), ws = as_doubles(w), bs = as_doubles(b), ys = as_doubles(y);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 6; ++j) {
      int64_t acc = int64_t(bs[size_t(j)]);
      for (int64_t l = 0; l < 40; ++l) acc += int64_t(xs[size_t(i * 40 + l)]) * int64_t(ws[size_t(j * 40 + l)]);
      EXPECT_EQ(int64_t(ys[size_t(i * 6 + j)]), int64_t(int8_t(uint8_t(uint64_t(acc))))) << i << ", " << j;
    }
}

TEST(SparseApi, EmptyInnerDimGivesTheBias) {
  tessera::manual_seed(17);
  Tensor s = sp::to_sparse_semi_structured(tessera::zeros({3, 0}));
  Tensor b = tessera::randn({3});
  Tensor y = tessera::linear(tessera::zeros({2, 0}), s, b);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, 3}));
  std::vector<double> bs = as_doubles(b);
  expect_close(y, {bs[0], bs[1], bs[2], bs[0], bs[1], bs[2]}, 0);
}

TEST(SparseApi, MatmulMatchesDoubleLoop) {
  tessera::manual_seed(14);
  for (int64_t p : {1, 5, 40}) {
    Tensor w = sp::prune_2_4(tessera::randn({9, 36}));
    Tensor x = tessera::randn({36, p});
    Tensor y = tessera::matmul(sp::to_sparse_semi_structured(w), x);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{9, p}));
    // w x = (x^T w^T)^T
    std::vector<double> ref = reference_linear(x.t().contiguous(), w, nullptr), want(ref.size());
    for (int64_t i = 0; i < 9; ++i)
      for (int64_t j = 0; j < p; ++j) want[size_t(i * p + j)] = ref[size_t(j * 9 + i)];
    expect_close(y, want, 1e-4 * 6);
  }
}

TEST(SparseApi, OtherOpsRunOnTheDensifiedTensor) {
  tessera::manual_seed(15);
  Tensor w = sp::prune_2_4(tessera::randn({4, 8}));
  Tensor s = sp::to_sparse_semi_structured(w);
  Tensor y = tessera::add(s, tessera::ones({4, 8}));
  std::vector<double> want = as_doubles(w);
  for (double& v : want) v += 1;
  expect_close(y, want, 1e-6);
  EXPECT_FALSE(sp::is_sparse(y));
}

TEST(SparseApi, StrictModeRefusesToDensify) {
  Tensor s = sp::to_sparse_semi_structured(sp::prune_2_4(tessera::randn({4, 8})));
  setenv("TESSERA_SPARSE_STRICT", "1", 1);
  try {
    tessera::mul(s, tessera::ones({4, 8}));
    unsetenv("TESSERA_SPARSE_STRICT");
    FAIL() << "expected an error";
  } catch (const tessera::Error& e) {
    unsetenv("TESSERA_SPARSE_STRICT");
    EXPECT_NE(std::string(e.what()).find("TESSERA_SPARSE_STRICT=1 forbids densifying"), std::string::npos) << e.what();
  }
}

// Printing shows the dense values, the size, the dtype and that the tensor is 2:4 semi-structured.
TEST(SparseApi, PrintsTheDenseValuesAndTheLayout) {
  Tensor w = tessera::zeros({2, 6});
  const float v[] = {1, 0, 0, -2, 0, 5, /**/ 0, 3, 4, 0, 0, 0};
  std::copy(v, v + 12, w.data_ptr<float>());
  Tensor s = sp::to_sparse_semi_structured(w);
  std::ostringstream os;
  os << s;
  EXPECT_EQ(os.str(),
            "tensor([[ 1.,  0.,  0., -2.,  0.,  5.],\n"
            "        [ 0.,  3.,  4.,  0.,  0.,  0.]], size=(2, 6), dtype=float32,\n"
            "       layout=sparse_semi_structured(2:4))");
  Tensor b = sp::to_sparse_semi_structured(w.to(tessera::kBFloat16));
  EXPECT_NE(tessera::to_string(b).find("dtype=bfloat16"), std::string::npos) << tessera::to_string(b);
  EXPECT_NE(tessera::to_string(b).find("[ 0.,  3.,  4.,  0.,  0.,  0.]]"), std::string::npos) << tessera::to_string(b);
}

// to(cpu) keeps the compressed tensor (the same one, as for any tensor already there).
TEST(SparseApi, ToTheCpuKeepsItSemiStructured) {
  Tensor s = sp::to_sparse_semi_structured(sp::prune_2_4(tessera::randn({4, 8})));
  Tensor c = s.to("cpu");
  EXPECT_TRUE(sp::is_sparse(c));
  EXPECT_EQ(c.impl(), s.impl());
  EXPECT_TRUE(sp::is_sparse(s.cpu()));
}

#ifdef TESSERA_SPARSE_TEST_ACCELERATOR
// to(another device) densifies (a semi-structured tensor lives on the CPU only): the result is the
// dense weight on that device.
TEST(SparseApi, ToAnotherDeviceGivesTheDenseWeightThere) {
  tessera::manual_seed(19);
  Tensor w = sp::prune_2_4(tessera::randn({5, 12}));
  Tensor d = sp::to_sparse_semi_structured(w).to("my_hardware_device");
  EXPECT_FALSE(sp::is_sparse(d));
  EXPECT_EQ(d.device().str(), "my_hardware_device:0");
  EXPECT_EQ(d.sizes(), w.sizes());
  expect_close(d.cpu(), as_doubles(w), 0);
}
#endif

// Run once with the plugin loaded and once (ctest sparse_api_plugin_disabled) with
// TESSERA_PLUGINS_DISABLE=sparse: disabled, the plugin is listed as such and linear takes the
// dense path with the same result.
TEST(SparseApi, DisablingThePluginDensifies) {
  const char* disable = std::getenv("TESSERA_PLUGINS_DISABLE");
  const bool disabled = disable && std::strstr(disable, "sparse");
  tessera::manual_seed(20);
  Tensor w = sp::prune_2_4(tessera::randn({8, 64}));
  Tensor s = sp::to_sparse_semi_structured(w);
  bool listed = false;
  for (const auto& p : tessera::plugins())
    if (p.name == "sparse") {
      listed = true;
      EXPECT_EQ(tessera::plugin_status_name(p.status), std::string(disabled ? "disabled" : "loaded")) << p.reason;
      EXPECT_EQ(p.kind, tessera::PluginKind::Kernels);
    }
  EXPECT_TRUE(listed);
  Tensor x = tessera::randn({1, 64});
  tessera::profiler_clear();
  tessera::profiler_enable("summary");
  Tensor y = tessera::linear(x, s);
  const std::string summary = tessera::profiler_summary();
  tessera::profiler_enable("");
  tessera::profiler_clear();
  EXPECT_EQ(summary.find("sparse densify") != std::string::npos, disabled) << summary;
  expect_close(y, reference_linear(x, w, nullptr), 1e-4 * 8);
}

}  // namespace
