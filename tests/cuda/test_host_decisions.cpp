// Host-side decisions of the CUDA kernels that need no GPU to check: the cuBLASLt layout and
// alignment rules (matmul_layout.h), the split reduction's launch plan and the attention grid
// (tensor_iter.h), when the device guard restores the previous device (cuda_backend.h), and how a
// number (a wrapped C++ number, an alpha, a fill value) is converted into a kernel's compute type
// (scalar_convert.h).
// Expected values are worked out by hand or by brute force over the index space.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "cuda_backend.h"
#include "matmul_layout.h"
#include "scalar_convert.h"
#include "tensor_iter.h"

namespace {

using tessera::cuda::MatrixOperand;
using tessera::cuda::ReduceLaunch;
using tessera::cuda::ReducePlan;

// The element offsets a layout addresses (relative to data), for a rows x cols matrix read
// row-major or column-major as cuBLASLt would with the normalised strides.
std::set<int64_t> addressed(const MatrixOperand& x) {
  std::set<int64_t> s;
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t c = 0; c < x.cols; ++c) s.insert(r * x.row_stride + c * x.col_stride);
  return s;
}

TEST(MatmulLayout, BroadcastColumnOfOneElementIsNotReadAsADenseColumn) {
  // b = x.expand(k, 1) of a one-element buffer: sizes [4, 1], strides [0, 0].
  MatrixOperand b{nullptr, 4, 1, 0, 0, 0};
  tessera::cuda::fix_degenerate(b);
  EXPECT_EQ(b.row_stride, 0) << "the stride of a size-4 dim must not change";
  EXPECT_FALSE(tessera::cuda::lt_layout_ok(b)) << "cuBLASLt cannot express a broadcast column: copy it first";
}

TEST(MatmulLayout, BroadcastRowIsRejectedAndSizeOneDimsAreNormalised) {
  MatrixOperand row_bcast{nullptr, 1, 8, 0, 0, 0};  // [1, 8] with stride 0 along the columns
  tessera::cuda::fix_degenerate(row_bcast);
  EXPECT_FALSE(tessera::cuda::lt_layout_ok(row_bcast));
  MatrixOperand matrix_bcast{nullptr, 3, 5, 0, 1, 0};  // a row repeated 3 times
  tessera::cuda::fix_degenerate(matrix_bcast);
  EXPECT_FALSE(tessera::cuda::lt_layout_ok(matrix_bcast));

  // Dense vectors and scalars whose size-1 strides are arbitrary become usable, addressing only
  // the elements the tensor has.
  const std::vector<MatrixOperand> dense = {
      {nullptr, 1, 8, 123, 1, 0}, {nullptr, 1, 8, 0, 3, 0}, {nullptr, 8, 1, 1, 0, 0},
      {nullptr, 8, 1, 5, 77, 0},  {nullptr, 1, 1, 0, 0, 0}, {nullptr, 6, 4, 4, 1, 0}, {nullptr, 6, 4, 1, 6, 0}};
  for (MatrixOperand x : dense) {
    const std::set<int64_t> before = addressed(x);
    tessera::cuda::fix_degenerate(x);
    EXPECT_TRUE(tessera::cuda::lt_layout_ok(x)) << x.rows << "x" << x.cols << " strides " << x.row_stride << "," << x.col_stride;
    EXPECT_EQ(addressed(x), before);
  }
}

TEST(MatmulLayout, AlignmentIsTheLargestPowerOfTwoUpTo16) {
  alignas(64) static char buf[64];
  EXPECT_EQ(tessera::cuda::lt_alignment(buf), 16u);
  EXPECT_EQ(tessera::cuda::lt_alignment(buf + 32), 16u);
  EXPECT_EQ(tessera::cuda::lt_alignment(buf + 8), 8u);
  EXPECT_EQ(tessera::cuda::lt_alignment(buf + 4), 4u);
  EXPECT_EQ(tessera::cuda::lt_alignment(buf + 2), 2u);  // a float16 view at element offset 1
  EXPECT_EQ(tessera::cuda::lt_alignment(buf + 6), 2u);
  EXPECT_EQ(tessera::cuda::lt_alignment(buf + 1), 1u);
  EXPECT_FALSE(tessera::cuda::lt_bias_needs_copy(buf + 16));
  EXPECT_TRUE(tessera::cuda::lt_bias_needs_copy(buf + 4));
  EXPECT_FALSE(tessera::cuda::lt_bias_needs_copy(nullptr));
}

