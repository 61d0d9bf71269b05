// Tensor metadata and views. Expected sizes, strides and offsets are written by hand from PyTorch's
// semantics for the same calls.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "tessera/tensor.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using V = std::vector<int64_t>;

V vec(IntArrayRef a) { return a.vec(); }

Tensor arange(IntArrayRef sizes, DType dt = kFloat32) {
  Tensor t = make_tensor(sizes, dt, kCPU);
  visit_dtype(dt, [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data_ptr<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, bool>) p[i] = (i % 2) != 0;
      else p[i] = T(float(i));
    }
    return 0;
  });
  return t;
}

void expect_geometry(const Tensor& t, V sizes, V strides, int64_t offset) {
  EXPECT_EQ(vec(t.sizes()), sizes);
  EXPECT_EQ(vec(t.strides()), strides);
  EXPECT_EQ(t.storage_offset(), offset);
}

TEST(Tensor, MakeTensorIsContiguousDense) {
  Tensor t = make_tensor({2, 3, 4}, kFloat32, kCPU);
  expect_geometry(t, {2, 3, 4}, {12, 4, 1}, 0);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.key_set(), DispatchKeySet::dense(kCPU));
  EXPECT_EQ(t.storage()->nbytes(), 96u);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_TRUE(t.is("cpu"));
  EXPECT_FALSE(t.is("cuda"));
  EXPECT_THAT([&] { t.size(3); }, ThrowsMessage<Error>(HasSubstr("dimension 3 out of range for a 3-D tensor (expected -3..2)")));
  Tensor s = make_tensor({}, kFloat64, kCPU);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_THAT([&] { s.size(0); }, ThrowsMessage<Error>(HasSubstr("0-dim")));
}

// Note [Tensor autograd methods]: without libtessera_autograd (test_core does not link it) a tensor
// is outside every graph, and the two methods that need the library say so.
TEST(Tensor, AutogradMethodsWithoutTheLibrary) {
  Tensor t = make_tensor({2, 3}, kFloat32, Device(kMeta));
  EXPECT_FALSE(t.requires_grad());
  EXPECT_TRUE(t.is_leaf());
  EXPECT_FALSE(t.grad().defined());
  EXPECT_TRUE(t.requires_grad_(false).is_same(t));
  EXPECT_THAT([&] { t.requires_grad_(); },
              ThrowsMessage<Error>(HasSubstr("Tensor::requires_grad_: autograd is not loaded; link libtessera_autograd")));
  EXPECT_THAT([&] { t.backward(); }, ThrowsMessage<Error>(HasSubstr("Tensor::backward: autograd is not loaded")));
  Tensor d = t.detach();
  EXPECT_FALSE(d.is_same(t));
  EXPECT_EQ(d.storage().get(), t.storage().get());
  EXPECT_EQ(d.sizes(), t.sizes());
}

TEST(Tensor, MetaTensorsHaveNoData) {
  Tensor m = make_tensor({2, 3}, kFloat16, Device(kMeta));
  EXPECT_EQ(m.key_set(), DispatchKeySet::dense(kMeta));
  EXPECT_TRUE(m.is("meta"));
  EXPECT_EQ(m.storage()->data(), nullptr);
  EXPECT_EQ(m.storage()->nbytes(), 12u);
  EXPECT_THAT([&] { m.data_ptr<Half>(); }, ThrowsMessage<Error>(AllOf(HasSubstr("'meta'"), HasSubstr(".to(\"cpu\")"))));
  EXPECT_THAT([&] { m.raw_data_ptr(); }, ThrowsMessage<Error>(HasSubstr(".to(\"cpu\")")));
  // Views work on meta tensors (metadata only).
  expect_geometry(m.t(), {3, 2}, {1, 3}, 0);
}

