// The OpenCL backend through the public API and the real runtime: tensors moved .to("opencl") and
// back, every op compared with the CPU backend (and a naive double reference for the core ones) on
// fresh random inputs, broadcast and strided cases; allocator statistics; the on-disk program cache
// across processes; and a machine without any OpenCL ICD, simulated in a child process.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"
#include "tessera/random.h"
#include "tessera/tessera.h"

namespace ts = tessera;
namespace fs = std::filesystem;

namespace {

bool have_opencl() { return ts::device_count(ts::kOpenCL) > 0; }

nlohmann::json opencl_properties() {
  for (const auto& d : ts::devices())
    if (d.device.type() == ts::kOpenCL && d.device.index() == 0) return nlohmann::json::parse(d.properties);
  return {};
}

double tolerance(ts::DType t) {
  switch (t) {
    case ts::kFloat16: return 4e-3;
    case ts::kBFloat16: return 3e-2;
    case ts::kFloat32: return 1e-5;
    case ts::kFloat64: return 1e-12;
    default: return 0;
  }
}

// Element-by-element comparison of two CPU tensors of the same shape, in double.
void expect_close(const ts::Tensor& got_any, const ts::Tensor& want_any, double scale = 1, const std::string& what = "") {
  ASSERT_EQ(got_any.sizes().vec(), want_any.sizes().vec()) << what;
  ASSERT_EQ(got_any.dtype(), want_any.dtype()) << what;
  const ts::Tensor got = got_any.cpu().to(ts::kFloat64).contiguous();
  const ts::Tensor want = want_any.cpu().to(ts::kFloat64).contiguous();
  const double tol = tolerance(want_any.dtype()) * scale;
  const double* g = got.data_ptr<double>();
  const double* w = want.data_ptr<double>();
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::fabs(w[i]))) << what << " at " << i;
  }
}

ts::Tensor random(std::vector<int64_t> sizes, ts::DType dtype, double lo = -2, double hi = 2) {
  ts::Tensor t = ts::rand(sizes) * (hi - lo) + lo;  // fresh values: the generator is not reseeded
  return t.to(dtype);
}

class OpenCL : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_opencl()) GTEST_SKIP() << "no OpenCL device on this machine";
  }
};

TEST_F(OpenCL, DeviceIsListedWithProperties) {
  bool found = false;
  for (const auto& d : ts::devices()) {
    if (d.device.type() != ts::kOpenCL) continue;
    found = true;
    EXPECT_EQ(d.name, "opencl:" + std::to_string(d.device.index()));
    EXPECT_EQ(d.plugin, "opencl");
    auto p = nlohmann::json::parse(d.properties);
    for (const char* key : {"name", "vendor", "driver_version", "global_memory", "fp64", "allocator", "program_cache"})
      EXPECT_TRUE(p.contains(key)) << key << " in " << d.properties;
    EXPECT_GT(p["global_memory"].get<uint64_t>(), 0u);
    for (const char* key : {"allocated", "cached", "hits", "misses"}) EXPECT_TRUE(p["allocator"].contains(key)) << key;
  }
  EXPECT_TRUE(found);
}

TEST_F(OpenCL, RoundTripKeepsEveryDtype) {
  std::vector<ts::DType> dtypes = {ts::kFloat32, ts::kFloat16, ts::kBFloat16, ts::kInt64, ts::kInt32,
                                   ts::kUInt8, ts::kBool};
  if (opencl_properties()["fp64"].get<bool>()) dtypes.push_back(ts::kFloat64);
  for (ts::DType dt : dtypes) {
    ts::Tensor x = random({7, 9}, dt, 0, 5);
    ts::Tensor d = x.to("opencl");
    EXPECT_TRUE(d.is("opencl"));
    EXPECT_TRUE(ts::equal(d.to("cpu"), x)) << ts::dtype_name(dt);
    // A strided view on the device comes back with the same values.
    ts::Tensor v = d.t().slice(0, 1, 8, 2);
    EXPECT_TRUE(ts::equal(v.cpu(), x.t().slice(0, 1, 8, 2).contiguous())) << ts::dtype_name(dt);
  }
}

