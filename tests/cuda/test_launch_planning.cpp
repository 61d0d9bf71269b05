// Launch planning of the CUDA kernels (tensor_iter.h) and the host-side 16-bit float rounding
// (half_bits.h). Planning is checked on the host against naive
// broadcasting, copying and reduction over fresh random shapes, strides and dim sets: the planned
// (merged) iteration space must address exactly the elements the naive loops address.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "conv_plan.h"
#include "half_bits.h"
#include "softmax_plan.h"
#include "index_math.h"
#include "tensor_iter.h"
#include "tessera/half.h"

namespace {

using tessera::cuda::CopyPlan;
using tessera::cuda::Geometry;
using tessera::cuda::IterShape;
using tessera::cuda::kMaxDims;
using tessera::cuda::Operand;
using tessera::cuda::ReducePlan;

struct Layout {
  std::vector<int64_t> sizes, strides;
  Geometry geometry() const { return Geometry{int32_t(sizes.size()), sizes.data(), strides.data()}; }
};

// Random dense strides over a random permutation of the dims (so some layouts are transposed),
// sometimes with a gap (a slice of a bigger tensor).
Layout random_layout(std::mt19937& rng, const std::vector<int64_t>& sizes) {
  Layout l{sizes, std::vector<int64_t>(sizes.size())};
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  if (rng() % 2) std::shuffle(order.begin(), order.end(), rng);
  int64_t acc = 1;
  for (size_t i = order.size(); i-- > 0;) {
    l.strides[order[i]] = acc;
    acc *= sizes[order[i]] + int64_t(rng() % 4 == 0 ? 1 : 0);
  }
  return l;
}

std::vector<int64_t> coords_of(int64_t linear, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> c(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    c[d] = linear % sizes[d];
    linear /= sizes[d];
  }
  return c;
}

int64_t planned_offset(const IterShape& s, const Operand& op, int64_t linear) {
  int64_t off = 0;
  for (int d = s.ndim - 1; d >= 0; --d) {
    off += (linear % s.sizes[d]) * op.strides[d];
    linear /= s.sizes[d];
  }
  return off;
}

TEST(LaunchPlanning, BroadcastingMatchesNaiveIndexing) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    const int ndim = int(rng() % 6);
    std::vector<int64_t> out_sizes(static_cast<size_t>(ndim));
    for (auto& s : out_sizes) s = 1 + int64_t(rng() % 5);
    // Inputs: a suffix of the output's dims, some set to 1 (broadcast).
    std::vector<Layout> inputs;
    for (int k = 0; k < 2; ++k) {
      const int nd = ndim == 0 ? 0 : int(rng() % (ndim + 1));
      std::vector<int64_t> sizes(out_sizes.end() - nd, out_sizes.end());
      for (auto& s : sizes)
        if (rng() % 3 == 0) s = 1;
      inputs.push_back(random_layout(rng, sizes));
    }
    const Layout out = random_layout(rng, out_sizes);
    IterShape shape;
    Operand ops[3];
    const Geometry ins[2] = {inputs[0].geometry(), inputs[1].geometry()};
    ASSERT_TRUE(tessera::cuda::plan_elementwise(out.geometry(), ins, 2, &shape, ops)) << "seed " << seed;
    int64_t numel = 1;
    for (int64_t s : out_sizes) numel *= s;
    ASSERT_EQ(shape.numel, numel);
    int64_t planned_numel = 1;
    for (int d = 0; d < shape.ndim; ++d) planned_numel *= shape.sizes[d];
    ASSERT_EQ(planned_numel, numel);
    // The plan may visit the elements in another order (the output's memory order), but each
    // output element exactly once, each with the input elements of its logical coordinates. The
    // output's offsets are distinct (it is dense), so they name the elements.
    std::map<int64_t, std::array<int64_t, 2>> want;  // output offset -> input offsets
    for (int64_t i = 0; i < numel; ++i) {
      const auto c = coords_of(i, out_sizes);
      int64_t expected_out = 0;
      for (int d = 0; d < ndim; ++d) expected_out += c[size_t(d)] * out.strides[size_t(d)];
      std::array<int64_t, 2> expected{};
      for (int k = 0; k < 2; ++k) {
        const Layout& in = inputs[size_t(k)];
        const int shift = ndim - int(in.sizes.size());
        for (size_t d = 0; d < in.sizes.size(); ++d)
          if (in.sizes[d] != 1) expected[size_t(k)] += c[d + size_t(shift)] * in.strides[d];
      }
      want[expected_out] = expected;
    }
    ASSERT_EQ(int64_t(want.size()), numel);
    std::map<int64_t, int> seen;
    for (int64_t i = 0; i < numel; ++i) {
      const int64_t o = planned_offset(shape, ops[0], i);
      ASSERT_EQ(++seen[o], 1) << "output offset " << o << " visited twice; seed " << seed << " trial " << trial;
      auto it = want.find(o);
      ASSERT_NE(it, want.end()) << "output offset " << o << " is no element; seed " << seed << " trial " << trial;
      for (int k = 0; k < 2; ++k)
        ASSERT_EQ(planned_offset(shape, ops[k + 1], i), it->second[size_t(k)]) << "seed " << seed << " trial " << trial;
    }
  }
}

// out = f(a, b) with all three laid out as `g`: planned as one dense dim of `numel` elements (the
// vector path).
void expect_one_dense_run(const Geometry& g, int64_t numel, IterShape& shape, Operand* ops) {
  const Geometry ins[2] = {g, g};
  ASSERT_TRUE(tessera::cuda::plan_elementwise(g, ins, 2, &shape, ops));
  EXPECT_EQ(shape.ndim, 1);
  EXPECT_EQ(shape.sizes[0], numel);
  EXPECT_TRUE(tessera::cuda::is_dense(shape, ops, 3));
}

