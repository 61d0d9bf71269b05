// Every CUDA kernel against the CPU backend on fresh random inputs, the caching allocator on the
// device, and streams/events through the device interface. Skipped (with the reason) where
// device_count("cuda") == 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "tessera/memory_format.h"
#include "tessera/tessera.h"

namespace {

using tessera::DType;
using tessera::Tensor;

using cuda_test::expect_close;
using cuda_test::Tol;
using cuda_test::tol_for;

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_CUDA_DEVICE();
    // These tests check the plugin's own kernels: SDPA on cuDNN (Note [SDPA on cuDNN]) has its own
    // test, which turns it back on.
    setenv("TESSERA_CUDA_CUDNN_ATTENTION", "0", 1);
    std::random_device rd;
    seed_ = rd();
    tessera::manual_seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
  }
  void TearDown() override { unsetenv("TESSERA_CUDA_CUDNN_ATTENTION"); }
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

// Channels-last tensors on the GPU (docs/semantics.md, "Memory formats"): .to("cuda") keeps the
// layout, pointwise ops give channels-last outputs written in memory order (the planner orders
// dims by the output's strides), and the values match the CPU's.
TEST_F(CudaKernels, ChannelsLastPointwiseOps) {
  for (DType t : kFloatTypes) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor x = tessera::contiguous(tessera::randn({2, 24, 9, 11}).to(t), tessera::MemoryFormat::ChannelsLast);
    const Tensor bias = tessera::randn({1, 24, 1, 1}).to(t);
    const Tensor dx = x.to("cuda:0"), dbias = bias.to("cuda:0");
    ASSERT_EQ(tessera::suggest_memory_format(dx), tessera::MemoryFormat::ChannelsLast) << tn;
    const Tensor dr = tessera::relu(tessera::add(dx, dbias));
    EXPECT_EQ(tessera::suggest_memory_format(dr), tessera::MemoryFormat::ChannelsLast) << tn;
    expect_close(dr, tessera::relu(tessera::add(x, bias)), tol_for(t, 4), "relu(x_cl + bias) " + tn);
    expect_close(tessera::mul(dx, dx), tessera::mul(x, x), tol_for(t, 4), "x_cl * x_cl " + tn);
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
    // Rows starting 2 bytes past a 16-byte boundary (a contiguous view at offset 1): the scalar
    // loads of Note [Register-resident softmax rows], against the vector loads of the aligned copy.
    auto [flat, dflat] = randn_pair({1 + 6 * 512}, t);
    const Tensor shifted = dflat.narrow(0, 1, 6 * 512).view({6, 512});
    expect_close(tessera::softmax(shifted, -1), tessera::softmax(flat.narrow(0, 1, 6 * 512).view({6, 512}), -1),
                 tol_for(t, 4), "softmax of unaligned rows " + tn);
    expect_close(tessera::log_softmax(shifted.contiguous(), -1),
                 tessera::log_softmax(flat.narrow(0, 1, 6 * 512).view({6, 512}), -1), tol_for(t, 4),
                 "log_softmax of aligned rows " + tn);
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
        // A float32 mask with half queries is added in float32 (PyTorch): 64 + x would lose x in bf16.
        Tensor mask_f32 = tessera::add(tessera::randn({2, 1, 77, 101}), tessera::full({1}, 64.0));
        check(tessera::scaled_dot_product_attention(dq, dk, dv, mask_f32.to("cuda:0")),
              tessera::scaled_dot_product_attention(q32, k32, v32, mask_f32), "sdpa float32 mask");
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
  ASSERT_NE(stats, nullptr);
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
  tessera_cuda_memory_stats_t pre{};
  pre.struct_size = sizeof(pre);
  ASSERT_EQ(stats(0, &pre), 0);
  const uint64_t released = tessera::empty_cache(tessera::Device("cuda:0"));  // TESSERA_EXT_EMPTY_CACHE
  tessera_cuda_memory_stats_t emptied{};
  emptied.struct_size = sizeof(emptied);
  ASSERT_EQ(stats(0, &emptied), 0);
  EXPECT_EQ(released, pre.reserved_bytes - emptied.reserved_bytes) << "the extension reports what it released";
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
    // A non-contiguous query (transposed heads) and a fully masked row (0, as in PyTorch).
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
    const Tensor row3 = tessera::scaled_dot_product_attention(dqt, dk3, dv3, mask.to("cuda:0")).select(2, 3);
    EXPECT_TRUE(tessera::equal(row3.cpu(), tessera::zeros({2, 4, 64}, tessera::TensorOptions(t)))) << tn;
  }
}