TEST_F(OpenCL, BinaryOpsMatchNaiveReferenceWithBroadcastAndStrides) {
  ts::Tensor a = random({5, 6, 4}, ts::kFloat32).permute({2, 0, 1});  // [4, 5, 6], non-contiguous
  ts::Tensor b = random({6}, ts::kFloat32, 0.5, 2);                  // broadcast over [4, 5]
  ts::Tensor da = a.to("opencl"), db = b.to("opencl");
  struct Case {
    const char* name;
    std::function<ts::Tensor(const ts::Tensor&, const ts::Tensor&)> op;
    std::function<double(double, double)> ref;
  };
  const std::vector<Case> cases = {
      {"add", [](auto& x, auto& y) { return ts::add(x, y, 0.5); }, [](double x, double y) { return x + 0.5 * y; }},
      {"sub", [](auto& x, auto& y) { return ts::sub(x, y, 2); }, [](double x, double y) { return x - 2 * y; }},
      {"mul", [](auto& x, auto& y) { return ts::mul(x, y); }, [](double x, double y) { return x * y; }},
      {"div", [](auto& x, auto& y) { return ts::div(x, y); }, [](double x, double y) { return x / y; }},
      {"maximum", [](auto& x, auto& y) { return ts::maximum(x, y); }, [](double x, double y) { return std::max(x, y); }},
      {"minimum", [](auto& x, auto& y) { return ts::minimum(x, y); }, [](double x, double y) { return std::min(x, y); }},
  };
  const ts::Tensor ac = a.contiguous(), bc = b.contiguous();
  for (const auto& c : cases) {
    ts::Tensor out = c.op(da, db);
    ASSERT_TRUE(out.is("opencl")) << c.name;
    ts::Tensor want = ts::empty({4, 5, 6}, ts::kFloat64);
    double* w = want.data_ptr<double>();
    const float* pa = ac.data_ptr<float>();
    const float* pb = bc.data_ptr<float>();
    for (int64_t i = 0; i < 120; ++i) w[i] = c.ref(pa[i], pb[i % 6]);
    expect_close(out, want.to(ts::kFloat32), 2, c.name);
  }
}

TEST_F(OpenCL, ComparisonsGiveBool) {
  ts::Tensor a = random({8, 3}, ts::kFloat32).t(), b = random({3, 1}, ts::kFloat32);
  a = ts::cat({a, b.expand({3, 8}).slice(1, 0, 1)}, 1);  // some equal elements: [3, 9]
  ts::Tensor da = a.to("opencl"), db = b.to("opencl");
  using Fn = ts::Tensor (*)(const ts::Tensor&, const ts::Tensor&);
  for (Fn f : {Fn(ts::eq), Fn(ts::ne), Fn(ts::lt), Fn(ts::le), Fn(ts::gt), Fn(ts::ge)}) {
    ts::Tensor got = f(da, db);
    EXPECT_TRUE(got.is("opencl"));
    EXPECT_EQ(got.dtype(), ts::kBool);
    EXPECT_TRUE(ts::equal(got.cpu(), f(a, b)));
  }
}

TEST_F(OpenCL, WhereAndLogicalOpsMatchNaiveReference) {
  ts::Tensor a = random({5, 8}, ts::kFloat32), b = random({8}, ts::kFloat32);
  ts::Tensor cond = ts::gt(a, ts::zeros({1}));
  ts::Tensor got = ts::where(cond.to("opencl"), a.to("opencl"), b.to("opencl"));
  ASSERT_TRUE(got.is("opencl"));
  ts::Tensor want = ts::empty({5, 8});
  for (int64_t i = 0; i < 40; ++i) {
    const float x = a.data_ptr<float>()[i];
    want.data_ptr<float>()[i] = x > 0 ? x : b.data_ptr<float>()[i % 8];
  }
  EXPECT_TRUE(ts::equal(got.cpu(), want));
  ts::Tensor p = random({6, 7}, ts::kInt32, -1, 1), q = random({7}, ts::kInt32, -1, 1);
  ts::Tensor land = ts::logical_and(p.to("opencl"), q.to("opencl")).cpu();
  ts::Tensor lor = ts::logical_or(p.to("opencl"), q.to("opencl")).cpu();
  ASSERT_EQ(land.dtype(), ts::kBool);
  for (int64_t i = 0; i < 42; ++i) {
    const int32_t x = p.data_ptr<int32_t>()[i], y = q.data_ptr<int32_t>()[i % 7];
    EXPECT_EQ(land.data_ptr<bool>()[i], x != 0 && y != 0);
    EXPECT_EQ(lor.data_ptr<bool>()[i], x != 0 || y != 0);
  }
}