TEST(LaunchPlanning, DenseOperandsMergeIntoOneDimAndTakeTheVectorPath) {
  const std::vector<int64_t> sizes = {4, 5, 6}, strides = {30, 6, 1};
  Geometry g{3, sizes.data(), strides.data()};
  IterShape shape;
  Operand ops[3];
  expect_one_dense_run(g, 120, shape, ops);
  // A broadcast row is not dense.
  const std::vector<int64_t> row = {6}, row_stride = {1};
  const Geometry ins2[2] = {g, Geometry{1, row.data(), row_stride.data()}};
  ASSERT_TRUE(tessera::cuda::plan_elementwise(g, ins2, 2, &shape, ops));
  EXPECT_EQ(shape.ndim, 2);
  EXPECT_FALSE(tessera::cuda::is_dense(shape, ops, 3));
  // Shapes that do not broadcast are refused.
  const std::vector<int64_t> bad = {7}, bad_stride = {1};
  const Geometry ins3[2] = {g, Geometry{1, bad.data(), bad_stride.data()}};
  EXPECT_FALSE(tessera::cuda::plan_elementwise(g, ins3, 2, &shape, ops));
}

// Channels-last operands and output (docs/semantics.md, "Memory formats": a pointwise op keeps a
// channels-last input's layout) are one dense run in memory: the plan must see that and take the
// vector path, as for row-major tensors. A channels-last bias [1, C, 1, 1] broadcasts.
TEST(LaunchPlanning, ChannelsLastOperandsMergeIntoOneDim) {
  const std::vector<int64_t> sizes = {2, 6, 5, 7}, cl = {210, 1, 42, 6};
  const Geometry g{4, sizes.data(), cl.data()};
  IterShape shape;
  Operand ops[3];
  expect_one_dense_run(g, 420, shape, ops);
  const std::vector<int64_t> bias = {1, 6, 1, 1}, bias_strides = {6, 1, 1, 1};
  const Geometry ins2[2] = {g, Geometry{4, bias.data(), bias_strides.data()}};
  ASSERT_TRUE(tessera::cuda::plan_elementwise(g, ins2, 2, &shape, ops));
  // The plan walks the output in memory order: step i writes offset i, the pixel's channel i % 6.
  for (int64_t i = 0; i < 420; ++i) {
    ASSERT_EQ(planned_offset(shape, ops[0], i), i);
    ASSERT_EQ(planned_offset(shape, ops[1], i), i);
    ASSERT_EQ(planned_offset(shape, ops[2], i), i % 6) << i;
  }
}

TEST(LaunchPlanning, TooManyNonMergeableDimsAreRefused) {
  // 9 dims of size 2 whose strides never continue (a reversed layout with gaps).
  std::vector<int64_t> sizes(9, 2), strides(9);
  for (int d = 0; d < 9; ++d) strides[size_t(d)] = int64_t(1) << (2 * d);
  Geometry g{9, sizes.data(), strides.data()};
  IterShape shape;
  Operand op;
  EXPECT_FALSE(tessera::cuda::plan_elementwise(g, nullptr, 0, &shape, &op));
  EXPECT_GT(9, kMaxDims);
}

TEST(LaunchPlanning, ReductionPlanMatchesNaiveReduction) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int ndim = 1 + int(rng() % 5);
    std::vector<int64_t> sizes(static_cast<size_t>(ndim));
    for (auto& s : sizes) s = 1 + int64_t(rng() % 5);
    const Layout in = random_layout(rng, sizes);
    uint64_t mask = 0;
    for (int d = 0; d < ndim; ++d)
      if (rng() % 2) mask |= uint64_t(1) << d;
    if (mask == 0) mask = (uint64_t(1) << ndim) - 1;
    const bool keepdim = rng() % 2;
    std::vector<int64_t> out_sizes;
    for (int d = 0; d < ndim; ++d) {
      if ((mask >> d) & 1u) {
        if (keepdim) out_sizes.push_back(1);
      } else {
        out_sizes.push_back(sizes[size_t(d)]);
      }
    }
    const Layout out = random_layout(rng, out_sizes);
    ReducePlan plan;
    ASSERT_TRUE(tessera::cuda::plan_reduction(in.geometry(), out.geometry(), mask, keepdim, &plan)) << "seed " << seed;

    // Storage big enough for the strided layouts; fresh random values.
    int64_t in_span = 1, out_span = 1;
    for (int d = 0; d < ndim; ++d) in_span += (sizes[size_t(d)] - 1) * in.strides[size_t(d)];
    for (size_t d = 0; d < out_sizes.size(); ++d) out_span += (out_sizes[d] - 1) * out.strides[d];
    std::vector<double> x(static_cast<size_t>(in_span));
    for (auto& v : x) v = uni(rng);

    // Naive: sum over every input element into its output position.
    std::vector<double> expected(size_t(out_span), 0.0), got(size_t(out_span), 0.0);
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    for (int64_t i = 0; i < numel; ++i) {
      const auto c = coords_of(i, sizes);
      int64_t ioff = 0, ooff = 0;
      size_t od = 0;
      for (int d = 0; d < ndim; ++d) {
        ioff += c[size_t(d)] * in.strides[size_t(d)];
        if ((mask >> d) & 1u) {
          if (keepdim) ++od;
        } else {
          ooff += c[size_t(d)] * out.strides[od++];
        }
      }
      expected[size_t(ooff)] += x[size_t(ioff)];
    }
    // Through the plan, as the kernels index.
    for (int64_t o = 0; o < plan.num_outputs; ++o) {
      int64_t in_base = 0, out_off = 0, rem = o;
      for (int d = plan.kept_ndim - 1; d >= 0; --d) {
        const int64_t c = rem % plan.kept_sizes[d];
        rem /= plan.kept_sizes[d];
        in_base += c * plan.kept_in_strides[d];
        out_off += c * plan.kept_out_strides[d];
      }
      double acc = 0.0;
      for (int64_t r = 0; r < plan.reduce_size; ++r) {
        int64_t off = 0, rr = r;
        for (int d = plan.reduced_ndim - 1; d >= 0; --d) {
          off += (rr % plan.reduced_sizes[d]) * plan.reduced_in_strides[d];
          rr /= plan.reduced_sizes[d];
        }
        acc += x[size_t(in_base + off)];
      }
      got[size_t(out_off)] = acc;
    }
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_NEAR(got[i], expected[i], 1e-9) << "seed " << seed << " trial " << trial << " at " << i;
  }
}

}  // namespace

