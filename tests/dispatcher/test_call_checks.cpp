// Checks the call path makes before any kernel runs: memory overlap of in-place ops (Note [Memory
// overlap]), the kernel rank limit (Note [Kernel rank limit]), PyTorch's argument rules (bool
// subtraction, scalar ranges of fill_/full/alpha, negative integer powers) and the message when a
// device implements an op but not for the dtype.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "op_registry.h"
#include "tessera/ops.h"
#include "test_kernels.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::vector<double> as_doubles(const Tensor& t) {
  Tensor c = t.cpu().to(kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

class CallChecks : public ::testing::Test {
 protected:
  void SetUp() override { testing::setup_test_backends(); }
};

TEST_F(CallChecks, InPlaceIntoAnExpandedTensorIsRefused) {
  Tensor dst = zeros({1}).expand({3});
  EXPECT_THAT([&] { dst.add_(ones({3})); },
              ThrowsMessage<Error>(HasSubstr("more than one element of the written-to tensor")));
  EXPECT_THAT([&] { dst.copy_(ones({3})); },
              ThrowsMessage<Error>(HasSubstr("more than one element of the written-to tensor")));
  EXPECT_EQ(as_doubles(dst), std::vector<double>(3, 0.0));
  // fill_ writes one value everywhere: allowed, as in PyTorch.
  dst.fill_(2.0);
  EXPECT_EQ(as_doubles(dst), std::vector<double>(3, 2.0));
}

TEST_F(CallChecks, PartialOverlapWithAnInputIsRefused) {
  Tensor x = tensor_from_buffer(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8}.data(), kFloat32, 9, {3, 3}, {});
  EXPECT_THAT([&] { x.t().add_(x); },
              ThrowsMessage<Error>(HasSubstr("some elements of the input tensor 1 and the written-to tensor")));
  Tensor y = tensor_from_buffer(std::vector<float>{0, 1, 2, 3, 4, 5}.data(), kFloat32, 6, {6}, {});
  EXPECT_THAT([&] { y.slice(0, 1).add_(y.slice(0, 0, 5)); },
              ThrowsMessage<Error>(HasSubstr("refer to a single memory location")));
  EXPECT_THAT([&] { y.slice(0, 1).copy_(y.slice(0, 0, 5)); },
              ThrowsMessage<Error>(HasSubstr("refer to a single memory location")));
  EXPECT_EQ(as_doubles(y), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  // Full overlap and disjoint views are fine.
  y.add_(y);
  EXPECT_EQ(as_doubles(y), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  y.slice(0, 0, 3).add_(y.slice(0, 3));
  EXPECT_EQ(as_doubles(y), (std::vector<double>{6, 10, 14, 6, 8, 10}));
}

TEST_F(CallChecks, RankAboveTheKernelLimitIsRefusedBeforeAnyKernel) {
  std::vector<int64_t> sizes(17, 1);
  Tensor t = tessera::empty(sizes);
  EXPECT_THAT([&] { neg(t); }, ThrowsMessage<Error>(HasSubstr("has 17 dimensions; kernels take at most 16")));
  std::vector<int64_t> huge(1000, 1);
  Tensor h = tessera::empty(huge);
  EXPECT_THAT([&] { h.clone(); }, ThrowsMessage<Error>(HasSubstr("has 1000 dimensions")));
  EXPECT_THAT([&] { h.to(Device(testing::kFakeDeviceName)); }, ThrowsMessage<Error>(HasSubstr("at most 16")));
  std::vector<int64_t> sixteen(16, 1);
  EXPECT_NO_THROW(neg(full(sixteen, 1.0f)));
}

// An output allocated after an in-place one is rank-checked too: a shape rule of a plugin-defined
// op may write its first argument and return a new tensor of any rank.
void meta_write_self_then_17_dims(MetaCall& m) {
  m.alias_output(0);
  m.add_output(std::vector<int64_t>(17, 1), m.tensors[0]->dtype());
}
tessera_status_t k_not_reached(void*, const tessera_kernel_call_t*) {
  ADD_FAILURE() << "the kernel ran with an output above the rank limit";
  return nullptr;
}

TEST_F(CallChecks, NewOutputAfterAnInPlaceOneIsRankChecked) {
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry& op =
      d.define_op("test_write_self_then_new(Tensor(a!) self) -> (Tensor(a!), Tensor)", "relu", "test");
  op.meta = &meta_write_self_then_17_dims;
  [[maybe_unused]] RegistrationHandle h = d.register_kernel(
      op, DeviceType::CPU, Functionality::Dense, KernelEntry{k_not_reached, nullptr, TESSERA_DTYPE_MASK_ALL, 0, "test"});
  Tensor x = full({2}, 3.0f);
  EXPECT_THAT([&] { d.call_boxed(op, {x}); },
              ThrowsMessage<Error>(AllOf(HasSubstr("output 1"), HasSubstr("has 17 dimensions; kernels take at most 16"))));
  EXPECT_EQ(as_doubles(x), (std::vector<double>{3, 3}));
}

TEST_F(CallChecks, SubtractionWithABoolOperandRaisesAsPyTorch) {
  const char* msg = "Subtraction, the `-` operator, with a bool tensor is not supported";
  Tensor b = full({2}, true);
  Tensor i = full({2}, 3);
  EXPECT_THAT([&] { sub(b, i); }, ThrowsMessage<Error>(HasSubstr(msg)));
  EXPECT_THAT([&] { sub(i, b); }, ThrowsMessage<Error>(HasSubstr(msg)));
  EXPECT_THAT([&] { sub(b, b); }, ThrowsMessage<Error>(HasSubstr(msg)));
  EXPECT_THAT([&] { (void)(i - true); }, ThrowsMessage<Error>(HasSubstr(msg)));
}

TEST_F(CallChecks, FillAndFullRejectValuesOutOfRange) {
  const char* msg = "cannot be converted to type uint8_t without overflow";
  EXPECT_THAT([] { full({2}, 300, kUInt8); }, ThrowsMessage<Error>(HasSubstr(msg)));
  Tensor u = zeros({2}, kUInt8);
  EXPECT_THAT([&] { u.fill_(300); }, ThrowsMessage<Error>(HasSubstr(msg)));
  EXPECT_THAT([] { full({2}, 1e5, kFloat16); }, ThrowsMessage<Error>(HasSubstr("type Half without overflow")));
  EXPECT_THAT([] { full({2}, 300.0, kInt8); }, ThrowsMessage<Error>(HasSubstr("type int8_t")));
  // Alpha of add/sub must fit the result dtype too.
  EXPECT_THAT([&] { add(u, u, 300); }, ThrowsMessage<Error>(HasSubstr(msg)));
  EXPECT_THAT([&] { add(u, u, 1.5); }, ThrowsMessage<Error>(HasSubstr("alpha must not be a floating point")));
}

TEST_F(CallChecks, NegativeIntegerPowerOfAnIntegerTensorRaises) {
  Tensor u = full({2}, 2, kUInt8);
  EXPECT_THAT([&] { pow(u, -1); }, ThrowsMessage<Error>(HasSubstr("integers to negative integer powers are not allowed")));
  EXPECT_THAT([&] { pow(full({2}, 2, kInt32), -2); }, ThrowsMessage<Error>(HasSubstr("negative integer powers")));
}

TEST_F(CallChecks, NoKernelMessageNamesTheDtypesTheDeviceImplements) {
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry& op = d.define_op("test_dtype_mask(Tensor self) -> Tensor", "relu", "test");
  testing::ScopedKernel k("test_dtype_mask", kCPU, testing::k_neg, nullptr,
                          dtype_bit(kFloat32) | dtype_bit(kFloat64));
  EXPECT_THAT([&] { d.call_boxed(op, {full({2}, 1, kInt32)}); },
              ThrowsMessage<Error>(AllOf(HasSubstr("implemented on: cpu (dtypes float32, float64; not int32)"),
                                         HasSubstr("convert the inputs with .to(...)"))));
}

}  // namespace

}  // namespace tessera