TEST(Tensor, HelpersAndErrors) {
  EXPECT_EQ(contiguous_strides({2, 0, 3}), (V{3, 3, 1}));
  EXPECT_EQ(contiguous_strides({}), V{});
  EXPECT_EQ(compute_numel({2, 3, 4}), 24);
  EXPECT_EQ(compute_numel({}), 1);
  EXPECT_EQ(compute_numel({5, 0}), 0);
  EXPECT_THAT([] { compute_numel({int64_t(1) << 40, int64_t(1) << 40}); }, ThrowsMessage<Error>(HasSubstr("overflows")));
  EXPECT_THAT([] { compute_numel({2, -1}); }, ThrowsMessage<Error>(HasSubstr("negative")));
  EXPECT_EQ(wrap_dim(-1, 2), 1);
  EXPECT_EQ(wrap_dim(-1, 0), 0);
  EXPECT_EQ(wrap_dim(0, 0), 0);
  EXPECT_THAT([] { wrap_dim(3, 2); }, ThrowsMessage<Error>(HasSubstr("dimension 3 out of range for a 2-D tensor (expected -2..1)")));
  EXPECT_THAT([] { wrap_dim(-3, 2); }, ThrowsMessage<Error>(HasSubstr("expected -2..1")));
  EXPECT_EQ(infer_size({2, -1}, 8), (V{2, 4}));
  EXPECT_THAT([] { make_tensor({2, -3}, kFloat32, kCPU); }, ThrowsMessage<Error>(HasSubstr("negative")));
}

TEST(Tensor, ManyDimsUseTheHeap) {
  Tensor t = make_tensor({1, 2, 1, 2, 1, 2, 1, 2}, kInt8, kCPU);
  expect_geometry(t, {1, 2, 1, 2, 1, 2, 1, 2}, {16, 8, 8, 4, 4, 2, 2, 1}, 0);
  EXPECT_EQ(t.numel(), 16);
  Tensor s = t.squeeze();
  expect_geometry(s, {2, 2, 2, 2}, {8, 4, 2, 1}, 0);
  // Back and forth between inline and heap storage of the geometry.
  t.impl()->set_sizes_and_strides({16}, {1}, 0);
  expect_geometry(t, {16}, {1}, 0);
  t.impl()->set_sizes_and_strides({2, 1, 2, 1, 2, 1, 1}, {8, 8, 4, 4, 2, 2, 1}, 0);
  expect_geometry(t, {2, 1, 2, 1, 2, 1, 1}, {8, 8, 4, 4, 2, 2, 1}, 0);
  t.impl()->set_sizes_and_strides(t.sizes(), t.strides(), 1);  // aliasing its own arrays; still in bounds
  expect_geometry(t, {2, 1, 2, 1, 2, 1, 1}, {8, 8, 4, 4, 2, 2, 1}, 1);
  EXPECT_THAT([&] { t.impl()->set_sizes_and_strides({2, 2}, {1}, 0); }, ThrowsMessage<Error>(HasSubstr("one stride per size")));
  // Views whose rank crosses the inline capacity.
  Tensor r7 = make_tensor({2, 1, 3, 1, 2, 1, 2}, kFloat32, kCPU);
  expect_geometry(r7, {2, 1, 3, 1, 2, 1, 2}, {12, 12, 4, 4, 2, 2, 1}, 0);
  expect_geometry(r7.unsqueeze(0).unsqueeze(-1), {1, 2, 1, 3, 1, 2, 1, 2, 1}, {24, 12, 12, 4, 4, 2, 2, 1, 1}, 0);
  expect_geometry(r7.unsqueeze(3).unsqueeze(3).select(0, 1), {1, 3, 1, 1, 1, 2, 1, 2}, {12, 4, 4, 4, 4, 2, 2, 1}, 12);
  expect_geometry(r7.expand({5, 2, 1, 3, 1, 2, 1, 2}).transpose(0, 7), {2, 2, 1, 3, 1, 2, 1, 5},
                  {1, 12, 12, 4, 4, 2, 2, 0}, 0);
  expect_geometry(r7.unsqueeze(0).unsqueeze(0).squeeze(), {2, 3, 2, 2}, {12, 4, 2, 1}, 0);
}

TEST(Tensor, Contiguity) {
  Tensor t = make_tensor({2, 3}, kFloat32, kCPU);
  EXPECT_FALSE(t.t().is_contiguous());
  EXPECT_TRUE(t.as_strided({1, 3}, {100, 1}, 0).is_contiguous());  // size-1 dims do not count
  EXPECT_TRUE(t.as_strided({0, 3}, {7, 5}, 0).is_contiguous());    // empty
  EXPECT_FALSE(make_tensor({3, 1}, kFloat32, kCPU).expand({3, 4}).is_contiguous());
  EXPECT_TRUE(t.select(0, 1).is_contiguous());
  EXPECT_FALSE(t.select(1, 1).is_contiguous());
}