namespace {

// fill_ values are converted on the host by the plugin's own float16/bfloat16 rounding; it must
// agree bit for bit with the core's conversion (round to nearest even, NaN, inf, subnormals).
// ---------------------------------------------------------------- copy_ planning

// (destination offset -> source offset) for every element, walking the plan's dims row-major.
std::map<int64_t, int64_t> planned_pairs(const CopyPlan& p) {
  std::map<int64_t, int64_t> m;
  for (int64_t i = 0; i < p.numel; ++i) {
    int64_t linear = i, d = 0, s = 0;
    for (int j = p.ndim - 1; j >= 0; --j) {
      const int64_t c = linear % p.sizes[j];
      linear /= p.sizes[j];
      d += c * p.dst_strides[j];
      s += c * p.src_strides[j];
    }
    EXPECT_TRUE(m.emplace(d, s).second) << "destination offset " << d << " visited twice";
  }
  return m;
}

TEST(CopyPlanning, CoalescedPlanCopiesExactlyTheNaiveElements) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 400; ++trial) {
    const int nd = int(rng() % 6);
    std::vector<int64_t> sizes(static_cast<size_t>(nd), 0);
    for (auto& v : sizes) v = 1 + int64_t(rng() % 5);
    const Layout dst = random_layout(rng, sizes);
    // The source: a random layout of the same shape, or of a broadcasting shape (leading dims
    // dropped, some dims of size 1).
    std::vector<int64_t> src_sizes(sizes.begin() + (nd > 0 ? rng() % (nd + 1) : 0), sizes.end());
    for (auto& v : src_sizes)
      if (rng() % 4 == 0) v = 1;
    const Layout src = random_layout(rng, src_sizes);
    CopyPlan plan;
    ASSERT_TRUE(tessera::cuda::plan_copy(dst.geometry(), src.geometry(), &plan)) << "seed " << seed;
    std::map<int64_t, int64_t> expected;
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    ASSERT_EQ(plan.numel, numel);
    const int shift = nd - int(src_sizes.size());
    for (int64_t i = 0; i < numel; ++i) {
      const std::vector<int64_t> c = coords_of(i, sizes);
      int64_t d = 0, s = 0;
      for (int k = 0; k < nd; ++k) d += c[size_t(k)] * dst.strides[size_t(k)];
      for (size_t k = 0; k < src_sizes.size(); ++k)
        if (src_sizes[k] != 1) s += c[k + size_t(shift)] * src.strides[k];
      expected.emplace(d, s);
    }
    ASSERT_EQ(planned_pairs(plan), expected) << "seed " << seed << " trial " << trial;
    EXPECT_TRUE(plan.index32);
    // The innermost planned dim has the smallest destination stride (neighbouring threads write
    // neighbouring elements).
    if (numel > 1) {
      int64_t smallest = INT64_MAX;
      for (int k = 0; k < nd; ++k)
        if (sizes[size_t(k)] > 1) smallest = std::min(smallest, dst.strides[size_t(k)]);
      EXPECT_EQ(plan.dst_strides[plan.ndim - 1], smallest) << "seed " << seed << " trial " << trial;
    }
  }
}

TEST(CopyPlanning, DenseAndEquallyPermutedCopiesBecomeOneContiguousDim) {
  const std::vector<int64_t> sizes = {4, 5, 6}, dense = {30, 6, 1};
  CopyPlan plan;
  ASSERT_TRUE(tessera::cuda::plan_copy(Geometry{3, sizes.data(), dense.data()}, Geometry{3, sizes.data(), dense.data()}, &plan));
  EXPECT_EQ(plan.ndim, 1);
  EXPECT_EQ(plan.sizes[0], 120);
  EXPECT_TRUE(plan.contiguous);
  // Both operands the same permutation of a dense block (y.t().copy_(x.t())): one dense dim after
  // ordering by the destination's strides.
  const std::vector<int64_t> psizes = {6, 5, 4}, pstrides = {1, 6, 30};
  ASSERT_TRUE(tessera::cuda::plan_copy(Geometry{3, psizes.data(), pstrides.data()}, Geometry{3, psizes.data(), pstrides.data()}, &plan));
  EXPECT_EQ(plan.ndim, 1);
  EXPECT_TRUE(plan.contiguous);
  // A transposed source into a dense destination: two dims, destination stride 1 innermost.
  const std::vector<int64_t> tsizes = {5, 6}, tdst = {6, 1}, tsrc = {1, 5};
  ASSERT_TRUE(tessera::cuda::plan_copy(Geometry{2, tsizes.data(), tdst.data()}, Geometry{2, tsizes.data(), tsrc.data()}, &plan));
  EXPECT_EQ(plan.ndim, 2);
  EXPECT_FALSE(plan.contiguous);
  EXPECT_EQ(plan.dst_strides[1], 1);
  EXPECT_EQ(plan.src_strides[1], 5);
  // A broadcast row keeps stride 0 and is not contiguous; a single element is.
  const std::vector<int64_t> row = {6}, row_stride = {1};
  ASSERT_TRUE(tessera::cuda::plan_copy(Geometry{2, tsizes.data(), tdst.data()}, Geometry{1, row.data(), row_stride.data()}, &plan));
  EXPECT_EQ(plan.ndim, 2);
  EXPECT_EQ(plan.src_strides[0], 0);
  EXPECT_FALSE(plan.contiguous);
  ASSERT_TRUE(tessera::cuda::plan_copy(Geometry{0, nullptr, nullptr}, Geometry{0, nullptr, nullptr}, &plan));
  EXPECT_EQ(plan.numel, 1);
  EXPECT_TRUE(plan.contiguous);
}

