// The CPU plugin's weight cache (Note [Weight cache] in plugins/cpu/nn/onednn_ops.cpp): a weight
// reused by linear / matmul / conv2d is packed once into oneDNN's preferred layout, the packed copy
// is dropped when the weight is written (Note [Storage version]), its bytes show in
// memory_stats(cpu).reserved_bytes and empty_cache(cpu) releases them. Results are checked against
// naive double references computed here from the tensors' current values.
#include <gtest/gtest.h>

#include <vector>

#include "cpu_test_util.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using cpu_test::close;
using cpu_test::linear_ref;
using cpu_test::matmul_ref;
using cpu_test::random_tensor;
using cpu_test::read;
using cpu_test::Ref;
using cpu_test::round_to;
using cpu_test::seed_trace;
using cpu_test::Tol;

// Products of up to 256 terms accumulated in f32 (bf16: stored rounded to bf16).
Tol tol(DType dt) { return dt == kFloat32 ? Tol{1e-4, 1e-4} : cpu_test::tol(dt); }

uint64_t cpu_reserved() { return memory_stats(Device("cpu")).reserved_bytes; }

// Reserved bytes of the host allocator alone do not move between two calls of the same op with
// outputs freed in between (its cache keeps the blocks), so the growth measured here is the
// plugin's packed weights.
// False on a CPU where oneDNN has no bf16 kernels (AVX2 only): bf16 products run through f32 there,
// on temporary f32 copies of the weights, so no bf16 weight is packed (Note [bf16 without oneDNN
// support] in plugins/cpu/nn/onednn.h).
bool packs(DType dt) {
  if (dt != kBFloat16) return true;
  for (const auto& d : devices())
    if (d.device.type() == DeviceType::CPU) return d.properties.find("\"onednn_bf16\": true") != std::string::npos;
  return false;
}
#define SKIP_UNLESS_PACKED(dt) \
  if (!packs(dt)) GTEST_SKIP() << "bfloat16 runs through float32 on this CPU (no oneDNN bf16): nothing is packed"

class CpuWeightCache : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { empty_cache(Device("cpu")); }
};

TEST_P(CpuWeightCache, ReusedLinearWeightIsPackedOnceAndCounted) {
  SCOPED_TRACE(seed_trace());
  const DType dt = GetParam();
  SKIP_UNLESS_PACKED(dt);
  const Tensor x = random_tensor({48, 256}, dt), w = random_tensor({384, 256}, dt, -0.2, 0.2),
               b = random_tensor({384}, dt);
  const std::vector<double> want = linear_ref(x, w, b);
  EXPECT_TRUE(close(linear(x, w, b), want, tol(dt), "first call"));
  const uint64_t before = cpu_reserved();
  EXPECT_TRUE(close(linear(x, w, b), want, tol(dt), "second call (packs)"));
  const uint64_t packed = cpu_reserved() - before;
  EXPECT_GE(packed, uint64_t(384 * 256) * itemsize(dt)) << "memory_stats(cpu) does not show the packed weight";
  EXPECT_TRUE(close(linear(x, w, b), want, tol(dt), "third call (cached)"));
  EXPECT_EQ(cpu_reserved() - before, packed) << "the cached copy was packed again";
  EXPECT_GE(empty_cache(Device("cpu")), packed);
  EXPECT_EQ(cpu_reserved(), before);
  EXPECT_TRUE(close(linear(x, w, b), want, tol(dt), "after empty_cache"));
}

TEST_P(CpuWeightCache, InPlaceWriteToTheWeightIsSeen) {
  SCOPED_TRACE(seed_trace());
  const DType dt = GetParam();
  const Tensor x = random_tensor({16, 128}, dt), b = random_tensor({96}, dt);
  Tensor w = random_tensor({96, 128}, dt, -0.2, 0.2);
  for (int i = 0; i < 3; ++i) (void)linear(x, w, b);  // packed and cached
  w.add_(random_tensor({96, 128}, dt));
  EXPECT_TRUE(close(linear(x, w, b), linear_ref(x, w, b), tol(dt), "after add_"));
  w.mul_(random_tensor({96, 128}, dt));
  (void)linear(x, w, b);
  EXPECT_TRUE(close(linear(x, w, b), linear_ref(x, w, b), tol(dt), "after mul_ (repacked)"));
  // A write through a view of the weight (one row) is a write to its storage.
  w.select(0, 5).fill_(3.0);
  EXPECT_TRUE(close(linear(x, w, b), linear_ref(x, w, b), tol(dt), "after a view's fill_"));
}

TEST_P(CpuWeightCache, WriteThroughDataPtrIsSeen) {
  SCOPED_TRACE(seed_trace());
  const DType dt = GetParam();
  const Tensor a = random_tensor({40, 64}, dt);
  Tensor b = random_tensor({64, 80}, dt);
  for (int i = 0; i < 3; ++i) (void)matmul(a, b);
  // Overwrite the weight's bytes from the host with another tensor's values.
  const Tensor other = random_tensor({64, 80}, dt);
  std::memcpy(b.raw_data_ptr(), other.raw_const_data_ptr(), b.nbytes());
  EXPECT_TRUE(close(matmul(a, b), matmul_ref(a, other, a.dtype()), tol(dt), "after a raw_data_ptr write"));
  (void)matmul(a, b);
  if (dt == kFloat32) {
    b.data_ptr<float>()[7] = 100.f;
    EXPECT_TRUE(close(matmul(a, b), matmul_ref(a, b, a.dtype()), tol(dt), "after a data_ptr<float> write"));
  }
}

