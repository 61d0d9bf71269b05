// Every CUDA kernel against the CPU backend on fresh random inputs, the caching allocator on the
// device, and streams/events through the device interface. Skipped (with the reason) where
// device_count("cuda") == 0.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tessera/cuda/cuda_plugin.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace {

using tessera::DType;
using tessera::Tensor;

std::string no_device_reason() {
  if (tessera::device_count("cuda") > 0) return {};
  const tessera::BackendDevice& b = tessera::backend_device(tessera::DeviceType::CUDA);
  char reason[512] = {0};
  b.iface->device_count(b.self, reason, sizeof(reason));
  return reason;
}

// Skips without a device, except under TESSERA_REQUIRE_CUDA=1 (the GPU run), where zero devices
// fail the test instead: a GPU check must not pass by skipping everything.
bool cuda_required() {
  const char* v = std::getenv("TESSERA_REQUIRE_CUDA");
  return v && std::string(v) == "1";
}
#define REQUIRE_CUDA_DEVICE()                                                              \
  do {                                                                                     \
    const std::string why = no_device_reason();                                            \
    if (!why.empty() && cuda_required()) FAIL() << "TESSERA_REQUIRE_CUDA=1 and no CUDA device: " << why; \
    if (!why.empty()) GTEST_SKIP() << "no CUDA device: " << why;                           \
  } while (0)

// The plugin's count of queued CUDA kernels (tessera_cuda_kernel_launches): an op that went to the
// CPU fallback leaves it unchanged.
uint64_t cuda_kernel_launches() {
  std::string why;
  if (!tessera::ensure_backend_loaded(tessera::DeviceType::CUDA, &why)) return 0;
  std::string path;
  for (const auto& p : tessera::plugins())
    if (p.name == "cuda") path = p.library;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return 0;
  auto fn = reinterpret_cast<tessera_cuda_kernel_launches_fn_t>(dlsym(lib, TESSERA_CUDA_KERNEL_LAUNCHES_NAME));
  const uint64_t n = fn ? fn() : 0;
  dlclose(lib);
  return n;
}
// Runs `f` and expects it to have queued at least one CUDA kernel.
#define EXPECT_RUNS_ON_CUDA(what, ...)                                            \
  do {                                                                            \
    const uint64_t launches_before_ = cuda_kernel_launches();                     \
    __VA_ARGS__;                                                                  \
    EXPECT_GT(cuda_kernel_launches(), launches_before_) << what << ": the CPU fallback ran, not CUDA"; \
  } while (0)

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType t, double scale = 1.0) {
  switch (t) {
    case DType::Float16: return {3e-3 * scale, 3e-3 * scale};
    case DType::BFloat16: return {1.6e-2 * scale, 1.6e-2 * scale};
    case DType::Float32: return {2e-5 * scale, 2e-5 * scale};
    default: return {0.0, 0.0};
  }
}

// Compares on the host in double; NaNs must match NaNs.
void expect_close(const Tensor& got, const Tensor& expected, Tol tol, const std::string& what) {
  ASSERT_EQ(got.sizes(), expected.sizes()) << what;
  ASSERT_EQ(got.dtype(), expected.dtype()) << what;
  Tensor g = got.cpu().to(tessera::kFloat64).contiguous();
  Tensor e = expected.cpu().to(tessera::kFloat64).contiguous();
  const double* gp = g.data_ptr<double>();
  const double* ep = e.data_ptr<double>();
  int64_t bad = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const bool both_nan = std::isnan(gp[i]) && std::isnan(ep[i]);
    if (both_nan) continue;
    if (!(std::abs(gp[i] - ep[i]) <= tol.atol + tol.rtol * std::abs(ep[i]))) {
      if (++bad <= 5) ADD_FAILURE() << what << ": element " << i << " got " << gp[i] << " expected " << ep[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.numel() << " elements differ";
}

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_CUDA_DEVICE();
    std::random_device rd;
    seed_ = rd();
    tessera::manual_seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
  }
  // N(0, 1) on the CPU in `t`, and its copy on cuda:0.
  std::pair<Tensor, Tensor> randn_pair(std::vector<int64_t> sizes, DType t) {
    Tensor cpu = tessera::randn(sizes).to(t);
    return {cpu, cpu.to("cuda:0")};
  }
  uint64_t seed_ = 0;
};