TEST(Tensor, CopyingAHandleSharesTheImpl) {
  Tensor a = make_tensor({1024, 1024}, kFloat32, kCPU);
  const CpuAllocatorStats before = cpu_allocator_stats();
  EXPECT_EQ(a.use_count(), 1);
  {
    Tensor b = a;
    EXPECT_EQ(a.use_count(), 2);
    EXPECT_TRUE(b.is_same(a));
    EXPECT_EQ(b.impl(), a.impl());
    Tensor c = std::move(b);
    EXPECT_EQ(a.use_count(), 2);
    EXPECT_FALSE(b.defined());
  }
  EXPECT_EQ(a.use_count(), 1);
  const CpuAllocatorStats after = cpu_allocator_stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.misses + after.hits, before.misses + before.hits);
  // A view is a new impl over the same storage.
  Tensor v = a.view({-1});
  EXPECT_FALSE(v.is_same(a));
  EXPECT_EQ(v.storage().get(), a.storage().get());
  EXPECT_EQ(a.storage().use_count(), 2);
}

TEST(Views, View) {
  Tensor t = make_tensor({2, 3, 4}, kFloat32, kCPU);
  expect_geometry(t.view({4, -1}), {4, 6}, {6, 1}, 0);
  expect_geometry(t.view({-1}), {24}, {1}, 0);
  expect_geometry(t.view({2, 1, 12}), {2, 1, 12}, {12, 12, 1}, 0);
  // Splitting a dim of a non-contiguous tensor is fine...
  Tensor cols = make_tensor({4, 6}, kFloat32, kCPU).slice(1, 0, 3);
  expect_geometry(cols, {4, 3}, {6, 1}, 0);
  expect_geometry(cols.view({2, 2, 3}), {2, 2, 3}, {12, 6, 1}, 0);
  // ...merging dims that are not contiguous with each other is not.
  EXPECT_THAT([&] { cols.view({12}); },
              ThrowsMessage<Error>(AllOf(HasSubstr("not compatible"), HasSubstr("use .reshape(...) instead"))));
  Tensor tr = t.transpose(1, 2);
  expect_geometry(tr.view({2, 4, 3, 1}), {2, 4, 3, 1}, {12, 1, 4, 4}, 0);
  EXPECT_THROW(tr.view({2, 12}), Error);
  Tensor ex = make_tensor({3, 1}, kFloat32, kCPU).expand({3, 4});
  expect_geometry(ex.view({3, 2, 2}), {3, 2, 2}, {1, 0, 0}, 0);
  EXPECT_THROW(ex.view({12}), Error);
  // Size inference errors.
  EXPECT_THAT([&] { t.view({5, -1}); }, ThrowsMessage<Error>(HasSubstr("shape [5, -1] is invalid for input of size 24")));
  EXPECT_THAT([&] { t.view({-1, -1}); }, ThrowsMessage<Error>(HasSubstr("only one dimension can be inferred")));
  EXPECT_THAT([&] { t.view({5, 5}); }, ThrowsMessage<Error>(HasSubstr("invalid for input of size 24")));
  Tensor empty = make_tensor({0, 3}, kFloat32, kCPU);
  EXPECT_THAT([&] { empty.view({0, -1}); }, ThrowsMessage<Error>(HasSubstr("ambiguous")));
  expect_geometry(empty.view({3, 0}), {3, 0}, {1, 1}, 0);
  // 0-dim <-> one element.
  Tensor s = make_tensor({}, kFloat32, kCPU);
  expect_geometry(s.view({1}), {1}, {1}, 0);
  expect_geometry(s.view({1}).view({}), {}, {}, 0);
}