TEST_F(OpenCL, ElementwiseMatchesCpuAcrossDtypes) {
  std::vector<ts::DType> dtypes = {ts::kFloat16, ts::kBFloat16, ts::kInt32, ts::kInt64};
  if (opencl_properties()["fp64"].get<bool>()) dtypes.push_back(ts::kFloat64);
  for (ts::DType dt : dtypes) {
    ts::Tensor a = random({6, 10}, dt, -20, 20), b = random({10}, dt, 1, 5);
    ts::Tensor da = a.to("opencl"), db = b.to("opencl");
    expect_close(ts::add(da, db), ts::add(a, b), 2, "add " + std::string(ts::dtype_name(dt)));
    expect_close(ts::mul(da.t(), db.unsqueeze(1)), ts::mul(a.t(), b.unsqueeze(1)), 2, "mul");
    expect_close(ts::maximum(da, db), ts::maximum(a, b), 1, "maximum");
    EXPECT_TRUE(ts::equal(ts::lt(da, db).cpu(), ts::lt(a, b)));
    expect_close(ts::neg(da), ts::neg(a), 1, "neg");
    expect_close(ts::abs(da), ts::abs(a), 1, "abs");
  }
}

TEST_F(OpenCL, UnaryOpsMatchCpu) {
  using Fn = ts::Tensor (*)(const ts::Tensor&);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"neg", ts::neg}, {"abs", ts::abs}, {"exp", ts::exp}, {"sin", ts::sin}, {"cos", ts::cos},
      {"tanh", ts::tanh}, {"sigmoid", ts::sigmoid}, {"relu", ts::relu}, {"silu", ts::silu}, {"erf", ts::erf}};
  ts::Tensor x = random({9, 11}, ts::kFloat32, -3, 3).t();  // strided input
  ts::Tensor dx = x.to("opencl");
  for (const auto& [name, f] : ops) expect_close(f(dx), f(x), 10, name);
  ts::Tensor pos = random({50}, ts::kFloat32, 0.1, 4);
  ts::Tensor dpos = pos.to("opencl");
  expect_close(ts::log(dpos), ts::log(pos), 10, "log");
  expect_close(ts::sqrt(dpos), ts::sqrt(pos), 10, "sqrt");
  expect_close(ts::rsqrt(dpos), ts::rsqrt(pos), 10, "rsqrt");
  expect_close(ts::gelu(dx), ts::gelu(x), 10, "gelu");
  expect_close(ts::gelu(dx, "tanh"), ts::gelu(x, "tanh"), 10, "gelu tanh");
  ts::Tensor h = random({40}, ts::kFloat16, -3, 3);
  expect_close(ts::exp(h.to("opencl")), ts::exp(h), 2, "exp f16");
}

TEST_F(OpenCL, FillCopyAndConversion) {
  ts::Tensor d = ts::empty({4, 5}, ts::TensorOptions(ts::kFloat32).device("opencl"));
  d.fill_(1.75);
  EXPECT_TRUE(ts::equal(d.cpu(), ts::full({4, 5}, 1.75)));
  ts::Tensor x = random({5, 4}, ts::kFloat32);
  d.copy_(x.t().to("opencl"));
  EXPECT_TRUE(ts::equal(d.cpu(), x.t().contiguous()));
  d.t().copy_(x.to("opencl"));  // strided destination
  EXPECT_TRUE(ts::equal(d.cpu(), x.t().contiguous()));
  ts::Tensor h = d.to(ts::kFloat16);  // dtype conversion on the device
  EXPECT_TRUE(h.is("opencl"));
  expect_close(h, x.t().contiguous().to(ts::kFloat16), 1, "to f16");
  ts::Tensor i = d.to(ts::kInt64);
  EXPECT_TRUE(ts::equal(i.cpu(), x.t().contiguous().to(ts::kInt64)));
}

