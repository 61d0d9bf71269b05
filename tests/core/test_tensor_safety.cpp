// Memory safety of tensor metadata: undefined tensors, overflow-checked extents (Note [Checked
// extents]), TensorImpl bounds, slice with huge steps, memory-overlap classification (Note [Memory
// overlap]) and scalar range checks. Expected values are written by hand from PyTorch's semantics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tessera/tensor.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using V = std::vector<int64_t>;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(TensorSafety, UndefinedTensorAccessorsThrowInsteadOfCrashing) {
  Tensor t;
  auto undefined = ThrowsMessage<Error>(HasSubstr("undefined"));
  EXPECT_THAT([&] { (void)t.numel(); }, undefined);
  EXPECT_THAT([&] { (void)t.dim(); }, undefined);
  EXPECT_THAT([&] { (void)t.sizes(); }, undefined);
  EXPECT_THAT([&] { (void)t.strides(); }, undefined);
  EXPECT_THAT([&] { (void)t.dtype(); }, undefined);
  EXPECT_THAT([&] { (void)t.scalar_type(); }, undefined);
  EXPECT_THAT([&] { (void)t.device(); }, undefined);
  EXPECT_THAT([&] { (void)t.key_set(); }, undefined);
  EXPECT_THAT([&] { (void)t.storage_offset(); }, undefined);
  EXPECT_THAT([&] { (void)t.storage(); }, undefined);
  EXPECT_THAT([&] { (void)t.itemsize(); }, undefined);
  EXPECT_THAT([&] { (void)t.nbytes(); }, undefined);
  EXPECT_THAT([&] { (void)t.is_contiguous(); }, undefined);
  EXPECT_THAT([&] { (void)t.is_cpu(); }, undefined);
  EXPECT_THAT([&] { (void)t.size(0); }, undefined);
  EXPECT_FALSE(t.defined());
}

TEST(TensorSafety, SliceWithHugeStepKeepsOneElement) {
  Tensor t = make_tensor({5}, kInt64, kCPU);
  Tensor s = t.slice(0, std::nullopt, std::nullopt, kMax);
  EXPECT_EQ(s.sizes().vec(), V{1});  // ceil(5 / (2^63 - 1)) = 1
  EXPECT_EQ(s.storage_offset(), 0);
  Tensor s2 = t.slice(0, 2, std::nullopt, kMax - 1);
  EXPECT_EQ(s2.sizes().vec(), V{1});
  EXPECT_EQ(s2.storage_offset(), 2);
  EXPECT_EQ(t.slice(0, 0, 5, 2).sizes().vec(), V{3});
  EXPECT_EQ(t.slice(0, 4, 2, kMax).sizes().vec(), V{0});
  Tensor m = make_tensor({3, 4}, kFloat32, kCPU);
  Tensor ms = m.slice(1, 1, std::nullopt, kMax);
  EXPECT_EQ(ms.sizes().vec(), (V{3, 1}));
  EXPECT_EQ(ms.storage_offset(), 1);
}

TEST(TensorSafety, AsStridedRejectsExtentsThatOverflow) {
  Tensor t = make_tensor({2}, kFloat32, kCPU);
  auto oob = ThrowsMessage<Error>(HasSubstr("as_strided"));
  EXPECT_THAT([&] { t.as_strided({2}, {kMax}); }, oob);        // extent 2^63 overflows int64
  EXPECT_THAT([&] { t.as_strided({3}, {kMax / 2}); }, oob);    // elements fit, bytes do not
  EXPECT_THAT([&] { t.as_strided({2}, {1}, kMax); }, oob);     // offset + span overflows
  EXPECT_THAT([&] { t.as_strided({1}, {1}, kMax / 4 + 1); }, oob);  // (offset + 1) * 4 overflows
  EXPECT_THAT([&] { t.as_strided({kMax, 2}, {0, 1}); }, ThrowsMessage<Error>(HasSubstr("")));
  Tensor ok = t.as_strided({2}, {1});
  EXPECT_EQ(ok.sizes().vec(), V{2});
  EXPECT_EQ(t.as_strided({0}, {kMax}).numel(), 0);  // no element, no extent
}

TEST(TensorSafety, TensorImplConstructorChecksTheStorageBounds) {
  Tensor base = make_tensor({4}, kFloat32, kCPU);  // 16 bytes
  const Storage& st = base.storage();
  auto oob = ThrowsMessage<Error>(HasSubstr("out of bounds"));
  EXPECT_THAT([&] { make_intrusive<TensorImpl>(st, kFloat32, kCPU, IntArrayRef({5}), IntArrayRef({1}), 0); }, oob);
  EXPECT_THAT([&] { make_intrusive<TensorImpl>(st, kFloat32, kCPU, IntArrayRef({2}), IntArrayRef({2}), 2); }, oob);
  EXPECT_THAT([&] { make_intrusive<TensorImpl>(st, kFloat64, kCPU, IntArrayRef({3}), IntArrayRef({1}), 0); }, oob);
  EXPECT_THAT([&] { make_intrusive<TensorImpl>(st, kFloat32, kCPU, IntArrayRef({2}), IntArrayRef({kMax}), 0); },
              ThrowsMessage<Error>(HasSubstr("overflows")));
  EXPECT_THAT([&] { make_intrusive<TensorImpl>(st, kFloat32, kCPU, IntArrayRef({2}), IntArrayRef({-1}), 1); },
              ThrowsMessage<Error>(HasSubstr("negative strides")));
  auto impl = make_intrusive<TensorImpl>(st, kFloat32, kCPU, IntArrayRef({2}), IntArrayRef({2}), 1);  // 1, 3
  EXPECT_EQ(impl->numel(), 2);
  // A failed set_sizes_and_strides leaves the impl as it was.
  EXPECT_THAT([&] { impl->set_sizes_and_strides(IntArrayRef({8}), IntArrayRef({1}), 0); }, oob);
  EXPECT_EQ(impl->sizes().vec(), V{2});
  EXPECT_EQ(impl->strides().vec(), V{2});
  EXPECT_EQ(impl->storage_offset(), 1);
}