TEST(CopyPlanning, IndexWidthFollowsTheElementCountAndTheExtents) {
  CopyPlan plan;
  const std::vector<int64_t> one = {1};
  std::vector<int64_t> sizes = {INT32_MAX};
  ASSERT_TRUE(tessera::cuda::plan_copy(Geometry{1, sizes.data(), one.data()}, Geometry{1, sizes.data(), one.data()}, &plan));
  EXPECT_TRUE(plan.index32);
  sizes = {int64_t(INT32_MAX) + 1};
  ASSERT_TRUE(tessera::cuda::plan_copy(Geometry{1, sizes.data(), one.data()}, Geometry{1, sizes.data(), one.data()}, &plan));
  EXPECT_FALSE(plan.index32);
  // Few elements, but the source's last element lies past 2^31 - 1 elements.
  const std::vector<int64_t> two = {2}, dst_stride = {1}, far = {int64_t(1) << 31};
  ASSERT_TRUE(tessera::cuda::plan_copy(Geometry{1, two.data(), dst_stride.data()}, Geometry{1, two.data(), far.data()}, &plan));
  EXPECT_FALSE(plan.index32);
  const std::vector<int64_t> near = {int64_t(INT32_MAX)};
  ASSERT_TRUE(tessera::cuda::plan_copy(Geometry{1, two.data(), dst_stride.data()}, Geometry{1, two.data(), near.data()}, &plan));
  EXPECT_TRUE(plan.index32);
  // Extents whose products overflow int64 are planned without overflow, as 64-bit.
  const std::vector<int64_t> huge = {INT64_MAX};
  ASSERT_TRUE(tessera::cuda::plan_copy(Geometry{1, two.data(), huge.data()}, Geometry{1, two.data(), dst_stride.data()}, &plan));
  EXPECT_FALSE(plan.index32);
}

// Note [Tiled transposed copies]: transposes (2-D, batched, inside a bigger permutation) are
// recognised, and the tile mapping, replayed over every element, addresses exactly the naive
// (destination, source) pairs; contiguous, broadcast and small copies are not tiles.
TEST(CopyPlanning, TransposedCopiesBecomeTilesThatCoverEveryElementOnce) {
  auto plan_of = [](const Layout& dst, const Layout& src, CopyPlan* p) {
    return tessera::cuda::plan_copy(dst.geometry(), src.geometry(), p);
  };
  auto contiguous = [](std::vector<int64_t> sizes) {
    Layout l{sizes, std::vector<int64_t>(sizes.size())};
    int64_t acc = 1;
    for (int d = int(sizes.size()) - 1; d >= 0; --d) {
      l.strides[size_t(d)] = acc;
      acc *= sizes[size_t(d)];
    }
    return l;
  };
  struct Case {
    Layout dst, src;
  };
  // [70, 45] from the transpose of a [45, 70]; from a contiguous [3, 4, 50, 40]: its (0, 2, 1, 3)
  // permutation (rows of 40 stay contiguous: no tile) and its (0, 3, 1, 2) permutation (a [40, 50]
  // tile for each of the 3 x 4 batch items).
  const Layout t2_src{{70, 45}, {1, 70}};
  const Layout p4_src{{3, 50, 4, 40}, {8000, 40, 2000, 1}};
  const Layout q4_src{{3, 40, 4, 50}, {8000, 1, 2000, 40}};
  const std::vector<Case> tiles = {{contiguous({70, 45}), t2_src}, {contiguous({3, 40, 4, 50}), q4_src}};
  for (const Case& c : tiles) {
    CopyPlan p;
    ASSERT_TRUE(plan_of(c.dst, c.src, &p));
    tessera::cuda::TransposePlan t;
    ASSERT_TRUE(tessera::cuda::plan_transpose(p, &t));
    // Replay the kernel's mapping: every (batch item, a, b) once.
    std::map<int64_t, int64_t> seen;  // dst offset -> src offset
    for (int64_t z = 0; z < t.batch_count; ++z) {
      int64_t sb = 0, db = 0, r = z;
      for (int d = t.batch_ndim - 1; d >= 0; --d) {
        sb += (r % t.batch_sizes[d]) * t.batch_src_strides[d];
        db += (r % t.batch_sizes[d]) * t.batch_dst_strides[d];
        r /= t.batch_sizes[d];
      }
      for (int64_t a = 0; a < t.size_a; ++a)
        for (int64_t b = 0; b < t.size_b; ++b) EXPECT_TRUE(seen.emplace(db + a * t.dst_stride_a + b, sb + a + b * t.src_stride_b).second);
    }
    // The naive copy: element (i...) of the destination from the same logical element of the source.
    const size_t nd = c.dst.sizes.size();
    int64_t numel = 1;
    for (int64_t s : c.dst.sizes) numel *= s;
    ASSERT_EQ(int64_t(seen.size()), numel);
    std::vector<int64_t> idx(nd, 0);
    for (int64_t e = 0; e < numel; ++e) {
      int64_t doff = 0, soff = 0;
      for (size_t d = 0; d < nd; ++d) {
        doff += idx[d] * c.dst.strides[d];
        soff += idx[d] * c.src.strides[d];
      }
      ASSERT_EQ(seen.count(doff), 1u);
      EXPECT_EQ(seen[doff], soff);
      for (int d = int(nd) - 1; d >= 0; --d) {
        if (++idx[size_t(d)] < c.dst.sizes[size_t(d)]) break;
        idx[size_t(d)] = 0;
      }
    }
  }
  const std::vector<Case> others = {
      {contiguous({3, 50, 4, 40}), p4_src},                        // rows stay contiguous
      {contiguous({70, 45}), contiguous({70, 45})},                 // a plain copy
      {contiguous({70, 45}), Layout{{70, 45}, {0, 1}}},             // a broadcast row
      {contiguous({8, 45}), Layout{{8, 45}, {1, 8}}},               // planes thinner than 16
  };
  for (const Case& c : others) {
    CopyPlan p;
    ASSERT_TRUE(plan_of(c.dst, c.src, &p));
    tessera::cuda::TransposePlan t;
    EXPECT_FALSE(tessera::cuda::plan_transpose(p, &t));
  }
}