TEST_F(OpenCL, ReductionsMatchNaiveReference) {
  ts::Tensor x = random({4, 30, 7}, ts::kFloat32).transpose(0, 2);  // [7, 30, 4], strided
  ts::Tensor dx = x.to("opencl");
  ts::Tensor xc = x.contiguous();
  const float* p = xc.data_ptr<float>();
  // sum over dim 1, keepdim, checked against a double loop.
  ts::Tensor s = ts::sum(dx, {1}, true);
  ASSERT_EQ(s.sizes().vec(), (std::vector<int64_t>{7, 1, 4}));
  ts::Tensor want = ts::empty({7, 1, 4}, ts::kFloat64);
  for (int i = 0; i < 7; ++i)
    for (int k = 0; k < 4; ++k) {
      double acc = 0;
      for (int j = 0; j < 30; ++j) acc += p[(i * 30 + j) * 4 + k];
      want.data_ptr<double>()[i * 4 + k] = acc;
    }
  expect_close(s, want.to(ts::kFloat32), 10, "sum");
  for (bool keepdim : {false, true}) {
    for (std::vector<int64_t> dims : {std::vector<int64_t>{}, {0}, {2, 0}, {-1}}) {
      expect_close(ts::sum(dx, dims, keepdim), ts::sum(x, dims, keepdim), 20, "sum");
      expect_close(ts::mean(dx, dims, keepdim), ts::mean(x, dims, keepdim), 20, "mean");
      expect_close(ts::amax(dx, dims, keepdim), ts::amax(x, dims, keepdim), 1, "amax");
      expect_close(ts::amin(dx, dims, keepdim), ts::amin(x, dims, keepdim), 1, "amin");
    }
  }
  ts::Tensor big = random({300000}, ts::kFloat32, 0, 1);
  double total = 0;
  for (int64_t i = 0; i < big.numel(); ++i) total += big.data_ptr<float>()[i];
  EXPECT_NEAR(ts::sum(big.to("opencl")).cpu().item<double>(), total, 1e-5 * total);
  ts::Tensor ints = random({6, 8}, ts::kInt32, -100, 100);
  EXPECT_TRUE(ts::equal(ts::sum(ints.to("opencl"), {1}).cpu(), ts::sum(ints, {1})));
}

TEST_F(OpenCL, SoftmaxLogSoftmaxLayerNormMatchCpu) {
  ts::Tensor x = random({3, 200, 5}, ts::kFloat32, -6, 6);
  ts::Tensor dx = x.to("opencl");
  for (int64_t dim : {1, -1, 0}) {
    expect_close(ts::softmax(dx, dim), ts::softmax(x, dim), 10, "softmax");
    expect_close(ts::log_softmax(dx, dim), ts::log_softmax(x, dim), 10, "log_softmax");
  }
  // softmax rows sum to one (independent of the CPU backend).
  ts::Tensor rows = ts::sum(ts::softmax(dx, 1), {1}).cpu();
  for (int64_t i = 0; i < rows.numel(); ++i) EXPECT_NEAR(rows.data_ptr<float>()[i], 1.0, 1e-5);
  ts::Tensor w = random({5}, ts::kFloat32, 0.5, 1.5), b = random({5}, ts::kFloat32);
  expect_close(ts::layer_norm(dx, {5}, w.to("opencl"), b.to("opencl")), ts::layer_norm(x, {5}, w, b), 20, "layer_norm");
  expect_close(ts::layer_norm(dx.transpose(0, 1), {3, 5}), ts::layer_norm(x.transpose(0, 1), {3, 5}), 20,
               "layer_norm strided");
}