// Note [Fully masked attention rows] (plugins/cpu/nn/attention.cpp), on both flash kernels: a row
// whose keys are all masked is 0 @ V (0, NaN in a column with a NaN value), a NaN score makes its
// row NaN, rows masked only in some key tiles are plain softmax. Checked against the CPU in f32
// (itself checked against a double reference in tests/cpu/test_sdpa.cpp) and exactly where known.
TEST_F(CudaKernels, FlashAttentionFullyMaskedRowsAndNaN) {
  const int64_t l = 77, s = 101;  // two query blocks, four key tiles of 32 (the last partial)
  const int64_t dead[] = {0, 40, l - 1};
  for (const char* simt : {"0", "1"}) {
    setenv("TESSERA_CUDA_FLASH_SIMT", simt, 1);
    for (DType t : {tessera::kFloat16, tessera::kBFloat16}) {
      for (int64_t d : {int64_t(64), int64_t(128)}) {
        const std::string tn = std::string(tessera::dtype_name(t)) + " d=" + std::to_string(d) +
                               (simt[0] == '1' ? " (CUDA cores)" : " (tensor cores)");
        const Tol tol = t == tessera::kFloat16 ? Tol{1e-2, 1e-2} : Tol{3e-2, 3e-2};
        auto [q, dq] = randn_pair({2, 3, l, d}, t);
        auto [k, dk] = randn_pair({2, 3, s, d}, t);
        auto [v, dv] = randn_pair({2, 3, s, d}, t);
        const Tensor q32 = q.to(tessera::kFloat32), k32 = k.to(tessera::kFloat32),
                     v32 = v.to(tessera::kFloat32);
        Tensor keep = tessera::gt(tessera::rand({l, s}), tessera::full({1}, 0.3));
        for (int64_t i : dead) keep.select(0, i).fill_(false);
        keep.select(0, 5).narrow(0, 0, 32).fill_(false);  // first key tile masked
        keep.select(0, 6).narrow(0, 96, 5).fill_(false);  // last (partial) key tile masked
        keep.select(0, 7).fill_(false);
        keep.select(0, 7).narrow(0, 100, 1).fill_(true);  // only the last key
        const Tensor add_t =
            tessera::where(keep, tessera::zeros({l, s}), tessera::full({l, s}, -INFINITY)).to(t);
        const std::tuple<std::string, Tensor, Tensor> masks[] = {
            {"bool", keep, keep}, {"additive", add_t, add_t.to(tessera::kFloat32)}};
        for (const auto& [name, mask, mask_ref] : masks) {
          const Tensor got = tessera::scaled_dot_product_attention(dq, dk, dv, mask.to("cuda:0"));
          expect_close(got.to(tessera::kFloat32),
                       tessera::scaled_dot_product_attention(q32, k32, v32, mask_ref), tol,
                       "sdpa fully masked rows, " + name + " mask " + tn);
          for (int64_t i : dead)
            EXPECT_TRUE(
                tessera::equal(got.select(2, i).cpu(), tessera::zeros({2, 3, d}, tessera::TensorOptions(t))))
                << name << " row " << i << " " << tn;
        }
        // A NaN in query row 9 (its scores are all NaN): that row is NaN, not taken for masked.
        Tensor qn = q.clone();
        qn.select(2, 9).fill_(NAN);
        const Tensor got_q =
            tessera::scaled_dot_product_attention(qn.to("cuda:0"), dk, dv, keep.to("cuda:0"));
        expect_close(got_q.to(tessera::kFloat32),
                     tessera::scaled_dot_product_attention(qn.to(tessera::kFloat32), k32, v32, keep), tol,
                     "sdpa NaN query row " + tn);
        // A NaN value (key 50, column 3): column 3 is NaN in every row, fully masked ones included.
        Tensor vn = v.clone();
        vn.select(2, 50).narrow(2, 3, 1).fill_(NAN);
        const Tensor got_v =
            tessera::scaled_dot_product_attention(dq, dk, vn.to("cuda:0"), keep.to("cuda:0"));
        expect_close(got_v.to(tessera::kFloat32),
                     tessera::scaled_dot_product_attention(q32, k32, vn.to(tessera::kFloat32), keep), tol,
                     "sdpa NaN value " + tn);
      }
    }
  }
  unsetenv("TESSERA_CUDA_FLASH_SIMT");
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

// A C++ number as the dispatcher passes it to kernels (Note [Wrapped numbers reach kernels as they
// are]): a 0-dim CPU tensor of its own kind's dtype, marked as a wrapped number.
Tensor wrapped(double v) {
  Tensor t = tessera::full({}, v, tessera::TensorOptions(tessera::kFloat64));
  t.impl()->set_wrapped_number(true);
  return t;
}
Tensor wrapped(int64_t v) {
  Tensor t = tessera::full({}, v, tessera::TensorOptions(tessera::kInt64));
  t.impl()->set_wrapped_number(true);
  return t;
}
Tensor on_cuda(const std::vector<double>& v, DType t) {
  return tessera::tensor(v, {int64_t(v.size())}).to(t).to("cuda:0");
}
// The elements of `x` in double, on the host.
std::vector<double> values(const Tensor& x) {
  Tensor h = x.cpu().to(tessera::kFloat64).contiguous();
  return std::vector<double>(h.data_ptr<double>(), h.data_ptr<double>() + h.numel());
}

// Note [Wrapped numbers on the GPU]: the number stays on the host, is converted once into the
// compute type and passed by value; PyTorch's results (docs/semantics.md).
TEST_F(CudaKernels, WrappedNumbersAreConvertedIntoTheComputeType) {
  Tensor r;
  // float16 [0.001] * 1e5: float16(0.001) = 0.0010004 times 100000.0f, rounded to float16 = 100.0625.
  EXPECT_RUNS_ON_CUDA("float16 * 1e5", r = tessera::mul(on_cuda({0.001}, tessera::kFloat16), wrapped(1e5)));
  EXPECT_EQ(r.dtype(), tessera::kFloat16);
  EXPECT_EQ(values(r), std::vector<double>{100.0625});
  EXPECT_RUNS_ON_CUDA("1e5 * float16", r = tessera::mul(wrapped(1e5), on_cuda({0.001}, tessera::kFloat16)));
  EXPECT_EQ(values(r), std::vector<double>{100.0625});
  // uint8 [7] / -3 is float32 7 / -3 (not 7 / 253).
  EXPECT_RUNS_ON_CUDA("uint8 / -3", r = tessera::div(on_cuda({7}, tessera::kUInt8), wrapped(int64_t(-3))));
  EXPECT_EQ(r.dtype(), tessera::kFloat32);
  EXPECT_EQ(values(r), std::vector<double>{double(7.0f / -3.0f)});
  EXPECT_EQ(values(tessera::div(on_cuda({100}, tessera::kInt8), wrapped(int64_t(300)))),
            std::vector<double>{double(100.0f / 300.0f)});
  EXPECT_EQ(values(tessera::div(on_cuda({1}, tessera::kInt32), wrapped(int64_t(1) << 40))),
            std::vector<double>{double(1.0f / 1099511627776.0f)});
  // -3 / uint8 [7]: the number on the left.
  EXPECT_EQ(values(tessera::div(wrapped(int64_t(-3)), on_cuda({7}, tessera::kUInt8))),
            std::vector<double>{double(-3.0f / 7.0f)});
  // uint8 [2] * -3 wraps to 250; uint8 [1] + 300 to 45; int16 [5] - 70000 wraps in int16.
  EXPECT_RUNS_ON_CUDA("uint8 * -3", r = tessera::mul(on_cuda({2, 3}, tessera::kUInt8), wrapped(int64_t(-3))));
  EXPECT_EQ(r.dtype(), tessera::kUInt8);
  EXPECT_EQ(values(r), (std::vector<double>{250, 247}));
  EXPECT_EQ(values(tessera::add(on_cuda({1}, tessera::kUInt8), wrapped(int64_t(300)))), std::vector<double>{45});
  EXPECT_EQ(values(tessera::sub(on_cuda({5}, tessera::kInt16), wrapped(int64_t(70000)))),
            std::vector<double>{double(int16_t(5 - 70000))});
  // bfloat16 + 0.1: 0.1 as a float (not rounded to bfloat16 first), the sum rounded once.
  const float one_bf = 1.0f;
  EXPECT_EQ(values(tessera::add(on_cuda({1}, tessera::kBFloat16), wrapped(0.1))),
            std::vector<double>{double(tessera::BFloat16(one_bf + 0.1f))});
  // A larger strided operand with the number on either side: the strided and vector paths. Every
  // |x| > 0.655 overflows float16 (65504) to an infinity of x's sign, about half of N(0, 1); the
  // rest stay finite, which they would not if 1e5 had been rounded to float16 (inf) first.
  auto [x, dx] = randn_pair({64, 33}, tessera::kFloat16);
  Tensor strided;
  EXPECT_RUNS_ON_CUDA("strided float16 * 1e5", strided = tessera::mul(dx.t(), wrapped(1e5)));
  expect_close(strided, tessera::mul(x.t(), wrapped(1e5)), tol_for(tessera::kFloat16), "strided float16 * 1e5");
  int64_t finite = 0, infinite = 0;
  for (double v : values(strided)) (std::isfinite(v) ? finite : infinite) += 1;
  EXPECT_GT(finite, 0) << "strided float16 * 1e5: no finite product (was 1e5 rounded to float16?)";
  EXPECT_GT(infinite, 0) << "strided float16 * 1e5: no product overflowed";
  auto [y, dy] = randn_pair({1 << 12}, tessera::kFloat32);
  expect_close(tessera::sub(wrapped(2.5), dy), tessera::sub(wrapped(2.5), y), tol_for(tessera::kFloat32),
               "2.5 - contiguous float32");
}

TEST_F(CudaKernels, ComparisonsWithANumberConvertItToTheTensorDtype) {
  Tensor r;
  // uint8 [44] == 300 is true in PyTorch (300 -> uint8 44); float16 [65504] == 65519 is true.
  EXPECT_RUNS_ON_CUDA("uint8 == 300", r = tessera::eq(on_cuda({44, 45}, tessera::kUInt8), wrapped(int64_t(300))));
  EXPECT_EQ(values(r), (std::vector<double>{1, 0}));
  EXPECT_EQ(values(tessera::eq(on_cuda({65504}, tessera::kFloat16), wrapped(65519.0))), std::vector<double>{1});
  EXPECT_EQ(values(tessera::eq(on_cuda({0.1, 0.2}, tessera::kFloat32), wrapped(0.1))), (std::vector<double>{1, 0}));
  EXPECT_EQ(values(tessera::lt(on_cuda({2, 3}, tessera::kInt32), wrapped(2.5))), (std::vector<double>{1, 0}));
  EXPECT_EQ(values(tessera::gt(wrapped(int64_t(2)), on_cuda({1, 2, 3}, tessera::kInt64))), (std::vector<double>{1, 0, 0}));
}

// Note [Floating to integral conversion], worked out here: to int32 and narrower integers through
// int32, where NaN and values outside its range become INT32_MIN, then wrapping (PyTorch on x86-64).
// The CPU backend goes through int64 instead, which differs only for those values.
Tensor floating_to_narrow_integers(const Tensor& src, DType to) {
  Tensor v = src.to(tessera::kFloat64).contiguous();
  std::vector<int64_t> out;
  for (int64_t i = 0; i < v.numel(); ++i) {
    const double x = v.data_ptr<double>()[i];
    const int64_t i32 = x > -2147483649.0 && x < 2147483648.0 ? int64_t(x) : INT32_MIN;
    out.push_back(to == tessera::kUInt8 ? int64_t(uint8_t(i32))
                  : to == tessera::kInt8 ? int64_t(int8_t(i32))
                  : to == tessera::kInt16 ? int64_t(int16_t(i32)) : i32);
  }
  return tessera::tensor(out, src.sizes()).to(to);
}

// Same dtype, shape and values, NaN equal to NaN (tessera::equal treats NaN as unequal).
void expect_same(const Tensor& got, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(got.dtype(), expected.dtype()) << what;
  ASSERT_EQ(got.sizes(), expected.sizes()) << what;
  const std::vector<double> g = values(got), e = values(expected);
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == e[i] || (std::isnan(g[i]) && std::isnan(e[i]))) continue;
    if (++bad <= 5) ADD_FAILURE() << what << ": element " << i << " got " << g[i] << " expected " << e[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

// Note [CUDA copy conversions]: every dtype pair against the CPU backend's copy_ (and Note
// [Floating to integral conversion] for floating -> narrow integers), through the vectorised
// (dense, aligned), 32-bit strided (transposed) and broadcast paths.
TEST_F(CudaKernels, CopyConvertsEveryDtypePairLikeTheCpu) {
  const DType all[] = {tessera::kBool,    tessera::kUInt8,   tessera::kInt8,     tessera::kInt16,   tessera::kInt32,
                       tessera::kInt64,   tessera::kFloat16, tessera::kBFloat16, tessera::kFloat32, tessera::kFloat64};
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<double> special = {nan, inf, -inf, 1e30, -3.7, 2.9, 0.5, -0.5, -0.0, 300.7, -1.2, 65519, 3e9, -129.5};
  Tensor base = (tessera::randn({37, 29}) * 100.0).to(tessera::kFloat64);
  for (size_t i = 0; i < special.size(); ++i) base.data_ptr<double>()[i * 7] = special[i];
  for (DType from : all) {
    const Tensor src = base.to(from);  // the CPU's own conversion makes the source
    const Tensor dsrc = src.to("cuda:0");
    for (DType to : all) {
      const bool narrow = tessera::is_floating(from) && to != tessera::kBool && to != tessera::kInt64 &&
                          !tessera::is_floating(to);
      auto expected = [&](const Tensor& s) { return narrow ? floating_to_narrow_integers(s, to) : s.to(to); };
      const std::string what = std::string(tessera::dtype_name(from)) + " -> " + std::string(tessera::dtype_name(to));
      Tensor dense = tessera::empty({37, 29}, tessera::TensorOptions(to).device("cuda:0"));
      // A dense copy within one dtype is one cudaMemcpyAsync (no kernel): only the absence of a
      // CPU fallback tells that it ran on the GPU. Every other copy here launches the copy kernel.
      if (from == to) {
        EXPECT_NO_CPU_FALLBACK(what, dense.copy_(dsrc));
      } else {
        EXPECT_RUNS_ON_CUDA(what, dense.copy_(dsrc));
      }
      expect_same(dense, expected(src), what + " (dense)");
      Tensor transposed = tessera::empty({29, 37}, tessera::TensorOptions(to).device("cuda:0"));
      EXPECT_RUNS_ON_CUDA(what + " (transposed source)", transposed.copy_(dsrc.t()));
      expect_same(transposed, expected(src.t()), what + " (transposed source)");
      Tensor rows = tessera::empty({5, 29}, tessera::TensorOptions(to).device("cuda:0"));
      EXPECT_RUNS_ON_CUDA(what + " (broadcast row)", rows.copy_(dsrc.select(0, 3)));
      expect_same(rows, expected(src.select(0, 3).expand({5, 29})), what + " (broadcast row)");
    }
  }
}

TEST_F(CudaKernels, LargeAndOffsetCopiesTakeEveryKernelPath) {
  // An odd element count at an offset of one element: the unaligned (scalar) path; the same count
  // aligned: the vectorised path with a tail; a 3-D permutation: the strided path.
  Tensor x = tessera::randn({(1 << 20) + 3});
  Tensor dx = x.to("cuda:0");
  for (DType to : {tessera::kFloat16, tessera::kBFloat16, tessera::kInt32, tessera::kFloat64}) {
    Tensor d = tessera::empty({(1 << 20) + 2}, tessera::TensorOptions(to).device("cuda:0"));
    d.copy_(dx.slice(0, 1, (1 << 20) + 3));
    EXPECT_TRUE(tessera::equal(d.cpu(), x.slice(0, 1, (1 << 20) + 3).to(to))) << tessera::dtype_name(to) << " offset";
    Tensor e = tessera::empty({(1 << 20) + 3}, tessera::TensorOptions(to).device("cuda:0"));
    e.copy_(dx);
    EXPECT_TRUE(tessera::equal(e.cpu(), x.to(to))) << tessera::dtype_name(to) << " aligned";
  }
  Tensor y = tessera::randn({16, 24, 40});
  Tensor p = tessera::empty({40, 16, 24}, tessera::TensorOptions(tessera::kFloat16).device("cuda:0"));
  p.copy_(y.to("cuda:0").permute({2, 0, 1}));
  EXPECT_TRUE(tessera::equal(p.cpu(), y.permute({2, 0, 1}).to(tessera::kFloat16))) << "permuted float32 -> float16";
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

// where on every dtype: the selection copies element bits, so the result equals the CPU's exactly,
// with broadcasting, a strided operand, operands of two dtypes (converted to the promoted one) and
// a number on either side (Note [Wrapped numbers on the GPU]).
TEST_F(CudaKernels, WhereOnEveryDtypeWithBroadcastingAndNumbers) {
  const Tensor c = tessera::gt(tessera::randn({7, 1, 9}), tessera::full({}, 0.0));
  const Tensor dc = c.to("cuda:0");
  for (DType t : {tessera::kBool, tessera::kUInt8, tessera::kInt8, tessera::kInt16, tessera::kInt32, tessera::kInt64,
                  tessera::kFloat16, tessera::kBFloat16, tessera::kFloat32, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor a = tessera::mul(tessera::randn({5, 9}), tessera::full({}, 50.0)).to(t);
    const Tensor b = tessera::mul(tessera::randn({9, 5}), tessera::full({}, 50.0)).to(t).t();  // strided
    const Tensor da = a.to("cuda:0"), db = b.to("cuda:0");
    Tensor got;
    EXPECT_RUNS_ON_CUDA("where " + tn, got = tessera::where(dc, da, db));
    EXPECT_TRUE(tessera::equal(got.cpu(), tessera::where(c, a, b))) << "where " << tn;
  }
  // float16 and float32 operands: the output is float32, the float16 one converted exactly.
  const Tensor h = tessera::randn({5, 9}).to(tessera::kFloat16), f = tessera::randn({7, 5, 9});
  Tensor mixed;
  EXPECT_RUNS_ON_CUDA("where float16, float32", mixed = tessera::where(dc, h.to("cuda:0"), f.to("cuda:0")));
  EXPECT_EQ(mixed.dtype(), tessera::kFloat32);
  EXPECT_TRUE(tessera::equal(mixed.cpu(), tessera::where(c, h, f)));
  // A number on either side, and NaN kept.
  const Tensor x = tessera::randn({5, 9}).to(tessera::kBFloat16);
  Tensor left, right;
  EXPECT_RUNS_ON_CUDA("where(c, x, 0.5)", right = tessera::where(dc, x.to("cuda:0"), wrapped(0.5)));
  EXPECT_TRUE(tessera::equal(right.cpu(), tessera::where(c, x, wrapped(0.5))));
  const Tensor i = tessera::tensor(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}, {9}).to(tessera::kInt32);
  EXPECT_RUNS_ON_CUDA("where(c, -3, i)", left = tessera::where(dc, wrapped(int64_t(-3)), i.to("cuda:0")));
  EXPECT_TRUE(tessera::equal(left.cpu(), tessera::where(c, wrapped(int64_t(-3)), i)));
  const Tensor nan = tessera::full({9}, std::nan(""));
  const std::vector<double> v = values(tessera::where(dc, nan.to("cuda:0"), wrapped(1.0)));
  const std::vector<double> cv = values(c.to(tessera::kFloat64).expand({7, 1, 9}).reshape({63}));
  for (size_t k = 0; k < v.size(); ++k) EXPECT_EQ(std::isnan(v[k]), cv[k] != 0) << "element " << k;
}

// cat and stack: a copy of each input into its slice of the output, converting where an input's
// dtype differs from the promoted one; strided and empty inputs, a negative dim.
TEST_F(CudaKernels, CatAndStackCopyEachInputIntoItsSlice) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kInt64, tessera::kBool, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor p0 = tessera::randn({3, 4}).to(t), p1 = tessera::randn({4, 2}).to(t).t(),  // strided [2, 4]
        p2 = tessera::randn({0, 4}).to(t);
    const std::vector<Tensor> cpu = {p0, p1, p2};
    const std::vector<Tensor> dev = {p0.to("cuda:0"), p1.to("cuda:0"), p2.to("cuda:0")};
    Tensor got;
    EXPECT_NO_CPU_FALLBACK("cat dim 0 " + tn, got = tessera::cat(dev, 0));
    EXPECT_TRUE(tessera::equal(got.cpu(), tessera::cat(cpu, 0))) << "cat dim 0 " << tn;
    const std::vector<Tensor> rows = {p0.t(), p1.t()};  // [4, 3] and [4, 2]: along the last dim
    EXPECT_NO_CPU_FALLBACK("cat dim -1 " + tn, got = tessera::cat({rows[0].to("cuda:0"), rows[1].to("cuda:0")}, -1));
    EXPECT_TRUE(tessera::equal(got.cpu(), tessera::cat(rows, -1))) << "cat dim -1 " << tn;
    const Tensor q = tessera::randn({3, 4}).to(t);
    for (int64_t dim : {0, 1, 2, -1}) {
      EXPECT_NO_CPU_FALLBACK("stack " + tn,
                             got = tessera::stack({p0.to("cuda:0"), q.t().contiguous().t().to("cuda:0"), p0.to("cuda:0")}, dim));
      EXPECT_TRUE(tessera::equal(got.cpu(), tessera::stack({p0, q, p0}, dim))) << "stack dim " << dim << " " << tn;
    }
  }
  // float16 next to float32: a float32 output, the float16 part converted on the device.
  const Tensor h = tessera::randn({2, 3}).to(tessera::kFloat16), f = tessera::randn({1, 3});
  Tensor mixed;
  EXPECT_RUNS_ON_CUDA("cat float16, float32", mixed = tessera::cat({h.to("cuda:0"), f.to("cuda:0")}, 0));
  EXPECT_EQ(mixed.dtype(), tessera::kFloat32);
  EXPECT_TRUE(tessera::equal(mixed.cpu(), tessera::cat({h, f}, 0)));
  // The legacy empty 1-D tensor is skipped, as on the CPU.
  const Tensor legacy = tessera::empty({0});
  EXPECT_NO_CPU_FALLBACK("cat with a 1-D empty tensor", mixed = tessera::cat({f.to("cuda:0"), legacy.to("cuda:0")}, 1));
  EXPECT_TRUE(tessera::equal(mixed.cpu(), tessera::cat({f, legacy}, 1)));
}

// arange on the device: the same values as the CPU kernel, bit for bit (floating dtypes from
// start + i * step in double, rounded once into the compute type; integers in int64).
TEST_F(CudaKernels, ArangeInEveryNumericDtype) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    for (auto [start, end, step] : std::vector<std::tuple<double, double, double>>{
             {-3.5, 7.25, 0.37}, {10, -5, -1.5}, {0, 100000, 1}, {0.1, 0.2, 0.01}}) {
      Tensor got;
      EXPECT_RUNS_ON_CUDA("arange " + tn,
                          got = tessera::arange(start, end, step, tessera::TensorOptions(t).device("cuda:0")));
      EXPECT_TRUE(tessera::equal(got.cpu(), tessera::arange(start, end, step, tessera::TensorOptions(t))))
          << "arange(" << start << ", " << end << ", " << step << ") " << tn;
    }
  }
  for (DType t : {tessera::kUInt8, tessera::kInt8, tessera::kInt16, tessera::kInt32, tessera::kInt64}) {
    const std::string tn(tessera::dtype_name(t));
    Tensor got;
    EXPECT_RUNS_ON_CUDA("arange " + tn, got = tessera::arange(int64_t(2), int64_t(120), int64_t(3),
                                                              tessera::TensorOptions(t).device("cuda:0")));
    EXPECT_TRUE(tessera::equal(got.cpu(), tessera::arange(int64_t(2), int64_t(120), int64_t(3), tessera::TensorOptions(t))))
        << tn;
    if (t == tessera::kUInt8) continue;
    got = tessera::arange(int64_t(50), int64_t(-60), int64_t(-7), tessera::TensorOptions(t).device("cuda:0"));
    EXPECT_TRUE(tessera::equal(got.cpu(), tessera::arange(int64_t(50), int64_t(-60), int64_t(-7), tessera::TensorOptions(t))))
        << "descending " << tn;
  }
}

// index_select and embedding (Note [Index errors on the GPU]): the element bits the CPU kernel
// copies, for every dtype, a strided source, negative and int32 indices, multi-dim and strided
// embedding indices; an index out of range is the CPU's error, and the device keeps working.
TEST_F(CudaKernels, IndexSelectAndEmbeddingLikeTheCpu) {
  const Tensor idx = tessera::tensor(std::vector<double>{3, 0, -1, 2, 3, -5}, {6}).to(tessera::kInt64);
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64, tessera::kInt64,
                  tessera::kInt8, tessera::kBool}) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor x = tessera::mul(tessera::randn({7, 5, 6}), tessera::full({}, 20.0)).to(t).permute({2, 1, 0});  // [6, 5, 7] strided
    const Tensor dx = x.to("cuda:0");
    for (int64_t dim : {0, 1, 2, -1}) {
      const int64_t size = x.size(dim < 0 ? dim + 3 : dim);
      const Tensor i = tessera::remainder(idx, tessera::full({}, int64_t(size)));  // within range for this dim
      for (DType it : {tessera::kInt64, tessera::kInt32}) {
        Tensor got;
        EXPECT_RUNS_ON_CUDA("index_select " + tn, got = tessera::index_select(dx, dim, i.to(it).to("cuda:0")));
        EXPECT_TRUE(tessera::equal(got.cpu(), tessera::index_select(x, dim, i.to(it)))) << "dim " << dim << " " << tn;
      }
    }
    EXPECT_TRUE(tessera::equal(tessera::index_select(dx, 0, idx.to("cuda:0")).cpu(), tessera::index_select(x, 0, idx)))
        << "negative indices " << tn;
  }
  const Tensor w = tessera::randn({11, 8});
  const Tensor dw = w.to("cuda:0");
  const Tensor ids = tessera::tensor(std::vector<double>{1, 10, 0, 4, 4, 7, 2, 9, 3, 5, 6, 8}, {4, 3}).to(tessera::kInt64);
  Tensor got;
  EXPECT_RUNS_ON_CUDA("embedding", got = tessera::embedding(dw, ids.to("cuda:0")));
  EXPECT_TRUE(tessera::equal(got.cpu(), tessera::embedding(w, ids)));
  EXPECT_TRUE(tessera::equal(tessera::embedding(dw, ids.t().to("cuda:0")).cpu(), tessera::embedding(w, ids.t())))
      << "strided indices";
  EXPECT_TRUE(tessera::equal(tessera::embedding(dw.t().contiguous().t(), ids.to(tessera::kInt32).to("cuda:0")).cpu(),
                             tessera::embedding(w, ids.to(tessera::kInt32))))
      << "column-major weight, int32 indices";
  // Out of range: the CPU's message, and the device still works afterwards.
  const Tensor bad = tessera::tensor(std::vector<double>{1, 11, 2}, {3}).to(tessera::kInt64).to("cuda:0");
  try {
    (void)tessera::embedding(dw, bad).cpu();
    ADD_FAILURE() << "an index of 11 into 11 rows was accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 11 is out of bounds for a dimension of size 11"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)tessera::index_select(dw, 1, tessera::full({1}, int64_t(-9)).to("cuda:0")).cpu(), tessera::Error);
  EXPECT_TRUE(tessera::equal(tessera::embedding(dw, ids.to("cuda:0")).cpu(), tessera::embedding(w, ids)))
      << "after the errors";
}