ReducePlan reduce_plan(int64_t outputs, int64_t reduce_size, bool inner_contiguous) {
  ReducePlan p;
  p.kept_ndim = outputs > 1 ? 1 : 0;
  p.kept_sizes[0] = outputs;
  p.kept_in_strides[0] = inner_contiguous ? reduce_size : 1;
  p.kept_out_strides[0] = 1;
  p.reduced_ndim = 1;
  p.reduced_sizes[0] = reduce_size;
  p.reduced_in_strides[0] = inner_contiguous ? 1 : outputs;
  p.num_outputs = outputs;
  p.reduce_size = reduce_size;
  return p;
}

// Every reduced index is in exactly one split, and no split is empty.
void expect_covers(const ReduceLaunch& how, int64_t reduce_size) {
  ASSERT_GE(how.splits, 1);
  ASSERT_LE(how.splits, 65535);
  EXPECT_GE(how.splits * how.chunk, reduce_size);
  EXPECT_LT((how.splits - 1) * how.chunk, reduce_size);
}

TEST(ReduceLaunchPlan, AFullSumUsesEverySm) {
  const int sms = 132;
  const ReduceLaunch how = tessera::cuda::plan_reduce_launch(reduce_plan(1, int64_t(1) << 28, true), sms);
  EXPECT_TRUE(how.block_per_output);
  EXPECT_GE(how.splits, sms) << "one block for the whole sum uses one SM";
  expect_covers(how, int64_t(1) << 28);
}

TEST(ReduceLaunchPlan, ManyOutputsWithLongStridedReductionsAreSplit) {
  // 4096 columns of 1e6 rows, reduced over the rows (a thread per output): 1e6 serial adds per
  // thread without a split.
  const int64_t rows = 1000000;
  const ReduceLaunch how = tessera::cuda::plan_reduce_launch(reduce_plan(4096, rows, false), 132);
  EXPECT_FALSE(how.block_per_output);
  EXPECT_GT(how.splits, 1);
  EXPECT_LE(how.chunk, rows / 32);
  expect_covers(how, rows);
}

TEST(ReduceLaunchPlan, SmallOrWellSpreadReductionsAreNotSplit) {
  EXPECT_EQ(tessera::cuda::plan_reduce_launch(reduce_plan(1, 100, true), 132).splits, 1);
  EXPECT_EQ(tessera::cuda::plan_reduce_launch(reduce_plan(1 << 20, 512, true), 132).splits, 1);
  EXPECT_EQ(tessera::cuda::plan_reduce_launch(reduce_plan(1 << 20, 64, false), 132).splits, 1);
  const ReduceLaunch empty = tessera::cuda::plan_reduce_launch(reduce_plan(8, 0, true), 132);
  EXPECT_EQ(empty.splits, 1);
  for (int64_t n : {1, 2, 4095, 4096, 4097, 123457, 1 << 22})
    for (int64_t outs : {1, 3, 100, 5000}) expect_covers(tessera::cuda::plan_reduce_launch(reduce_plan(outs, n, outs < 200), 132), n);
}

TEST(AttentionGrid, BatchTimesHeadsPast65535IsOneDimensionalGrid) {
  int64_t q_blocks = 0;
  uint32_t grid = 0;
  // batch 2048 x heads 64 = 131072 > 65535 (the y limit), 100 query rows in blocks of 64.
  ASSERT_TRUE(tessera::cuda::plan_attention_grid(2048 * 64, 100, 64, &q_blocks, &grid));
  EXPECT_EQ(q_blocks, 2);
  EXPECT_EQ(grid, 2048u * 64u * 2u);
  // The kernel's decomposition of the block index visits every (batch*head, query block) once.
  std::set<std::pair<int64_t, int64_t>> seen;
  for (uint32_t i = 0; i < grid; ++i) seen.insert({int64_t(i) / q_blocks, int64_t(i) % q_blocks});
  EXPECT_EQ(seen.size(), size_t(grid));
  EXPECT_EQ(seen.rbegin()->first, 2048 * 64 - 1);
  // Past 2^31 - 1 blocks: refused (on the host, before anything is queued).
  EXPECT_FALSE(tessera::cuda::plan_attention_grid(int64_t(1) << 26, 64 * 64, 64, &q_blocks, &grid));
  ASSERT_TRUE(tessera::cuda::plan_attention_grid(4, 0, 64, &q_blocks, &grid));
  EXPECT_EQ(grid, 0u);
}