const DType kFloatTypes[] = {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16};

TEST_F(CudaKernels, BinaryOpsWithBroadcastingAndStrides) {
  for (DType t : kFloatTypes) {
    auto [a, da] = randn_pair({37, 65}, t);
    auto [b, db] = randn_pair({65}, t);
    auto [c, dc] = randn_pair({65, 37}, t);  // used transposed: a strided operand
    const Tensor ct = c.t(), dct = dc.t();
    const std::string tn(tessera::dtype_name(t));
    expect_close(tessera::add(da, db, 2.5), tessera::add(a, b, 2.5), tol_for(t), "add(alpha) " + tn);
    expect_close(tessera::sub(da, dct, 0.5), tessera::sub(a, ct, 0.5), tol_for(t), "sub(alpha) strided " + tn);
    expect_close(tessera::mul(da, db), tessera::mul(a, b), tol_for(t), "mul " + tn);
    expect_close(tessera::div(da, dct), tessera::div(a, ct), tol_for(t, 4), "div " + tn);
    expect_close(tessera::maximum(da, db), tessera::maximum(a, b), tol_for(t), "maximum " + tn);
    expect_close(tessera::minimum(dct, da), tessera::minimum(ct, a), tol_for(t), "minimum " + tn);
    for (auto [name, fn] : std::vector<std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&)>>{
             {"eq", tessera::eq}, {"ne", tessera::ne}, {"lt", tessera::lt}, {"le", tessera::le}, {"gt", tessera::gt},
             {"ge", tessera::ge}}) {
      EXPECT_TRUE(tessera::equal(fn(da, db).cpu(), fn(a, b))) << name << " " << tn;
    }
    // Contiguous, 16-byte aligned, large: the vectorised path, with an odd tail.
    auto [x, dx] = randn_pair({1 << 16 | 7}, t);
    auto [y, dy] = randn_pair({1 << 16 | 7}, t);
    expect_close(tessera::add(dx, dy), tessera::add(x, y), tol_for(t), "add vectorised " + tn);
  }
}

TEST_F(CudaKernels, IntegerBinaryAndUnaryOps) {
  std::mt19937 rng(static_cast<unsigned>(seed_));
  for (DType t : {tessera::kInt32, tessera::kInt64}) {
    std::vector<int32_t> va(300), vb(300);
    for (auto& v : va) v = int32_t(rng() % 2001) - 1000;
    for (auto& v : vb) v = int32_t(rng() % 2001) - 1000;
    Tensor a = tessera::tensor(va, {20, 15}).to(t), b = tessera::tensor(vb, {20, 15}).to(t);
    Tensor da = a.to("cuda:0"), db = b.to("cuda:0");
    const std::string tn(tessera::dtype_name(t));
    EXPECT_TRUE(tessera::equal(tessera::add(da, db, 3).cpu(), tessera::add(a, b, 3))) << "add " << tn;
    EXPECT_TRUE(tessera::equal(tessera::sub(da, db).cpu(), tessera::sub(a, b))) << "sub " << tn;
    EXPECT_TRUE(tessera::equal(tessera::mul(da, db).cpu(), tessera::mul(a, b))) << "mul " << tn;
    EXPECT_TRUE(tessera::equal(tessera::maximum(da, db).cpu(), tessera::maximum(a, b))) << "maximum " << tn;
    EXPECT_TRUE(tessera::equal(tessera::lt(da, db).cpu(), tessera::lt(a, b))) << "lt " << tn;
    EXPECT_TRUE(tessera::equal(tessera::neg(da).cpu(), tessera::neg(a))) << "neg " << tn;
    EXPECT_TRUE(tessera::equal(tessera::abs(da).cpu(), tessera::abs(a))) << "abs " << tn;
    EXPECT_TRUE(tessera::equal(tessera::relu(da).cpu(), tessera::relu(a))) << "relu " << tn;
  }
}