// float64 binary and unary ops computed in double on the device (the double math functions), within
// a few double ulps of the CPU's; comparisons and min/max exact.
TEST_F(CudaKernels, Float64ElementwiseInDouble) {
  const Tol tol{1e-13, 1e-15};
  auto [a, da] = randn_pair({37, 65}, tessera::kFloat64);
  auto [b, db] = randn_pair({65}, tessera::kFloat64);
  Tensor got;
  EXPECT_RUNS_ON_CUDA("add float64", got = tessera::add(da, db, 2.5));
  expect_close(got, tessera::add(a, b, 2.5), tol, "add(alpha) float64");
  expect_close(tessera::sub(da.t(), wrapped(0.1)), tessera::sub(a.t(), wrapped(0.1)), tol, "sub number strided float64");
  expect_close(tessera::mul(da, db), tessera::mul(a, b), tol, "mul float64");
  expect_close(tessera::div(da, db), tessera::div(a, b), tol, "div float64");
  EXPECT_TRUE(tessera::equal(tessera::maximum(da, db).cpu(), tessera::maximum(a, b)));
  EXPECT_TRUE(tessera::equal(tessera::lt(da, db).cpu(), tessera::lt(a, b)));
  // 0.1 in double, not in float: a float32 computation would be 1e-9 off.
  EXPECT_EQ(values(tessera::add(on_cuda({0.2}, tessera::kFloat64), wrapped(0.1))), std::vector<double>{0.2 + 0.1});
  using Fn = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"neg", tessera::neg}, {"abs", tessera::abs},   {"exp", tessera::exp},         {"sin", tessera::sin},
      {"cos", tessera::cos}, {"tanh", tessera::tanh}, {"sigmoid", tessera::sigmoid}, {"relu", tessera::relu},
      {"silu", tessera::silu}, {"erf", tessera::erf}};
  for (auto [name, fn] : ops) {
    EXPECT_RUNS_ON_CUDA(std::string(name) + " float64", got = fn(da));
    expect_close(got, fn(a), tol, std::string(name) + " float64");
  }
  const Tensor pos = tessera::add(tessera::abs(a), tessera::full({1}, 0.1).to(tessera::kFloat64)), dpos = pos.to("cuda:0");
  expect_close(tessera::log(dpos), tessera::log(pos), tol, "log float64");
  expect_close(tessera::sqrt(dpos), tessera::sqrt(pos), tol, "sqrt float64");
  expect_close(tessera::rsqrt(dpos), tessera::rsqrt(pos), tol, "rsqrt float64");
  expect_close(tessera::gelu(da), tessera::gelu(a), tol, "gelu float64");
  expect_close(tessera::gelu(da, "tanh"), tessera::gelu(a, "tanh"), tol, "gelu tanh float64");
}

// logical_and / or / xor / not and isnan against the CPU, on operands of every kind of dtype with
// zeros, -0.0 and NaN among them (NaN is true, -0.0 false), broadcast and strided.
TEST_F(CudaKernels, LogicalOpsAndIsnanLikeTheCpu) {
  const std::vector<double> special = {0.0, -0.0, std::nan(""), 1.5, -2.0, 0.0, 3.0, -0.0, std::nan(""), 7.0, 0.0, 1.0};
  const Tensor f = tessera::tensor(special, {3, 4});
  for (DType ta : {tessera::kFloat32, tessera::kFloat16, tessera::kFloat64, tessera::kInt32, tessera::kBool}) {
    for (DType tb : {tessera::kFloat32, tessera::kUInt8, tessera::kBool}) {
      const std::string tn = std::string(tessera::dtype_name(ta)) + ", " + std::string(tessera::dtype_name(tb));
      const Tensor a = f.to(ta), b = tessera::tensor(std::vector<double>{0, 2, 0, 1}, {4}).to(tb);  // broadcast row
      const Tensor da = a.to("cuda:0"), db = b.to("cuda:0");
      for (auto [name, fn] : std::vector<std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&)>>{
               {"logical_and", tessera::logical_and}, {"logical_or", tessera::logical_or},
               {"logical_xor", tessera::logical_xor}}) {
        Tensor got;
        EXPECT_RUNS_ON_CUDA(std::string(name) + " " + tn, got = fn(da.t().contiguous().t(), db));
        EXPECT_TRUE(tessera::equal(got.cpu(), fn(a, b))) << name << " " << tn;
      }
    }
    const std::string tn(tessera::dtype_name(ta));
    Tensor got;
    EXPECT_RUNS_ON_CUDA("logical_not " + tn, got = tessera::logical_not(f.to(ta).to("cuda:0")));
    EXPECT_TRUE(tessera::equal(got.cpu(), tessera::logical_not(f.to(ta)))) << "logical_not " << tn;
    EXPECT_RUNS_ON_CUDA("isnan " + tn, got = tessera::isnan(f.to(ta).to("cuda:0").t()));
    EXPECT_TRUE(tessera::equal(got.cpu(), tessera::isnan(f.to(ta).t()))) << "isnan " << tn;
  }
}

// gather on the device: the CPU's values for every dim, a strided source and a transposed index
// with negative entries, an index smaller than self; an index out of range is the CPU's error.
TEST_F(CudaKernels, GatherLikeTheCpu) {
  std::mt19937 rng(static_cast<unsigned>(seed_));
  for (DType t : {tessera::kFloat32, tessera::kBFloat16, tessera::kInt64, tessera::kBool, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor x = tessera::mul(tessera::randn({5, 6, 4}), tessera::full({}, 9.0)).to(t).permute({1, 0, 2});  // [6, 5, 4]
    const Tensor dx = x.to("cuda:0");
    for (int64_t dim : {0, 1, 2, -2}) {
      const int64_t size = x.size(dim < 0 ? dim + 3 : dim);
      std::vector<double> v(3 * 4 * 2);
      for (double& e : v) e = double(int64_t(rng() % uint64_t(2 * size)) - size);  // [-size, size)
      const Tensor i = tessera::tensor(v, {2, 4, 3}).to(tessera::kInt64).permute({2, 1, 0});  // [3, 4, 2], strided
      Tensor got;
      EXPECT_RUNS_ON_CUDA("gather " + tn, got = tessera::gather(dx, dim, i.to("cuda:0")));
      EXPECT_TRUE(tessera::equal(got.cpu(), tessera::gather(x, dim, i))) << "gather dim " << dim << " " << tn;
    }
  }
  const Tensor dx = tessera::randn({4, 3}).to("cuda:0");
  EXPECT_THROW((void)tessera::gather(dx, 1, tessera::full({4, 2}, int64_t(3)).to("cuda:0")).cpu(), tessera::Error);
  EXPECT_EQ(tessera::gather(dx, 1, tessera::full({4, 1}, int64_t(-1)).to("cuda:0")).cpu().size(1), 1) << "after the error";
}

// rms_norm on the device against the CPU, with and without a weight, eps given and the default,
// a non-contiguous input, and a row holding a NaN (the whole row NaN, as on the CPU).
TEST_F(CudaKernels, RmsNormLikeTheCpu) {
  for (DType t : kFloatTypes) {
    const std::string tn(tessera::dtype_name(t));
    auto [x, dx] = randn_pair({6, 33, 96}, t);
    auto [w, dw] = randn_pair({96}, t);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("rms_norm " + tn, got = tessera::rms_norm(dx, {96}, dw, 1e-6));
    expect_close(got, tessera::rms_norm(x, {96}, w, 1e-6), tol_for(t, 4), "rms_norm " + tn);
    expect_close(tessera::rms_norm(dx, {33, 96}), tessera::rms_norm(x, {33, 96}), tol_for(t, 4),
                 "rms_norm two dims, no weight, default eps " + tn);
    const Tensor xt = x.transpose(0, 1), dxt = dx.transpose(0, 1);
    expect_close(tessera::rms_norm(dxt, {96}, dw), tessera::rms_norm(xt, {96}, w), tol_for(t, 4),
                 "rms_norm of a transposed input " + tn);
  }
  std::vector<double> v(2 * 8, 1.0);
  v[3] = std::nan("");
  const Tensor h = tessera::tensor(v, {2, 8});
  const std::vector<double> r = values(tessera::rms_norm(h.to("cuda:0"), {8}));
  for (size_t k = 0; k < r.size(); ++k) EXPECT_EQ(std::isnan(r[k]), k < 8) << "element " << k;
}

// Reductions of integers and bool on the device against the CPU, exactly: sum (int64 results,
// wrapping), prod (wrapping), amax / amin, argmax / argmin with ties (the first index) over a
// dim, all dims and a transposed input, and a sum long enough to be split across the GPU.
TEST_F(CudaKernels, IntegerReductionsAndArgmaxLikeTheCpu) {
  std::mt19937 rng(static_cast<unsigned>(seed_));
  for (DType t : {tessera::kBool, tessera::kUInt8, tessera::kInt8, tessera::kInt16, tessera::kInt32, tessera::kInt64}) {
    const std::string tn(tessera::dtype_name(t));
    std::vector<double> v(7 * 5 * 6);
    for (double& e : v) e = double(int(rng() % 7) - (t == tessera::kUInt8 || t == tessera::kBool ? 0 : 3));
    const Tensor x = tessera::tensor(v, {7, 5, 6}).to(t), dx = x.to("cuda:0");
    Tensor got;
    EXPECT_RUNS_ON_CUDA("sum " + tn, got = tessera::sum(dx));
    expect_same(got, tessera::sum(x), "sum " + tn);
    expect_same(tessera::sum(dx, {0, 2}, true), tessera::sum(x, {0, 2}, true), "sum dims 0, 2 keepdim " + tn);
    expect_same(tessera::sum(dx.transpose(0, 2), {1}), tessera::sum(x.transpose(0, 2), {1}), "sum transposed " + tn);
    EXPECT_RUNS_ON_CUDA("prod " + tn, got = tessera::prod(dx, {1}));
    expect_same(got, tessera::prod(x, {1}), "prod " + tn);
    expect_same(tessera::prod(dx), tessera::prod(x), "prod of all (wraps) " + tn);
    EXPECT_RUNS_ON_CUDA("amax " + tn, got = tessera::amax(dx, {2}));
    expect_same(got, tessera::amax(x, {2}), "amax " + tn);
    expect_same(tessera::amin(dx, {0, 1}), tessera::amin(x, {0, 1}), "amin " + tn);
    if (t == tessera::kBool) continue;  // argmax / argmin refuse bool, as PyTorch does
    for (std::optional<int64_t> dim : {std::optional<int64_t>{}, std::optional<int64_t>{0}, std::optional<int64_t>{2},
                                       std::optional<int64_t>{-2}}) {
      EXPECT_RUNS_ON_CUDA("argmax " + tn, got = tessera::argmax(dx, dim));
      expect_same(got, tessera::argmax(x, dim), "argmax " + tn);
      expect_same(tessera::argmin(dx.permute({2, 0, 1}), dim, true), tessera::argmin(x.permute({2, 0, 1}), dim, true),
                  "argmin permuted keepdim " + tn);
    }
  }
  // 2^22 int32 values near INT32_MAX: an int64 sum across splits, exact.
  std::vector<int64_t> near_max(size_t(1) << 22);
  for (int64_t& e : near_max) e = 2147483000 + int64_t(rng() % 600);
  const Tensor big = tessera::tensor(near_max, {int64_t(near_max.size())}).to(tessera::kInt32);
  Tensor got;
  EXPECT_RUNS_ON_CUDA("split int32 sum", got = tessera::sum(big.to("cuda:0")));
  expect_same(got, tessera::sum(big), "split int32 sum");
  expect_same(tessera::argmax(big.to("cuda:0")), tessera::argmax(big), "split argmax");
  expect_same(tessera::sum(tessera::zeros({0, 3}, tessera::TensorOptions(tessera::kInt16)).to("cuda:0"), {0}),
              tessera::zeros({3}, tessera::TensorOptions(tessera::kInt64)), "empty int16 sum");
}

// var and argmax / argmin of floating inputs against the CPU: corrections 0, 1 and 2, over one and
// several dims, n <= correction (NaN and inf as in PyTorch), a NaN (the first NaN is argmax's
// and argmin's answer, var NaN) and ties.
TEST_F(CudaKernels, VarArgmaxAndProdOfFloatsLikeTheCpu) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-12, 1e-12} : tol_for(t, 4);
    auto [x, dx] = randn_pair({9, 40, 33}, t);
    Tensor got;
    for (int64_t c : {0, 1, 2}) {
      EXPECT_RUNS_ON_CUDA("var " + tn, got = tessera::var(dx, {1}, c));
      expect_close(got, tessera::var(x, {1}, c), tol, "var dim 1 correction " + std::to_string(c) + " " + tn);
    }
    expect_close(tessera::var(dx, {0, 2}, 1, true), tessera::var(x, {0, 2}, 1, true), tol, "var dims 0, 2 " + tn);
    expect_close(tessera::var(dx), tessera::var(x), tol, "var of all " + tn);
    expect_close(tessera::var(dx.narrow(1, 0, 1), {1}), tessera::var(x.narrow(1, 0, 1), {1}), tol, "var n = 1: NaN " + tn);
    expect_close(tessera::var(dx.narrow(1, 0, 2), {1}, 2), tessera::var(x.narrow(1, 0, 2), {1}, 2), tol,
                 "var n = correction: inf " + tn);
    expect_close(tessera::prod(dx.narrow(2, 0, 6), {2}), tessera::prod(x.narrow(2, 0, 6), {2}), tol, "prod " + tn);
    expect_close(tessera::sum(dx, {1}), tessera::sum(x, {1}), tol_for(t, 8), "sum " + tn);
    expect_close(tessera::mean(dx, {0, 2}), tessera::mean(x, {0, 2}), tol, "mean " + tn);
    for (std::optional<int64_t> dim : {std::optional<int64_t>{}, std::optional<int64_t>{1}}) {
      EXPECT_RUNS_ON_CUDA("argmax " + tn, got = tessera::argmax(dx, dim));
      expect_same(got, tessera::argmax(x, dim), "argmax " + tn);
      expect_same(tessera::argmin(dx, dim), tessera::argmin(x, dim), "argmin " + tn);
    }
    std::vector<double> v = {1, 3, 3, std::nan(""), 5, std::nan(""), -1, -1, 0, 2, 2, -4};
    const Tensor s = tessera::tensor(v, {2, 6}).to(t), ds = s.to("cuda:0");
    expect_same(tessera::argmax(ds, 1), tessera::argmax(s, 1), "argmax NaN and ties " + tn);
    expect_same(tessera::argmin(ds, 1), tessera::argmin(s, 1), "argmin NaN and ties " + tn);
    expect_same(tessera::argmax(ds), tessera::argmax(s), "argmax of all with NaN " + tn);
    const std::vector<double> r = values(tessera::var(ds, {1}));
    EXPECT_TRUE(std::isnan(r[0])) << tn;
    EXPECT_FALSE(std::isnan(r[1])) << tn;
  }
}