TEST(CopyPlanning, RefusesWhatItCannotPlan) {
  CopyPlan plan;
  const std::vector<int64_t> sizes = {4}, bad = {3}, one = {1}, negative = {-1};
  EXPECT_FALSE(tessera::cuda::plan_copy(Geometry{1, sizes.data(), one.data()}, Geometry{1, bad.data(), one.data()}, &plan));
  EXPECT_FALSE(tessera::cuda::plan_copy(Geometry{1, sizes.data(), negative.data()}, Geometry{1, sizes.data(), one.data()}, &plan));
  EXPECT_FALSE(tessera::cuda::plan_copy(Geometry{0, nullptr, nullptr}, Geometry{1, sizes.data(), one.data()}, &plan));
  // 9 dims of size 2 that never merge.
  std::vector<int64_t> s9(9, 2), st9(9);
  for (int d = 0; d < 9; ++d) st9[size_t(d)] = int64_t(1) << (2 * d);
  EXPECT_FALSE(tessera::cuda::plan_copy(Geometry{9, s9.data(), st9.data()}, Geometry{9, s9.data(), st9.data()}, &plan));
}

TEST(LaunchPlanning, ANumberPassedByValueDoesNotBlockTheVectorPath) {
  const std::vector<int64_t> sizes = {4, 5, 6}, strides = {30, 6, 1};
  Geometry g{3, sizes.data(), strides.data()};
  const Geometry ins[2] = {g, Geometry{0, nullptr, nullptr}};  // x * 2.5: the number is 0-dim
  IterShape shape;
  Operand ops[3];
  ASSERT_TRUE(tessera::cuda::plan_elementwise(g, ins, 2, &shape, ops));
  EXPECT_EQ(shape.ndim, 1);
  EXPECT_EQ(ops[2].strides[0], 0);
  EXPECT_FALSE(tessera::cuda::is_dense(shape, ops, 3));
  EXPECT_TRUE(tessera::cuda::is_dense(shape, ops, 3, 1u << 2));
  EXPECT_FALSE(tessera::cuda::is_dense(shape, ops, 3, 1u << 1));
}

TEST(HalfBits, MatchesTheCoreConversionBitForBit) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x33000000u,
                                    0x33000001u, 0x387fffffu, 0x38800000u, 0x477fefffu, 0x477ff000u, 0x3f800000u,
                                    0x3f801000u, 0x3f803000u};
  for (int i = 0; i < 1000000; ++i) patterns.push_back(rng());
  for (int i = 0; i < 100000; ++i) patterns.push_back(0x33000000u + rng() % (0x47800000u - 0x33000000u));  // half range
  for (uint32_t bits : patterns) {
    float f;
    std::memcpy(&f, &bits, 4);
    const uint16_t core_half = tessera::Half(f).bits, mine_half = tessera::cuda::float_to_half_bits(f);
    if (std::isnan(f)) {
      EXPECT_EQ(mine_half & 0x7c00u, 0x7c00u);
      EXPECT_NE(mine_half & 0x03ffu, 0u);
    } else {
      ASSERT_EQ(mine_half, core_half) << "float bits 0x" << std::hex << bits << " (seed " << std::dec << seed << ")";
    }
    const uint16_t core_bf = tessera::BFloat16(f).bits, mine_bf = tessera::cuda::float_to_bf16_bits(f);
    if (!std::isnan(f)) {
      ASSERT_EQ(mine_bf, core_bf) << "float bits 0x" << std::hex << bits;
    }
  }
}

}  // namespace

namespace {

// cat / stack through plan_concat as the plugin runs them: each part copied element by element into
// the output's memory at its offset, with the output's strides (stack: less the new dim). The
// result must be the naive concatenation: every output element written once, by the right part.
void check_concat(std::mt19937& rng, bool stack, unsigned seed, int trial) {
  const int part_nd = int(rng() % 4) + (stack ? 0 : 1);
  std::vector<int64_t> base(static_cast<size_t>(part_nd));
  for (auto& v : base) v = 1 + int64_t(rng() % 4);
  const int out_nd = stack ? part_nd + 1 : part_nd;
  const int dim = int(rng() % uint32_t(out_nd));
  const int parts = 1 + int(rng() % 4);
  std::vector<int64_t> lengths(static_cast<size_t>(parts));
  std::vector<std::vector<int64_t>> part_sizes;
  for (int k = 0; k < parts; ++k) {
    std::vector<int64_t> s = base;
    if (!stack) s[size_t(dim)] = int64_t(rng() % 4);  // 0 too: an empty part
    lengths[size_t(k)] = stack ? 1 : s[size_t(dim)];
    part_sizes.push_back(s);
  }
  std::vector<int64_t> out_sizes = base;
  if (stack) out_sizes.insert(out_sizes.begin() + dim, parts);
  else out_sizes[size_t(dim)] = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
  const Layout out = random_layout(rng, out_sizes);  // transposed or sliced outputs too
  std::vector<int64_t> offsets(static_cast<size_t>(parts));
  ASSERT_TRUE(tessera::cuda::plan_concat(out.geometry(), dim, lengths.data(), parts, offsets.data()))
      << "seed " << seed << " trial " << trial;
  // Memory of the output: element offset -> (part, part's linear index), written by the plan.
  std::map<int64_t, std::pair<int, int64_t>> written;
  for (int k = 0; k < parts; ++k) {
    std::vector<int64_t> st = out.strides;
    if (stack) st.erase(st.begin() + dim);
    int64_t n = 1;
    for (int64_t s : part_sizes[size_t(k)]) n *= s;
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<int64_t> c = coords_of(i, part_sizes[size_t(k)]);
      int64_t off = offsets[size_t(k)];
      for (size_t d = 0; d < c.size(); ++d) off += c[d] * st[d];
      ASSERT_TRUE(written.emplace(off, std::make_pair(k, i)).second) << "an element written twice, seed " << seed;
    }
  }
  // The naive concatenation, element by element of the output.
  int64_t numel = 1;
  for (int64_t s : out_sizes) numel *= s;
  ASSERT_EQ(int64_t(written.size()), numel) << "seed " << seed << " trial " << trial;
  for (int64_t i = 0; i < numel; ++i) {
    std::vector<int64_t> c = coords_of(i, out_sizes);
    int64_t off = 0;
    for (size_t d = 0; d < c.size(); ++d) off += c[d] * out.strides[d];
    int k = 0;
    if (stack) {
      k = int(c[size_t(dim)]);
      c.erase(c.begin() + dim);
    } else {
      while (c[size_t(dim)] >= lengths[size_t(k)]) c[size_t(dim)] -= lengths[size_t(k++)];
    }
    int64_t lin = 0;
    for (size_t d = 0; d < c.size(); ++d) lin = lin * part_sizes[size_t(k)][d] + c[d];
    EXPECT_EQ(written.at(off), std::make_pair(k, lin)) << "seed " << seed << " trial " << trial << " element " << i;
  }
}