TEST_F(CudaKernels, UnaryOps) {
  using Fn = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"neg", tessera::neg},   {"abs", tessera::abs},         {"exp", tessera::exp},   {"sin", tessera::sin},
      {"cos", tessera::cos},   {"tanh", tessera::tanh},       {"sigmoid", tessera::sigmoid},
      {"relu", tessera::relu}, {"silu", tessera::silu},       {"erf", tessera::erf}};
  for (DType t : kFloatTypes) {
    auto [x, dx] = randn_pair({129, 33}, t);
    const std::string tn(tessera::dtype_name(t));
    for (auto [name, fn] : ops) expect_close(fn(dx), fn(x), tol_for(t, 10), std::string(name) + " " + tn);
    expect_close(tessera::exp(dx.t()), tessera::exp(x.t()), tol_for(t, 10), "exp strided " + tn);
    const Tensor pos = tessera::add(tessera::abs(x), tessera::full({1}, 0.1).to(t));
    const Tensor dpos = pos.to("cuda:0");
    expect_close(tessera::log(dpos), tessera::log(pos), tol_for(t, 10), "log " + tn);
    expect_close(tessera::sqrt(dpos), tessera::sqrt(pos), tol_for(t, 10), "sqrt " + tn);
    expect_close(tessera::rsqrt(dpos), tessera::rsqrt(pos), tol_for(t, 10), "rsqrt " + tn);
    expect_close(tessera::gelu(dx), tessera::gelu(x), tol_for(t, 10), "gelu " + tn);
    expect_close(tessera::gelu(dx, "tanh"), tessera::gelu(x, "tanh"), tol_for(t, 10), "gelu tanh " + tn);
  }
}

TEST_F(CudaKernels, FillAndCopyWithConversionAndStrides) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kInt32, tessera::kInt64,
                  tessera::kUInt8, tessera::kBool}) {
    Tensor d = tessera::empty({17, 19}, tessera::TensorOptions(t).device("cuda:0"));
    d.fill_(3);
    EXPECT_TRUE(tessera::equal(d.cpu(), tessera::full({17, 19}, 3).to(t))) << "fill_ " << tessera::dtype_name(t);
  }
  auto [x, dx] = randn_pair({31, 45}, tessera::kFloat32);
  for (DType t : kFloatTypes) {
    Tensor dst = tessera::empty({45, 31}, tessera::TensorOptions(t).device("cuda:0"));
    dst.copy_(dx.t());  // strided source, dtype conversion
    expect_close(dst, x.t().to(t), tol_for(t), std::string("copy_ to ") + std::string(tessera::dtype_name(t)));
    // Into a strided destination (a transposed view).
    Tensor dst2 = tessera::empty({31, 45}, tessera::TensorOptions(t).device("cuda:0"));
    dst2.t().copy_(dx.t().to(t));
    expect_close(dst2, x.to(t), tol_for(t), "copy_ into strided view");
  }
  Tensor ints = tessera::tensor(std::vector<int64_t>{-5, 0, 7, 1 << 20}, {4});
  EXPECT_TRUE(tessera::equal(ints.to("cuda:0").to(tessera::kInt32).cpu(), ints.to(tessera::kInt32)));
  EXPECT_TRUE(tessera::equal(ints.to("cuda:0").to(tessera::kFloat32).cpu(), ints.to(tessera::kFloat32)));
}

TEST_F(CudaKernels, ReductionsOverDims) {
  for (DType t : kFloatTypes) {
    auto [x, dx] = randn_pair({6, 70, 33}, t);
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = tol_for(t, t == tessera::kFloat32 ? 10 : 4);
    for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{{}, {0}, {1}, {2}, {0, 2}, {-1, -2}}) {
      for (bool keep : {false, true}) {
        const std::string what = " dims " + std::to_string(dims.size()) + " keepdim " + std::to_string(keep) + " " + tn;
        expect_close(tessera::sum(dx, dims, keep), tessera::sum(x, dims, keep), Tol{tol.rtol, tol.atol * 30}, "sum" + what);
        expect_close(tessera::mean(dx, dims, keep), tessera::mean(x, dims, keep), tol, "mean" + what);
        expect_close(tessera::amax(dx, dims, keep), tessera::amax(x, dims, keep), tol_for(t), "amax" + what);
        expect_close(tessera::amin(dx, dims, keep), tessera::amin(x, dims, keep), tol_for(t), "amin" + what);
      }
    }
    expect_close(tessera::sum(dx.transpose(0, 2), {0}), tessera::sum(x.transpose(0, 2), {0}), Tol{tol.rtol, tol.atol * 30},
                 "sum of a transposed view " + tn);
  }
}