// float64 softmax, log_softmax, layer_norm, rms_norm, matmul and linear (with a bias, added after
// the GEMM) computed in double on the device.
TEST_F(CudaKernels, Float64SoftmaxNormsAndMatmulInDouble) {
  const Tol tol{1e-12, 1e-13};
  auto [x, dx] = randn_pair({6, 17, 1500}, tessera::kFloat64);
  Tensor got;
  EXPECT_RUNS_ON_CUDA("softmax float64", got = tessera::softmax(dx, -1));
  expect_close(got, tessera::softmax(x, -1), tol, "softmax float64 long rows");
  expect_close(tessera::log_softmax(dx.narrow(2, 0, 40), 2), tessera::log_softmax(x.narrow(2, 0, 40), 2), tol,
               "log_softmax float64 short rows");
  expect_close(tessera::softmax(dx, 1), tessera::softmax(x, 1), tol, "softmax float64 columns");
  auto [w, dw] = randn_pair({1500}, tessera::kFloat64);
  auto [b, db] = randn_pair({1500}, tessera::kFloat64);
  EXPECT_RUNS_ON_CUDA("layer_norm float64", got = tessera::layer_norm(dx, {1500}, dw, db));
  expect_close(got, tessera::layer_norm(x, {1500}, w, b), tol, "layer_norm float64");
  EXPECT_RUNS_ON_CUDA("rms_norm float64", got = tessera::rms_norm(dx, {1500}, dw));
  expect_close(got, tessera::rms_norm(x, {1500}, w), tol, "rms_norm float64");
  auto [a, da] = randn_pair({3, 70, 129}, tessera::kFloat64);
  auto [m, dm] = randn_pair({129, 65}, tessera::kFloat64);
  EXPECT_RUNS_ON_CUDA("matmul float64", got = tessera::matmul(da, dm));
  expect_close(got, tessera::matmul(a, m), tol, "matmul float64");
  auto [lw, dlw] = randn_pair({65, 129}, tessera::kFloat64);
  auto [lb, dlb] = randn_pair({65}, tessera::kFloat64);
  EXPECT_RUNS_ON_CUDA("linear float64", got = tessera::linear(da, dlw, dlb));
  expect_close(got, tessera::linear(a, lw, lb), tol, "linear float64 with bias");
  expect_close(tessera::linear(da.transpose(0, 1), dlw), tessera::linear(a.transpose(0, 1), lw), tol,
               "linear float64 transposed input, no bias");
}

// pow (tensor and number exponents, integer pow with negative exponents, the sqrt / rsqrt
// special cases) and clamp (one bound, both, inverted, NaN bounds, integer tensors) against the CPU.
TEST_F(CudaKernels, PowAndClampLikeTheCpu) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-13, 1e-15} : tol_for(t, 2);
    auto [x, dx] = randn_pair({33, 20}, t);
    const Tensor pos = tessera::add(tessera::abs(x), tessera::full({}, 0.25).to(t)), dpos = pos.to("cuda:0");
    auto [e, de] = randn_pair({20}, t);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("pow tensor " + tn, got = tessera::pow(dpos, de));
    expect_close(got, tessera::pow(pos, e), tol, "pow tensor, broadcast exponent " + tn);
    for (double p : {2.0, 3.0, 0.5, -0.5, -1.0, 1.7}) {
      EXPECT_RUNS_ON_CUDA("pow number " + tn, got = tessera::pow(dx.t(), tessera::Scalar(p)));
      expect_close(got, tessera::pow(x.t(), tessera::Scalar(p)), tol, "pow " + std::to_string(p) + " " + tn);
    }
    expect_close(tessera::pow(dx, tessera::Scalar(int64_t(3))), tessera::pow(x, tessera::Scalar(int64_t(3))), tol,
                 "pow integral 3 " + tn);
    const std::vector<double> sp = {-INFINITY, -0.0, 0.0, std::nan(""), INFINITY, -4.0};
    const Tensor special = tessera::tensor(sp, {6}).to(t);
    expect_close(tessera::pow(special.to("cuda:0"), tessera::Scalar(0.5)), tessera::pow(special, tessera::Scalar(0.5)),
                 tol, "pow 0.5 of special values " + tn);
    EXPECT_RUNS_ON_CUDA("clamp " + tn, got = tessera::clamp(dx, -0.5, 0.7));
    expect_same(got, tessera::clamp(x, -0.5, 0.7), "clamp both " + tn);
    expect_same(tessera::clamp(dx, 0.1), tessera::clamp(x, 0.1), "clamp min " + tn);
    expect_same(tessera::clamp(dx, std::nullopt, -0.3), tessera::clamp(x, std::nullopt, -0.3), "clamp max " + tn);
    expect_same(tessera::clamp(dx, 1.0, -1.0), tessera::clamp(x, 1.0, -1.0), "clamp inverted " + tn);
    expect_same(tessera::clamp(dx, std::nan(""), 1.0), tessera::clamp(x, std::nan(""), 1.0), "clamp NaN bound " + tn);
    expect_same(tessera::clamp(dx, std::nan("")), tessera::clamp(x, std::nan("")), "clamp lone NaN bound " + tn);
    expect_same(tessera::clamp(special.to("cuda:0"), -1.0, 1.0), tessera::clamp(special, -1.0, 1.0),
                "clamp special values " + tn);
  }
  for (DType t : {tessera::kUInt8, tessera::kInt8, tessera::kInt16, tessera::kInt32, tessera::kInt64}) {
    const std::string tn(tessera::dtype_name(t));
    const bool u = t == tessera::kUInt8;
    const Tensor b = tessera::tensor(std::vector<double>{2, u ? 3.0 : -1.0, 1, u ? 7.0 : -3.0, 0, 5, u ? 200.0 : -2.0, 9}, {8}).to(t);
    const Tensor ex = tessera::tensor(std::vector<double>{3, 5, u ? 4.0 : -2.0, 2, 0, u ? 9.0 : -1.0, 2, 13}, {8}).to(t);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("pow integer " + tn, got = tessera::pow(b.to("cuda:0"), ex.to("cuda:0")));
    expect_same(got, tessera::pow(b, ex), "pow integer tensors (wrapping, negative exponents) " + tn);
    expect_same(tessera::pow(b.to("cuda:0"), tessera::Scalar(int64_t(3))), tessera::pow(b, tessera::Scalar(int64_t(3))),
                "pow integer number " + tn);
    EXPECT_RUNS_ON_CUDA("clamp integer " + tn, got = tessera::clamp(b.to("cuda:0"), int64_t(1), int64_t(6)));
    expect_same(got, tessera::clamp(b, int64_t(1), int64_t(6)), "clamp integer " + tn);
    expect_same(tessera::clamp(b.to("cuda:0"), 0.5), tessera::clamp(b, 0.5), "clamp integer with a float bound " + tn);
  }
}

// A number or string property of cuda:0 ("cudnn_sdpa_calls"), as its device properties say.
std::string cuda_property(const std::string& key) {
  for (const tessera::DeviceInfo& d : tessera::devices()) {
    if (d.name != "cuda:0") continue;
    const std::string quoted = "\"" + key + "\": ";
    const size_t pos = d.properties.find(quoted);
    if (pos == std::string::npos) return "";
    std::string v = d.properties.substr(pos + quoted.size());
    if (!v.empty() && v[0] == '"') return v.substr(1, v.find('"', 1) - 1);
    return v.substr(0, v.find_first_of(",}"));
  }
  return "";
}
// A counter of cuda:0's device properties ("cudnn_poolings"), -1 when not reported.
int64_t cuda_counter(const std::string& key) {
  const std::string v = cuda_property(key);
  return v.empty() ? -1 : std::stoll(v);
}
int64_t cudnn_sdpa_calls() { return cuda_counter("cudnn_sdpa_calls"); }
// Whether the plugin loaded cuDNN; a failure naming why not otherwise (a GPU machine must have it).
bool cudnn_loaded() {
  if (cuda_property("cudnn").find("version") != std::string::npos) return true;
  ADD_FAILURE() << "cuDNN is not available: " << cuda_property("cudnn");
  return false;
}

// Note [SDPA on cuDNN]: float16 / bfloat16 attention runs on cuDNN's fused attention (its call
// counter in the device properties moves) and matches the CPU in float32: causal or not, other key
// lengths, head dims 64 to 256. Masks go to cuDNN only with TESSERA_CUDA_CUDNN_ATTENTION=masks;
// there a fully masked row must still give 0 (docs/semantics.md), which decides whether masks can
// go to cuDNN by default.
TEST_F(CudaKernels, CudnnAttentionLikeTheCpu) {
  setenv("TESSERA_CUDA_CUDNN_ATTENTION", "1", 1);
  const std::string status = cuda_property("cudnn_attention");
  if (status.rfind("float16/bfloat16", 0) != 0) {
    ADD_FAILURE() << "SDPA on cuDNN is not available: " << status;
    return;
  }
  struct Shape {
    int64_t b, h, lq, lk, d;
    bool causal;
  };
  for (DType t : {tessera::kFloat16, tessera::kBFloat16})
    for (const Shape& s : {Shape{2, 4, 77, 101, 64, false}, Shape{1, 8, 256, 256, 128, true},
                           Shape{1, 2, 64, 200, 256, false}, Shape{2, 3, 128, 96, 64, true}}) {
      const std::string what = std::string(tessera::dtype_name(t)) + " " + std::to_string(s.lq) + "x" +
                               std::to_string(s.lk) + " d=" + std::to_string(s.d) +
                               (s.causal ? " causal" : "");
      auto [q, dq] = randn_pair({s.b, s.h, s.lq, s.d}, t);
      auto [k, dk] = randn_pair({s.b, s.h, s.lk, s.d}, t);
      auto [v, dv] = randn_pair({s.b, s.h, s.lk, s.d}, t);
      const int64_t before = cudnn_sdpa_calls();
      const Tensor got = tessera::scaled_dot_product_attention(dq, dk, dv, std::nullopt, s.causal);
      EXPECT_GT(cudnn_sdpa_calls(), before) << what << ": cuDNN did not run it";
      const Tensor ref = tessera::scaled_dot_product_attention(
          q.to(tessera::kFloat32), k.to(tessera::kFloat32), v.to(tessera::kFloat32), std::nullopt, s.causal);
      const Tol tol = t == tessera::kFloat16 ? Tol{1e-2, 1e-2} : Tol{3e-2, 3e-2};
      expect_close(got.to(tessera::kFloat32), ref, tol, "cuDNN sdpa " + what);
    }
  setenv("TESSERA_CUDA_CUDNN_ATTENTION", "masks", 1);
  for (DType t : {tessera::kFloat16, tessera::kBFloat16}) {
    auto [q, dq] = randn_pair({2, 4, 64, 64}, t);
    auto [k, dk] = randn_pair({2, 4, 96, 64}, t);
    auto [v, dv] = randn_pair({2, 4, 96, 64}, t);
    Tensor mask = tessera::gt(tessera::rand({64, 96}), tessera::full({1}, 0.3));
    mask.select(0, 5).fill_(false);  // query 5 sees no key: 0, like PyTorch
    const int64_t before = cudnn_sdpa_calls();
    const Tensor got =
        tessera::scaled_dot_product_attention(dq, dk, dv, mask.to("cuda:0")).to(tessera::kFloat32);
    EXPECT_GT(cudnn_sdpa_calls(), before) << "a bool mask with TESSERA_CUDA_CUDNN_ATTENTION=masks";
    const Tensor ref = tessera::scaled_dot_product_attention(q.to(tessera::kFloat32), k.to(tessera::kFloat32),
                                                             v.to(tessera::kFloat32), mask);
    expect_close(got, ref, t == tessera::kFloat16 ? Tol{1e-2, 1e-2} : Tol{3e-2, 3e-2},
                 "cuDNN sdpa bool mask " + std::string(tessera::dtype_name(t)));
    EXPECT_TRUE(tessera::equal(got.select(2, 5).cpu(), tessera::zeros({2, 4, 64})))
        << "a fully masked row is not 0";
  }
}

// Note [CUDA attention, a warp per query row]: float32 and float64 attention, and float16 /
// bfloat16 at head dims the flash kernels do not take, against the CPU: causal, bool and additive
// masks, a value head dim other than the query's, broadcast batch / head dims, 3-D and 2-D
// operands, a fully masked row (0 @ V) and a NaN in a key (its row NaN).
TEST_F(CudaKernels, AttentionRowKernelForEveryOtherDtypeAndHeadDim) {
  struct Dims {
    int64_t e, ev;
  };
  for (DType t : {tessera::kFloat32, tessera::kFloat64, tessera::kFloat16, tessera::kBFloat16}) {
    const std::string tn(tessera::dtype_name(t));
    const bool half = t == tessera::kFloat16 || t == tessera::kBFloat16;
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-12, 1e-12} : (half ? tol_for(t, 4) : Tol{1e-5, 1e-5});
    for (Dims dims : {Dims{32, 32}, Dims{80, 48}, Dims{256, 200}, Dims{1, 3}}) {
      const std::string what = tn + " e " + std::to_string(dims.e) + " ev " + std::to_string(dims.ev);
      auto [q, dq] = randn_pair({2, 3, 37, dims.e}, t);
      auto [k, dk] = randn_pair({2, 3, 45, dims.e}, t);
      auto [v, dv] = randn_pair({2, 3, 45, dims.ev}, t);
      Tensor got;
      EXPECT_RUNS_ON_CUDA("sdpa " + what, got = tessera::scaled_dot_product_attention(dq, dk, dv));
      expect_close(got, tessera::scaled_dot_product_attention(q, k, v), tol, "sdpa " + what);
      expect_close(tessera::scaled_dot_product_attention(dq, dk, dv, std::nullopt, true, 0.3),
                   tessera::scaled_dot_product_attention(q, k, v, std::nullopt, true, 0.3), tol, "causal, scale " + what);
    }
    // bool mask with a fully masked row, additive mask, broadcast heads of K and V, transposed Q.
    auto [q, dq] = randn_pair({2, 4, 9, 40}, t);
    auto [k, dk] = randn_pair({2, 1, 11, 40}, t);
    auto [v, dv] = randn_pair({2, 1, 11, 24}, t);
    std::vector<double> mv(9 * 11);
    std::mt19937 rng(static_cast<unsigned>(seed_));
    for (double& e : mv) e = double(rng() % 3 != 0);
    for (int j = 0; j < 11; ++j) mv[size_t(4 * 11 + j)] = 0;  // query row 4 sees no key
    const Tensor bmask = tessera::tensor(mv, {9, 11}).to(tessera::kBool);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("sdpa bool mask " + tn,
                        got = tessera::scaled_dot_product_attention(dq, dk, dv, bmask.to("cuda:0")));
    expect_close(got, tessera::scaled_dot_product_attention(q, k, v, bmask), tol, "bool mask, broadcast heads " + tn);
    auto [add, dadd] = randn_pair({4, 1, 11}, t);
    expect_close(tessera::scaled_dot_product_attention(dq.transpose(1, 2).contiguous().transpose(1, 2), dk, dv, dadd),
                 tessera::scaled_dot_product_attention(q, k, v, add), tol, "additive mask, strided query " + tn);
    auto [q3, dq3] = randn_pair({5, 7, 16}, t);
    auto [k3, dk3] = randn_pair({5, 6, 16}, t);
    expect_close(tessera::scaled_dot_product_attention(dq3, dk3, dk3), tessera::scaled_dot_product_attention(q3, k3, k3),
                 tol, "3-D " + tn);
    expect_close(tessera::scaled_dot_product_attention(dq3.select(0, 1), dk3.select(0, 2), dk3.select(0, 3)),
                 tessera::scaled_dot_product_attention(q3.select(0, 1), k3.select(0, 2), k3.select(0, 3)), tol, "2-D " + tn);
    // A NaN in key 3 makes every row that sees it NaN; the others stay finite (causal).
    Tensor kn = k3.clone();
    kn.select(0, 0).select(0, 3).select(0, 5).fill_(std::nan(""));
    const std::vector<double> r = values(
        tessera::scaled_dot_product_attention(dq3.narrow(0, 0, 1), kn.narrow(0, 0, 1).to("cuda:0"),
                                              dk3.narrow(0, 0, 1), std::nullopt, true));
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(std::isnan(r[size_t(i * 16)]), i >= 3) << "row " << i << " " << tn;
  }
}