TEST(TensorSafety, NbytesOfAHugeBroadcastViewThrows) {
  Tensor t = make_tensor({1}, kFloat64, kCPU);
  Tensor e = t.expand({kMax});
  EXPECT_EQ(e.numel(), kMax);
  EXPECT_THAT([&] { (void)e.nbytes(); }, ThrowsMessage<Error>(HasSubstr("overflow")));
  EXPECT_EQ(t.nbytes(), 8u);
}

TEST(TensorSafety, CheckedExtentHelpers) {
  EXPECT_EQ(storage_extent(IntArrayRef({2, 3}), IntArrayRef({3, 1}), 0), 6);
  EXPECT_EQ(storage_extent(IntArrayRef({2, 3}), IntArrayRef({3, 1}), 4), 10);
  EXPECT_EQ(storage_extent(IntArrayRef({0, 3}), IntArrayRef({kMax, kMax}), 0), 0);
  EXPECT_EQ(storage_extent(IntArrayRef({2}), IntArrayRef({kMax}), 0), std::nullopt);
  EXPECT_EQ(storage_extent(IntArrayRef({2}), IntArrayRef({-1}), 0), std::nullopt);
  EXPECT_EQ(checked_nbytes(kMax, 4), std::nullopt);
  EXPECT_EQ(checked_nbytes(-1, 4), std::nullopt);
  EXPECT_EQ(checked_nbytes(10, 8), 80u);
  EXPECT_EQ(checked_mul(kMax, 2), std::nullopt);
  EXPECT_EQ(checked_add(kMax, 1), std::nullopt);
  EXPECT_EQ(saturating_mul(kMax, 3), kMax);
}

TEST(TensorSafety, MemoryOverlapClassification) {
  Tensor x = make_tensor({3, 3}, kFloat32, kCPU);
  EXPECT_EQ(has_internal_overlap(*x.impl()), MemOverlap::No);
  EXPECT_EQ(has_internal_overlap(*x.t().impl()), MemOverlap::No);
  Tensor one = make_tensor({1}, kFloat32, kCPU);
  EXPECT_EQ(has_internal_overlap(*one.expand({3}).impl()), MemOverlap::Yes);
  EXPECT_EQ(has_internal_overlap(*x.slice(1, 0, 3, 2).impl()), MemOverlap::TooHard);
  EXPECT_EQ(get_overlap_status(*x.impl(), *x.impl()), MemOverlapStatus::Full);
  EXPECT_EQ(get_overlap_status(*x.impl(), *x.view({9}).view({3, 3}).impl()), MemOverlapStatus::Full);
  EXPECT_EQ(get_overlap_status(*x.t().impl(), *x.impl()), MemOverlapStatus::Partial);
  Tensor y = make_tensor({6}, kFloat32, kCPU);
  EXPECT_EQ(get_overlap_status(*y.slice(0, 1).impl(), *y.slice(0, 0, 5).impl()), MemOverlapStatus::Partial);
  EXPECT_EQ(get_overlap_status(*y.slice(0, 0, 3).impl(), *y.slice(0, 3).impl()), MemOverlapStatus::No);
  EXPECT_EQ(get_overlap_status(*y.impl(), *make_tensor({6}, kFloat32, kCPU).impl()), MemOverlapStatus::No);
}

TEST(TensorSafety, ScalarRangeFollowsCheckedConvert) {
  EXPECT_TRUE(scalar_overflows(300, kUInt8));
  EXPECT_FALSE(scalar_overflows(255, kUInt8));
  EXPECT_FALSE(scalar_overflows(-1, kUInt8));  // wraps to 255 as in PyTorch
  EXPECT_FALSE(scalar_overflows(-255, kUInt8));
  EXPECT_TRUE(scalar_overflows(-256, kUInt8));
  EXPECT_TRUE(scalar_overflows(-1.0, kUInt8));
  EXPECT_TRUE(scalar_overflows(128, kInt8));
  EXPECT_FALSE(scalar_overflows(-128, kInt8));
  EXPECT_FALSE(scalar_overflows(2.5, kInt8));
  EXPECT_TRUE(scalar_overflows(300.0, kInt8));
  EXPECT_TRUE(scalar_overflows(std::nan(""), kInt32));
  EXPECT_TRUE(scalar_overflows(1e5, kFloat16));
  EXPECT_TRUE(scalar_overflows(100000, kFloat16));
  EXPECT_FALSE(scalar_overflows(65504.0, kFloat16));
  EXPECT_FALSE(scalar_overflows(std::numeric_limits<double>::infinity(), kFloat16));
  EXPECT_FALSE(scalar_overflows(std::nan(""), kBFloat16));
  EXPECT_TRUE(scalar_overflows(1e39, kFloat32));
  EXPECT_FALSE(scalar_overflows(5, kBool));
  EXPECT_FALSE(scalar_overflows(true, kUInt8));
  EXPECT_THAT([] { check_scalar_fits(300, kUInt8, "fill_"); },
              ThrowsMessage<Error>(HasSubstr("cannot be converted to type uint8_t without overflow")));
}

}  // namespace
}  // namespace tessera
