// The host-built layout of the CUDA tensor-core kernel (Note [CUDA mma.sp layout]) checked on the
// CPU against the PTX ISA's description of sparse mma.m16n8k32 with .f16 / .bf16, written here
// independently of plugins/sparse/cuda/mma_layout.cpp:
// - "Matrix fragments for sparse mma.m16n8k32": a lane (groupID g = lane >> 2, threadID_in_group
//   t = lane % 4) holds a0..a7, row g for a0, a1, a4, a5 and g + 8 otherwise, compressed column
//   2t + (i & 1) (+ 8 for i >= 4); compressed columns 2c, 2c + 1 are the two kept values of
//   chunk c (dense columns 4c..4c+3);
// - the metadata figure for m16n8k32 .f16/.bf16 with sparsity selector 0: lane 4g + h holds in
//   bits 0..15 the positions of row g, chunks 4h..4h+3, and in bits 16..31 those of row g + 8;
//   2 bits per kept value in order, lower bits first;
// - "Sparse matrix storage": the two positions of a chunk are distinct (0b0000, 0b0101, 0b1010,
//   0b1111 are invalid).
// The weights come from the runtime's to_sparse_semi_structured (the canonical form the layout is
// built from); the emulated MMA is compared with a naive double loop over the dense weight.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "mma_layout.h"
#include "tessera/sparse_format.h"
#include "tessera/tessera.h"

namespace {

namespace sp = tessera::sparse;
namespace scu = tessera::sparse_cuda;
using LayoutPtr = std::unique_ptr<scu::MmaLayout, decltype(&std::free)>;

struct Case {
  tessera::Tensor dense;  // (rows, cols) f16 or bf16, 2:4 along cols
  LayoutPtr layout{nullptr, &std::free};
};

// A random 2:4 weight whose groups keep two, one or no non-zeros (the last group may be short).
Case make_case(tessera::DType dt, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> pos(0, 3), kind(0, 3);
  std::vector<float> w(size_t(rows * cols), 0.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; 4 * g < cols; ++g) {
      const int want = kind(rng) == 0 ? kind(rng) % 3 : 2;
      for (int kept = 0, tries = 0; kept < want && tries < 16; ++tries) {
        const int64_t c = 4 * g + pos(rng);
        if (c >= cols || w[size_t(r * cols + c)] != 0.f) continue;
        float v = normal(rng);
        if (std::abs(v) < 1e-2f) v = 1.f;  // survives the cast to 16 bits
        w[size_t(r * cols + c)] = v;
        ++kept;
      }
    }
  Case out;
  out.dense = tessera::tensor(w, {rows, cols}).to(dt);
  const sp::SemiStructuredParts parts = sp::semi_structured_parts(sp::to_sparse_semi_structured(out.dense));
  std::string error;
  out.layout.reset(scu::build_mma_layout(static_cast<const uint8_t*>(parts.values.raw_data_ptr()),
                                         static_cast<const uint8_t*>(parts.indices.raw_data_ptr()), rows,
                                         cols, &error));
  EXPECT_TRUE(out.layout) << error;
  return out;
}

const uint8_t* block_of(const Case& c) { return reinterpret_cast<const uint8_t*>(c.layout.get()); }

// Register `reg` (0..3) of `lane` for tile (rt, ct): two 16-bit values.
uint32_t value_register(const Case& c, int64_t rt, int64_t ct, int lane, int reg) {
  const scu::MmaLayout& l = *c.layout;
  uint32_t v;
  std::memcpy(&v, block_of(c) + l.values_offset + size_t((rt * l.col_tiles + ct) * 512 + lane * 16 + reg * 4),
              4);
  return v;
}

// The metadata register of `lane` for tile (rt, ct) as the kernel loads it.
uint32_t meta_register(const Case& c, int64_t rt, int64_t ct, int lane) {
  const scu::MmaLayout& l = *c.layout;
  uint32_t m;
  std::memcpy(
      &m,
      block_of(c) + l.meta_offset + size_t((rt * l.col_tiles + ct) * 64 + ((lane / 4) * 2 + lane % 2) * 4),
      4);
  return m;
}

// The 16 x 32 A tile (rt, ct) the hardware sees, decoded from the lanes' registers per the PTX ISA,
// as 16-bit patterns; false (with a gtest failure) when a chunk's positions are invalid.
bool decode_tile(const Case& c, int64_t rt, int64_t ct, uint16_t (&a)[16][32]) {
  std::memset(a, 0, sizeof a);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane % 4;
    for (int i = 0; i < 8; ++i) {
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int ccol = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
      const int chunk = ccol / 2, which = ccol % 2;
      // The metadata of (row, chunk): lane 4 * (row % 8) + chunk / 4, half row / 8.
      const uint32_t meta = meta_register(c, rt, ct, 4 * (row % 8) + chunk / 4);
      const unsigned nibble = (meta >> (16 * (row / 8) + 4 * (chunk % 4))) & 0xfu;
      const unsigned p0 = nibble & 3u, p1 = nibble >> 2;
      if (p0 >= p1) {
        ADD_FAILURE() << "tile (" << rt << ", " << ct << ") row " << row << " chunk " << chunk
                      << ": positions " << p0 << ", " << p1;
        return false;
      }
      const uint32_t reg = value_register(c, rt, ct, lane, i / 2);
      a[row][4 * chunk + (which ? p1 : p0)] = uint16_t(reg >> (16 * (i % 2)));
    }
  }
  return true;
}