// Note [conv2d on cuDNN]: conv2d against the CPU in every floating dtype: stride, padding,
// dilation, groups (depthwise too), a bias, a channels-last input (channels-last output), a
// transposed input and an unbatched input.
TEST_F(CudaKernels, Conv2dOnCudnnLikeTheCpu) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-12, 1e-12} : (t == tessera::kFloat32 ? Tol{1e-4, 1e-4} : tol_for(t, 8));
    auto [x, dx] = randn_pair({2, 6, 13, 11}, t);
    auto [w, dw] = randn_pair({8, 3, 3, 2}, t);
    auto [b, db] = randn_pair({8}, t);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("conv2d " + tn, got = tessera::conv2d(dx, dw, db, {2, 1}, {1, 0}, {1, 2}, 2));
    expect_close(got, tessera::conv2d(x, w, b, {2, 1}, {1, 0}, {1, 2}, 2), tol, "conv2d groups 2 " + tn);
    auto [w1, dw1] = randn_pair({4, 6, 3, 3}, t);
    expect_close(tessera::conv2d(dx, dw1, std::nullopt, {1, 1}, {1, 1}), tessera::conv2d(x, w1, std::nullopt, {1, 1}, {1, 1}),
                 tol, "conv2d 3x3 same " + tn);
    auto [wd, dwd] = randn_pair({6, 1, 3, 3}, t);
    expect_close(tessera::conv2d(dx, dwd, db.narrow(0, 0, 6), {1, 1}, {1, 1}, {1, 1}, 6),
                 tessera::conv2d(x, wd, b.narrow(0, 0, 6), {1, 1}, {1, 1}, {1, 1}, 6), tol, "depthwise " + tn);
    const Tensor xcl = tessera::contiguous(x, tessera::MemoryFormat::ChannelsLast), dxcl = xcl.to("cuda:0");
    EXPECT_RUNS_ON_CUDA("conv2d channels-last " + tn, got = tessera::conv2d(dxcl, dw1, std::nullopt, {1, 1}, {1, 1}));
    expect_close(got, tessera::conv2d(xcl, w1, std::nullopt, {1, 1}, {1, 1}), tol, "channels-last " + tn);
    EXPECT_TRUE(tessera::is_contiguous(got, tessera::MemoryFormat::ChannelsLast)) << "a channels-last output " << tn;
    expect_close(tessera::conv2d(dx.transpose(2, 3), dw1), tessera::conv2d(x.transpose(2, 3), w1), tol, "transposed " + tn);
    expect_close(tessera::conv2d(dx.select(0, 1), dw, db, {1, 1}, {0, 0}, {1, 1}, 2),
                 tessera::conv2d(x.select(0, 1), w, b, {1, 1}, {0, 0}, {1, 1}, 2), tol, "unbatched " + tn);
  }
}

// max_pool2d and avg_pool2d against the CPU, exactly for max and integers: stride, padding,
// dilation (max), a channels-last input, a 3-D input, and a NaN in a window (that window NaN).
TEST_F(CudaKernels, PoolingLikeTheCpu) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64, tessera::kInt64,
                  tessera::kUInt8, tessera::kInt32}) {
    const std::string tn(tessera::dtype_name(t));
    const bool floating = t == tessera::kFloat32 || t == tessera::kFloat16 || t == tessera::kBFloat16 || t == tessera::kFloat64;
    const Tensor x = floating ? tessera::randn({2, 5, 13, 12}).to(t)
                              : tessera::mul(tessera::randn({2, 5, 13, 12}), tessera::full({}, 40.0)).abs().to(t);
    const Tensor dx = x.to("cuda:0");
    Tensor got;
    EXPECT_RUNS_ON_CUDA("max_pool2d " + tn, got = tessera::max_pool2d(dx, {3, 2}, {2, 1}, {1, 1}, {2, 1}));
    expect_same(got, tessera::max_pool2d(x, {3, 2}, {2, 1}, {1, 1}, {2, 1}), "max_pool2d " + tn);
    expect_same(tessera::max_pool2d(dx, {2, 2}), tessera::max_pool2d(x, {2, 2}), "max_pool2d 2x2 " + tn);
    const Tensor xcl = tessera::contiguous(x, tessera::MemoryFormat::ChannelsLast);
    EXPECT_RUNS_ON_CUDA("max_pool2d channels-last " + tn, got = tessera::max_pool2d(xcl.to("cuda:0"), {3, 3}, {2, 2}, {1, 1}));
    expect_same(got, tessera::max_pool2d(xcl, {3, 3}, {2, 2}, {1, 1}), "max_pool2d channels-last " + tn);
    expect_same(tessera::max_pool2d(dx.select(0, 1), {2, 3}), tessera::max_pool2d(x.select(0, 1), {2, 3}), "3-D " + tn);
    if (!floating && t != tessera::kInt64) continue;  // avg_pool2d: floating dtypes and int64
    EXPECT_RUNS_ON_CUDA("avg_pool2d " + tn, got = tessera::avg_pool2d(dx, {3, 2}, {2, 2}, {1, 1}));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-14, 1e-14} : (floating ? tol_for(t) : Tol{0, 0});
    expect_close(got, tessera::avg_pool2d(x, {3, 2}, {2, 2}, {1, 1}), tol, "avg_pool2d " + tn);
    expect_close(tessera::avg_pool2d(xcl.to("cuda:0"), {2, 2}), tessera::avg_pool2d(xcl, {2, 2}), tol,
                 "avg_pool2d channels-last " + tn);
  }
  std::vector<double> v(16, 1.0);
  v[5] = std::nan("");
  const Tensor h = tessera::tensor(v, {1, 1, 4, 4});
  expect_same(tessera::max_pool2d(h.to("cuda:0"), {2, 2}), tessera::max_pool2d(h, {2, 2}), "max_pool2d with a NaN");
  EXPECT_TRUE(std::isnan(values(tessera::max_pool2d(h.to("cuda:0"), {2, 2}))[0]));
}

// Note [Pooling on cuDNN]: floating max_pool2d / avg_pool2d run on cuDNN (its counter moves) and give
// the CPU's results, NCHW and channels-last, NaN windows included; dilation and
// TESSERA_CUDA_CUDNN_POOLING=0 run the plugin's kernel (the counter stays).
TEST_F(CudaKernels, PoolingOnCudnnLikeTheCpu) {
  unsetenv("TESSERA_CUDA_CUDNN_POOLING");
  if (!cudnn_loaded()) return;
  auto poolings = [] { return cuda_counter("cudnn_poolings"); };
  ASSERT_GE(poolings(), 0) << "the device properties report no cudnn_poolings";
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    Tensor x = tessera::randn({2, 6, 15, 14});
    x.data_ptr<float>()[3 * 14 + 4] = std::nanf("");  // a NaN in the first plane
    x = x.to(t);
    for (const bool channels_last : {false, true}) {
      const Tensor xi = channels_last ? tessera::contiguous(x, tessera::MemoryFormat::ChannelsLast) : x;
      const Tensor dx = xi.to("cuda:0");
      const std::string what = tn + (channels_last ? " channels-last" : "");
      int64_t before = poolings();
      Tensor got;
      EXPECT_RUNS_ON_CUDA("max_pool2d " + what, got = tessera::max_pool2d(dx, {3, 3}, {2, 2}, {1, 1}));
      EXPECT_EQ(poolings(), before + 1) << "max_pool2d " << what << ": cuDNN did not run it";
      expect_same(got, tessera::max_pool2d(xi, {3, 3}, {2, 2}, {1, 1}), "cuDNN max_pool2d " + what);
      before = poolings();
      EXPECT_RUNS_ON_CUDA("avg_pool2d " + what, got = tessera::avg_pool2d(dx, {3, 2}, {2, 1}, {1, 1}));
      EXPECT_EQ(poolings(), before + 1) << "avg_pool2d " << what << ": cuDNN did not run it";
      const Tol tol = t == tessera::kFloat64 ? Tol{1e-14, 1e-14} : tol_for(t);
      expect_close(got, tessera::avg_pool2d(xi, {3, 2}, {2, 1}, {1, 1}), tol, "cuDNN avg_pool2d " + what);
    }
    // Dilation: the plugin's kernel.
    const int64_t before = poolings();
    expect_same(tessera::max_pool2d(x.to("cuda:0"), {2, 2}, {1, 1}, {0, 0}, {2, 2}),
                tessera::max_pool2d(x, {2, 2}, {1, 1}, {0, 0}, {2, 2}), "dilated max_pool2d " + tn);
    EXPECT_EQ(poolings(), before) << "cuDNN's pooling has no dilation";
  }
  setenv("TESSERA_CUDA_CUDNN_POOLING", "0", 1);
  const Tensor x = tessera::randn({1, 3, 9, 9});
  const int64_t before = poolings();
  expect_same(tessera::max_pool2d(x.to("cuda:0"), {2, 2}), tessera::max_pool2d(x, {2, 2}), "max_pool2d, cuDNN off");
  EXPECT_EQ(poolings(), before) << "TESSERA_CUDA_CUDNN_POOLING=0";
  unsetenv("TESSERA_CUDA_CUDNN_POOLING");
}

// Note [Reproducible random numbers]: the same seed gives the CPU's numbers on the device: rand and
// uniform_ bit for bit in every floating dtype (a strided self included), randn and normal_ within
// the GPU's logf / cosf.
TEST_F(CudaKernels, RandomFillsDrawTheCpuNumbers) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    tessera::manual_seed(seed_);
    const Tensor cpu_u = tessera::rand({1000, 37}, tessera::TensorOptions(t));
    const Tensor cpu_n = tessera::randn({777}, tessera::TensorOptions(t));
    tessera::manual_seed(seed_);
    Tensor gpu_u, gpu_n;
    EXPECT_RUNS_ON_CUDA("rand " + tn, gpu_u = tessera::rand({1000, 37}, tessera::TensorOptions(t).device("cuda:0")));
    EXPECT_RUNS_ON_CUDA("randn " + tn, gpu_n = tessera::randn({777}, tessera::TensorOptions(t).device("cuda:0")));
    expect_same(gpu_u, cpu_u, "rand " + tn);
    expect_close(gpu_n, cpu_n, t == tessera::kFloat64 || t == tessera::kFloat32 ? Tol{1e-5, 1e-5} : tol_for(t), "randn " + tn);
    // uniform_ into a transposed view, from a generator of its own.
    Tensor a = tessera::zeros({30, 20}, tessera::TensorOptions(t)).t();
    Tensor b = tessera::zeros({30, 20}, tessera::TensorOptions(t).device("cuda:0")).t();
    tessera::uniform_(a, -3.0, 5.0, tessera::Generator(tessera::Device("cpu"), 1234));
    EXPECT_RUNS_ON_CUDA("uniform_ strided " + tn,
                        tessera::uniform_(b, -3.0, 5.0, tessera::Generator(tessera::Device("cuda:0"), 1234)));
    expect_same(b, a, "uniform_ into a transposed view " + tn);
    tessera::normal_(a, 2.0, 0.5, tessera::Generator(tessera::Device("cpu"), 99));
    tessera::normal_(b, 2.0, 0.5, tessera::Generator(tessera::Device("cuda:0"), 99));
    expect_close(b, a, t == tessera::kFloat64 || t == tessera::kFloat32 ? Tol{1e-5, 1e-5} : tol_for(t), "normal_ " + tn);
  }
}

// scatter on the device against the CPU, bit for bit: every dim, indices without repeats (a
// repeated index lands one unspecified value, as in PyTorch's CUDA scatter) and negative ones, an
// index smaller than src and self, strided operands; an index out of range is the CPU's error.
TEST_F(CudaKernels, ScatterLikeTheCpu) {
  std::mt19937 rng(static_cast<unsigned>(seed_));
  for (DType t : {tessera::kFloat32, tessera::kBFloat16, tessera::kInt64, tessera::kBool, tessera::kFloat64, tessera::kUInt8}) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor self = tessera::mul(tessera::randn({6, 5, 4}), tessera::full({}, 9.0)).to(t);
    const Tensor src = tessera::mul(tessera::randn({5, 4, 7}), tessera::full({}, 9.0)).to(t).permute({1, 2, 0});  // [4, 7, 5]
    for (int64_t dim : {0, 1, 2, -1}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      const int64_t size = self.size(d);
      const int64_t isz[3] = {d == 0 ? 4 : 3, d == 1 ? 4 : 3, d == 2 ? 4 : 3};
      std::vector<double> v(size_t(isz[0] * isz[1] * isz[2]));
      // along dim, each line of the index is a prefix of a permutation of 0..size-1 (no repeats)
      for (int64_t a = 0; a < isz[0]; ++a)
        for (int64_t b = 0; b < isz[1]; ++b)
          for (int64_t c = 0; c < isz[2]; ++c) {
            const int64_t pos[3] = {a, b, c};
            int64_t line = 0;
            for (int k = 0; k < 3; ++k)
              if (k != d) line = line * 7 + pos[k];
            const int64_t i = (pos[d] + line) % size;  // distinct within a line: pos[d] < size
            v[size_t((a * isz[1] + b) * isz[2] + c)] = double((rng() % 2) ? i : i - size);  // negative half the time
          }
      const Tensor idx = tessera::tensor(v, {isz[0], isz[1], isz[2]}).to(tessera::kInt64);
      Tensor got;
      EXPECT_RUNS_ON_CUDA("scatter " + tn, got = tessera::scatter(self.to("cuda:0"), dim, idx.to("cuda:0"), src.to("cuda:0")));
      expect_same(got, tessera::scatter(self, dim, idx, src), "scatter dim " + std::to_string(dim) + " " + tn);
    }
  }
  const Tensor s = tessera::randn({4, 3}).to("cuda:0");
  EXPECT_THROW((void)tessera::scatter(s, 1, tessera::full({4, 2}, int64_t(3)).to("cuda:0"), s).cpu(), tessera::Error);
  EXPECT_EQ(tessera::scatter(s, 1, tessera::full({4, 1}, int64_t(-1)).to("cuda:0"), s).cpu().size(1), 3) << "after the error";
}

// Note [scatter_reduce on the GPU]: every reduction, with and without self, over repeated indices
// (the point of it), along both dims, against the CPU: exactly for integers (small values: no
// overflow, where the CPU's int64 accumulator and the device's wrapping would differ), within
// rounding for floats (the fold order is unspecified).
TEST_F(CudaKernels, ScatterReduceLikeTheCpu) {
  std::mt19937 rng(static_cast<unsigned>(seed_));
  for (DType t : {tessera::kFloat32, tessera::kFloat64, tessera::kFloat16, tessera::kBFloat16, tessera::kInt64,
                  tessera::kInt32, tessera::kInt16, tessera::kInt8, tessera::kUInt8}) {
    const std::string tn(tessera::dtype_name(t));
    const bool floating = t == tessera::kFloat32 || t == tessera::kFloat64 || t == tessera::kFloat16 || t == tessera::kBFloat16;
    auto values = [&](std::vector<int64_t> sizes) {
      if (floating) return tessera::randn(sizes).to(t);
      int64_t n = 1;
      for (int64_t s : sizes) n *= s;
      std::vector<double> v(static_cast<size_t>(n));
      for (double& e : v) e = double(int(rng() % 7) - (t == tessera::kUInt8 ? 0 : 3));
      return tessera::tensor(v, sizes).to(t);
    };
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-12, 1e-12} : (floating ? tol_for(t, 4) : Tol{0, 0});
    for (int64_t dim : {0, 1}) {
      const Tensor self = values({5, 6});
      const std::vector<int64_t> isz = dim == 0 ? std::vector<int64_t>{8, 6} : std::vector<int64_t>{5, 9};
      const Tensor src = values(isz);
      std::vector<double> iv(size_t(isz[0] * isz[1]));
      for (double& e : iv) e = double(rng() % uint64_t(self.size(dim)));
      const Tensor idx = tessera::tensor(iv, isz).to(tessera::kInt64);
      for (const char* r : {"sum", "prod", "mean", "amax", "amin"}) {
        for (bool include_self : {true, false}) {
          const std::string what = std::string(r) + (include_self ? "" : " without self") + " dim " + std::to_string(dim) + " " + tn;
          Tensor got;
          EXPECT_RUNS_ON_CUDA("scatter_reduce " + what,
                              got = tessera::scatter_reduce(self.to("cuda:0"), dim, idx.to("cuda:0"), src.to("cuda:0"), r,
                                                            include_self));
          expect_close(got, tessera::scatter_reduce(self, dim, idx, src, r, include_self), tol, "scatter_reduce " + what);
        }
      }
    }
  }
}