TEST(Views, PermuteTransposeT) {
  Tensor t = make_tensor({2, 3, 4}, kFloat32, kCPU);
  expect_geometry(t.permute({2, 0, 1}), {4, 2, 3}, {1, 12, 4}, 0);
  expect_geometry(t.permute({-1, -2, -3}), {4, 3, 2}, {1, 4, 12}, 0);
  EXPECT_THAT([&] { t.permute({0, 0, 1}); }, ThrowsMessage<Error>(HasSubstr("dim 0 appears more than once")));
  EXPECT_THAT([&] { t.permute({0, 1}); }, ThrowsMessage<Error>(HasSubstr("got 2 dims for a 3-D tensor")));
  EXPECT_THAT([&] { t.permute({0, 1, 3}); }, ThrowsMessage<Error>(HasSubstr("dimension 3 out of range")));
  expect_geometry(t.transpose(0, 2), {4, 3, 2}, {1, 4, 12}, 0);
  expect_geometry(t.transpose(-1, 1), {2, 4, 3}, {12, 1, 4}, 0);
  Tensor m = make_tensor({2, 3}, kFloat32, kCPU);
  expect_geometry(m.t(), {3, 2}, {1, 3}, 0);
  expect_geometry(make_tensor({5}, kFloat32, kCPU).t(), {5}, {1}, 0);
  expect_geometry(make_tensor({}, kFloat32, kCPU).t(), {}, {}, 0);
  EXPECT_THAT([&] { t.t(); }, ThrowsMessage<Error>(HasSubstr("<= 2 dimensions")));
}

TEST(Views, SelectAndIndex) {
  Tensor t = arange({2, 3, 4});
  expect_geometry(t.select(1, -1), {2, 4}, {12, 1}, 8);
  expect_geometry(t.select(0, 1), {3, 4}, {4, 1}, 12);
  expect_geometry(t[1][2], {4}, {1}, 20);
  EXPECT_EQ(t[1][2][3].item<float>(), 23.0f);
  EXPECT_EQ(static_cast<float*>(t.select(1, -1).raw_data_ptr()), t.data_ptr<float>() + 8);
  EXPECT_THAT([&] { t.select(0, 2); },
              ThrowsMessage<Error>(AllOf(HasSubstr("index 2 out of range"), HasSubstr("[2, 3, 4]"),
                                         HasSubstr("dimension 0"))));
  EXPECT_THROW(t.select(0, -3), Error);
  EXPECT_THAT([&] { t[0][0][0].select(0, 0); }, ThrowsMessage<Error>(HasSubstr("0-dim")));
}

TEST(Views, Slice) {
  Tensor t = make_tensor({2, 3, 4}, kFloat32, kCPU);
  expect_geometry(t.slice(2, 1, 3), {2, 3, 2}, {12, 4, 1}, 1);
  expect_geometry(t.slice(1, std::nullopt, std::nullopt, 2), {2, 2, 4}, {12, 8, 1}, 0);
  expect_geometry(t.slice(2, -3, 100, 2), {2, 3, 2}, {12, 4, 2}, 1);
  expect_geometry(t.slice(2, 10, 20), {2, 3, 0}, {12, 4, 1}, 4);
  expect_geometry(t.slice(2, 3, 1), {2, 3, 0}, {12, 4, 1}, 3);
  expect_geometry(t.slice(0, -100), {2, 3, 4}, {12, 4, 1}, 0);
  expect_geometry(t.slice(-1, std::nullopt, -1), {2, 3, 3}, {12, 4, 1}, 0);
  expect_geometry(t.slice(1, 1).slice(2, 1, std::nullopt, 3), {2, 2, 1}, {12, 4, 3}, 5);
  EXPECT_THAT([&] { t.slice(0, 0, 1, 0); }, ThrowsMessage<Error>(HasSubstr("step must be positive")));
  EXPECT_THAT([&] { t.slice(0, 0, 1, -1); }, ThrowsMessage<Error>(HasSubstr("step must be positive")));
}

TEST(Views, Narrow) {
  Tensor t = make_tensor({2, 3, 4}, kFloat32, kCPU);
  expect_geometry(t.narrow(2, 1, 2), {2, 3, 2}, {12, 4, 1}, 1);
  expect_geometry(t.narrow(2, -2, 2), {2, 3, 2}, {12, 4, 1}, 2);
  expect_geometry(t.narrow(0, 2, 0), {0, 3, 4}, {12, 4, 1}, 24);
  EXPECT_THAT([&] { t.narrow(2, 3, 2); }, ThrowsMessage<Error>(HasSubstr("start (3) + length (2) exceeds dimension size (4)")));
  EXPECT_THAT([&] { t.narrow(2, 5, 0); }, ThrowsMessage<Error>(HasSubstr("start 5 out of range")));
  EXPECT_THAT([&] { t.narrow(2, 0, -1); }, ThrowsMessage<Error>(HasSubstr("non-negative")));
}