TEST_F(OpenCL, MatmulMatchesNaiveReference) {
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{64, 64, 64}, {37, 53, 29}, {1, 70, 3}}) {
    ts::Tensor a = random({m, k}, ts::kFloat32, -1, 1), b = random({n, k}, ts::kFloat32, -1, 1).t();
    ts::Tensor got = ts::matmul(a.to("opencl"), b.to("opencl"));
    ASSERT_TRUE(got.is("opencl"));
    ts::Tensor ac = a.contiguous(), bc = b.contiguous();
    ts::Tensor want = ts::empty({m, n}, ts::kFloat64);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += double(ac.data_ptr<float>()[i * k + q]) * bc.data_ptr<float>()[q * n + j];
        want.data_ptr<double>()[i * n + j] = s;
      }
    expect_close(got, want.to(ts::kFloat32), 20, "matmul");
  }
  // Batched with a broadcast batch dim, and f16.
  ts::Tensor a = random({2, 3, 17, 9}, ts::kFloat32), b = random({3, 9, 11}, ts::kFloat32);
  expect_close(ts::matmul(a.to("opencl"), b.to("opencl")), ts::matmul(a, b), 20, "batched matmul");
  ts::Tensor ah = random({20, 16}, ts::kFloat16, -1, 1), bh = random({16, 12}, ts::kFloat16, -1, 1);
  expect_close(ts::matmul(ah.to("opencl"), bh.to("opencl")), ts::matmul(ah.to(ts::kFloat32), bh.to(ts::kFloat32)).to(ts::kFloat16),
               4, "matmul f16");
}

TEST_F(OpenCL, OpsWithoutKernelFallBackToCpu) {
  ts::Tensor x = random({4, 6}, ts::kFloat32, 0.5, 2);
  ts::Tensor got = ts::pow(x.to("opencl"), 2.0);  // no OpenCL kernel: the CPU fallback runs it
  EXPECT_TRUE(got.is("opencl"));
  expect_close(got, ts::pow(x, 2.0), 2, "pow via fallback");
}

// A channels-last tensor keeps its layout across .to(device) both ways (its bytes move as they
// are), and conv2d, which this backend leaves to the CPU fallback, gives a channels-last result on
// the OpenCL device as it does on the CPU (Note [Channels-last activations] in docs/semantics.md).
TEST_F(OpenCL, ChannelsLastSurvivesTransfersAndTheFallback) {
  const std::vector<int64_t> nhwc = {6 * 7 * 5, 1, 7 * 5, 5};  // (N, 5, 6, 7): (H W C, 1, W C, C)
  ts::Tensor x = ts::contiguous(random({2, 5, 6, 7}, ts::kFloat32), ts::MemoryFormat::ChannelsLast);
  ts::Tensor xd = x.to("opencl");
  EXPECT_EQ(xd.strides().vec(), nhwc);
  ts::Tensor back = xd.cpu();
  EXPECT_EQ(back.strides().vec(), nhwc);
  expect_close(back, x, 0, "channels-last round trip");
  ts::Tensor w = random({4, 5, 3, 3}, ts::kFloat32);
  ts::Tensor yd = ts::conv2d(xd, w.to("opencl"), std::nullopt, {1, 1}, {1, 1});
  EXPECT_TRUE(yd.is("opencl"));
  EXPECT_EQ(ts::suggest_memory_format(yd), ts::MemoryFormat::ChannelsLast) << "strides " << yd.strides();
  expect_close(yd, ts::conv2d(x.contiguous(), w, std::nullopt, {1, 1}, {1, 1}), 20, "conv2d via fallback");
  // Pointwise kernels on the device write the channels-last output in memory order.
  ts::Tensor bias = random({1, 5, 1, 1}, ts::kFloat32);
  ts::Tensor rd = ts::relu(ts::add(xd, bias.to("opencl")));
  EXPECT_EQ(rd.strides().vec(), nhwc);
  expect_close(rd, ts::relu(ts::add(x, bias)), 1, "relu(x_cl + bias) on the device");
}

TEST_F(OpenCL, AllocatorReusesFreedBlocks) {
  const auto before = opencl_properties()["allocator"];
  { ts::Tensor t = ts::empty({1 << 18}, ts::TensorOptions(ts::kFloat32).device("opencl")); }
  const auto mid = opencl_properties()["allocator"];
  EXPECT_GE(mid["cached"].get<uint64_t>(), uint64_t(1) << 20);
  { ts::Tensor t = ts::empty({(1 << 18) - 100}, ts::TensorOptions(ts::kFloat32).device("opencl")); }
  const auto after = opencl_properties()["allocator"];
  EXPECT_EQ(after["hits"].get<uint64_t>(), mid["hits"].get<uint64_t>() + 1);
  EXPECT_EQ(after["misses"].get<uint64_t>(), mid["misses"].get<uint64_t>());
  (void)before;
  // Emptying the cache releases the free lists.
  const uint64_t cached = opencl_properties()["allocator"]["cached"].get<uint64_t>();
  EXPECT_GT(cached, 0u);
  EXPECT_EQ(ts::empty_cache(ts::Device("opencl")), cached);  // TESSERA_EXT_EMPTY_CACHE
  EXPECT_EQ(opencl_properties()["allocator"]["cached"].get<uint64_t>(), 0u);
}