// Note [Tiled transposed copies]: transposes of every element size through the tile kernel
// (sizes not multiples of 32, a batched head transpose, more batch items than the grid's z limit)
// equal the CPU's copies bit for bit.
TEST_F(CudaKernels, TransposedCopiesThroughTilesLikeTheCpu) {
  for (DType t : {tessera::kUInt8, tessera::kFloat16, tessera::kFloat32, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor x = tessera::mul(tessera::randn({45, 70}), tessera::full({}, 20.0)).to(t);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("transpose " + tn, got = x.to("cuda:0").t().contiguous());
    expect_same(got, x.t().contiguous(), "2-D transpose " + tn);
    const Tensor h = tessera::mul(tessera::randn({2, 33, 5, 48}), tessera::full({}, 20.0)).to(t);  // [B, L, H, D]
    EXPECT_RUNS_ON_CUDA("head transpose " + tn, got = h.to("cuda:0").permute({0, 3, 2, 1}).contiguous());
    expect_same(got, h.permute({0, 3, 2, 1}).contiguous(), "batched transpose " + tn);
  }
  // Conversions between floating dtypes take tiles too (converted on the way out).
  const Tensor f = tessera::randn({45, 70});
  for (auto [from, to] : {std::pair{tessera::kFloat32, tessera::kFloat16}, std::pair{tessera::kBFloat16, tessera::kFloat32},
                          std::pair{tessera::kFloat64, tessera::kBFloat16}}) {
    const Tensor src = f.to(from);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("converting transpose", got = src.to("cuda:0").t().to(to).contiguous());
    expect_same(got, src.t().to(to).contiguous(),
                "transpose " + std::string(tessera::dtype_name(from)) + " -> " + std::string(tessera::dtype_name(to)));
  }
  const Tensor many = tessera::arange(int64_t(70000) * 16 * 16).to(tessera::kInt32).view({70000, 16, 16});
  Tensor got;
  EXPECT_RUNS_ON_CUDA("70000 transposes", got = many.to("cuda:0").transpose(1, 2).contiguous());
  expect_same(got, many.transpose(1, 2).contiguous(), "more batch items than gridDim.z");
}

// The pointwise ops of docs/pointwise-ops.md on the device against the CPU: every floating dtype,
// inputs inside each function's domain plus NaN and infinities, the activations' parameters, and
// floor / ceil / trunc / round / sign on integers (unchanged, or their sign) exactly.
TEST_F(CudaKernels, PointwiseOpsOfTheOnnxSetLikeTheCpu) {
  using Fn = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, Fn>> any_input = {
      {"tan", tessera::tan},           {"atan", tessera::atan},         {"sinh", tessera::sinh},
      {"cosh", tessera::cosh},         {"asinh", tessera::asinh},       {"expm1", tessera::expm1},
      {"reciprocal", tessera::reciprocal}, {"softsign", tessera::softsign}, {"mish", tessera::mish},
      {"hardsigmoid", tessera::hardsigmoid}, {"hardswish", tessera::hardswish}, {"selu", tessera::selu},
      {"floor", tessera::floor},       {"ceil", tessera::ceil},         {"trunc", tessera::trunc},
      {"round", tessera::round},       {"sign", tessera::sign}};
  const std::vector<std::pair<const char*, Fn>> unit_input = {
      {"asin", tessera::asin}, {"acos", tessera::acos}, {"atanh", tessera::atanh}};
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-13, 1e-13} : tol_for(t, 2);
    std::vector<double> v;
    for (int i = 0; i < 200; ++i) v.push_back((i - 100) * 0.037);  // halves (round to even) included
    for (double e : {2.5, -2.5, 0.5, -0.5, -0.0, std::nan(""), double(INFINITY), -double(INFINITY)}) v.push_back(e);
    const Tensor x = tessera::tensor(v, {int64_t(v.size())}).to(t), dx = x.to("cuda:0");
    for (auto [name, fn] : any_input) {
      Tensor got;
      EXPECT_RUNS_ON_CUDA(std::string(name) + " " + tn, got = fn(dx));
      expect_close(got, fn(x), tol, std::string(name) + " " + tn);
    }
    const Tensor u = tessera::clamp(tessera::mul(x, tessera::full({}, 0.12).to(t)), -1.0, 1.0), du = u.to("cuda:0");
    for (auto [name, fn] : unit_input) expect_close(fn(du), fn(u), tol, std::string(name) + " " + tn);
    const Tensor big = tessera::add(tessera::abs(x), tessera::full({}, 1.0).to(t)), dbig = big.to("cuda:0");
    expect_close(tessera::acosh(dbig), tessera::acosh(big), tol, "acosh " + tn);
    expect_close(tessera::log1p(dbig), tessera::log1p(big), tol, "log1p " + tn);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("leaky_relu " + tn, got = tessera::leaky_relu(dx, 0.2));
    expect_close(got, tessera::leaky_relu(x, 0.2), tol, "leaky_relu " + tn);
    expect_close(tessera::elu(dx, 1.5, 2.0, 0.5), tessera::elu(x, 1.5, 2.0, 0.5), tol, "elu " + tn);
    expect_close(tessera::celu(dx, 0.7), tessera::celu(x, 0.7), tol, "celu " + tn);
    expect_close(tessera::softplus(dx, 2.0, 5.0), tessera::softplus(x, 2.0, 5.0), tol, "softplus " + tn);
    EXPECT_RUNS_ON_CUDA("hardtanh " + tn, got = tessera::hardtanh(dx, -0.5, 2.0));
    expect_same(got, tessera::hardtanh(x, -0.5, 2.0), "hardtanh " + tn);
  }
  for (DType t : {tessera::kUInt8, tessera::kInt8, tessera::kInt32, tessera::kInt64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor x = tessera::tensor(std::vector<double>{0, 1, 7, 100, t == tessera::kUInt8 ? 255.0 : -3.0, 2}, {6}).to(t);
    for (auto [name, fn] : std::vector<std::pair<const char*, Fn>>{
             {"floor", tessera::floor}, {"ceil", tessera::ceil}, {"trunc", tessera::trunc}, {"round", tessera::round},
             {"sign", tessera::sign}}) {
      Tensor got;
      EXPECT_RUNS_ON_CUDA(std::string(name) + " " + tn, got = fn(x.to("cuda:0")));
      expect_same(got, fn(x), std::string(name) + " " + tn);
    }
    Tensor got;
    EXPECT_RUNS_ON_CUDA("hardtanh " + tn, got = tessera::hardtanh(x.to("cuda:0"), 1.5, 90));
    expect_same(got, tessera::hardtanh(x, 1.5, 90), "hardtanh (bounds truncated) " + tn);
  }
}

// The binary ops of docs/pointwise-ops.md against the CPU: remainder, fmod, floor_divide (zeros,
// signs, infinities) and atan2 on floating tensors, prelu and _prelu_kernel, and the bitwise ops and
// shifts (out-of-range shift counts included) on every integer dtype, exactly.
TEST_F(CudaKernels, BinaryOpsOfTheOnnxSetLikeTheCpu) {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  std::vector<double> av, bv;
  for (int i = 0; i < 120; ++i) {
    av.push_back((i % 23 - 11) * 0.75);
    bv.push_back(((i * 7) % 17 - 8) * 0.5);  // zeros and both signs
  }
  av.push_back(INFINITY), bv.push_back(3.0);
  av.push_back(5.0), bv.push_back(-INFINITY);
  av.push_back(-0.0), bv.push_back(2.0);
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor a = tessera::tensor(av, {int64_t(av.size())}).to(t), b = tessera::tensor(bv, {int64_t(bv.size())}).to(t);
    const Tensor da = a.to("cuda:0"), db = b.to("cuda:0");
    for (auto [name, fn] : std::vector<std::pair<const char*, Fn>>{
             {"remainder", tessera::remainder}, {"fmod", tessera::fmod}, {"floor_divide", tessera::floor_divide},
             {"atan2", tessera::atan2}}) {
      Tensor got;
      EXPECT_RUNS_ON_CUDA(std::string(name) + " " + tn, got = fn(da, db));
      expect_close(got, fn(a, b), t == tessera::kFloat64 ? Tol{1e-14, 1e-14} : tol_for(t), std::string(name) + " " + tn);
    }
    auto [x, dx] = randn_pair({2, 3, 4, 5}, t);
    auto [w, dw] = randn_pair({3}, t);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("prelu " + tn, got = tessera::prelu(dx, dw));
    expect_same(got, tessera::prelu(x, w), "prelu per channel " + tn);
    expect_same(tessera::prelu(dx, dw.narrow(0, 0, 1)), tessera::prelu(x, w.narrow(0, 0, 1)), "prelu one weight " + tn);
  }
  for (DType t : {tessera::kUInt8, tessera::kInt8, tessera::kInt16, tessera::kInt32, tessera::kInt64}) {
    const std::string tn(tessera::dtype_name(t));
    const bool u = t == tessera::kUInt8;
    const Tensor a = tessera::tensor(std::vector<double>{5, u ? 200.0 : -7.0, 12, 1, u ? 255.0 : -1.0, 9, 3, 100}, {8}).to(t);
    const Tensor b = tessera::tensor(std::vector<double>{3, 2, 0, 7, 1, u ? 8.0 : -1.0, 70, 6}, {8}).to(t);
    for (auto [name, fn] : std::vector<std::pair<const char*, Fn>>{
             {"bitwise_and", tessera::bitwise_and}, {"bitwise_or", tessera::bitwise_or}, {"bitwise_xor", tessera::bitwise_xor},
             {"bitwise_left_shift", tessera::bitwise_left_shift}, {"bitwise_right_shift", tessera::bitwise_right_shift}}) {
      Tensor got;
      EXPECT_RUNS_ON_CUDA(std::string(name) + " " + tn, got = fn(a.to("cuda:0"), b.to("cuda:0")));
      expect_same(got, fn(a, b), std::string(name) + " " + tn);
    }
  }
}

// logsumexp (NaN, +inf and all -inf rows), isinf, bitwise_not, and the view copies expand_copy,
// slice_copy and repeat against the CPU.
TEST_F(CudaKernels, LogsumexpIsinfAndViewCopiesLikeTheCpu) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-13, 1e-13} : tol_for(t, 4);
    auto [x, dx] = randn_pair({7, 300, 5}, t);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("logsumexp " + tn, got = tessera::logsumexp(dx, {1}));
    expect_close(got, tessera::logsumexp(x, {1}), tol, "logsumexp dim 1 " + tn);
    expect_close(tessera::logsumexp(dx, {0, 2}, true), tessera::logsumexp(x, {0, 2}, true), tol, "logsumexp keepdim " + tn);
    const std::vector<double> sv = {1, std::nan(""), 2, 1, double(INFINITY), 2, -double(INFINITY), -double(INFINITY), -double(INFINITY)};
    const Tensor sp = tessera::tensor(sv, {3, 3}).to(t);
    expect_close(tessera::logsumexp(sp.to("cuda:0"), {1}), tessera::logsumexp(sp, {1}), tol, "logsumexp NaN / inf / -inf rows " + tn);
    EXPECT_RUNS_ON_CUDA("isinf " + tn, got = tessera::isinf(sp.to("cuda:0")));
    expect_same(got, tessera::isinf(sp), "isinf " + tn);
    EXPECT_RUNS_ON_CUDA("expand_copy " + tn, got = tessera::expand_copy(dx.narrow(1, 0, 1), {7, 4, 5}));
    expect_same(got, tessera::expand_copy(x.narrow(1, 0, 1), {7, 4, 5}), "expand_copy " + tn);
    for (auto [start, end, step] : {std::tuple<int64_t, int64_t, int64_t>{5, 200, 3}, {-50, 1000, 7}, {0, 300, 1}}) {
      EXPECT_RUNS_ON_CUDA("slice_copy " + tn, got = tessera::slice_copy(dx, 1, start, end, step));
      expect_same(got, tessera::slice_copy(x, 1, start, end, step), "slice_copy " + tn);
    }
    EXPECT_RUNS_ON_CUDA("repeat " + tn, got = tessera::repeat(dx.narrow(1, 0, 3), {2, 1, 3, 2}));
    expect_same(got, tessera::repeat(x.narrow(1, 0, 3), {2, 1, 3, 2}), "repeat " + tn);
  }
  for (DType t : {tessera::kUInt8, tessera::kInt16, tessera::kInt64}) {
    const Tensor x = tessera::tensor(std::vector<double>{0, 1, 5, 100, 7}, {5}).to(t);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("bitwise_not", got = tessera::bitwise_not(x.to("cuda:0")));
    expect_same(got, tessera::bitwise_not(x), std::string("bitwise_not ") + std::string(tessera::dtype_name(t)));
    expect_same(tessera::isinf(x.to("cuda:0")), tessera::isinf(x), "isinf of integers");
  }
}

// tril / triu (every dtype, diagonals above and below, batched and transposed inputs) exactly, and
// linalg_vector_norm for ord 2, 1, 0, +-inf and 3 (NaN included) against the CPU.
TEST_F(CudaKernels, TrianglesAndVectorNormsLikeTheCpu) {
  for (DType t : {tessera::kFloat32, tessera::kBool, tessera::kInt64, tessera::kFloat16, tessera::kUInt8}) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor x = tessera::mul(tessera::randn({3, 7, 9}), tessera::full({}, 9.0)).to(t);
    const Tensor dx = x.to("cuda:0");
    for (int64_t k : {-2, 0, 3}) {
      Tensor got;
      EXPECT_RUNS_ON_CUDA("tril " + tn, got = tessera::tril(dx, k));
      expect_same(got, tessera::tril(x, k), "tril " + std::to_string(k) + " " + tn);
      expect_same(tessera::triu(dx.transpose(1, 2), k), tessera::triu(x.transpose(1, 2), k),
                  "triu of a transpose " + std::to_string(k) + " " + tn);
    }
  }
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-12, 1e-12} : tol_for(t, 4);
    Tensor x = tessera::randn({6, 50, 4}).to(t);
    x.select(0, 2).select(0, 7).select(0, 1).fill_(std::nan(""));
    x.select(0, 3).select(0, 4).select(0, 0).fill_(0.0);
    const Tensor dx = x.to("cuda:0");
    for (double ord : {2.0, 1.0, 0.0, double(INFINITY), -double(INFINITY), 3.0}) {
      const std::string what = "vector_norm ord " + std::to_string(ord) + " " + tn;
      Tensor got;
      EXPECT_RUNS_ON_CUDA(what, got = tessera::linalg_vector_norm(dx, ord, std::vector<int64_t>{1}));
      expect_close(got, tessera::linalg_vector_norm(x, ord, std::vector<int64_t>{1}), tol, what);
    }
    expect_close(tessera::linalg_vector_norm(dx), tessera::linalg_vector_norm(x), tol, "vector_norm of all " + tn);
  }
}