TEST(DeviceGuard, RestoresOnlyADeviceTheThreadUsed) {
  // A fresh thread: cudaGetDevice says 0, the thread never used it and no context is current.
  EXPECT_FALSE(tessera::cuda::guard_restores_previous(0, 1, false, false));
  EXPECT_TRUE(tessera::cuda::guard_restores_previous(0, 1, true, false));   // set through the plugin
  EXPECT_TRUE(tessera::cuda::guard_restores_previous(0, 1, false, true));   // the application's context
  EXPECT_FALSE(tessera::cuda::guard_restores_previous(1, 1, true, true));   // nothing was changed
  EXPECT_FALSE(tessera::cuda::guard_restores_previous(-1, 1, true, true));
}

// ---------------------------------------------------------------- numbers in the compute type

using tessera::cuda::ComputeScalar;
using tessera::cuda::floating_number;
using tessera::cuda::HostNumber;
using tessera::cuda::integral_number;
using tessera::cuda::to_compute_scalar;
namespace dt {
using namespace tessera::cuda;  // kDt* dtype codes
}

// PyTorch's results for a tensor op a C++ number (docs/semantics.md), computed here the way the
// kernel does: the number converted by to_compute_scalar, the arithmetic in the compute type.
TEST(WrappedNumber, ConvertsStraightIntoTheComputeType) {
  // float16 [0.001] * 1e5: float compute, 1e5 stays 100000 (float16 would make it inf).
  const ComputeScalar big = to_compute_scalar(floating_number(1e5), dt::kDtF16);
  EXPECT_EQ(big.dtype, dt::kDtF32);
  EXPECT_EQ(big.f, 100000.0);
  const float x = tessera::cuda::half_bits_to_float(tessera::cuda::float_to_half_bits(0.001f));
  EXPECT_NEAR(x * float(big.f), 100.04, 0.02);  // float16(0.001) = 0.0010004; the product is finite
  // uint8 [7] / -3: true division computes in float32; the number is -3, not 253.
  const ComputeScalar m3 = to_compute_scalar(integral_number(-3), dt::kDtF32);
  EXPECT_EQ(m3.f, -3.0);
  EXPECT_NEAR(7.0f / float(m3.f), -2.333333, 1e-6);
  // int8 [100] / 300 and int32 [1] / 2^40: float32 compute.
  EXPECT_NEAR(100.0f / float(to_compute_scalar(integral_number(300), dt::kDtF32).f), 0.333333, 1e-6);
  EXPECT_NEAR(1.0f / float(to_compute_scalar(integral_number(int64_t(1) << 40), dt::kDtF32).f), 9.094947e-13, 1e-18);
  // uint8 [2] * -3: the integer compute type is uint8 itself; -3 wraps to 253 and 2 * 253 to 250.
  const ComputeScalar u = to_compute_scalar(integral_number(-3), dt::kDtU8);
  EXPECT_EQ(u.dtype, dt::kDtU8);
  EXPECT_EQ(u.i, 253);
  EXPECT_EQ(uint8_t(2 * uint8_t(u.i)), 250);
  EXPECT_EQ(to_compute_scalar(integral_number(-3), dt::kDtI8).i, -3);
  EXPECT_EQ(to_compute_scalar(integral_number(70000), dt::kDtI16).i, 70000 - 65536);
  EXPECT_EQ(to_compute_scalar(integral_number(INT64_MIN), dt::kDtI64).i, INT64_MIN);
  // One rounding, straight from int64: 2^54 + 2^30 + 1 is above the midpoint 2^54 + 2^30 of two
  // floats, so it rounds up; through double it would first become 2^54 + 2^30 and then tie to 2^54.
  const int64_t v = (int64_t(1) << 54) + (int64_t(1) << 30) + 1;
  EXPECT_EQ(to_compute_scalar(integral_number(v), dt::kDtF32).f, std::ldexp(1.0, 54) + std::ldexp(1.0, 31));
  EXPECT_EQ(to_compute_scalar(integral_number(v), dt::kDtF64).f, double(v));
  // A float64 number in a float compute type is the nearest float; in float64 it stays exact.
  EXPECT_EQ(to_compute_scalar(floating_number(0.1), dt::kDtBF16).f, double(0.1f));
  EXPECT_EQ(to_compute_scalar(floating_number(0.1), dt::kDtF64).f, 0.1);
  EXPECT_EQ(to_compute_scalar(floating_number(1e300), dt::kDtF32).f, std::numeric_limits<double>::infinity());
  // bool: nonzero is true (NaN too).
  EXPECT_EQ(to_compute_scalar(floating_number(0.5), dt::kDtBool).i, 1);
  EXPECT_EQ(to_compute_scalar(floating_number(NAN), dt::kDtBool).i, 1);
  EXPECT_EQ(to_compute_scalar(floating_number(-0.0), dt::kDtBool).i, 0);
  EXPECT_EQ(to_compute_scalar(integral_number(2), dt::kDtBool).i, 1);
}