TEST_F(CudaKernels, SoftmaxAndLogSoftmax) {
  for (DType t : kFloatTypes) {
    const std::string tn(tessera::dtype_name(t));
    for (std::vector<int64_t> shape : std::vector<std::vector<int64_t>>{{8, 100}, {3, 5000}, {5, 7, 9}}) {
      auto [x, dx] = randn_pair(shape, t);
      for (int64_t dim : {int64_t(-1), int64_t(0)}) {
        const std::string what = " dim " + std::to_string(dim) + " " + tn;
        expect_close(tessera::softmax(dx, dim), tessera::softmax(x, dim), tol_for(t, 4), "softmax" + what);
        expect_close(tessera::log_softmax(dx, dim), tessera::log_softmax(x, dim), tol_for(t, 4), "log_softmax" + what);
      }
    }
  }
}

TEST_F(CudaKernels, LayerNorm) {
  for (DType t : kFloatTypes) {
    auto [x, dx] = randn_pair({10, 3, 768}, t);
    auto [w, dw] = randn_pair({768}, t);
    auto [b, db] = randn_pair({768}, t);
    const std::string tn(tessera::dtype_name(t));
    expect_close(tessera::layer_norm(dx, {768}, dw, db), tessera::layer_norm(x, {768}, w, b), tol_for(t, 8),
                 "layer_norm " + tn);
    expect_close(tessera::layer_norm(dx, {3, 768}), tessera::layer_norm(x, {3, 768}), tol_for(t, 8),
                 "layer_norm without affine " + tn);
  }
}

TEST_F(CudaKernels, MatmulAndLinearThroughCublasLt) {
  for (DType t : kFloatTypes) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat32 ? Tol{1e-4, 1e-3} : Tol{2e-2, 5e-2};
    auto [a, da] = randn_pair({64, 96}, t);
    auto [b, db] = randn_pair({96, 80}, t);
    expect_close(tessera::matmul(da, db), tessera::matmul(a, b), tol, "matmul " + tn);
    auto [bt, dbt] = randn_pair({80, 96}, t);
    expect_close(tessera::matmul(da, dbt.t()), tessera::matmul(a, bt.t()), tol, "matmul transposed " + tn);
    auto [x, dx] = randn_pair({4, 3, 17, 96}, t);
    expect_close(tessera::matmul(dx, db), tessera::matmul(x, b), tol, "batched x shared " + tn);
    auto [y, dy] = randn_pair({4, 3, 96, 5}, t);
    expect_close(tessera::matmul(dx, dy), tessera::matmul(x, y), tol, "batched x batched " + tn);
    auto [v, dv] = randn_pair({96}, t);
    expect_close(tessera::matmul(da, dv), tessera::matmul(a, v), tol, "matrix x vector " + tn);
    auto [bias, dbias] = randn_pair({80}, t);
    expect_close(tessera::linear(dx, dbt, dbias), tessera::linear(x, bt, bias), tol, "linear with bias " + tn);
    expect_close(tessera::linear(dx, dbt), tessera::linear(x, bt), tol, "linear " + tn);
  }
}

