#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tessera/dtype.h"
#include "tessera/error.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(DType, NamesRoundTrip) {
  const char* names[] = {"bool",    "uint8",    "int8",    "int16", "int32",  "int64", "float16",
                         "bfloat16", "float32", "float64", "qint8", "quint8", "qint32"};
  for (int i = 0; i < kNumDTypes; ++i) {
    EXPECT_EQ(dtype_name(DType(i)), names[i]);
    EXPECT_EQ(dtype_from_name(names[i]), DType(i));
  }
  EXPECT_EQ(itemsize(kBFloat16), 2u);
  EXPECT_EQ(itemsize(kFloat64), 8u);
}

TEST(DType, Aliases) {
  EXPECT_EQ(dtype_from_name("float"), kFloat32);
  EXPECT_EQ(dtype_from_name("double"), kFloat64);
  EXPECT_EQ(dtype_from_name("half"), kFloat16);
  EXPECT_EQ(dtype_from_name("long"), kInt64);
  EXPECT_EQ(dtype_from_name("int"), kInt32);
  EXPECT_EQ(dtype_from_name("short"), kInt16);
  EXPECT_EQ(dtype_from_name("bf16"), kBFloat16);
  EXPECT_EQ(dtype_from_name("byte"), kUInt8);
  EXPECT_EQ(dtype_from_name("torch.float16"), kFloat16);
}

TEST(DType, UnknownNameListsValidNames) {
  try {
    dtype_from_name("float8");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("'float8'"), HasSubstr("bfloat16"), HasSubstr("float64"), HasSubstr("half")));
  }
  EXPECT_THROW(dtype_from_name(""), Error);
  EXPECT_THROW(dtype_from_name("Float32"), Error);
}

// PyTorch's promotion table (c10/core/ScalarType.cpp), written out by hand in its own order.
TEST(DType, PromotionTableMatchesPyTorch) {
  const DType u1 = kUInt8, i1 = kInt8, i2 = kInt16, i4 = kInt32, i8 = kInt64, f2 = kFloat16, f4 = kFloat32,
              f8 = kFloat64, b1 = kBool, bf = kBFloat16;
  const DType order[] = {u1, i1, i2, i4, i8, f2, f4, f8, b1, bf};
  const DType table[10][10] = {
      /* u1 */ {u1, i2, i2, i4, i8, f2, f4, f8, u1, bf},
      /* i1 */ {i2, i1, i2, i4, i8, f2, f4, f8, i1, bf},
      /* i2 */ {i2, i2, i2, i4, i8, f2, f4, f8, i2, bf},
      /* i4 */ {i4, i4, i4, i4, i8, f2, f4, f8, i4, bf},
      /* i8 */ {i8, i8, i8, i8, i8, f2, f4, f8, i8, bf},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f4, f8, f2, f4},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f8, f4, f4},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
      /* b1 */ {u1, i1, i2, i4, i8, f2, f4, f8, b1, bf},
      /* bf */ {bf, bf, bf, bf, bf, f4, f4, f8, bf, bf},
  };
  for (int a = 0; a < 10; ++a)
    for (int b = 0; b < 10; ++b)
      EXPECT_EQ(promote_types(order[a], order[b]), table[a][b]) << order[a] << " + " << order[b];
}

TEST(DType, SpotPromotions) {
  EXPECT_EQ(promote_types(kUInt8, kInt8), kInt16);
  EXPECT_EQ(promote_types(kInt64, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kBool, kBFloat16), kBFloat16);
}

DType result_of(std::initializer_list<std::tuple<DType, bool, bool>> operands) {
  ResultTypeState s;
  for (auto [t, zero_dim, wrapped] : operands) s.add_tensor(t, zero_dim, wrapped);
  return s.result();
}

constexpr bool kDim = false, kZeroDim = true, kWrapped = true, kNotWrapped = false;

TEST(DType, ResultTypeFollowsPyTorch) {
  // int32 tensor + 2.5 -> default dtype (float32), not float64.
  EXPECT_EQ(result_of({{kInt32, kDim, kNotWrapped}, {kFloat64, kZeroDim, kWrapped}}), kFloat32);
  // int32 tensor + 2 -> int32: a same-category scalar does not widen.
  EXPECT_EQ(result_of({{kInt32, kDim, kNotWrapped}, {kInt64, kZeroDim, kWrapped}}), kInt32);
  // uint8 tensor + int64 0-dim tensor -> uint8.
  EXPECT_EQ(result_of({{kUInt8, kDim, kNotWrapped}, {kInt64, kZeroDim, kNotWrapped}}), kUInt8);
  // int32 tensor + float64 0-dim tensor -> float64 (0-dim tensors keep their dtype).
  EXPECT_EQ(result_of({{kInt32, kDim, kNotWrapped}, {kFloat64, kZeroDim, kNotWrapped}}), kFloat64);
  // float16 tensor + float64 0-dim tensor -> float16.
  EXPECT_EQ(result_of({{kFloat16, kDim, kNotWrapped}, {kFloat64, kZeroDim, kNotWrapped}}), kFloat16);
  // bool tensor + 1 -> int64; bool tensor + True -> bool.
  EXPECT_EQ(result_of({{kBool, kDim, kNotWrapped}, {kInt64, kZeroDim, kWrapped}}), kInt64);
  EXPECT_EQ(result_of({{kBool, kDim, kNotWrapped}, {kBool, kZeroDim, kWrapped}}), kBool);
  // int8 0-dim tensor + 5 -> int8 (0-dim outranks wrapped numbers of the same category).
  EXPECT_EQ(result_of({{kInt8, kZeroDim, kNotWrapped}, {kInt64, kZeroDim, kWrapped}}), kInt8);
  // Two 0-dim tensors promote normally; two dimensioned tensors too.
  EXPECT_EQ(result_of({{kFloat32, kZeroDim, kNotWrapped}, {kFloat64, kZeroDim, kNotWrapped}}), kFloat64);
  EXPECT_EQ(result_of({{kInt8, kDim, kNotWrapped}, {kUInt8, kDim, kNotWrapped}}), kInt16);
  // Only wrapped numbers: 2 + 2.5 -> default dtype.
  EXPECT_EQ(result_of({{kInt64, kZeroDim, kWrapped}, {kFloat64, kZeroDim, kWrapped}}), kFloat32);
  // bfloat16 tensor + 0-dim float16 tensor -> bfloat16.
  EXPECT_EQ(result_of({{kBFloat16, kDim, kNotWrapped}, {kFloat16, kZeroDim, kNotWrapped}}), kBFloat16);
}

TEST(DType, ResultTypeWrappedFloatUsesDefaultDtype) {
  set_default_dtype(kFloat64);
  EXPECT_EQ(default_dtype(), kFloat64);
  EXPECT_EQ(result_of({{kInt32, kDim, kNotWrapped}, {kFloat64, kZeroDim, kWrapped}}), kFloat64);
  set_default_dtype(kFloat32);
  EXPECT_EQ(result_of({{kInt64, kDim, kNotWrapped}, {kFloat64, kZeroDim, kWrapped}}), kFloat32);
}

TEST(DType, ResultTypeNeedsAnOperand) {
  ResultTypeState s;
  EXPECT_THAT([&] { s.result(); }, ::testing::ThrowsMessage<Error>(HasSubstr("no operand")));
}

TEST(DType, DefaultDtypeMustBeFloating) {
  EXPECT_THAT([] { set_default_dtype(kInt32); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("int32"), HasSubstr("floating"))));
  EXPECT_EQ(default_dtype(), kFloat32);
}

}  // namespace
}  // namespace tessera