uint16_t dense_bits(const tessera::Tensor& w, int64_t r, int64_t k) {
  if (r >= w.size(0) || k >= w.size(1)) return 0;
  return static_cast<const uint16_t*>(w.raw_data_ptr())[r * w.size(1) + k];
}

bool is_zero_bits(uint16_t b) { return (b & 0x7fffu) == 0; }

// `got` holds the dense weight's `want` bit for bit; a kept zero may be +0 or -0 only where the
// dense weight is zero.
::testing::AssertionResult same_weight_bits(uint16_t got, uint16_t want) {
  if (is_zero_bits(want) ? is_zero_bits(got) : got == want) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "bits 0x" << std::hex << got << ", expected 0x" << want;
}

class SparseMmaLayout : public ::testing::TestWithParam<tessera::DType> {};

// Every A tile decoded from the layout holds the dense weight, bit for bit (padding as zeros):
// the kept values at the positions the metadata names, and nothing else non-zero.
TEST_P(SparseMmaLayout, FragmentsHoldTheDenseWeight) {
  std::mt19937 rng(1234);
  for (int64_t rows : {1, 15, 16, 17, 40})
    for (int64_t cols : {1, 4, 5, 30, 31, 32, 33, 100}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
      const Case c = make_case(GetParam(), rows, cols, rng);
      ASSERT_TRUE(c.layout);
      const scu::MmaLayout& l = *c.layout;
      ASSERT_EQ(l.row_tiles, (rows + 15) / 16);
      ASSERT_EQ(l.col_tiles, (cols + 31) / 32);
      for (int64_t rt = 0; rt < l.row_tiles; ++rt)
        for (int64_t ct = 0; ct < l.col_tiles; ++ct) {
          uint16_t a[16][32];
          ASSERT_TRUE(decode_tile(c, rt, ct, a));
          for (int r = 0; r < 16; ++r)
            for (int k = 0; k < 32; ++k) {
              ASSERT_TRUE(same_weight_bits(a[r][k], dense_bits(c.dense, rt * 16 + r, ct * 32 + k)))
                  << "row " << rt * 16 + r << " col " << ct * 32 + k;
            }
        }
    }
}

// The GPU's rebuild of the dense weight (expand_mma_layout, the input cuSPARSELt compresses) writes
// each slot where mma_slot_position says. Doing the same here must give the dense weight bit for bit,
// with no two slots of the weight naming one element and no non-zero value landing in the padding.
TEST_P(SparseMmaLayout, SlotPositionsRebuildTheDenseWeight) {
  std::mt19937 rng(4321);
  for (int64_t rows : {1, 15, 16, 17, 40})
    for (int64_t cols : {1, 4, 5, 30, 31, 32, 33, 100}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
      const Case c = make_case(GetParam(), rows, cols, rng);
      ASSERT_TRUE(c.layout);
      const scu::MmaLayout& l = *c.layout;
      std::vector<uint16_t> rebuilt(size_t(rows * cols), 0);
      std::vector<int> writes(size_t(rows * cols), 0);
      const auto* values = reinterpret_cast<const uint16_t*>(block_of(c) + l.values_offset);
      const auto* meta = reinterpret_cast<const uint32_t*>(block_of(c) + l.meta_offset);
      for (int64_t rt = 0; rt < l.row_tiles; ++rt)
        for (int64_t ct = 0; ct < l.col_tiles; ++ct) {
          const int64_t tile = rt * l.col_tiles + ct;
          for (int slot = 0; slot < 256; ++slot) {
            const scu::MmaSlot at =
                scu::mma_slot_position(rt, ct, slot, meta + tile * scu::kMmaTileMetaWords);
            const uint16_t v = values[tile * 256 + slot];
            ASSERT_GE(at.row, rt * 16);
            ASSERT_LT(at.row, rt * 16 + 16);
            ASSERT_GE(at.col, ct * 32);
            ASSERT_LT(at.col, ct * 32 + 32);
            if (at.row >= rows || at.col >= cols) {
              ASSERT_TRUE(is_zero_bits(v)) << "a value in the padding, slot " << slot;
              continue;
            }
            ++writes[size_t(at.row * cols + at.col)];
            rebuilt[size_t(at.row * cols + at.col)] = v;
          }
        }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < cols; ++k) {
          ASSERT_LE(writes[size_t(r * cols + k)], 1) << "row " << r << " col " << k;
          ASSERT_TRUE(same_weight_bits(rebuilt[size_t(r * cols + k)], dense_bits(c.dense, r, k)))
              << "row " << r << " col " << k;
        }
    }
}