TEST(WrappedNumber, ComparisonsConvertThroughTheOperandDtypeFirst) {
  // PyTorch: uint8 [44] == 300 is true (300 -> uint8 44); float16 [65504] == 65519 is true (65519
  // rounds to 65504 in float16, 65520 to inf); the arithmetic conversion keeps the number as it is.
  EXPECT_EQ(to_compute_scalar(integral_number(300), dt::kDtU8, true).i, 44);
  EXPECT_EQ(to_compute_scalar(floating_number(65519), dt::kDtF16, true).f, 65504.0);
  EXPECT_EQ(to_compute_scalar(floating_number(65519), dt::kDtF16).f, 65519.0);
  EXPECT_EQ(to_compute_scalar(floating_number(65520), dt::kDtF16, true).f, std::numeric_limits<double>::infinity());
  // bfloat16: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and ties to the even 1.
  EXPECT_EQ(to_compute_scalar(floating_number(1.00390625), dt::kDtBF16, true).f, 1.0);
  EXPECT_EQ(to_compute_scalar(floating_number(0.1), dt::kDtF32, true).f, double(0.1f));
  // int32 [2, 3] < 2.5 compares in float32 (the dispatcher casts the tensor): 2.5 stays 2.5.
  EXPECT_EQ(to_compute_scalar(floating_number(2.5), dt::kDtF32, true).f, 2.5);
}

// Note [Floating to integral conversion]: PyTorch's results on x86-64.
TEST(WrappedNumber, FloatingToIntegralIsDefinedForNaNInfinityAndOutOfRange) {
  const int64_t min64 = std::numeric_limits<int64_t>::min();
  const int32_t min32 = std::numeric_limits<int32_t>::min();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(to_compute_scalar(floating_number(NAN), dt::kDtI64).i, min64);
  EXPECT_EQ(to_compute_scalar(floating_number(inf), dt::kDtI64).i, min64);
  EXPECT_EQ(to_compute_scalar(floating_number(-inf), dt::kDtI64).i, min64);
  EXPECT_EQ(to_compute_scalar(floating_number(1e30), dt::kDtI64).i, min64);
  EXPECT_EQ(to_compute_scalar(floating_number(-3.7), dt::kDtI64).i, -3);
  EXPECT_EQ(to_compute_scalar(floating_number(2.9), dt::kDtI64).i, 2);
  EXPECT_EQ(to_compute_scalar(floating_number(NAN), dt::kDtI32).i, min32);
  EXPECT_EQ(to_compute_scalar(floating_number(3e9), dt::kDtI32).i, min32);
  EXPECT_EQ(to_compute_scalar(floating_number(-2147483648.0), dt::kDtI32).i, min32);
  EXPECT_EQ(to_compute_scalar(floating_number(-2147483648.9), dt::kDtI32).i, min32);
  EXPECT_EQ(to_compute_scalar(floating_number(2147483647.5), dt::kDtI32).i, 2147483647);
  EXPECT_EQ(to_compute_scalar(floating_number(300.7), dt::kDtU8).i, 44);
  EXPECT_EQ(to_compute_scalar(floating_number(-1.2), dt::kDtU8).i, 255);
  EXPECT_EQ(to_compute_scalar(floating_number(NAN), dt::kDtU8).i, 0);   // INT32_MIN wraps to 0
  EXPECT_EQ(to_compute_scalar(floating_number(-inf), dt::kDtI16).i, 0);
  EXPECT_EQ(to_compute_scalar(floating_number(-129.5), dt::kDtI8).i, 127);  // -129 wraps
}