// flip (one dim, several, negative, size-1 dims) and cumsum (every dim, the dtype argument, bool
// and integer inputs, a strided input) against the CPU.
TEST_F(CudaKernels, FlipAndCumsumLikeTheCpu) {
  for (DType t : {tessera::kFloat32, tessera::kBool, tessera::kInt16, tessera::kFloat64, tessera::kBFloat16}) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor x = tessera::mul(tessera::randn({4, 1, 6, 5}), tessera::full({}, 9.0)).to(t);
    const Tensor dx = x.to("cuda:0");
    for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{{0}, {2, -1}, {1}, {0, 1, 2, 3}}) {
      Tensor got;
      EXPECT_RUNS_ON_CUDA("flip " + tn, got = tessera::flip(dx, dims));
      expect_same(got, tessera::flip(x, dims), "flip " + tn);
    }
    if (t == tessera::kBool) {
      expect_same(tessera::cumsum(dx, 2), tessera::cumsum(x, 2), "cumsum of bool");
      continue;
    }
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-13, 1e-13} : (t == tessera::kInt16 ? Tol{0, 0} : tol_for(t, 4));
    for (int64_t dim : {0, 2, 3, -1}) {
      Tensor got;
      EXPECT_RUNS_ON_CUDA("cumsum " + tn, got = tessera::cumsum(dx, dim));
      expect_close(got, tessera::cumsum(x, dim), tol, "cumsum dim " + std::to_string(dim) + " " + tn);
    }
    expect_close(tessera::cumsum(dx.transpose(0, 2), 1), tessera::cumsum(x.transpose(0, 2), 1), tol, "cumsum strided " + tn);
    expect_close(tessera::cumsum(dx, 3, tessera::kFloat64), tessera::cumsum(x, 3, tessera::kFloat64), Tol{1e-13, 1e-13},
                 "cumsum into float64 " + tn);
  }
}

// batch_norm in inference mode against the CPU: every floating dtype, 4-D and 2-D inputs, with and
// without weight and bias.
TEST_F(CudaKernels, BatchNormInferenceLikeTheCpu) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-13, 1e-13} : tol_for(t, 2);
    for (std::vector<int64_t> shape : std::vector<std::vector<int64_t>>{{2, 5, 7, 3}, {9, 5}}) {
      auto [x, dx] = randn_pair(shape, t);
      auto [w, dw] = randn_pair({5}, t);
      auto [b, db] = randn_pair({5}, t);
      auto [m, dm] = randn_pair({5}, t);
      const Tensor v = tessera::add(tessera::abs(tessera::randn({5})), tessera::full({}, 0.5)).to(t), dv = v.to("cuda:0");
      Tensor got;
      EXPECT_RUNS_ON_CUDA("batch_norm " + tn, got = tessera::batch_norm(dx, dw, db, dm, dv, false, 0.1, 1e-3, false));
      expect_close(got, tessera::batch_norm(x, w, b, m, v, false, 0.1, 1e-3, false), tol, "batch_norm " + tn);
      expect_close(tessera::batch_norm(dx, std::nullopt, std::nullopt, dm, dv, false, 0.1, 1e-5, false),
                   tessera::batch_norm(x, std::nullopt, std::nullopt, m, v, false, 0.1, 1e-5, false), tol,
                   "batch_norm without weight and bias " + tn);
    }
  }
}

// Note [batch_norm on cuDNN]: 2-D to 4-D inference batch_norm (channels-last included) runs on cuDNN
// (its counter moves) and gives the CPU's results; 5-D inputs and TESSERA_CUDA_CUDNN_BATCH_NORM=0 run
// the plugin's path (the counter stays).
TEST_F(CudaKernels, BatchNormOnCudnnLikeTheCpu) {
  unsetenv("TESSERA_CUDA_CUDNN_BATCH_NORM");
  if (!cudnn_loaded()) return;
  auto calls = [] { return cuda_counter("cudnn_batch_norms"); };
  ASSERT_GE(calls(), 0) << "the device properties report no cudnn_batch_norms";
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-13, 1e-13} : tol_for(t, 2);
    auto [w, dw] = randn_pair({6}, t);
    auto [b, db] = randn_pair({6}, t);
    auto [m, dm] = randn_pair({6}, t);
    const Tensor v = tessera::add(tessera::abs(tessera::randn({6})), tessera::full({}, 0.5)).to(t), dv = v.to("cuda:0");
    for (const std::vector<int64_t>& shape :
         std::vector<std::vector<int64_t>>{{3, 6, 9, 7}, {5, 6}, {4, 6, 11}, {2, 6, 3, 4, 5}}) {
      for (const bool channels_last : {false, true}) {
        if (channels_last && shape.size() != 4) continue;
        Tensor x = tessera::randn(shape).to(t);
        if (channels_last) x = tessera::contiguous(x, tessera::MemoryFormat::ChannelsLast);
        const Tensor dx = x.to("cuda:0");
        const std::string what = tn + " rank " + std::to_string(shape.size()) + (channels_last ? " channels-last" : "");
        const int64_t before = calls();
        Tensor got;
        EXPECT_RUNS_ON_CUDA("batch_norm " + what, got = tessera::batch_norm(dx, dw, db, dm, dv, false, 0.1, 1e-3, false));
        EXPECT_EQ(calls(), before + (shape.size() <= 4 ? 1 : 0)) << what;
        expect_close(got, tessera::batch_norm(x, w, b, m, v, false, 0.1, 1e-3, false), tol, "batch_norm " + what);
        expect_close(tessera::batch_norm(dx, std::nullopt, std::nullopt, dm, dv, false, 0.1, 1e-5, false),
                     tessera::batch_norm(x, std::nullopt, std::nullopt, m, v, false, 0.1, 1e-5, false), tol,
                     "batch_norm without weight and bias " + what);
      }
    }
  }
  setenv("TESSERA_CUDA_CUDNN_BATCH_NORM", "0", 1);
  const Tensor x = tessera::randn({2, 3, 4, 4}), m = tessera::randn({3}), v = tessera::ones({3});
  const int64_t before = calls();
  expect_close(tessera::batch_norm(x.to("cuda:0"), std::nullopt, std::nullopt, m.to("cuda:0"), v.to("cuda:0"), false,
                                   0.1, 1e-5, false),
               tessera::batch_norm(x, std::nullopt, std::nullopt, m, v, false, 0.1, 1e-5, false), tol_for(tessera::kFloat32, 2),
               "batch_norm, cuDNN off");
  EXPECT_EQ(calls(), before) << "TESSERA_CUDA_CUDNN_BATCH_NORM=0";
  unsetenv("TESSERA_CUDA_CUDNN_BATCH_NORM");
}

// group_norm (with and without weight and bias) and constant pad (positive and negative amounts, a
// value) against the CPU.
// Note [Bool operands on the GPU]: add / mul / maximum / minimum / and / or / xor, the comparisons,
// bitwise_not and sign on bool tensors (and with a bool number) give the CPU's bools, every byte 0
// or 1.
TEST_F(CudaKernels, BoolOperandsLikeTheCpu) {
  const tessera::Device cuda("cuda:0");
  const Tensor a = tessera::gt(tessera::rand({7, 33}), tessera::full({1}, 0.5));
  const Tensor b = tessera::gt(tessera::rand({33}), tessera::full({1}, 0.3));  // broadcast
  const Tensor da = a.to(cuda), db = b.to(cuda);
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  for (auto [name, fn] : std::vector<std::pair<const char*, Fn>>{{"maximum", tessera::maximum},
                                                                 {"minimum", tessera::minimum},
                                                                 {"mul", tessera::mul},
                                                                 {"bitwise_and", tessera::bitwise_and},
                                                                 {"bitwise_or", tessera::bitwise_or},
                                                                 {"bitwise_xor", tessera::bitwise_xor},
                                                                 {"eq", tessera::eq},
                                                                 {"ne", tessera::ne},
                                                                 {"lt", tessera::lt},
                                                                 {"le", tessera::le},
                                                                 {"gt", tessera::gt},
                                                                 {"ge", tessera::ge}}) {
    const Tensor got = fn(da, db).cpu(), want = fn(a, b);
    EXPECT_EQ(got.dtype(), want.dtype()) << name;
    EXPECT_TRUE(tessera::equal(got, want)) << name;
    // Every byte is 0 or 1: viewed as uint8, the values equal the CPU's.
    EXPECT_TRUE(tessera::equal(got.to(tessera::kUInt8), want.to(tessera::kUInt8))) << name;
  }
  const Tensor sum = tessera::add(da, db).cpu();
  EXPECT_TRUE(tessera::equal(sum, tessera::add(a, b))) << "add";
  const Tensor t = tessera::scalar_tensor(true, tessera::TensorOptions().dtype(tessera::kBool));
  EXPECT_TRUE(tessera::equal(tessera::eq(da, t).cpu(), tessera::eq(a, t))) << "eq with a bool number";
  EXPECT_TRUE(tessera::equal(tessera::bitwise_xor(da, t).cpu(), tessera::bitwise_xor(a, t)))
      << "xor with a bool number";
  const Tensor inverted = tessera::bitwise_not(da).cpu();
  EXPECT_TRUE(tessera::equal(inverted, tessera::bitwise_not(a))) << "bitwise_not";
  EXPECT_TRUE(tessera::equal(inverted.to(tessera::kUInt8), tessera::bitwise_not(a).to(tessera::kUInt8)))
      << "bitwise_not: a byte other than 0 or 1";
  EXPECT_TRUE(tessera::equal(tessera::sign(da.t()).cpu(), tessera::sign(a.t()))) << "sign (strided)";
}

// Integer remainder, fmod and floor_divide (tessera/int_division.h, the CPU's rule) against the
// CPU: signs of both operands, a number divisor, int8 wrapping, INT64_MIN / -1; a zero divisor,
// tensor or number, is the CPU's error (Note [Integer division by zero on the GPU]).
TEST_F(CudaKernels, IntegerRemainderFmodFloorDivideLikeTheCpu) {
  const tessera::Device cuda("cuda:0");
  std::mt19937 rng(static_cast<unsigned>(seed_));
  for (DType t : {tessera::kInt64, tessera::kInt32, tessera::kInt8, tessera::kUInt8}) {
    const bool is_unsigned = t == tessera::kUInt8;
    std::vector<int64_t> va(257), vb(257);
    for (auto& v : va) v = int64_t(rng() % 255) - (is_unsigned ? 0 : 127);
    for (auto& v : vb) {
      v = int64_t(rng() % 31) - (is_unsigned ? 0 : 15);
      if (v == 0) v = 7;
    }
    const Tensor a = tessera::tensor(va, {257}).to(t), b = tessera::tensor(vb, {257}).to(t);
    const Tensor da = a.to(cuda), db = b.to(cuda);
    const std::string tn(tessera::dtype_name(t));
    EXPECT_TRUE(tessera::equal(tessera::remainder(da, db).cpu(), tessera::remainder(a, b)))
        << "remainder " << tn;
    EXPECT_TRUE(tessera::equal(tessera::fmod(da, db).cpu(), tessera::fmod(a, b))) << "fmod " << tn;
    EXPECT_TRUE(tessera::equal(tessera::floor_divide(da, db).cpu(), tessera::floor_divide(a, b)))
        << "floor_divide " << tn;
    const tessera::TensorOptions i64 = tessera::TensorOptions().dtype(tessera::kInt64);
    const Tensor six = tessera::scalar_tensor(6, i64),
                 four = tessera::scalar_tensor(4, i64);  // 0-dim CPU: numbers
    EXPECT_TRUE(tessera::equal(tessera::remainder(da, six).cpu(), tessera::remainder(a, six)))
        << "remainder by 6 " << tn;
    EXPECT_TRUE(tessera::equal(tessera::floor_divide(da, four).cpu(), tessera::floor_divide(a, four)))
        << "floor_divide by 4 " << tn;
    Tensor with_zero = b.clone();
    with_zero.select(0, 100).fill_(0);
    for (const char* what : {"tensor", "number"}) {
      try {
        if (std::string(what) == "tensor")
          (void)tessera::remainder(da, with_zero.to(cuda));
        else
          (void)tessera::floor_divide(da, tessera::scalar_tensor(0, i64));
        ADD_FAILURE() << "a zero divisor (" << what << ") was accepted for " << tn;
      } catch (const tessera::Error& e) {
        EXPECT_NE(std::string(e.what()).find("integer division by zero"), std::string::npos) << e.what();
      }
    }
  }
  const Tensor lo = tessera::tensor(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -7, 7}, {3});
  const Tensor m1 = tessera::tensor(std::vector<int64_t>{-1, 2, -2}, {3});
  EXPECT_TRUE(
      tessera::equal(tessera::floor_divide(lo.to(cuda), m1.to(cuda)).cpu(), tessera::floor_divide(lo, m1)));
  EXPECT_TRUE(tessera::equal(tessera::remainder(lo.to(cuda), m1.to(cuda)).cpu(), tessera::remainder(lo, m1)));
}

// pad in reflect / replicate / circular modes (index tables per padded dim, Note at pad_kernel)
// and constant pad of integer and bool tensors, against the CPU: positive and negative (cropping)
// amounts, 1-D to 3-D pads, a strided input; a reflect pad as large as the dim is an error naming it.
TEST_F(CudaKernels, PadModesAndIntegerPadLikeTheCpu) {
  const tessera::Device cuda("cuda:0");
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kInt64, tessera::kInt8})
    for (const char* mode : {"reflect", "replicate", "circular"})
      for (const std::vector<int64_t>& pads : {std::vector<int64_t>{2, 3}, std::vector<int64_t>{1, 2, 3, 0},
                                               std::vector<int64_t>{-1, 2, 0, -2, 1, 1}}) {
        const std::string what = std::string(tessera::dtype_name(t)) + " " + mode + " " + std::to_string(pads.size());
        Tensor x = (tessera::randn({3, 6, 7}) * 10).to(t);
        Tensor xs = x.transpose(1, 2);  // strided
        const Tensor want = tessera::pad(xs, pads, mode);
        const Tensor got = tessera::pad(xs.to(cuda), pads, mode);
        EXPECT_EQ(got.sizes(), want.sizes()) << what;
        EXPECT_TRUE(tessera::equal(got.cpu(), want)) << what;
      }
  for (DType t : {tessera::kInt32, tessera::kUInt8, tessera::kBool}) {
    Tensor x = (tessera::rand({4, 5}) * 100).to(t);
    const Tensor want = tessera::pad(x, {1, -2, 2, 1}, "constant", 7.0);
    EXPECT_TRUE(tessera::equal(tessera::pad(x.to(cuda), {1, -2, 2, 1}, "constant", 7.0).cpu(), want))
        << tessera::dtype_name(t);
  }
  try {
    tessera::pad(tessera::randn({2, 3}).to(cuda), {3, 0}, "reflect");
    ADD_FAILURE() << "a reflect pad of 3 on a dim of size 3 was accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("pad"), std::string::npos) << e.what();
  }
}

TEST_F(CudaKernels, GroupNormAndConstantPadLikeTheCpu) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-12, 1e-12} : tol_for(t, 4);
    auto [x, dx] = randn_pair({2, 6, 5, 7}, t);
    auto [w, dw] = randn_pair({6}, t);
    auto [b, db] = randn_pair({6}, t);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("group_norm " + tn, got = tessera::group_norm(dx, 3, dw, db, 1e-5));
    expect_close(got, tessera::group_norm(x, 3, w, b, 1e-5), tol, "group_norm " + tn);
    expect_close(tessera::group_norm(dx.transpose(2, 3), 2), tessera::group_norm(x.transpose(2, 3), 2), tol,
                 "group_norm without affine, strided " + tn);
    EXPECT_RUNS_ON_CUDA("pad " + tn, got = tessera::pad(dx, {1, 2, -1, 3}, "constant", 0.5));
    expect_same(got, tessera::pad(x, {1, 2, -1, 3}, "constant", 0.5), "pad " + tn);
    expect_same(tessera::pad(dx, {0, 0, 2, 0, 1, 1}), tessera::pad(x, {0, 0, 2, 0, 1, 1}), "pad three dims " + tn);
  }
}