double to_double(tessera::DType dt, uint16_t bits) {
  if (dt == tessera::kBFloat16) {
    const uint32_t f = uint32_t(bits) << 16;
    float v;
    std::memcpy(&v, &f, 4);
    return v;
  }
  const int sign = bits >> 15, exp = (bits >> 10) & 0x1f, mant = bits & 0x3ff;
  const double mag = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return sign ? -mag : mag;
}

// The m16n8k32 sparse MMA emulated over the layout (A decoded per the PTX ISA, B = x^T, column
// tiles summed) against a naive double matmul of the dense weight: y = x W^T.
TEST_P(SparseMmaLayout, EmulatedSparseMmaMatchesDenseMatmul) {
  const tessera::DType dt = GetParam();
  std::mt19937 rng(99);
  std::normal_distribution<double> normal;
  for (int64_t rows : {16, 33})
    for (int64_t cols : {29, 64, 70})
      for (int64_t batch : {1, 8, 11}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " batch " +
                     std::to_string(batch));
        const Case c = make_case(dt, rows, cols, rng);
        ASSERT_TRUE(c.layout);
        const scu::MmaLayout& l = *c.layout;
        std::vector<double> x(size_t(batch * cols));
        for (double& v : x) v = normal(rng);
        std::vector<double> y(size_t(batch * rows), 0.0);
        for (int64_t rt = 0; rt < l.row_tiles; ++rt)
          for (int64_t ct = 0; ct < l.col_tiles; ++ct) {
            uint16_t a[16][32];
            ASSERT_TRUE(decode_tile(c, rt, ct, a));
            for (int64_t n = 0; n < batch; ++n)
              for (int r = 0; r < 16 && rt * 16 + r < rows; ++r)
                for (int k = 0; k < 32 && ct * 32 + k < cols; ++k)
                  y[size_t(n * rows + rt * 16 + r)] +=
                      to_double(dt, a[r][k]) * x[size_t(n * cols + ct * 32 + k)];
          }
        const tessera::Tensor wd = c.dense.to(tessera::kFloat64);
        const double* w = wd.data_ptr<double>();
        for (int64_t n = 0; n < batch; ++n)
          for (int64_t r = 0; r < rows; ++r) {
            double want = 0, mag = 0;
            for (int64_t k = 0; k < cols; ++k) {
              want += w[r * cols + k] * x[size_t(n * cols + k)];
              mag += std::abs(w[r * cols + k] * x[size_t(n * cols + k)]);
            }
            ASSERT_NEAR(y[size_t(n * rows + r)], want, 1e-12 * (1 + mag))
                << "batch row " << n << " row " << r;
          }
      }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SparseMmaLayout, ::testing::Values(tessera::kFloat16, tessera::kBFloat16),
                         [](const auto& info) { return std::string(tessera::dtype_name(info.param)); });

TEST(SparseMmaLayoutErrors, RejectsPositionsThatAreNotIncreasing) {
  const uint16_t values[2] = {0x3c00, 0x3c00};
  for (uint8_t nibble : {uint8_t(0x0), uint8_t(0x5), uint8_t(0x1), uint8_t(0xf)}) {
    std::string error;
    scu::MmaLayout* l =
        scu::build_mma_layout(reinterpret_cast<const uint8_t*>(values), &nibble, 1, 4, &error);
    EXPECT_EQ(l, nullptr);
    std::free(l);
    EXPECT_NE(error.find("row 0, group 0 keeps positions"), std::string::npos) << error;
  }
}

TEST(SparseMmaLayoutErrors, RejectsSizesThatOverflow) {
  scu::MmaLayout plan;
  std::string error;
  EXPECT_FALSE(scu::mma_layout_plan(int64_t(1) << 62, int64_t(1) << 40, &plan, &error));
  EXPECT_NE(error.find("overflows"), std::string::npos) << error;
  EXPECT_FALSE(scu::mma_layout_plan(-1, 4, &plan, &error));
  EXPECT_NE(error.find("negative shape"), std::string::npos) << error;
  ASSERT_TRUE(scu::mma_layout_plan(17, 33, &plan, &error)) << error;
  EXPECT_EQ(plan.row_tiles, 2);
  EXPECT_EQ(plan.col_tiles, 2);
  EXPECT_EQ(plan.meta_offset - plan.values_offset, uint64_t(4 * 512));
  EXPECT_EQ(plan.total_bytes - plan.meta_offset, uint64_t(4 * 64));
}

}  // namespace