// Both flash kernels: tensor cores (default) and CUDA cores (TESSERA_CUDA_FLASH_SIMT=1).
TEST_F(CudaKernels, FlashAttention) {
  for (const char* simt : {"0", "1"}) {
    setenv("TESSERA_CUDA_FLASH_SIMT", simt, 1);
    for (DType t : {tessera::kFloat16, tessera::kBFloat16}) {
      for (int64_t d : {int64_t(64), int64_t(128)}) {
        const std::string tn = std::string(tessera::dtype_name(t)) + " d=" + std::to_string(d) +
                               (simt[0] == '1' ? " (CUDA cores)" : " (tensor cores)");
        auto [q, dq] = randn_pair({2, 3, 77, d}, t);
        auto [k, dk] = randn_pair({2, 3, 101, d}, t);
        auto [v, dv] = randn_pair({2, 3, 101, d}, t);
        // Reference: the CPU in float32 from the same (rounded) inputs.
        const Tensor q32 = q.to(tessera::kFloat32), k32 = k.to(tessera::kFloat32), v32 = v.to(tessera::kFloat32);
        const Tol tol = t == tessera::kFloat16 ? Tol{1e-2, 1e-2} : Tol{3e-2, 3e-2};
        auto check = [&](const Tensor& got, const Tensor& ref, const std::string& what) {
          expect_close(got.to(tessera::kFloat32), ref, tol, what + " " + tn);
        };
        check(tessera::scaled_dot_product_attention(dq, dk, dv),
              tessera::scaled_dot_product_attention(q32, k32, v32), "sdpa");
        check(tessera::scaled_dot_product_attention(dq, dk, dv, std::nullopt, true),
              tessera::scaled_dot_product_attention(q32, k32, v32, std::nullopt, true), "sdpa causal");
        check(tessera::scaled_dot_product_attention(dq, dk, dv, std::nullopt, false, 0.3),
              tessera::scaled_dot_product_attention(q32, k32, v32, std::nullopt, false, 0.3), "sdpa scale");
        Tensor mask_bool = tessera::gt(tessera::rand({77, 101}), tessera::full({1}, 0.3));
        check(tessera::scaled_dot_product_attention(dq, dk, dv, mask_bool.to("cuda:0")),
              tessera::scaled_dot_product_attention(q32, k32, v32, mask_bool), "sdpa bool mask");
        Tensor mask_add = tessera::randn({3, 77, 101}).to(t);
        check(tessera::scaled_dot_product_attention(dq, dk, dv, mask_add.to("cuda:0")),
              tessera::scaled_dot_product_attention(q32, k32, v32, mask_add.to(tessera::kFloat32)), "sdpa additive mask");
        // A strided query (heads and sequence swapped in memory).
        auto [qs, dqs] = randn_pair({2, 77, 3, d}, t);
        check(tessera::scaled_dot_product_attention(dqs.transpose(1, 2), dk, dv),
              tessera::scaled_dot_product_attention(qs.transpose(1, 2).to(tessera::kFloat32), k32, v32), "sdpa strided q");
      }
    }
  }
  unsetenv("TESSERA_CUDA_FLASH_SIMT");
}

TEST_F(CudaKernels, CachingAllocatorReusesAndSplitsOnTheDevice) {
  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(tessera::DeviceType::CUDA, &why)) << why;
  std::string path;
  for (const auto& p : tessera::plugins())
    if (p.name == "cuda") path = p.library;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr) << path;
  auto stats = reinterpret_cast<tessera_cuda_memory_stats_fn_t>(dlsym(lib, TESSERA_CUDA_MEMORY_STATS_NAME));
  auto empty_cache = reinterpret_cast<tessera_cuda_empty_cache_fn_t>(dlsym(lib, TESSERA_CUDA_EMPTY_CACHE_NAME));
  ASSERT_TRUE(stats && empty_cache);
  tessera::synchronize(tessera::Device("cuda:0"));
  tessera_cuda_memory_stats_t before{}, after{};
  before.struct_size = after.struct_size = sizeof(before);
  ASSERT_EQ(stats(0, &before), 0);
  {
    Tensor a = tessera::empty({1000}, tessera::TensorOptions(tessera::kFloat32).device("cuda:0"));  // 4000 B
    Tensor b = tessera::empty({1000}, tessera::TensorOptions(tessera::kFloat32).device("cuda:0"));
  }
  Tensor c = tessera::empty({1000}, tessera::TensorOptions(tessera::kFloat32).device("cuda:0"));
  ASSERT_EQ(stats(0, &after), 0);
  EXPECT_GE(after.hits, before.hits + 1) << "the third tensor reuses a freed block";
  EXPECT_GE(after.splits, before.splits + 1);
  EXPECT_GE(after.reserved_bytes, after.allocated_bytes);
  const std::string props = tessera::devices().empty() ? "" : [] {
    for (const auto& d : tessera::devices())
      if (d.device.type() == tessera::DeviceType::CUDA) return d.properties;
    return std::string();
  }();
  EXPECT_NE(props.find("\"allocator\""), std::string::npos) << props;
  EXPECT_NE(props.find("\"compute_capability\""), std::string::npos) << props;
  c = Tensor();
  tessera::synchronize(tessera::Device("cuda:0"));
  empty_cache(0);
  tessera_cuda_memory_stats_t emptied{};
  emptied.struct_size = sizeof(emptied);
  ASSERT_EQ(stats(0, &emptied), 0);
  EXPECT_LE(emptied.reserved_bytes, after.reserved_bytes);
  EXPECT_EQ(emptied.cached_bytes + emptied.allocated_bytes, emptied.reserved_bytes);
  dlclose(lib);
}

