// Host-side decisions of the CUDA kernels that need no GPU to check: the cuBLASLt layout and
// alignment rules (matmul_layout.h), the split reduction's launch plan and the attention grid
// (tensor_iter.h), and when the device guard restores the previous device (cuda_backend.h).
// Expected values are worked out by hand or by brute force over the index space.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "cuda_backend.h"
#include "matmul_layout.h"
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

}  // namespace
