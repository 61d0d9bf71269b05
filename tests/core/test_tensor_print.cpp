// Printing. Expected strings are PyTorch's repr of the same tensors (default print options), with
// "torch." dropped from dtype names.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "tessera/tensor.h"

namespace tessera {
namespace {

template <typename T>
Tensor from(std::vector<T> values, std::vector<int64_t> sizes) {
  Tensor t = make_tensor(sizes, dtype_of_v<T>, kCPU);
  EXPECT_EQ(size_t(t.numel()), values.size());
  T* p = t.data_ptr<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

template <typename T>
Tensor iota(std::vector<int64_t> sizes, double start = 0) {
  Tensor t = make_tensor(sizes, dtype_of_v<T>, kCPU);
  T* p = t.data_ptr<T>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = T(start + double(i));
  return t;
}

TEST(Print, FloatMatrix) {
  EXPECT_EQ(to_string(from<float>({1.0f, -2.5f, 3.0f, 4.0f}, {2, 2})),
            "tensor([[ 1.0000, -2.5000],\n"
            "        [ 3.0000,  4.0000]])");
}

TEST(Print, FloatIntegersPrintWithATrailingDot) {
  EXPECT_EQ(to_string(from<float>({1, 2, 3}, {3})), "tensor([1., 2., 3.])");
  EXPECT_EQ(to_string(from<float>({0, 0}, {2})), "tensor([0., 0.])");
  EXPECT_EQ(to_string(from<float>({-1, 10}, {2})), "tensor([-1., 10.])");
}

TEST(Print, Integers) {
  EXPECT_EQ(to_string(from<int64_t>({1, -20, 300}, {3})), "tensor([  1, -20, 300])");
  EXPECT_EQ(to_string(from<int32_t>({1, 2}, {2})), "tensor([1, 2], dtype=int32)");
  EXPECT_EQ(to_string(from<uint8_t>({7, 255}, {2})), "tensor([  7, 255], dtype=uint8)");
  EXPECT_EQ(to_string(from<int64_t>({std::numeric_limits<int64_t>::max()}, {1})),
            "tensor([9223372036854775807])");
}

TEST(Print, Bool) { EXPECT_EQ(to_string(from<bool>({true, false}, {2})), "tensor([ True, False])"); }

TEST(Print, ZeroDimAndEmpty) {
  EXPECT_EQ(to_string(from<float>({3.5f}, {})), "tensor(3.5000)");
  EXPECT_EQ(to_string(from<int64_t>({-7}, {})), "tensor(-7)");
  EXPECT_EQ(to_string(make_tensor({0}, kFloat32, kCPU)), "tensor([])");
  EXPECT_EQ(to_string(make_tensor({0}, kInt64, kCPU)), "tensor([], dtype=int64)");
  EXPECT_EQ(to_string(make_tensor({2, 0}, kFloat32, kCPU)), "tensor([], size=(2, 0))");
  EXPECT_EQ(to_string(Tensor()), "tensor(undefined)");
}

TEST(Print, DtypeSuffix) {
  EXPECT_EQ(to_string(from<double>({1.5}, {1})), "tensor([1.5000], dtype=float64)");
  EXPECT_EQ(to_string(from<Half>({Half(1.5f), Half(2.0f)}, {2})), "tensor([1.5000, 2.0000], dtype=float16)");
  EXPECT_EQ(to_string(from<BFloat16>({BFloat16(1.0f)}, {1})), "tensor([1.], dtype=bfloat16)");
  set_default_dtype(kFloat64);
  EXPECT_EQ(to_string(from<double>({1.5}, {1})), "tensor([1.5000])");
  EXPECT_EQ(to_string(from<float>({1.5f}, {1})), "tensor([1.5000], dtype=float32)");
  set_default_dtype(kFloat32);
}

TEST(Print, ScientificNotation) {
  EXPECT_EQ(to_string(from<float>({1e-5f, 1.0f}, {2})), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(to_string(from<double>({1.0, 1e9}, {2})), "tensor([1.0000e+00, 1.0000e+09], dtype=float64)");
  EXPECT_EQ(to_string(from<float>({0.5f, 2000.0f}, {2})), "tensor([5.0000e-01, 2.0000e+03])");
}

TEST(Print, NonFinite) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(to_string(from<float>({nan, inf, -inf, 1.5f}, {4})), "tensor([   nan,    inf,   -inf, 1.5000])");
  EXPECT_EQ(to_string(from<float>({1.0f, nan}, {2})), "tensor([1., nan])");
  EXPECT_EQ(to_string(from<float>({-nan}, {1})), "tensor([nan])");
}

TEST(Print, ThreeDims) {
  EXPECT_EQ(to_string(iota<int64_t>({2, 2, 2})),
            "tensor([[[0, 1],\n"
            "         [2, 3]],\n"
            "\n"
            "        [[4, 5],\n"
            "         [6, 7]]])");
}

TEST(Print, NonContiguousView) {
  EXPECT_EQ(to_string(iota<int64_t>({2, 3}).t()),
            "tensor([[0, 3],\n"
            "        [1, 4],\n"
            "        [2, 5]])");
  EXPECT_EQ(to_string(iota<int64_t>({2, 3}).select(1, 2)), "tensor([2, 5])");
}

TEST(Print, LongRowsWrap) {
  EXPECT_EQ(to_string(iota<float>({20}, 0.5)),
            "tensor([ 0.5000,  1.5000,  2.5000,  3.5000,  4.5000,  5.5000,  6.5000,  7.5000,\n"
            "         8.5000,  9.5000, 10.5000, 11.5000, 12.5000, 13.5000, 14.5000, 15.5000,\n"
            "        16.5000, 17.5000, 18.5000, 19.5000])");
  // The dtype goes on its own line when it would pass 80 columns.
  EXPECT_EQ(to_string(iota<double>({8}, 0.5)),
            "tensor([0.5000, 1.5000, 2.5000, 3.5000, 4.5000, 5.5000, 6.5000, 7.5000],\n"
            "       dtype=float64)");
}

TEST(Print, SummarizesLargeTensors) {
  EXPECT_EQ(to_string(iota<int64_t>({2000})), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  EXPECT_EQ(to_string(iota<float>({202, 10}, 100)),
            "tensor([[ 100.,  101.,  102.,  ...,  107.,  108.,  109.],\n"
            "        [ 110.,  111.,  112.,  ...,  117.,  118.,  119.],\n"
            "        [ 120.,  121.,  122.,  ...,  127.,  128.,  129.],\n"
            "        ...,\n"
            "        [2090., 2091., 2092.,  ..., 2097., 2098., 2099.],\n"
            "        [2100., 2101., 2102.,  ..., 2107., 2108., 2109.],\n"
            "        [2110., 2111., 2112.,  ..., 2117., 2118., 2119.]])");
  // max / min > 1000 among the shown values switches to scientific notation.
  EXPECT_EQ(to_string(iota<float>({2020})),
            "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 2.0170e+03, 2.0180e+03,\n"
            "        2.0190e+03])");
  // 1000 elements is not above the threshold: printed in full.
  EXPECT_EQ(to_string(iota<int64_t>({1000})).find("..."), std::string::npos);
}

TEST(Print, MetaTensor) {
  EXPECT_EQ(to_string(make_tensor({2, 3}, kFloat32, Device(kMeta))), "tensor(..., device='meta', size=(2, 3))");
  EXPECT_EQ(to_string(make_tensor({4}, kInt32, Device(kMeta))),
            "tensor(..., device='meta', size=(4,), dtype=int32)");
}

TEST(Print, StreamOperator) {
  std::ostringstream os;
  os << from<int64_t>({5}, {1});
  EXPECT_EQ(os.str(), "tensor([5])");
}

}  // namespace
}  // namespace tessera