// Note [conv2d on cuDNN]: the format follows the output (NHWC when it is channels-last), operands
// not packed that way are re-packed, and what cuDNN's int descriptors cannot hold is refused.
Layout conv_layout(std::vector<int64_t> sizes, bool channels_last) {
  Layout l{sizes, std::vector<int64_t>(sizes.size())};
  int64_t packed[4];
  if (sizes.size() == 4) {
    tessera::cuda::conv_packed_strides(sizes.data(), channels_last ? tessera::cuda::ConvLayout::NHWC
                                                                   : tessera::cuda::ConvLayout::NCHW, packed);
    l.strides.assign(packed, packed + 4);
  } else {
    l.strides = {sizes[1] * sizes[2], sizes[2], 1};
  }
  return l;
}

TEST(ConvPlanning, FormatFollowsTheOutputAndUnpackedOperandsAreCopied) {
  using tessera::cuda::ConvLayout;
  const int64_t pad[2] = {1, 0}, stride[2] = {2, 1}, dil[2] = {1, 3};
  tessera::cuda::ConvPlan p;
  std::string why;
  // NCHW everywhere: nothing copied; the sizes as cuDNN sees them.
  Layout x = conv_layout({2, 6, 9, 11}, false), w = conv_layout({8, 3, 3, 2}, false), y = conv_layout({2, 8, 5, 8}, false);
  ASSERT_TRUE(tessera::cuda::plan_conv(x.geometry(), w.geometry(), y.geometry(), pad, stride, dil, 2, &p, &why)) << why;
  EXPECT_EQ(p.layout, ConvLayout::NCHW);
  EXPECT_FALSE(p.copy_x || p.copy_w || p.copy_y);
  EXPECT_EQ(p.groups, 2);
  EXPECT_EQ(p.pad[0], 1);
  EXPECT_EQ(p.stride[0], 2);
  EXPECT_EQ(p.dilation[1], 3);
  EXPECT_EQ(p.w[1], 3);
  // A channels-last output: NHWC, and the NCHW input and weight are re-packed.
  Layout ycl = conv_layout({2, 8, 5, 8}, true);
  ASSERT_TRUE(tessera::cuda::plan_conv(x.geometry(), w.geometry(), ycl.geometry(), pad, stride, dil, 2, &p, &why));
  EXPECT_EQ(p.layout, ConvLayout::NHWC);
  EXPECT_TRUE(p.copy_x && p.copy_w);
  EXPECT_FALSE(p.copy_y);
  Layout xcl = conv_layout({2, 6, 9, 11}, true), wcl = conv_layout({8, 3, 3, 2}, true);
  ASSERT_TRUE(tessera::cuda::plan_conv(xcl.geometry(), wcl.geometry(), ycl.geometry(), pad, stride, dil, 2, &p, &why));
  EXPECT_FALSE(p.copy_x || p.copy_w || p.copy_y);
  // A transposed (not packed) input with an NCHW output: the input alone is copied.
  Layout xt{{2, 6, 9, 11}, {6 * 9 * 11, 1, 6, 6 * 9}};
  ASSERT_TRUE(tessera::cuda::plan_conv(xt.geometry(), w.geometry(), y.geometry(), pad, stride, dil, 2, &p, &why));
  EXPECT_EQ(p.layout, ConvLayout::NCHW);
  EXPECT_TRUE(p.copy_x);
  EXPECT_FALSE(p.copy_w || p.copy_y);
  // An output of 1 x 1 images is packed both ways: NCHW, and the channels-last input is copied.
  Layout y1 = conv_layout({2, 8, 1, 1}, true);
  ASSERT_TRUE(tessera::cuda::plan_conv(xcl.geometry(), w.geometry(), y1.geometry(), pad, stride, dil, 2, &p, &why));
  EXPECT_EQ(p.layout, ConvLayout::NCHW);
  EXPECT_TRUE(p.copy_x);
  // Unbatched [C, H, W]: N = 1.
  Layout x3 = conv_layout({6, 9, 11}, false), y3 = conv_layout({8, 5, 8}, false);
  ASSERT_TRUE(tessera::cuda::plan_conv(x3.geometry(), w.geometry(), y3.geometry(), pad, stride, dil, 2, &p, &why));
  EXPECT_EQ(p.x[0], 1);
  EXPECT_EQ(p.x[1], 6);
  EXPECT_FALSE(p.copy_x || p.copy_y);
}