TEST_P(CpuWeightCache, FreedWeightsMemoryReusedByAnotherWeightIsNotConfused) {
  SCOPED_TRACE(seed_trace());
  const DType dt = GetParam();
  const Tensor x = random_tensor({8, 64}, dt), b = random_tensor({64}, dt);
  for (int round = 0; round < 4; ++round) {
    // The caching allocator hands the same block to each new weight of the same size.
    const Tensor w = random_tensor({64, 64}, dt, -0.5, 0.5);
    const std::vector<double> want = linear_ref(x, w, b);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(close(linear(x, w, b), want, tol(dt), "round " + std::to_string(round)));
  }
}

TEST_P(CpuWeightCache, StaysWithinItsBoundAcrossManyWeights) {
  SCOPED_TRACE(seed_trace());
  const DType dt = GetParam();
  SKIP_UNLESS_PACKED(dt);
  const Tensor x = random_tensor({4, 128}, dt), b = random_tensor({128}, dt);
  std::vector<Tensor> weights;
  for (int i = 0; i < 12; ++i) weights.push_back(random_tensor({128, 128}, dt));
  for (int pass = 0; pass < 3; ++pass)
    for (const Tensor& w : weights) (void)linear(x, w, b);
  // Every weight was packed; the cache holds them (default bound 1 GiB) and releases them all.
  const uint64_t released = empty_cache(Device("cpu"));
  EXPECT_GE(released, uint64_t(12 * 128 * 128) * itemsize(dt));
  EXPECT_LE(released, uint64_t(1) << 30);
}

// conv2d, stride 1, padding 1, 3x3, in double from the tensors' current values.
std::vector<double> conv_ref(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const Ref X = read(x), W = read(w), B = read(bias);
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3), oc = w.size(0);
  std::vector<double> out(size_t(n * oc * h * wd));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < oc; ++o)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t z = 0; z < wd; ++z) {
          double acc = B.v[size_t(o)];
          for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t i = 0; i < 3; ++i)
              for (int64_t j = 0; j < 3; ++j) {
                const int64_t yy = y + i - 1, zz = z + j - 1;
                if (yy < 0 || yy >= h || zz < 0 || zz >= wd) continue;
                acc += X.v[size_t(((b * c + ci) * h + yy) * wd + zz)] * W.v[size_t(((o * c + ci) * 3 + i) * 3 + j)];
              }
          out[size_t(((b * oc + o) * h + y) * wd + z)] = round_to(acc, x.dtype());
        }
  return out;
}

TEST_P(CpuWeightCache, Conv2dWeightIsPackedOnceAndRepackedAfterAWrite) {
  SCOPED_TRACE(seed_trace());
  const DType dt = GetParam();
  SKIP_UNLESS_PACKED(dt);
  const Tensor x = random_tensor({2, 16, 9, 11}, dt), b = random_tensor({32}, dt);
  Tensor w = random_tensor({32, 16, 3, 3}, dt, -0.2, 0.2);
  auto conv = [&] { return conv2d(x, w, b, {1, 1}, {1, 1}); };
  std::vector<double> want = conv_ref(x, w, b);
  EXPECT_TRUE(close(conv(), want, tol(dt), "first call"));
  const uint64_t before = cpu_reserved();
  EXPECT_TRUE(close(conv(), want, tol(dt), "second call (packs)"));
  EXPECT_GE(cpu_reserved() - before, uint64_t(32 * 16 * 9) * itemsize(dt)) << "memory_stats(cpu) does not show the packed weight";
  EXPECT_TRUE(close(conv(), want, tol(dt), "third call (cached)"));
  w.add_(random_tensor({32, 16, 3, 3}, dt, -0.2, 0.2));
  want = conv_ref(x, w, b);
  EXPECT_TRUE(close(conv(), want, tol(dt), "after add_"));
  EXPECT_TRUE(close(conv(), want, tol(dt), "after add_, repacked"));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CpuWeightCache, ::testing::Values(kFloat32, kBFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CpuStorageVersion, InPlaceOpsAndDataPtrMoveItReadsDoNot) {
  Tensor t = random_tensor({4, 4}, kFloat32);
  const uint64_t v0 = t.storage()->version();
  EXPECT_NE(v0, 0u);
  (void)(t + t);
  (void)t.const_data_ptr<float>();
  (void)t.select(0, 1).select(0, 2).item<float>();
  EXPECT_EQ(t.storage()->version(), v0) << "reading moved the version";
  t.add_(t);
  const uint64_t v1 = t.storage()->version();
  EXPECT_NE(v1, v0);
  t.transpose(0, 1).fill_(1.0);
  const uint64_t v2 = t.storage()->version();
  EXPECT_NE(v2, v1);
  (void)t.data_ptr<float>();
  EXPECT_NE(t.storage()->version(), v2);
  EXPECT_NE(random_tensor({4, 4}, kFloat32).storage()->version(), t.storage()->version());
}

}  // namespace
}  // namespace tessera