TEST(Views, Expand) {
  Tensor a = make_tensor({3, 1}, kFloat32, kCPU);
  expect_geometry(a.expand({2, 3, 4}), {2, 3, 4}, {0, 1, 0}, 0);
  expect_geometry(a.expand({-1, 4}), {3, 4}, {1, 0}, 0);
  expect_geometry(a.expand({3, 1}), {3, 1}, {1, 1}, 0);
  expect_geometry(a.expand({1, 3, 1}), {1, 3, 1}, {3, 1, 1}, 0);
  expect_geometry(make_tensor({}, kFloat32, kCPU).expand({2, 2}), {2, 2}, {0, 0}, 0);
  Tensor b = make_tensor({2, 4}, kFloat32, kCPU);
  expect_geometry(a.expand_as(make_tensor({3, 5}, kFloat32, kCPU)), {3, 5}, {1, 0}, 0);
  EXPECT_THAT([&] { a.expand({3}); },
              ThrowsMessage<Error>(HasSubstr("number of sizes provided (1) must be greater or equal to the number of dimensions in the tensor (2)")));
  EXPECT_THAT([&] { b.expand({3, 4}); },
              ThrowsMessage<Error>(AllOf(HasSubstr("must match the existing size (2) at non-singleton dimension 0"),
                                         HasSubstr("target sizes: [3, 4]"), HasSubstr("tensor sizes: [2, 4]"))));
  EXPECT_THAT([&] { a.expand({-1, 3, 4}); }, ThrowsMessage<Error>(HasSubstr("leading, non-existing dimension 0")));
  EXPECT_THAT([&] { a.expand({3, -2}); }, ThrowsMessage<Error>(HasSubstr("negative")));
}

TEST(Views, SqueezeUnsqueeze) {
  Tensor t = make_tensor({1, 3, 1, 2}, kFloat32, kCPU);
  expect_geometry(t.squeeze(), {3, 2}, {2, 1}, 0);
  expect_geometry(t.squeeze(0), {3, 1, 2}, {2, 2, 1}, 0);
  expect_geometry(t.squeeze(1), {1, 3, 1, 2}, {6, 2, 2, 1}, 0);
  expect_geometry(t.squeeze(-2), {1, 3, 2}, {6, 2, 1}, 0);
  EXPECT_THROW(t.squeeze(4), Error);
  Tensor m = make_tensor({2, 3}, kFloat32, kCPU);
  expect_geometry(m.unsqueeze(0), {1, 2, 3}, {6, 3, 1}, 0);
  expect_geometry(m.unsqueeze(1), {2, 1, 3}, {3, 3, 1}, 0);
  expect_geometry(m.unsqueeze(2), {2, 3, 1}, {3, 1, 1}, 0);
  expect_geometry(m.unsqueeze(-1), {2, 3, 1}, {3, 1, 1}, 0);
  expect_geometry(m.unsqueeze(-3), {1, 2, 3}, {6, 3, 1}, 0);
  expect_geometry(m.t().unsqueeze(1), {3, 1, 2}, {1, 6, 3}, 0);
  EXPECT_THAT([&] { m.unsqueeze(3); }, ThrowsMessage<Error>(HasSubstr("dimension 3 out of range")));
  Tensor s = make_tensor({}, kFloat32, kCPU);
  expect_geometry(s.unsqueeze(0), {1}, {1}, 0);
  expect_geometry(s.squeeze(0), {}, {}, 0);
}

TEST(Views, Flatten) {
  Tensor t = make_tensor({2, 3, 4}, kFloat32, kCPU);
  expect_geometry(t.flatten(), {24}, {1}, 0);
  expect_geometry(t.flatten(1), {2, 12}, {12, 1}, 0);
  expect_geometry(t.flatten(0, 1), {6, 4}, {4, 1}, 0);
  expect_geometry(t.flatten(1, 1), {2, 3, 4}, {12, 4, 1}, 0);
  expect_geometry(make_tensor({}, kFloat32, kCPU).flatten(), {1}, {1}, 0);
  EXPECT_THAT([&] { t.flatten(2, 1); }, ThrowsMessage<Error>(HasSubstr("cannot come after")));
}