// ---------------------------------------------------------------- child processes

struct ChildResult {
  int status = -1;
  std::string out;
};
ChildResult run(const std::string& command) {
  ChildResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  r.status = pclose(p);
  return r;
}
std::string self_exe() { return fs::read_symlink("/proc/self/exe").string(); }
fs::path make_temp_dir(const char* tag) {
  std::string tmpl = (fs::temp_directory_path() / (std::string("tessera_opencl_") + tag + "_XXXXXX")).string();
  char* d = mkdtemp(tmpl.data());
  return d ? fs::path(d) : fs::path();
}

// Run only as a child (see ProgramCacheIsReusedAcrossProcesses): one op, then the cache statistics.
TEST(OpenCLChild, DISABLED_RunOneOpAndPrintCacheStats) {
  ASSERT_GT(ts::device_count(ts::kOpenCL), 0);
  ts::Tensor x = random({64}, ts::kFloat32);
  expect_close(ts::silu(x.to("opencl")), ts::silu(x), 10, "silu");
  std::printf("PROGRAM_CACHE %s\n", opencl_properties()["program_cache"].dump().c_str());
}

nlohmann::json child_cache_stats(const fs::path& cache) {
  ChildResult r = run("TESSERA_CACHE_DIR='" + cache.string() + "' '" + self_exe() +
                      "' --gtest_also_run_disabled_tests --gtest_filter=OpenCLChild.DISABLED_RunOneOpAndPrintCacheStats");
  EXPECT_EQ(r.status, 0) << r.out;
  const auto pos = r.out.find("PROGRAM_CACHE ");
  if (pos == std::string::npos) {
    ADD_FAILURE() << "no statistics in the child's output:\n" << r.out;
    return {};
  }
  return nlohmann::json::parse(r.out.substr(pos + 14, r.out.find('\n', pos) - pos - 14));
}

TEST_F(OpenCL, ProgramCacheIsReusedAcrossProcesses) {
  const fs::path cache = make_temp_dir("cache");
  ASSERT_FALSE(cache.empty());
  const auto first = child_cache_stats(cache);
  EXPECT_GE(first.value("disk_misses", 0), 1) << first.dump();
  EXPECT_EQ(first.value("disk_hits", -1), 0) << first.dump();
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(cache))
    if (e.path().extension() == ".clbin") files.push_back(e.path());
  ASSERT_FALSE(files.empty()) << "no program binary stored under " << cache;

  const auto second = child_cache_stats(cache);
  EXPECT_GE(second.value("disk_hits", 0), 1) << second.dump();
  EXPECT_EQ(second.value("disk_misses", -1), 0) << second.dump();

  // Corrupt every cached binary: the next process detects it, rebuilds, and still computes right.
  for (const auto& f : files) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(40);
    io.write("garbage!", 8);
  }
  const auto third = child_cache_stats(cache);
  EXPECT_GE(third.value("corrupt", 0), 1) << third.dump();
  EXPECT_GE(third.value("disk_misses", 0), 1) << third.dump();
  fs::remove_all(cache);
}