TEST_F(CudaKernels, StreamsAndEventsThroughTheDeviceInterface) {
  const tessera::BackendDevice& b = tessera::backend_device(tessera::DeviceType::CUDA);
  const tessera_device_interface_t* i = b.iface;
  void *s1 = nullptr, *s2 = nullptr, *ev = nullptr, *buf = nullptr;
  ASSERT_EQ(i->stream_create(b.self, 0, &s1), nullptr);
  ASSERT_EQ(i->stream_create(b.self, 0, &s2), nullptr);
  ASSERT_EQ(i->event_create(b.self, 0, &ev), nullptr);
  const size_t n = (size_t(9) << 20) + 123;  // more than two staging chunks
  ASSERT_EQ(i->memory_allocate(b.self, 0, n, &buf), nullptr);
  std::vector<unsigned char> src(n), dst(n, 0);
  std::mt19937 rng(static_cast<unsigned>(seed_));
  for (auto& v : src) v = static_cast<unsigned char>(rng());
  ASSERT_EQ(i->memory_copy_from_host(b.self, 0, buf, 0, src.data(), n, s1), nullptr);
  ASSERT_EQ(i->event_record(b.self, 0, ev, s1), nullptr);
  ASSERT_EQ(i->event_wait(b.self, 0, ev, s2), nullptr);  // s2 sees s1's copy
  ASSERT_EQ(i->memory_copy_to_host(b.self, 0, dst.data(), buf, 0, n, s2), nullptr);
  EXPECT_EQ(src, dst);
  // Offsets and device-to-device copies.
  void* buf2 = nullptr;
  ASSERT_EQ(i->memory_allocate(b.self, 0, n, &buf2), nullptr);
  ASSERT_EQ(i->memory_copy_device(b.self, 0, buf2, 7, 0, buf, 3, n - 10, s2), nullptr);
  ASSERT_EQ(i->event_record(b.self, 0, ev, s2), nullptr);
  ASSERT_EQ(i->event_synchronize(b.self, 0, ev), nullptr);
  std::vector<unsigned char> part(n - 10);
  ASSERT_EQ(i->memory_copy_to_host(b.self, 0, part.data(), buf2, 7, n - 10, nullptr), nullptr);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), src.begin() + 3));
  ASSERT_EQ(i->stream_synchronize(b.self, 0, s1), nullptr);
  ASSERT_EQ(i->device_synchronize(b.self, 0), nullptr);
  i->memory_free(b.self, 0, buf);
  i->memory_free(b.self, 0, buf2);
  i->event_destroy(b.self, 0, ev);
  i->stream_destroy(b.self, 0, s1);
  i->stream_destroy(b.self, 0, s2);
}

// ---------------------------------------------------------------- regressions of the CUDA defects