TEST(ConvPlanning, RefusesWhatCudnnDescriptorsCannotHold) {
  const int64_t pad[2] = {0, 0}, stride[2] = {1, 1}, dil[2] = {1, 1};
  tessera::cuda::ConvPlan p;
  std::string why;
  Layout x = conv_layout({2, 6, 9, 11}, false), w = conv_layout({8, 3, 3, 2}, false), y = conv_layout({2, 8, 7, 10}, false);
  EXPECT_FALSE(tessera::cuda::plan_conv(x.geometry(), w.geometry(), y.geometry(), pad, stride, dil, 3, &p, &why));
  EXPECT_NE(why.find("groups"), std::string::npos) << why;
  Layout huge = conv_layout({1 << 16, 6, 128, 256}, false);  // 2^34 elements
  EXPECT_FALSE(tessera::cuda::plan_conv(huge.geometry(), w.geometry(), y.geometry(), pad, stride, dil, 2, &p, &why));
  EXPECT_NE(why.find("2^31"), std::string::npos) << why;
  const int64_t big_pad[2] = {int64_t(1) << 40, 0};
  EXPECT_FALSE(tessera::cuda::plan_conv(x.geometry(), w.geometry(), y.geometry(), big_pad, stride, dil, 2, &p, &why));
  const int64_t zero_stride[2] = {0, 1};
  EXPECT_FALSE(tessera::cuda::plan_conv(x.geometry(), w.geometry(), y.geometry(), pad, zero_stride, dil, 2, &p, &why));
  Layout w3 = conv_layout({8, 3, 3}, false);
  EXPECT_FALSE(tessera::cuda::plan_conv(x.geometry(), w3.geometry(), y.geometry(), pad, stride, dil, 2, &p, &why));
}

// scatter_reduce's compare-and-swap on 1- and 2-byte elements: the element at each offset of a
// word is read back and replaced without touching its neighbours.
TEST(IndexMath, SubwordGetAndSetKeepTheNeighbours) {
  const uint32_t word = 0x89ABCDEFu;
  const uint8_t bytes[4] = {0xEF, 0xCD, 0xAB, 0x89};  // little-endian
  for (unsigned off = 0; off < 4; ++off) {
    EXPECT_EQ(tessera::cuda::subword_get(word, off, 1), bytes[off]);
    const uint32_t w = tessera::cuda::subword_set(word, off, 1, 0x1FFu);  // bits above the byte are dropped
    for (unsigned k = 0; k < 4; ++k)
      EXPECT_EQ((w >> (8 * k)) & 0xFFu, k == off ? 0xFFu : bytes[k]) << "offset " << off << " byte " << k;
  }
  for (unsigned off : {0u, 2u}) {
    EXPECT_EQ(tessera::cuda::subword_get(word, off, 2), off == 0 ? 0xCDEFu : 0x89ABu);
    const uint32_t w = tessera::cuda::subword_set(word, off, 2, 0x12345u);
    EXPECT_EQ(w, off == 0 ? 0x89AB2345u : 0x2345CDEFu);
  }
}

// Note [Register-resident softmax rows]: every row length up to the block limit, every element
// size and alignment: the plan's threads hold each element of the row exactly once (vector loads
// only where the length is a multiple of the vector), and the kinds change at 1024 and 8192.
TEST(SoftmaxPlanning, RegistersHoldEveryElementOfTheRowOnce) {
  using tessera::cuda::SoftmaxKind;
  for (int itemsize : {2, 4, 8}) {
    for (bool aligned : {true, false}) {
      for (int64_t n = 1; n <= tessera::cuda::kSoftmaxBlockMax; n += (n < 1100 ? 1 : 97)) {
        const tessera::cuda::SoftmaxLaunchPlan p = tessera::cuda::plan_softmax(n, 1, itemsize, aligned);
        const bool warp = n <= tessera::cuda::kSoftmaxWarpMax;
        ASSERT_EQ(p.kind, warp ? SoftmaxKind::WarpRegisters : SoftmaxKind::BlockRegisters) << n;
        const int width = warp ? 32 : tessera::cuda::kSoftmaxBlockThreads;
        const int per = p.kind == SoftmaxKind::BlockRegisters ? std::max(p.per_thread, 4) : p.per_thread;  // the kernel's instances
        if (p.vec > 1) {
          EXPECT_TRUE(aligned && n % p.vec == 0 && p.vec == 16 / itemsize) << n;
        }
        std::vector<int> hits(size_t(n), 0);
        for (int lane = 0; lane < width; ++lane)
          for (int k = 0; k < per; ++k) {
            const int64_t j = tessera::cuda::softmax_element(k, lane, width, p.vec);
            if (j < n) ++hits[size_t(j)];
          }
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(hits[size_t(j)], 1) << "n " << n << " element " << j << " itemsize " << itemsize;
      }
    }
  }
  EXPECT_EQ(tessera::cuda::plan_softmax(8193, 1, 4, true).kind, SoftmaxKind::BlockTwoPass);
  EXPECT_EQ(tessera::cuda::plan_softmax(100, 3, 4, true).kind, SoftmaxKind::Column);
  EXPECT_EQ(tessera::cuda::plan_softmax(512, 1, 2, true).vec, 8);
  EXPECT_EQ(tessera::cuda::plan_softmax(512, 1, 2, false).vec, 1);
  EXPECT_EQ(tessera::cuda::plan_softmax(500, 1, 4, true).vec, 4);
  EXPECT_EQ(tessera::cuda::plan_softmax(501, 1, 4, true).vec, 1);
  EXPECT_EQ(tessera::cuda::plan_softmax(40, 1, 2, true).vec, 1) << "two values per lane: no vector of 8";
}

}  // namespace

TEST(ConcatPlanning, CatAndStackSlicesTileTheOutputInOrder) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    check_concat(rng, false, seed, trial);
    check_concat(rng, true, seed, trial);
  }
}