// Run only as a child with OCL_ICD_VENDORS pointing at an empty folder.
TEST(OpenCLChild, DISABLED_NoIcdMeansZeroDevicesWithHint) {
  EXPECT_EQ(ts::device_count(ts::kOpenCL), 0);
  for (const auto& d : ts::devices()) EXPECT_NE(d.device.type(), ts::kOpenCL) << d.name;
  bool loaded = false;
  for (const auto& p : ts::plugins())
    if (p.name == "opencl") loaded = p.status == ts::PluginStatus::Loaded;
  EXPECT_TRUE(loaded) << "the OpenCL plugin must load without any ICD";
  const ts::BackendDevice* b = ts::backend_device_if_loaded(ts::kOpenCL);
  ASSERT_NE(b, nullptr);
  char reason[512] = {0};
  EXPECT_EQ(b->iface->device_count(b->self, reason, sizeof reason), 0);
  std::printf("REASON %s\n", reason);
  EXPECT_NE(std::string(reason).find("no OpenCL platform found"), std::string::npos) << reason;
  EXPECT_NE(std::string(reason).find("pocl-opencl-icd"), std::string::npos) << reason;
}

TEST(OpenCLNoIcd, PluginLoadsAndReportsZeroDevicesWithHint) {
  const fs::path vendors = make_temp_dir("vendors");
  ASSERT_FALSE(vendors.empty());
  ChildResult r = run("OCL_ICD_VENDORS='" + vendors.string() + "' '" + self_exe() +
                      "' --gtest_also_run_disabled_tests --gtest_filter=OpenCLChild.DISABLED_NoIcdMeansZeroDevicesWithHint");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("REASON no OpenCL platform found"), std::string::npos) << r.out;
#ifdef TESSERA_CLI_PATH
  ChildResult devices = run("OCL_ICD_VENDORS='" + vendors.string() + "' '" TESSERA_CLI_PATH "' devices");
  EXPECT_EQ(devices.status, 0) << devices.out;
  EXPECT_EQ(devices.out.find("opencl:0"), std::string::npos) << devices.out;
  EXPECT_NE(devices.out.find("no OpenCL platform found"), std::string::npos) << devices.out;
  ChildResult plugins = run("OCL_ICD_VENDORS='" + vendors.string() + "' '" TESSERA_CLI_PATH "' plugins --load");
  EXPECT_EQ(plugins.status, 0) << plugins.out;
  bool opencl_loaded = false;
  std::istringstream lines(plugins.out);
  for (std::string line; std::getline(lines, line);)
    if (line.find("opencl") != std::string::npos && line.find("loaded") != std::string::npos) opencl_loaded = true;
  EXPECT_TRUE(opencl_loaded) << plugins.out;
#endif
  fs::remove_all(vendors);
}

}  // namespace

// ---------------------------------------------------------------- streams (tessera/stream.h)

namespace {

// A kernel on a second queue reads `a`; the host frees `a` at once after record_stream and fills a
// new tensor of the same size on the default queue. The freed buffer must not be handed to the new
// tensor while the kernel may still read it (Note [Stream-ordered allocation]), so the kernel's
// result is exact; once the stream has finished, the buffer is reused (not leaked).
TEST_F(OpenCL, BufferFreedAfterRecordStreamIsNotReusedBeforeThatStreamsWork) {
  const ts::Device dev("opencl:0");
  constexpr int64_t n = 384;
  std::vector<float> values(size_t(n * n));
  for (int64_t i = 0; i < n * n; ++i) values[size_t(i)] = float(i % 5 - 2);
  std::vector<double> want(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < n; ++j) want[size_t(i * n + j)] += double(values[size_t(i * n + k)]) * values[size_t(k * n + j)];

  ts::Stream side = ts::Stream::create(dev);
  ASSERT_FALSE(side.is_default());
  ts::Tensor a = ts::tensor(values, {n, n}).to(dev);
  ts::synchronize(dev);
  void* const a_buffer = a.storage()->data();
  ts::Tensor y;
  {
    ts::StreamGuard guard(side);
    y = ts::matmul(a, a);
  }
  ts::record_stream(a, side);
  a = ts::Tensor();                              // freed while the side queue may still read it
  ts::Tensor b = ts::full({n, n}, 100.0, ts::TensorOptions(ts::kFloat32).device(dev));  // the default queue
  void* const b_buffer = b.storage()->data();
  side.synchronize();
  ts::Tensor c = ts::empty({n, n}, ts::TensorOptions(ts::kFloat32).device(dev));
  EXPECT_TRUE(b_buffer == a_buffer || c.storage()->data() == a_buffer)
      << "the buffer freed after record_stream was not reused once its stream had finished";
  ts::Tensor h;
  {
    ts::StreamGuard guard(side);
    h = y.to(ts::Device("cpu")).contiguous();
  }
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(double(h.data_ptr<float>()[i]), want[i]) << i;
  ts::Tensor bh = b.to(ts::Device("cpu")).contiguous();
  EXPECT_EQ(bh.data_ptr<float>()[0], 100.0f);
}

TEST_F(OpenCL, KernelsRunOnTheCurrentStreamAndAnEventOrdersThem) {
  const ts::Device dev("opencl:0");
  ts::Stream s1 = ts::Stream::create(dev), s2 = ts::Stream::create(dev);
  ts::Tensor x = ts::tensor(std::vector<float>{1, 2, 3, 4}, {4}).to(dev);
  ts::synchronize(dev);
  ts::Tensor y, z;
  ts::Event done;
  {
    ts::StreamGuard g(s1);
    y = ts::mul(x, x);
    done.record(s1);
  }
  s2.wait(done);
  {
    ts::StreamGuard g(s2);
    z = ts::add(y, x);
    ts::Tensor h = z.to(ts::Device("cpu")).contiguous();
    const float want[] = {2, 6, 12, 20};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(h.data_ptr<float>()[i], want[i]) << i;
  }
  // OpenCL queues are made without profiling: no event times, and a clear error says so.
  ts::Event a, b;
  a.record(s1);
  b.record(s1);
  try {
    (void)a.elapsed_time(b);
    ADD_FAILURE() << "elapsed_time on OpenCL did not throw";
  } catch (const ts::Error& e) {
    EXPECT_NE(std::string(e.what()).find("reports no event times"), std::string::npos) << e.what();
  }
}

}  // namespace