TEST(Views, AsStrided) {
  Tensor t = make_tensor({24}, kFloat32, kCPU);
  expect_geometry(t.as_strided({3, 3}, {3, 1}), {3, 3}, {3, 1}, 0);
  expect_geometry(t.as_strided({2, 2}, {1, 1}, 20), {2, 2}, {1, 1}, 20);
  expect_geometry(t.as_strided({4, 3}, {0, 2}, 19), {4, 3}, {0, 2}, 19);
  EXPECT_THAT([&] { t.as_strided({5, 5}, {5, 1}); },
              ThrowsMessage<Error>(AllOf(HasSubstr("require a storage of 100 bytes"), HasSubstr("storage of 96 bytes"))));
  EXPECT_THROW(t.as_strided({2, 2}, {2, 1}, 21), Error);
  EXPECT_NO_THROW(t.as_strided({0, 2}, {100, 100}, 24));
  EXPECT_THAT([&] { t.as_strided({2}, {-1}); }, ThrowsMessage<Error>(HasSubstr("negative strides")));
  EXPECT_THAT([&] { t.as_strided({2, 2}, {1}); }, ThrowsMessage<Error>(HasSubstr("same number")));
  // The bound is the storage, not the view: a narrow view can reach the whole storage.
  expect_geometry(t.narrow(0, 0, 2).as_strided({24}, {1}, 0), {24}, {1}, 0);
}

TEST(Tensor, MakeTensorStridedSizesItsStorage) {
  Tensor t = make_tensor_strided({2, 3}, {1, 2}, kFloat32, kCPU);
  expect_geometry(t, {2, 3}, {1, 2}, 0);
  EXPECT_EQ(t.storage()->nbytes(), 6u * 4);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(make_tensor_strided({2, 0}, {1, 1}, kFloat32, kCPU).storage()->nbytes(), 0u);
}

TEST(Tensor, DataAccessChecks) {
  Tensor t = arange({3}, kInt64);
  EXPECT_EQ(t.data_ptr<int64_t>()[2], 2);
  EXPECT_THAT([&] { t.data_ptr<float>(); },
              ThrowsMessage<Error>(AllOf(HasSubstr("dtype int64"), HasSubstr("not float32"))));
  Tensor undefined;
  EXPECT_THAT([&] { undefined.data_ptr<float>(); }, ThrowsMessage<Error>(HasSubstr("undefined")));
  t.storage()->mark_unusable();
  EXPECT_THAT([&] { t.data_ptr<int64_t>(); }, ThrowsMessage<Error>(HasSubstr("unusable")));
  EXPECT_THAT([&] { t.raw_data_ptr(); }, ThrowsMessage<Error>(HasSubstr("unusable")));
}