TEST(ConcatPlanning, RefusesPartsThatDoNotFillTheOutput) {
  const std::vector<int64_t> sizes = {2, 5}, strides = {5, 1};
  const Geometry out{2, sizes.data(), strides.data()};
  int64_t offsets[3];
  const int64_t fits[] = {2, 0, 3}, short_by_one[] = {2, 2}, too_long[] = {3, 3}, negative[] = {6, -1};
  ASSERT_TRUE(tessera::cuda::plan_concat(out, 1, fits, 3, offsets));
  EXPECT_EQ(offsets[0], 0);
  EXPECT_EQ(offsets[1], 2);
  EXPECT_EQ(offsets[2], 2);
  EXPECT_FALSE(tessera::cuda::plan_concat(out, 1, short_by_one, 2, offsets));
  EXPECT_FALSE(tessera::cuda::plan_concat(out, 1, too_long, 2, offsets));
  EXPECT_FALSE(tessera::cuda::plan_concat(out, 1, negative, 2, offsets));
  EXPECT_FALSE(tessera::cuda::plan_concat(out, 2, fits, 3, offsets));   // dim out of range
  EXPECT_FALSE(tessera::cuda::plan_concat(out, -1, fits, 3, offsets));
  // An offset that overflows int64 (sizes and strides from a caller are untrusted).
  const std::vector<int64_t> huge = {2, INT64_MAX / 2}, unit = {1, 1}, wide = {1, 8};
  const int64_t halves[] = {INT64_MAX / 4, INT64_MAX / 2 - INT64_MAX / 4};
  EXPECT_TRUE(tessera::cuda::plan_concat(Geometry{2, huge.data(), unit.data()}, 1, halves, 2, offsets));
  EXPECT_FALSE(tessera::cuda::plan_concat(Geometry{2, huge.data(), wide.data()}, 1, halves, 2, offsets));
}

// The index kernel's offsets (index_math.h, shared with the kernel) over every output element of
// random shapes, strided sources and outputs, indices with negative ones: index_select (one index
// per position along dim) and gather (an index tensor of the output's shape, any layout), against
// naive indexing.
TEST(IndexMath, EveryOutputElementReadsTheIndexedSourceElement) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 400; ++trial) {
    const bool gather = trial % 2 == 1;
    const int nd = 1 + int(rng() % 4);
    std::vector<int64_t> src_sizes(static_cast<size_t>(nd));
    for (auto& v : src_sizes) v = 1 + int64_t(rng() % 4);
    const int dim = int(rng() % uint32_t(nd));
    const int64_t dim_size = src_sizes[size_t(dim)];
    std::vector<int64_t> out_sizes = src_sizes;
    out_sizes[size_t(dim)] = int64_t(rng() % 5);
    if (gather)  // gather: the index may be smaller than self in the other dims too
      for (int d = 0; d < nd; ++d)
        if (d != dim) out_sizes[size_t(d)] = 1 + int64_t(rng() % uint64_t(src_sizes[size_t(d)]));
    const Layout src = random_layout(rng, src_sizes), out = random_layout(rng, out_sizes);
    // The index values, in memory at the index layout's offsets.
    const Layout idx_layout = gather ? random_layout(rng, out_sizes) : Layout{{out_sizes[size_t(dim)]}, {1}};
    std::map<int64_t, int64_t> index_memory;
    int64_t numel = 1;
    for (int64_t v : out_sizes) numel *= v;
    tessera::cuda::IndexSelectParams p;
    p.ndim = nd;
    p.dim = dim;
    p.src_dim_size = dim_size;
    for (int d = 0; d < nd; ++d) {
      p.sizes[d] = out_sizes[size_t(d)];
      p.out_strides[d] = out.strides[size_t(d)];
      p.src_strides[d] = src.strides[size_t(d)];
      p.index_strides[d] = gather ? idx_layout.strides[size_t(d)] : (d == dim ? 1 : 0);
    }
    auto index_at = [&](const std::vector<int64_t>& c) {  // the naive index of output coordinates c
      int64_t off = 0;
      if (gather) {
        for (int d = 0; d < nd; ++d) off += c[size_t(d)] * idx_layout.strides[size_t(d)];
      } else {
        off = c[size_t(dim)];
      }
      auto [it, fresh] = index_memory.emplace(off, 0);
      if (fresh) it->second = int64_t(rng() % uint64_t(2 * dim_size)) - dim_size;
      return std::make_pair(off, it->second);
    };
    std::map<int64_t, int64_t> want;  // output offset -> source offset, naive
    for (int64_t o = 0; o < numel; ++o) {
      std::vector<int64_t> c = coords_of(o, out_sizes);
      int64_t out_off = 0, src_off = 0;
      for (int d = 0; d < nd; ++d) out_off += c[size_t(d)] * out.strides[size_t(d)];
      const int64_t raw = index_at(c).second;
      c[size_t(dim)] = raw < 0 ? raw + dim_size : raw;
      for (int d = 0; d < nd; ++d) src_off += c[size_t(d)] * src.strides[size_t(d)];
      want.emplace(out_off, src_off);
    }
    for (int64_t o = 0; o < numel; ++o) {  // as the kernel computes them
      const tessera::cuda::IndexedElement e = tessera::cuda::indexed_element(p, o);
      ASSERT_TRUE(index_memory.count(e.index_offset)) << "an index read where none is, seed " << seed;
      int64_t i = -1;
      ASSERT_TRUE(tessera::cuda::wrap_index(index_memory.at(e.index_offset), dim_size, &i)) << "seed " << seed;
      EXPECT_EQ(want.at(e.out_offset), e.src_partial + i * p.src_strides[dim])
          << (gather ? "gather" : "index_select") << ", seed " << seed << " trial " << trial << " element " << o;
    }
  }
  int64_t w = 0;
  EXPECT_TRUE(tessera::cuda::wrap_index(-3, 3, &w));
  EXPECT_EQ(w, 0);
  EXPECT_FALSE(tessera::cuda::wrap_index(3, 3, &w));
  EXPECT_FALSE(tessera::cuda::wrap_index(-4, 3, &w));
  EXPECT_FALSE(tessera::cuda::wrap_index(0, 0, &w));
}