TEST_F(CudaKernels, MatmulAndLinearOnOffsetViewsAndBroadcastOperands) {
  for (DType t : kFloatTypes) {
    const std::string tn(tessera::dtype_name(t));
    // Views one element into their buffers: 2- or 4-byte aligned pointers (cuBLASLt must be told).
    auto [a, da] = randn_pair({1 + 64 * 96}, t);
    auto [b, db] = randn_pair({1 + 96 * 80}, t);
    auto [w, dw] = randn_pair({1 + 80 * 96}, t);
    auto [bias, dbias] = randn_pair({1 + 80}, t);
    const Tensor av = a.narrow(0, 1, 64 * 96).view({64, 96}), dav = da.narrow(0, 1, 64 * 96).view({64, 96});
    const Tensor bv = b.narrow(0, 1, 96 * 80).view({96, 80}), dbv = db.narrow(0, 1, 96 * 80).view({96, 80});
    const Tensor wv = w.narrow(0, 1, 80 * 96).view({80, 96}), dwv = dw.narrow(0, 1, 80 * 96).view({80, 96});
    const Tensor bb = bias.narrow(0, 1, 80), dbb = dbias.narrow(0, 1, 80);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("matmul offset " + tn, got = tessera::matmul(dav, dbv));
    expect_close(got, tessera::matmul(av, bv), tol_for(t, 20), "matmul offset views " + tn);
    EXPECT_RUNS_ON_CUDA("linear offset " + tn, got = tessera::linear(dav, dwv, dbb));
    expect_close(got, tessera::linear(av, wv, bb), tol_for(t, 20), "linear offset views and bias " + tn);
    // Stride-0 operands: a one-element buffer expanded to a column, and a broadcast row.
    auto [one, done] = randn_pair({1, 1}, t);
    expect_close(tessera::matmul(dav, done.expand({96, 1})), tessera::matmul(av, one.expand({96, 1})), tol_for(t, 20),
                 "matmul with an expanded one-element column " + tn);
    auto [row, drow] = randn_pair({1, 96}, t);
    expect_close(tessera::matmul(drow.expand({5, 96}), dbv), tessera::matmul(row.expand({5, 96}), bv), tol_for(t, 20),
                 "matmul with a broadcast row " + tn);
  }
  // The context is still usable (a misaligned access would poison it).
  tessera::synchronize(tessera::Device("cuda:0"));
}

TEST_F(CudaKernels, FullAndColumnReductionsSplitAcrossTheGpu) {
  // A full sum of 2^24 elements and column sums of a tall matrix, against double loops on the host.
  std::vector<float> v(size_t(1) << 24);
  std::mt19937 rng(static_cast<unsigned>(seed_));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : v) x = u(rng);
  const Tensor x = tessera::tensor(v, {int64_t(v.size())});
  const Tensor dx = x.to("cuda:0");
  double total = 0;
  for (float f : v) total += f;
  Tensor got;
  EXPECT_RUNS_ON_CUDA("full sum", got = tessera::sum(dx));
  EXPECT_NEAR(got.cpu().to(tessera::kFloat64).item<double>(), total, 1e-6 * double(v.size()));
  const int64_t rows = int64_t(1) << 18, cols = 64;
  const Tensor m = x.narrow(0, 0, rows * cols).view({rows, cols});
  EXPECT_RUNS_ON_CUDA("column sum", got = tessera::sum(dx.narrow(0, 0, rows * cols).view({rows, cols}), {0}));
  const Tensor g = got.cpu().to(tessera::kFloat64).contiguous();
  for (int64_t c = 0; c < cols; ++c) {
    double ref = 0;
    for (int64_t r = 0; r < rows; ++r) ref += v[size_t(r * cols + c)];
    EXPECT_NEAR(g.data_ptr<double>()[c], ref, 1e-5 * double(rows)) << "column " << c;
  }
  // amax with NaN and -inf, mean
  Tensor special = tessera::full({1 << 20}, -INFINITY);
  const Tensor dspecial = special.to("cuda:0");
  EXPECT_EQ(tessera::amax(dspecial, {0}).cpu().to(tessera::kFloat64).item<double>(), -INFINITY);
  EXPECT_NEAR(tessera::mean(dx).cpu().to(tessera::kFloat64).item<double>(), total / double(v.size()), 1e-6);
}