TEST(Tensor, Item) {
  Tensor f = arange({1}, kFloat64);
  f.data_ptr<double>()[0] = 0.1;
  EXPECT_TRUE(f.item().is_floating());
  EXPECT_EQ(f.item().to_double(), 0.1);  // exact: no rounding through float
  EXPECT_EQ(f.item<double>(), 0.1);
  Tensor i = arange({1, 1}, kInt64);
  i.data_ptr<int64_t>()[0] = (int64_t(1) << 62) + 1;
  EXPECT_EQ(i.item().to_int(), (int64_t(1) << 62) + 1);
  Tensor h = arange({}, kFloat16);
  h.data_ptr<Half>()[0] = Half(1.5f);
  EXPECT_EQ(h.item<float>(), 1.5f);
  Tensor b = arange({2}, kBool);
  EXPECT_TRUE(b[1].item().is_bool());
  EXPECT_TRUE(b[1].item<bool>());
  EXPECT_FALSE(b[0].item<bool>());
  EXPECT_EQ(arange({3}, kInt32)[2].item<int>(), 2);
  EXPECT_THAT([] { arange({3}).item(); }, ThrowsMessage<Error>(HasSubstr("3 elements")));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

class FakeDeviceAllocator : public Allocator {
 public:
  DataPtr allocate(size_t nbytes, int device_index) override {
    last_nbytes = nbytes;
    // Resolves "the current device" (-1) to device 0, as a backend does.
    return DataPtr(reinterpret_cast<void*>(uintptr_t(0x1000)), nullptr, nullptr,
                   Device(DeviceType::PrivateUse3, device_index < 0 ? 0 : device_index));
  }
  size_t last_nbytes = 0;
};

TEST(Tensor, PluginDeviceTensorsUseTheRegisteredAllocator) {
  FakeDeviceAllocator fake;
  set_allocator(DeviceType::PrivateUse3, &fake);
  reset_privateuse_names_for_testing();
  rename_privateuse_backend(3, "fakedev");
  {
    Tensor t = make_tensor({2, 3}, kBFloat16, Device("fakedev"));
    EXPECT_EQ(fake.last_nbytes, 12u);
    EXPECT_EQ(t.device(), Device(DeviceType::PrivateUse3, 0));
    EXPECT_EQ(t.key_set(), DispatchKeySet::dense(DeviceType::PrivateUse3));
    EXPECT_TRUE(t.is("fakedev"));
    EXPECT_TRUE(t.is("privateuse3"));
    EXPECT_FALSE(t.is("cpu"));
    EXPECT_THAT([&] { t.data_ptr<BFloat16>(); },
                ThrowsMessage<Error>(AllOf(HasSubstr("'fakedev:0'"), HasSubstr(".to(\"cpu\")"))));
    expect_geometry(t.transpose(0, 1).select(0, 2), {2}, {3}, 2);
    Tensor u = make_tensor({4}, kInt8, Device(DeviceType::PrivateUse3, 1));
    EXPECT_EQ(u.device().index(), 1);
  }
  set_allocator(DeviceType::PrivateUse3, nullptr);
  reset_privateuse_names_for_testing();
}


// Note [Views as slices of a reshape]: the nesting of select / narrow / permute views in their base,
// worked out by hand.
bool same_nest(const std::vector<NestedDim>& got, const std::vector<NestedDim>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i].extent != want[i].extent || got[i].stride != want[i].stride || got[i].start != want[i].start ||
        got[i].size != want[i].size || got[i].view_dim != want[i].view_dim)
      return false;
  return true;
}

TEST(Tensor, NestViewFindsTheReshapeASelectOrNarrowSlices) {
  // [2, 8, 48] as [2, 8, 3, 2, 8], permuted (2, 0, 3, 1, 4), select(0, 1): the 3 is read at index 1.
  Tensor base = make_tensor({2, 8, 48}, kFloat32, Device("cpu"));
  Tensor k = base.reshape({2, 8, 3, 2, 8}).permute({2, 0, 3, 1, 4}).select(0, 1);
  EXPECT_TRUE(same_nest(nest_view(k.sizes(), k.strides(), k.storage_offset(), base.numel()),
                        {{2, 384, 0, 2, 0}, {8, 48, 0, 8, 2}, {3, 16, 1, 1, -1}, {2, 8, 0, 2, 1}, {8, 1, 0, 8, 3}}));
  // narrow(1, 3, 5) of [4, 10]: a slice [3, 8) of the whole 10.
  Tensor m = make_tensor({4, 10}, kFloat32, Device("cpu"));
  Tensor n = m.narrow(1, 3, 5);
  EXPECT_TRUE(same_nest(nest_view(n.sizes(), n.strides(), n.storage_offset(), m.numel()),
                        {{4, 10, 0, 4, 0}, {10, 1, 3, 5, 1}}));
  // The first half of the rows, transposed: rows [0, 2) of 4 along stride 10.
  Tensor h = m.narrow(0, 0, 2).t();
  EXPECT_TRUE(same_nest(nest_view(h.sizes(), h.strides(), h.storage_offset(), m.numel()),
                        {{2, 20, 0, 1, -1}, {2, 10, 0, 2, 1}, {10, 1, 0, 10, 0}}));
  // Views that do not nest: overlapping, broadcast, every other element (stride 2 leaves gaps that
  // nest, so a step view nests as an extra dim read at 0), an offset past the base.
  EXPECT_TRUE(nest_view(V{3, 3}, V{1, 1}, 0, 9).empty());
  EXPECT_TRUE(nest_view(V{4, 10}, V{0, 1}, 0, 40).empty());
  EXPECT_TRUE(same_nest(nest_view(V{5}, V{2}, 0, 10), {{5, 2, 0, 5, 0}, {2, 1, 0, 1, -1}}));
  EXPECT_TRUE(nest_view(V{4}, V{1}, 40, 40).empty());
}

}  // namespace
}  // namespace tessera