TEST(WrappedNumber, ReadsTheElementOfEveryDtype) {
  auto read = [](const void* p, int32_t dtype) {
    HostNumber n;
    EXPECT_TRUE(tessera::cuda::read_host_number(p, dtype, &n)) << "dtype " << dtype;
    return n;
  };
  const uint8_t byte = 0xff, one = 1, two = 2;
  EXPECT_EQ(read(&byte, dt::kDtU8).i, 255);
  EXPECT_EQ(read(&byte, dt::kDtI8).i, -1);
  EXPECT_EQ(read(&two, dt::kDtBool).i, 1);  // any nonzero byte is true
  EXPECT_FALSE(read(&one, dt::kDtBool).floating);
  const int16_t s16 = -30000;
  const int32_t s32 = -2000000000;
  const int64_t s64 = int64_t(1) << 62;
  EXPECT_EQ(read(&s16, dt::kDtI16).i, -30000);
  EXPECT_EQ(read(&s32, dt::kDtI32).i, -2000000000);
  EXPECT_EQ(read(&s64, dt::kDtI64).i, int64_t(1) << 62);
  const float f = 0.1f;
  const double d = 0.1;
  EXPECT_EQ(read(&f, dt::kDtF32).f, double(0.1f));
  EXPECT_TRUE(read(&d, dt::kDtF64).floating);
  EXPECT_EQ(read(&d, dt::kDtF64).f, 0.1);
  const uint16_t h_one = 0x3c00, h_inf = 0xfc00, h_sub = 0x0001, bf_one = 0x3f80;
  EXPECT_EQ(read(&h_one, dt::kDtF16).f, 1.0);
  EXPECT_EQ(read(&h_inf, dt::kDtF16).f, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(read(&h_sub, dt::kDtF16).f, std::ldexp(1.0, -24));
  EXPECT_EQ(read(&bf_one, dt::kDtBF16).f, 1.0);
  // Unaligned memory is fine.
  alignas(8) unsigned char buf[16] = {};
  const double three = 3.0;
  std::memcpy(buf + 1, &three, 8);
  EXPECT_EQ(read(buf + 1, dt::kDtF64).f, 3.0);
  HostNumber n;
  EXPECT_FALSE(tessera::cuda::read_host_number(&byte, 42, &n));
}

// Every float16 pattern against its value worked out in double from the fields.
TEST(WrappedNumber, HalfBitsToFloatIsExactForEveryPattern) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const int sign = (h >> 15) & 1, exp = int((h >> 10) & 0x1f), mant = int(h & 0x3ff);
    const float got = tessera::cuda::half_bits_to_float(uint16_t(h));
    if (exp == 31 && mant != 0) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
      continue;
    }
    double expected = exp == 31 ? std::numeric_limits<double>::infinity()
                                : (exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25));
    if (sign) expected = -expected;
    ASSERT_EQ(double(got), expected) << std::hex << h;
    ASSERT_EQ(std::signbit(got), sign == 1) << std::hex << h;
    ASSERT_EQ(tessera::cuda::float_to_half_bits(got), h) << std::hex << h;  // and back
  }
  for (uint32_t b = 0; b < 0x10000u; b += 7) {
    const float got = tessera::cuda::bf16_bits_to_float(uint16_t(b));
    if (std::isnan(got)) continue;
    ASSERT_EQ(tessera::cuda::float_to_bf16_bits(got), b) << std::hex << b;
  }
}

}  // namespace