TEST_F(CudaKernels, AttentionWithManyHeadsNoKeysAndMaskedRows) {
  for (DType t : {tessera::kFloat16, tessera::kBFloat16}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat16 ? Tol{1e-2, 1e-2} : Tol{3e-2, 3e-2};
    // batch * heads = 70000 > 65535 (the grid's y limit).
    auto [q, dq] = randn_pair({700, 100, 1, 64}, t);
    auto [k, dk] = randn_pair({700, 100, 3, 64}, t);
    auto [v, dv] = randn_pair({700, 100, 3, 64}, t);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("sdpa 70000 heads " + tn, got = tessera::scaled_dot_product_attention(dq, dk, dv));
    expect_close(got.to(tessera::kFloat32),
                 tessera::scaled_dot_product_attention(q.to(tessera::kFloat32), k.to(tessera::kFloat32),
                                                       v.to(tessera::kFloat32)),
                 tol, "sdpa batch*heads 70000 " + tn);
    // len_k == 0: zeros like the CPU.
    auto [q2, dq2] = randn_pair({2, 2, 5, 64}, t);
    const Tensor dk0 = tessera::empty({2, 2, 0, 64}, tessera::TensorOptions(t).device("cuda:0"));
    got = tessera::scaled_dot_product_attention(dq2, dk0, dk0);
    EXPECT_TRUE(tessera::equal(got.cpu(), tessera::zeros({2, 2, 5, 64}, tessera::TensorOptions(t)))) << tn;
    // A non-contiguous query (transposed heads) and a fully masked row (NaN like the math path).
    auto [q3, dq3] = randn_pair({2, 7, 4, 64}, t);
    auto [k3, dk3] = randn_pair({2, 4, 9, 64}, t);
    auto [v3, dv3] = randn_pair({2, 4, 9, 64}, t);
    Tensor mask = tessera::ones({7, 9}, tessera::TensorOptions(tessera::kBool));
    mask.select(0, 3).fill_(false);
    const Tensor qt = q3.transpose(1, 2), dqt = dq3.transpose(1, 2);
    expect_close(tessera::scaled_dot_product_attention(dqt, dk3, dv3, mask.to("cuda:0")).to(tessera::kFloat32),
                 tessera::scaled_dot_product_attention(qt.to(tessera::kFloat32), k3.to(tessera::kFloat32),
                                                       v3.to(tessera::kFloat32), mask),
                 tol, "sdpa strided query, fully masked row " + tn);
  }
}

TEST_F(CudaKernels, InPlaceOpWithAConversionIsAppliedOnce) {
  auto [a, da] = randn_pair({1000}, tessera::kFloat16);
  auto [b, db] = randn_pair({1000}, tessera::kFloat32);
  Tensor expected = a.clone();
  expected.add_(b);
  EXPECT_RUNS_ON_CUDA("add_", da.add_(db));
  expect_close(da, expected, tol_for(tessera::kFloat16), "add_ float16 += float32");
}

TEST_F(CudaKernels, SmallIntegerDtypesAndFloat64Copies) {
  for (DType t : {tessera::kUInt8, tessera::kInt8, tessera::kInt16}) {
    std::vector<int32_t> va(200), vb(200);
    for (int i = 0; i < 200; ++i) {
      va[size_t(i)] = i % 97;
      vb[size_t(i)] = i % 13;
    }
    Tensor a = tessera::tensor(va, {200}).to(t), b = tessera::tensor(vb, {200}).to(t);
    Tensor da = a.to("cuda:0"), db = b.to("cuda:0");
    const std::string tn(tessera::dtype_name(t));
    Tensor got;
    EXPECT_RUNS_ON_CUDA("add " + tn, got = tessera::add(da, db));
    EXPECT_TRUE(tessera::equal(got.cpu(), tessera::add(a, b))) << "add " << tn;
    EXPECT_TRUE(tessera::equal(tessera::mul(da, db).cpu(), tessera::mul(a, b))) << "mul " << tn;
  }
  auto [x, dx] = randn_pair({33, 17}, tessera::kFloat64);
  Tensor y = tessera::empty({17, 33}, tessera::TensorOptions(tessera::kFloat64).device("cuda:0"));
  y.copy_(dx.t());
  EXPECT_TRUE(tessera::equal(y.cpu(), x.t().contiguous())) << "strided float64 copy_ is exact";
}

TEST_F(CudaKernels, CopiesBetweenTwoGpusAreOrdered) {
  if (tessera::device_count("cuda") < 2) GTEST_SKIP() << "needs two CUDA devices, this machine has " << tessera::device_count("cuda");
  for (int round = 0; round < 20; ++round) {
    auto [x, dx] = randn_pair({1 << 22}, tessera::kFloat32);
    const Tensor produced = tessera::mul(dx, dx);  // queued on cuda:0 right before the copy
    Tensor on1 = tessera::empty({1 << 22}, tessera::TensorOptions(tessera::kFloat32).device("cuda:1"));
    on1.copy_(produced);
    const Tensor back = on1.to("cuda:0");
    expect_close(back, tessera::mul(x, x), tol_for(tessera::kFloat32), "cuda:0 -> cuda:1 -> cuda:0");
  }
}

}  // namespace