// Note [Generators]: the same seed gives the same numbers on the OpenCL device as on the CPU, from
// the device's own Philox kernels (uniform values bit for bit; normal ones up to log/cos rounding).
TEST(OpenCLGenerators, SameSeedSameValuesAsTheCpuFromDeviceKernels) {
  if (!have_opencl()) GTEST_SKIP() << "no OpenCL device on this machine";
  ts::Dispatcher& disp = ts::Dispatcher::instance();
  for (const char* op : {"uniform_", "normal_"})
    EXPECT_EQ(disp.resolution(disp.op(op), ts::kOpenCL, ts::kFloat32), ts::Resolution::Kernel) << op;
  ts::Generator on_cpu(ts::Device("cpu"), 42), on_cl(ts::Device("opencl:0"), 42);
  const ts::Tensor u_cpu = ts::rand({4097}, on_cpu);
  const ts::Tensor u_cl = ts::rand({4097}, on_cl, ts::TensorOptions(ts::kFloat32).device("opencl:0"));
  EXPECT_TRUE(ts::equal(u_cl.cpu(), u_cpu));
  const float* p = u_cpu.const_data_ptr<float>();
  for (uint64_t i = 0; i < 4097; ++i) ASSERT_EQ(p[i], ts::philox::uniform(42, i)) << i;
  EXPECT_EQ(on_cl.offset(), 4097u);
  ts::Tensor n_cpu = ts::empty({3, 500}), n_cl = ts::empty({3, 500}, ts::TensorOptions(ts::kFloat32).device("opencl:0"));
  ts::normal_(n_cpu, 1.5, 2.0, ts::Generator(ts::Device("cpu"), 7));
  ts::normal_(n_cl, 1.5, 2.0, ts::Generator(ts::Device("opencl:0"), 7));
  expect_close(n_cl, n_cpu, 10, "normal_ on OpenCL vs the CPU");
  // A strided destination draws in row-major order of the view.
  ts::Tensor base = ts::zeros({6, 4}, ts::TensorOptions(ts::kFloat32).device("opencl:0"));
  ts::Tensor view = base.t();  // [4, 6], not contiguous
  ts::uniform_(view, 0.0, 1.0, ts::Generator(ts::Device("cpu"), 3));
  ts::Tensor want = ts::empty({4, 6});
  ts::uniform_(want, 0.0, 1.0, ts::Generator(ts::Device("cpu"), 3));
  EXPECT_TRUE(ts::equal(view.cpu().contiguous(), want));
}