// topk (Note [topk on the GPU]) against the CPU, values and indices exactly: every numeric dtype,
// largest and smallest, rows of one tile and of several (2049, 5000: global bitonic steps), an inner
// dim, a transposed input, ties (ascending index first) and NaN (above every number).
TEST_F(CudaKernels, TopkLikeTheCpu) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64,
                  tessera::kInt64, tessera::kInt32, tessera::kInt16, tessera::kInt8, tessera::kUInt8}) {
    const std::string tn(tessera::dtype_name(t));
    // Values in [0, 40): many ties in every row.
    for (const std::vector<int64_t>& shape :
         std::vector<std::vector<int64_t>>{{3, 7}, {2, 2049}, {5000}, {4, 300, 3}}) {
      const Tensor x = tessera::floor(tessera::mul(tessera::rand(shape), tessera::full({}, 40.0))).to(t);
      const Tensor dx = x.to("cuda:0");
      const int64_t dim = shape.size() == 3 ? 1 : -1, n = shape[shape.size() == 3 ? 1 : shape.size() - 1];
      for (int64_t k : {int64_t(1), std::min<int64_t>(n, 5), n})
        for (bool largest : {true, false}) {
          const std::string what = "topk " + tn + " n " + std::to_string(n) + " k " + std::to_string(k) +
                                   (largest ? " largest" : " smallest");
          std::tuple<Tensor, Tensor> got;
          EXPECT_RUNS_ON_CUDA(what, got = tessera::topk(dx, k, dim, largest));
          const auto want = tessera::topk(x, k, dim, largest);
          expect_same(std::get<0>(got), std::get<0>(want), what + " values");
          expect_same(std::get<1>(got), std::get<1>(want), what + " indices");
        }
    }
    const Tensor x = tessera::floor(tessera::mul(tessera::rand({6, 9}), tessera::full({}, 40.0))).to(t);
    expect_same(std::get<1>(tessera::topk(x.to("cuda:0").t(), 3, 1)), std::get<1>(tessera::topk(x.t(), 3, 1)),
                "topk transposed " + tn);
  }
  // NaN is larger than every number; -0 equals +0 (ascending index).
  const Tensor x = tessera::tensor(
      std::vector<float>{1.0f, std::nanf(""), -0.0f, 0.0f, INFINITY, std::nanf(""), -INFINITY});
  for (bool largest : {true, false}) {
    const auto got = tessera::topk(x.to("cuda:0"), 7, -1, largest);
    const auto want = tessera::topk(x, 7, -1, largest);
    expect_same(std::get<0>(got), std::get<0>(want), largest ? "NaN largest" : "NaN smallest");
    expect_same(std::get<1>(got), std::get<1>(want),
                largest ? "NaN largest indices" : "NaN smallest indices");
  }
}

// conv_transpose2d on cuDNN's backward data (Note [conv_transpose2d on cuDNN]) against the CPU:
// groups, stride, padding, output_padding, dilation, bias, a channels-last input, an unbatched input.
TEST_F(CudaKernels, ConvTranspose2dOnCudnnLikeTheCpu) {
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-12, 1e-12}
                                           : (t == tessera::kFloat32 ? Tol{1e-4, 1e-4} : tol_for(t, 8));
    auto [x, dx] = randn_pair({2, 4, 5, 6}, t);
    auto [w, dw] = randn_pair({4, 3, 3, 3}, t);
    auto [b, db] = randn_pair({6}, t);
    Tensor got;
    EXPECT_RUNS_ON_CUDA("conv_transpose2d " + tn,
                        got = tessera::conv_transpose2d(dx, dw, db, {2}, {1}, {1}, 2, {1}));
    expect_close(got, tessera::conv_transpose2d(x, w, b, {2}, {1}, {1}, 2, {1}), tol,
                 "conv_transpose2d groups 2 " + tn);
    auto [w1, dw1] = randn_pair({4, 5, 2, 3}, t);
    EXPECT_RUNS_ON_CUDA(
        "conv_transpose2d dilated " + tn,
        got = tessera::conv_transpose2d(dx, dw1, std::nullopt, {1, 2}, {0, 1}, {0, 1}, 1, {2, 1}));
    expect_close(got, tessera::conv_transpose2d(x, w1, std::nullopt, {1, 2}, {0, 1}, {0, 1}, 1, {2, 1}), tol,
                 "conv_transpose2d dilated " + tn);
    const Tensor xcl = tessera::contiguous(x, tessera::MemoryFormat::ChannelsLast), dxcl = xcl.to("cuda:0");
    expect_close(tessera::conv_transpose2d(dxcl, dw1), tessera::conv_transpose2d(xcl, w1), tol,
                 "conv_transpose2d channels-last " + tn);
    expect_close(tessera::conv_transpose2d(dx.select(0, 1), dw, db, {2}, {1}, {1}, 2),
                 tessera::conv_transpose2d(x.select(0, 1), w, b, {2}, {1}, {1}, 2), tol,
                 "conv_transpose2d unbatched " + tn);
  }
}

// _resize (Note [_resize on the GPU]) against the CPU: nearest exactly for every dtype, linear and
// cubic (with scales read back from the device, exclude_outside) within float rounding.
TEST_F(CudaKernels, ResizeLikeTheCpu) {
  tessera::Dispatcher& d = tessera::Dispatcher::instance();
  auto resize = [&](const Tensor& x, std::vector<int64_t> size, const char* mode, const char* coord,
                    std::optional<Tensor> scales = std::nullopt, bool exclude = false) {
    tessera::Stack r = d.call_boxed(d.op("_resize"),
                                    tessera::Stack{x, size, std::string(mode), std::string(coord),
                                                   std::string("round_prefer_ceil"), -0.75, exclude, scales});
    return std::get<Tensor>(r[0]);
  };
  for (DType t : {tessera::kBool, tessera::kUInt8, tessera::kInt64, tessera::kFloat16, tessera::kFloat32,
                  tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tensor x = tessera::mul(tessera::randn({2, 3, 4, 5}), tessera::full({}, 9.0)).to(t),
                 dx = x.to("cuda:0");
    for (const char* coord : {"asymmetric", "half_pixel", "align_corners"}) {
      Tensor got;
      EXPECT_RUNS_ON_CUDA("resize nearest " + tn, got = resize(dx, {7, 3}, "nearest", coord));
      expect_same(got, resize(x, {7, 3}, "nearest", coord), std::string("nearest ") + coord + " " + tn);
    }
    expect_same(resize(dx.transpose(2, 3), {9, 2}, "nearest", "half_pixel"),
                resize(x.transpose(2, 3), {9, 2}, "nearest", "half_pixel"), "nearest strided " + tn);
    if (t == tessera::kBool || t == tessera::kUInt8 || t == tessera::kInt64) continue;
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-12, 1e-12}
                                           : (t == tessera::kFloat32 ? Tol{1e-5, 1e-5} : tol_for(t, 4));
    for (const char* mode : {"linear", "cubic"})
      for (const char* coord : {"half_pixel", "align_corners", "pytorch_half_pixel"}) {
        Tensor got;
        EXPECT_RUNS_ON_CUDA(std::string(mode) + " " + tn, got = resize(dx, {8, 3}, mode, coord));
        expect_close(got, resize(x, {8, 3}, mode, coord), tol, std::string(mode) + " " + coord + " " + tn);
      }
    const Tensor scales = tessera::tensor(std::vector<double>{1.5, 0.8}, {2});
    expect_close(resize(dx, {6, 4}, "cubic", "half_pixel", scales.to("cuda:0"), true),
                 resize(x, {6, 4}, "cubic", "half_pixel", scales, true), tol, "cubic with scales " + tn);
  }
}

// fake_quantize per tensor and per channel (Note [Fake quantize]) against the CPU bit for bit (the
// shared rule), values below, inside and above the range, a transposed input, and the CPU's errors.
TEST_F(CudaKernels, FakeQuantizeLikeTheCpu) {
  const tessera::Device cuda("cuda:0");
  const Tensor x = tessera::mul(tessera::randn({5, 7}), tessera::full({}, 3.0));
  const Tensor scale = tessera::tensor(std::vector<float>{0.01f}),
               zp = tessera::tensor(std::vector<int32_t>{30});
  Tensor got;
  EXPECT_RUNS_ON_CUDA(
      "fake_quantize_per_tensor_affine",
      got = tessera::fake_quantize_per_tensor_affine(x.to(cuda), scale.to(cuda), zp.to(cuda), 0, 255));
  expect_same(got, tessera::fake_quantize_per_tensor_affine(x, scale, zp, 0, 255), "per tensor");
  const Tensor cs = tessera::tensor(std::vector<float>{0.02f, 0.5f, 0.003f, 0.1f, 1.0f});
  const Tensor cz = tessera::tensor(std::vector<int64_t>{0, -3, 10, 0, 127});
  EXPECT_RUNS_ON_CUDA(
      "fake_quantize_per_channel_affine",
      got = tessera::fake_quantize_per_channel_affine(x.to(cuda), cs.to(cuda), cz.to(cuda), 0, -128, 127));
  expect_same(got, tessera::fake_quantize_per_channel_affine(x, cs, cz, 0, -128, 127), "per channel");
  const Tensor xt = tessera::mul(tessera::randn({7, 5}), tessera::full({}, 3.0)).t();
  expect_same(tessera::fake_quantize_per_channel_affine(xt.to(cuda), cs.to(cuda), cz.to(cuda), 0, -128, 127),
              tessera::fake_quantize_per_channel_affine(xt, cs, cz, 0, -128, 127), "per channel, transposed");
  try {
    tessera::fake_quantize_per_tensor_affine(x.to(cuda), tessera::tensor(std::vector<float>{-1.0f}).to(cuda),
                                             zp.to(cuda), 0, 255);
    ADD_FAILURE() << "a negative scale was accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not finite and positive"), std::string::npos) << e.what();
  }
  try {
    tessera::fake_quantize_per_tensor_affine(x.to(cuda), scale.to(cuda),
                                             tessera::tensor(std::vector<int32_t>{300}).to(cuda), 0, 255);
    ADD_FAILURE() << "a zero point above quant_max was accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("zero_point 300"), std::string::npos) << e.what();
  }
}

// _linear_epilogue (Note [Linear epilogues on CUDA]): residual + act(linear(x, w, b)) against the same
// ops on the CPU in double, every activation with and without bias and residual: cuBLASLt's
// epilogues (bias, relu, the tanh GELU, the residual as C) and the separate passes (the erf GELU,
// float64) alike.
TEST_F(CudaKernels, LinearEpilogueLikeTheCpuOps) {
  tessera::Dispatcher& d = tessera::Dispatcher::instance();
  auto reference = [](const Tensor& x, const Tensor& w, const std::optional<Tensor>& b,
                      const std::optional<Tensor>& r, const std::string& act) {
    auto f64 = [](const Tensor& t) { return t.to(tessera::kFloat64); };
    Tensor y = tessera::linear(f64(x), f64(w), b ? std::optional<Tensor>(f64(*b)) : std::nullopt);
    if (act == "relu") y = tessera::relu(y);
    if (act == "gelu") y = tessera::gelu(y);
    if (act == "gelu_tanh") y = tessera::gelu(y, "tanh");
    return r ? tessera::add(y, f64(*r)) : y;
  };
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-12, 1e-12}
                                           : (t == tessera::kFloat32 ? Tol{1e-4, 1e-4} : tol_for(t, 8));
    auto [x, dx] = randn_pair({3, 10, 64}, t);
    auto [w, dw] = randn_pair({48, 64}, t);
    auto [b, db] = randn_pair({48}, t);
    auto [r, dr] = randn_pair({3, 10, 48}, t);
    for (const char* act : {"none", "relu", "gelu", "gelu_tanh"})
      for (bool with_bias : {true, false})
        for (bool with_residual : {true, false}) {
          const std::string what =
              tn + " " + act + (with_bias ? " bias" : "") + (with_residual ? " residual" : "");
          const tessera::Value bias = with_bias ? tessera::Value(db) : tessera::Value(std::monostate{});
          const tessera::Value res = with_residual ? tessera::Value(dr) : tessera::Value(std::monostate{});
          Tensor got;
          EXPECT_RUNS_ON_CUDA(
              "_linear_epilogue " + what,
              got = std::get<Tensor>(d.call_boxed(d.op("_linear_epilogue"),
                                                  tessera::Stack{dx, dw, bias, res, std::string(act)})[0]));
          expect_close(got,
                       reference(x, w, with_bias ? std::optional<Tensor>(b) : std::nullopt,
                                 with_residual ? std::optional<Tensor>(r) : std::nullopt, act)
                           .to(t),
                       tol, "_linear_epilogue " + what);
        }
  }
}

// _conv2d_epilogue (Note [Conv epilogues on cuDNN]) against the CPU ops in double: relu with a bias
// (cuDNN's fused call), relu without one, both GELUs, a channels-last input, four dtypes.
TEST_F(CudaKernels, Conv2dEpilogueLikeTheCpuOps) {
  tessera::Dispatcher& d = tessera::Dispatcher::instance();
  for (DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64}) {
    const std::string tn(tessera::dtype_name(t));
    const Tol tol = t == tessera::kFloat64 ? Tol{1e-12, 1e-12}
                                           : (t == tessera::kFloat32 ? Tol{1e-4, 1e-4} : tol_for(t, 8));
    auto [x, dx] = randn_pair({2, 4, 9, 7}, t);
    auto [w, dw] = randn_pair({6, 2, 3, 3}, t);
    auto [b, db] = randn_pair({6}, t);
    for (const char* act : {"relu", "gelu", "gelu_tanh", "none"})
      for (bool with_bias : {true, false})
        for (bool channels_last : {false, true}) {
          const std::string what =
              tn + " " + act + (with_bias ? " bias" : "") + (channels_last ? " channels-last" : "");
          const Tensor input =
              channels_last ? tessera::contiguous(dx, tessera::MemoryFormat::ChannelsLast) : dx;
          const tessera::Value bias = with_bias ? tessera::Value(db) : tessera::Value(std::monostate{});
          Tensor got;
          EXPECT_RUNS_ON_CUDA(
              "_conv2d_epilogue " + what,
              got = std::get<Tensor>(d.call_boxed(
                  d.op("_conv2d_epilogue"),
                  tessera::Stack{input, dw, bias, std::vector<int64_t>{2, 1}, std::vector<int64_t>{1, 1},
                                 std::vector<int64_t>{1, 1}, int64_t(2), std::string(act)})[0]));
          Tensor want =
              tessera::conv2d(x.to(tessera::kFloat64), w.to(tessera::kFloat64),
                              with_bias ? std::optional<Tensor>(b.to(tessera::kFloat64)) : std::nullopt,
                              {2, 1}, {1, 1}, {1, 1}, 2);
          if (std::string(act) == "relu") want = tessera::relu(want);
          if (std::string(act) == "gelu") want = tessera::gelu(want);
          if (std::string(act) == "gelu_tanh") want = tessera::gelu(want, "tanh");
          expect_close(got, want.to(t), tol, "_conv2d_epilogue " + what);
        }
  }
}

// Integer matmul (Note [Integer nn ops]) against the CPU, exactly: every integer dtype (int8 and
// uint8 wrapping), 2-D, batched with a broadcast batch dim, vector operands, and k = 0.
TEST_F(CudaKernels, IntegerMatmulLikeTheCpu) {
  for (DType t : {tessera::kInt64, tessera::kInt32, tessera::kInt16, tessera::kInt8, tessera::kUInt8}) {
    const std::string tn(tessera::dtype_name(t));
    auto ints = [&](std::vector<int64_t> sizes) {
      return tessera::floor(tessera::mul(tessera::randn(sizes), tessera::full({}, 40.0))).to(t);
    };
    for (const auto& [sa, sb] :
         std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{{{7, 19}, {19, 5}},
                                                                            {{3, 1, 6, 33}, {4, 33, 17}},
                                                                            {{19}, {19, 5}},
                                                                            {{2, 7, 19}, {19}},
                                                                            {{5, 0}, {0, 3}}}) {
      const Tensor a = ints(sa), b = ints(sb);
      Tensor got;
      EXPECT_RUNS_ON_CUDA("integer matmul " + tn, got = tessera::matmul(a.to("cuda:0"), b.to("cuda:0")));
      expect_same(got, tessera::matmul(a, b),
                  "integer matmul " + tn + " " + std::to_string(sa.size()) + "x" + std::to_string(sb.size()));
    }
    const Tensor a = ints({9, 12}), b = ints({12, 9});
    expect_same(tessera::matmul(a.to("cuda:0").t(), b.to("cuda:0").t()), tessera::matmul(a.t(), b.t()),
                "integer matmul transposed " + tn);
  }
}

}  // namespace
