// scaled_dot_product_attention on the CPU through the public API: the flash kernel (the op's
// default path) and the unfused math path (the plugin-defined op _sdpa_math, called boxed),
// each against a naive double-precision reference, and against each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "cpu_test_util.h"
#include "tessera/dispatcher.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using cpu_test::close;
using cpu_test::random_tensor;
using cpu_test::read;
using cpu_test::Ref;
using cpu_test::round_to;
using cpu_test::seed_trace;
using cpu_test::Tol;

// Reference attention over [B..., L, E] inputs with broadcasting batch dims and masks, with
// PyTorch's rules: a bool mask adds -inf where false; a row whose masked scores are all -inf gets
// probabilities 0 (its output is 0 @ V), every other row the plain softmax.
std::vector<double> ref_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& mask,
                             bool causal, std::optional<double> scale, const std::vector<int64_t>& out_sizes) {
  const Ref rq = read(q), rk = read(k), rv = read(v);
  Ref rm;
  if (mask) rm = read(*mask);
  const int64_t l = q.size(-2), e = q.size(-1), s = k.size(-2), ev = v.size(-1);
  const double sc = scale ? *scale : 1.0 / std::sqrt(double(e));
  std::vector<int64_t> batch(out_sizes.begin(), out_sizes.end() - 2);
  int64_t nb = 1;
  for (auto b : batch) nb *= b;
  std::vector<double> out;
  // Offset of the [rows, cols] matrix of batch index `bidx` in a (broadcast) Ref.
  auto base = [](const Ref& r, const std::vector<int64_t>& bidx) {
    const size_t rb = r.sizes.size() - 2, off = bidx.size() - rb;
    int64_t lin = 0;
    for (size_t d = 0; d < rb; ++d) lin = lin * r.sizes[d] + (r.sizes[d] == 1 ? 0 : bidx[d + off]);
    return lin * r.sizes[rb] * r.sizes[rb + 1];
  };
  for (int64_t bi = 0; bi < nb; ++bi) {
    const auto bidx = cpu_test::unravel(bi, batch);
    const double* pq = rq.v.data() + base(rq, bidx);
    const double* pk = rk.v.data() + base(rk, bidx);
    const double* pv = rv.v.data() + base(rv, bidx);
    const double* pm = nullptr;
    int64_t m_sl = 0, m_ss = 0;
    if (mask) {
      std::vector<int64_t> ms = rm.sizes;
      while (ms.size() < 2) ms.insert(ms.begin(), 1);
      Ref r2 = rm;
      r2.sizes = ms;
      pm = rm.v.data() + base(r2, bidx);
      m_sl = ms[ms.size() - 2] == 1 ? 0 : ms.back();
      m_ss = ms.back() == 1 ? 0 : 1;
    }
    for (int64_t i = 0; i < l; ++i) {
      std::vector<double> w(static_cast<size_t>(s));
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < s; ++j) {
        double d = 0;
        for (int64_t c = 0; c < e; ++c) d += pq[i * e + c] * pk[j * e + c];
        d *= sc;
        if (causal && j > i) d = -std::numeric_limits<double>::infinity();
        if (pm) {
          const double mv = pm[i * m_sl + j * m_ss];
          if (mask->dtype() == kBool) {
            if (mv == 0) d += -std::numeric_limits<double>::infinity();
          } else {
            d += mv;
          }
        }
        w[size_t(j)] = d;
        m = std::isnan(m) || std::isnan(d) ? std::numeric_limits<double>::quiet_NaN() : std::max(m, d);
      }
      double z = 0;
      if (m == -std::numeric_limits<double>::infinity()) {
        std::fill(w.begin(), w.end(), 0.0);
        z = 1;
      } else {
        for (auto& x : w) z += (x = std::exp(x - m));
      }
      for (int64_t c = 0; c < ev; ++c) {
        double a = 0;
        for (int64_t j = 0; j < s; ++j) a += w[size_t(j)] * pv[j * ev + c];
        out.push_back(a / z);
      }
    }
  }
  return out;
}

Tensor sdpa_math(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& mask, bool causal,
                 std::optional<double> scale) {
  Dispatcher& d = Dispatcher::instance();
  Stack args{q, k, v, mask, causal};
  if (scale) args.push_back(*scale);
  else args.push_back(std::monostate{});
  Stack out = d.call_boxed(d.op("_sdpa_math"), std::move(args));
  return std::get<Tensor>(out.at(0));
}

Tol attn_tol(DType d) {
  switch (d) {
    case kFloat64: return {1e-10, 1e-10};
    case kFloat32: return {1e-4, 2e-5};
    case kFloat16: return {5e-3, 3e-3};
    default: return {3e-2, 2e-2};
  }
}

struct Case {
  Case(std::vector<int64_t> q_, std::vector<int64_t> k_, std::vector<int64_t> v_, bool causal_ = false)
      : q(std::move(q_)), k(std::move(k_)), v(std::move(v_)), causal(causal_) {}
  std::vector<int64_t> q, k, v;
  bool causal = false;
  std::optional<double> scale;
  int mask = 0;  // 0 none, 1 bool, 2 float
  std::vector<int64_t> mask_shape;
};

// A bool mask that keeps at least one key per query row (j == i % S) so that no row is all -inf.
Tensor bool_mask(const std::vector<int64_t>& shape) {
  Tensor r = random_tensor(shape, kFloat64, 0, 1);
  const Ref rr = read(r);
  std::vector<bool> keep(rr.v.size());
  const int64_t s = shape.back(), l = shape[shape.size() - 2];
  for (size_t i = 0; i < rr.v.size(); ++i) {
    const int64_t j = int64_t(i) % s, row = (int64_t(i) / s) % l;
    keep[i] = rr.v[i] < 0.6 || j == row % s;
  }
  return tensor(keep, shape);
}

void run_case(const Case& c, DType d) {
  SCOPED_TRACE(seed_trace());
  Tensor q = random_tensor(c.q, d), k = random_tensor(c.k, d), v = random_tensor(c.v, d);
  std::optional<Tensor> mask;
  if (c.mask == 1) mask = bool_mask(c.mask_shape);
  if (c.mask == 2) mask = random_tensor(c.mask_shape, d, -3, 1);
  Tensor flash = scaled_dot_product_attention(q, k, v, mask, c.causal, c.scale);
  Tensor math = sdpa_math(q, k, v, mask, c.causal, c.scale);
  std::vector<int64_t> os(flash.sizes().begin(), flash.sizes().end());
  ASSERT_EQ(flash.sizes(), math.sizes());
  const auto want = ref_sdpa(q, k, v, mask, c.causal, c.scale, os);
  const std::string what = std::string(dtype_name(d)) + (c.causal ? " causal" : "") +
                           (c.mask == 1 ? " bool mask" : c.mask == 2 ? " float mask" : "") + (c.scale ? " scale" : "");
  EXPECT_TRUE(close(flash, want, attn_tol(d), "flash " + what));
  EXPECT_TRUE(close(math, want, attn_tol(d), "math " + what));
  // Flash against math directly (both computed by the plugin).
  const Ref rm = read(math);
  EXPECT_TRUE(close(flash, rm.v, attn_tol(d), "flash vs math " + what));
}

const DType kAttnTypes[] = {kFloat32, kBFloat16, kFloat16, kFloat64};

TEST(CpuSdpa, PlainOddLengths) {
  // L and S not multiples of the query (64) or key (256) blocks; S > one key block.
  for (DType d : kAttnTypes) run_case(Case({2, 3, 77, 64}, {2, 3, 301, 64}, {2, 3, 301, 40}), d);
}

TEST(CpuSdpa, Causal) {
  for (DType d : kAttnTypes) {
    run_case(Case({1, 2, 130, 32}, {1, 2, 130, 32}, {1, 2, 130, 32}, true), d);
    run_case(Case({2, 70, 16}, {2, 300, 16}, {2, 300, 8}, true), d);  // 3-D, S > L (top-left aligned)
  }
}

TEST(CpuSdpa, BoolMask) {
  for (DType d : kAttnTypes) {
    Case c({2, 2, 45, 24}, {2, 2, 270, 24}, {2, 2, 270, 24});
    c.mask = 1;
    c.mask_shape = {45, 270};  // broadcast over batch and heads
    run_case(c, d);
    c.mask_shape = {2, 1, 45, 270};  // per batch, broadcast over heads
    run_case(c, d);
  }
}

TEST(CpuSdpa, FloatMaskAndCustomScale) {
  for (DType d : kAttnTypes) {
    Case c({1, 3, 66, 48}, {1, 3, 99, 48}, {1, 3, 99, 48});
    c.mask = 2;
    c.mask_shape = {1, 3, 66, 99};
    c.scale = 0.37;
    run_case(c, d);
    Case s({2, 1, 33, 20}, {2, 1, 33, 20}, {2, 1, 33, 20});
    s.scale = 1.5;
    run_case(s, d);
  }
}

// PyTorch accepts a float32 additive mask for every floating query dtype and adds it in float32
// to the float32 scores (checked with 2.15, math and flash backends): the mask is not rounded to
// the query's dtype first. The mask 64 + u keeps u exactly in float32 but rounds it away in bf16
// (steps of 0.5 at 64) and f16 (steps of 1/16): the reference with the rounded mask must not match.
TEST(CpuSdpa, Float32MaskWithHalfQueries) {
  for (DType d : {kBFloat16, kFloat16}) {
    for (const std::vector<int64_t>& ms : {std::vector<int64_t>{37, 83}, std::vector<int64_t>{2, 3, 37, 83}}) {
      SCOPED_TRACE(seed_trace());
      const std::string what = std::string(dtype_name(d)) + " query, float32 mask " + (ms.size() == 2 ? "[L, S]" : "[B, H, L, S]");
      Tensor q = random_tensor({2, 3, 37, 40}, d), k = random_tensor({2, 3, 83, 40}, d),
             v = random_tensor({2, 3, 83, 24}, d);
      Tensor mask = random_tensor(ms, kFloat32, 62, 66);
      Tensor flash = scaled_dot_product_attention(q, k, v, mask);
      Tensor math = sdpa_math(q, k, v, mask, false, std::nullopt);
      ASSERT_EQ(flash.dtype(), d);
      ASSERT_EQ(math.dtype(), d);
      const std::vector<int64_t> os{2, 3, 37, 24};
      const auto want = ref_sdpa(q, k, v, mask, false, std::nullopt, os);
      EXPECT_TRUE(close(flash, want, attn_tol(d), "flash " + what));
      EXPECT_TRUE(close(math, want, attn_tol(d), "math " + what));
      const auto rounded = ref_sdpa(q, k, v, cpu_test::cast(mask, d), false, std::nullopt, os);
      EXPECT_FALSE(close(flash, rounded, attn_tol(d), "flash " + what + " against the mask rounded to the query's dtype"));
      EXPECT_FALSE(close(math, rounded, attn_tol(d), "math " + what + " against the mask rounded to the query's dtype"));
    }
  }
}

// float64 queries take a float32 mask too (PyTorch: added exactly, in double).
TEST(CpuSdpa, Float32MaskWithFloat64Query) {
  SCOPED_TRACE(seed_trace());
  Tensor q = random_tensor({2, 19, 16}, kFloat64), k = random_tensor({2, 29, 16}, kFloat64),
         v = random_tensor({2, 29, 8}, kFloat64);
  Tensor mask = random_tensor({19, 29}, kFloat32, -3, 1);
  const auto want = ref_sdpa(q, k, v, mask, false, std::nullopt, {2, 19, 8});
  EXPECT_TRUE(close(scaled_dot_product_attention(q, k, v, mask), want, attn_tol(kFloat64), "flash float64"));
  EXPECT_TRUE(close(sdpa_math(q, k, v, mask, false, std::nullopt), want, attn_tol(kFloat64), "math float64"));
}

// The mask dtypes PyTorch refuses: neither bool, nor float32, nor the query's dtype. The message
// names the given dtype and the accepted ones, and the next call works.
TEST(CpuSdpa, RefusedMaskDtypesNameWhatIsAccepted) {
  const std::pair<DType, DType> refused[] = {
      {kFloat32, kFloat64}, {kBFloat16, kFloat16}, {kFloat16, kBFloat16}, {kFloat32, kBFloat16},
      {kFloat32, kInt32},   {kBFloat16, kFloat64}, {kFloat32, kUInt8}};
  for (const auto& [qd, md] : refused) {
    Tensor q = random_tensor({1, 2, 4, 8}, qd);
    Tensor mask = random_tensor({4, 4}, md);
    std::string msg;
    try {
      scaled_dot_product_attention(q, q, q, mask);
    } catch (const Error& e) {
      msg = e.what();
    }
    const std::string want = std::string("attn_mask has dtype ") + std::string(dtype_name(md)) +
                             "; expected bool, float32 or the query's dtype " + std::string(dtype_name(qd));
    EXPECT_NE(msg.find(want), std::string::npos) << "query " << dtype_name(qd) << ", mask " << dtype_name(md)
                                                 << ": got '" << msg << "'";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  Tensor q = random_tensor({1, 2, 4, 8}, kBFloat16);
  EXPECT_EQ(scaled_dot_product_attention(q, q, q, random_tensor({4, 4}, kFloat32)).dtype(), kBFloat16);
}

// Integer and bool attention is refused before any kernel, as in PyTorch ("expected scalar type
// Float but found Long"); it used to be computed in float32.
TEST(CpuSdpa, IntegerAndBoolQueriesAreRefused) {
  for (const Tensor& q : {full({1, 2, 4, 8}, int64_t(1)), full({1, 2, 4, 8}, int32_t(2)), full({1, 2, 4, 8}, true)}) {
    std::string msg;
    try {
      scaled_dot_product_attention(q, q, q);
    } catch (const Error& e) {
      msg = e.what();
    }
    const std::string want = std::string("query, key and value have dtype ") + std::string(dtype_name(q.dtype())) +
                             "; expected a floating dtype";
    EXPECT_NE(msg.find(want), std::string::npos) << "got '" << msg << "'";
  }
  Tensor q = random_tensor({1, 2, 4, 8}, kFloat16);
  EXPECT_EQ(scaled_dot_product_attention(q, q, q).dtype(), kFloat16);
}

TEST(CpuSdpa, BroadcastKeyValueAndStridedQuery) {
  SCOPED_TRACE(seed_trace());
  // Query in [B, L, H, E] memory viewed as [B, H, L, E] (how a model splits heads); key/value
  // shared by every head (size-1 head dim).
  Tensor q = random_tensor({2, 50, 4, 32}, kFloat32).transpose(1, 2);
  Tensor k = random_tensor({2, 1, 90, 32}, kFloat32), v = random_tensor({2, 1, 90, 16}, kFloat32);
  Tensor flash = scaled_dot_product_attention(q, k, v);
  ASSERT_EQ(flash.sizes(), IntArrayRef({2, 4, 50, 16}));
  std::vector<int64_t> os(flash.sizes().begin(), flash.sizes().end());
  const auto want = ref_sdpa(q, k, v, std::nullopt, false, std::nullopt, os);
  EXPECT_TRUE(close(flash, want, attn_tol(kFloat32), "flash strided/broadcast"));
  EXPECT_TRUE(close(sdpa_math(q, k, v, std::nullopt, false, std::nullopt), want, attn_tol(kFloat32), "math strided/broadcast"));
}

TEST(CpuSdpa, EveryOperandExpandedOverHeads) {
  SCOPED_TRACE(seed_trace());
  // Stride-0 head dim in query, key and value alike: the math path's batched matmuls must still
  // produce every head.
  Tensor q = random_tensor({2, 1, 19, 16}, kFloat32).expand({2, 3, 19, 16});
  Tensor k = random_tensor({2, 1, 23, 16}, kFloat32).expand({2, 3, 23, 16});
  Tensor v = random_tensor({2, 1, 23, 8}, kFloat32).expand({2, 3, 23, 8});
  Tensor flash = scaled_dot_product_attention(q, k, v);
  std::vector<int64_t> os(flash.sizes().begin(), flash.sizes().end());
  const auto want = ref_sdpa(q, k, v, std::nullopt, false, std::nullopt, os);
  EXPECT_TRUE(close(flash, want, attn_tol(kFloat32), "flash expanded"));
  EXPECT_TRUE(close(sdpa_math(q, k, v, std::nullopt, false, std::nullopt), want, attn_tol(kFloat32), "math expanded"));
}

TEST(CpuSdpa, Bf16OddHeadDimsStridedAndExpandedOperands) {
  SCOPED_TRACE(seed_trace());
  // bf16 through the flash loop with odd E, odd S, Ev not a multiple of 16, a strided query and a
  // stride-0 head dim in the key.
  for (bool causal : {false, true}) {
    Tensor q = random_tensor({2, 41, 3, 33}, kBFloat16).transpose(1, 2);
    Tensor k = random_tensor({2, 1, 263, 33}, kBFloat16).expand({2, 3, 263, 33});
    Tensor v = random_tensor({2, 3, 263, 17}, kBFloat16);
    Tensor flash = scaled_dot_product_attention(q, k, v, std::nullopt, causal);
    std::vector<int64_t> os(flash.sizes().begin(), flash.sizes().end());
    const auto want = ref_sdpa(q, k, v, std::nullopt, causal, std::nullopt, os);
    EXPECT_TRUE(close(flash, want, attn_tol(kBFloat16), causal ? "bf16 causal" : "bf16"));
  }
}

// Edges of the flash kernel's blocking (64 queries, 256 keys, key and value panels of 32 columns):
// one query, one key, lengths one past a block, head dims that are not multiples of 16 or cross a
// panel.
TEST(CpuSdpa, BlockingEdges) {
  for (DType d : {kFloat32, kBFloat16}) {
    run_case(Case({1, 1, 1, 16}, {1, 1, 1, 16}, {1, 1, 1, 16}), d);          // L = S = 1
    run_case(Case({2, 1, 20}, {2, 1, 20}, {2, 1, 12}), d);                    // L = S = 1, 3-D
    run_case(Case({1, 2, 1, 24}, {1, 2, 300, 24}, {1, 2, 300, 24}), d);       // L = 1
    run_case(Case({1, 2, 300, 20}, {1, 2, 1, 20}, {1, 2, 1, 12}), d);         // S = 1
    run_case(Case({1, 3, 65, 33}, {1, 3, 33, 33}, {1, 3, 33, 40}), d);        // E = 33, Ev = 40
    run_case(Case({1, 2, 129, 16}, {1, 2, 257, 16}, {1, 2, 257, 72}), d);     // S = 257, Ev = 72
    run_case(Case({1, 1, 64, 64}, {1, 1, 512, 64}, {1, 1, 512, 64}), d);      // exact multiples
    run_case(Case({1, 2, 70, 8}, {1, 2, 31, 8}, {1, 2, 31, 5}), d);           // S < one panel
  }
}

TEST(CpuSdpa, CausalWithUnequalLengths) {
  // Top-left aligned: query i sees keys j <= i; with L > S the rows i >= S - 1 see every key.
  for (DType d : kAttnTypes) {
    run_case(Case({1, 2, 40, 24}, {1, 2, 300, 24}, {1, 2, 300, 24}, true), d);   // L < S
    run_case(Case({1, 2, 300, 24}, {1, 2, 40, 24}, {1, 2, 40, 24}, true), d);    // L > S
    run_case(Case({1, 1, 257, 20}, {1, 1, 31, 20}, {1, 1, 31, 12}, true), d);    // L > S, odd blocks
    run_case(Case({1, 1, 1, 16}, {1, 1, 5, 16}, {1, 1, 5, 16}, true), d);        // L = 1: key 0 only
  }
}

TEST(CpuSdpa, ManyHeadsFewRows) {
  for (DType d : {kFloat32, kBFloat16}) {
    run_case(Case({3, 16, 3, 24}, {3, 16, 5, 24}, {3, 16, 5, 24}), d);
    run_case(Case({2, 24, 2, 40}, {2, 24, 2, 40}, {2, 24, 2, 40}, true), d);
  }
}

TEST(CpuSdpa, F32KeyAndValueNotInDenseRows) {
  SCOPED_TRACE(seed_trace());
  // A key whose features are strided (a transposed [E, S] tensor) and a value viewed out of
  // [B, S, H, Ev] memory: the packed path, against the dense operands' direct one.
  for (bool causal : {false, true}) {
    Tensor q = random_tensor({2, 3, 90, 40}, kFloat32);
    Tensor k = random_tensor({2, 3, 40, 270}, kFloat32).transpose(2, 3);
    Tensor v = random_tensor({2, 270, 3, 36}, kFloat32).transpose(1, 2);
    Tensor flash = scaled_dot_product_attention(q, k, v, std::nullopt, causal);
    std::vector<int64_t> os(flash.sizes().begin(), flash.sizes().end());
    const auto want = ref_sdpa(q, k, v, std::nullopt, causal, std::nullopt, os);
    EXPECT_TRUE(close(flash, want, attn_tol(kFloat32), causal ? "strided k/v causal" : "strided k/v"));
    const Ref dense = read(scaled_dot_product_attention(q, k.contiguous(), v.contiguous(), std::nullopt, causal));
    EXPECT_TRUE(close(flash, dense.v, attn_tol(kFloat32), "strided vs dense k/v"));
    // Key rows contiguous but H * E floats apart (heads split out of [B, S, H, E]).
    Tensor k2 = random_tensor({2, 270, 3, 40}, kFloat32).transpose(1, 2);
    Tensor flash2 = scaled_dot_product_attention(q, k2, v, std::nullopt, causal);
    const auto want2 = ref_sdpa(q, k2, v, std::nullopt, causal, std::nullopt, os);
    EXPECT_TRUE(close(flash2, want2, attn_tol(kFloat32), causal ? "head-split k causal" : "head-split k"));
  }
}

TEST(CpuSdpa, RowsMaskedOutOfEarlyKeyBlocks) {
  // Rows whose first key blocks are fully masked: the online softmax starts from -inf there and
  // picks up at the first live key (key block 2 of 2, and the very last key).
  const int64_t l = 5, s = 300;
  for (DType d : {kFloat32, kBFloat16, kFloat64}) {
    SCOPED_TRACE(seed_trace());
    std::vector<bool> keep(size_t(l * s), true);
    for (int64_t j = 0; j < 280; ++j) keep[size_t(1 * s + j)] = false;
    for (int64_t j = 0; j < s - 1; ++j) keep[size_t(3 * s + j)] = false;
    const Tensor mask = tensor(keep, {l, s});
    Tensor q = random_tensor({2, l, 24}, d), k = random_tensor({2, s, 24}, d), v = random_tensor({2, s, 20}, d);
    Tensor flash = scaled_dot_product_attention(q, k, v, mask);
    std::vector<int64_t> os(flash.sizes().begin(), flash.sizes().end());
    const auto want = ref_sdpa(q, k, v, mask, false, std::nullopt, os);
    EXPECT_TRUE(close(flash, want, attn_tol(d), "masked early blocks " + std::string(dtype_name(d))));
  }
}

// PyTorch gives 0 for every output of a query row whose keys are all masked (Note [Fully masked
// attention rows] in plugins/cpu/nn/attention.cpp). L = 150 spans three query blocks of 64 and
// S = 700 three key blocks of 256 (the last one partial). Fully masked rows sit in the first, a
// middle and the last query block; other rows lose a whole key block (first, middle, last) or keep
// a single key in one of them, and must come out as plain softmax.
TEST(CpuSdpa, FullyMaskedRowsAreZero) {
  const int64_t b = 2, h = 3, l = 150, s = 700, e = 24, ev = 20;
  const std::vector<int64_t> dead_rows = {0, 70, l - 1};
  std::vector<bool> keep(size_t(l * s));
  {
    const Ref r = read(random_tensor({l, s}, kFloat64, 0, 1));
    for (int64_t i = 0; i < l; ++i)
      for (int64_t j = 0; j < s; ++j) keep[size_t(i * s + j)] = r.v[size_t(i * s + j)] < 0.6 || j == i;
  }
  auto set_row = [&](int64_t i, int64_t j0, int64_t j1, bool v) {
    for (int64_t j = j0; j < j1; ++j) keep[size_t(i * s + j)] = v;
  };
  for (int64_t i : dead_rows) set_row(i, 0, s, false);
  set_row(5, 0, 256, false);    // first key block masked
  set_row(6, 256, 512, false);  // middle key block masked
  set_row(7, 512, s, false);    // last (partial) key block masked
  const std::pair<int64_t, int64_t> lone[] = {{8, 3}, {9, 300}, {10, s - 1}, {71, 511}};
  for (auto [i, j] : lone) {
    set_row(i, 0, s, false);
    keep[size_t(i * s + j)] = true;
  }
  for (DType d : kAttnTypes) {
    SCOPED_TRACE(seed_trace());
    const Tensor q = random_tensor({b, h, l, e}, d), k = random_tensor({b, h, s, e}, d),
                 v = random_tensor({b, h, s, ev}, d);
    // Batch 0 of the [B, 1, L, S] mask keeps the dead rows alive: only batch 1 has them.
    std::vector<bool> keep_b(keep);
    keep_b.insert(keep_b.begin(), keep.begin(), keep.end());
    for (int64_t i : dead_rows) std::fill_n(keep_b.begin() + i * s, s, true);
    // Additive mask: finite values where kept, -inf elsewhere.
    std::vector<double> add(keep.size());
    const Ref noise = read(random_tensor({l, s}, kFloat64, -2, 0));
    for (size_t x = 0; x < add.size(); ++x)
      add[x] = keep[x] ? round_to(noise.v[x], d) : -std::numeric_limits<double>::infinity();
    std::vector<bool> row_keep(size_t(l), true);
    for (int64_t i : dead_rows) row_keep[size_t(i)] = false;
    const std::pair<std::string, Tensor> masks[] = {
        {"bool [L, S]", tensor(keep, {l, s})},
        {"bool [B, 1, L, S]", tensor(keep_b, {b, 1, l, s})},
        {"float [L, S]", tensor(add, {l, s}).to(d)},
        {"bool [L, 1]", tensor(row_keep, {l, 1})},
    };
    for (const auto& [name, mask] : masks) {
      const std::string what = std::string(dtype_name(d)) + " " + name;
      const bool batch1_only = name == "bool [B, 1, L, S]";
      const auto want = ref_sdpa(q, k, v, mask, false, std::nullopt, {b, h, l, ev});
      for (int path = 0; path < 2; ++path) {
        const Tensor got =
            path == 0 ? scaled_dot_product_attention(q, k, v, mask) : sdpa_math(q, k, v, mask, false, {});
        const std::string pw = (path == 0 ? "flash " : "math ") + what;
        EXPECT_TRUE(close(got, want, attn_tol(d), pw));
        const Ref g = read(got);
        for (int64_t bh = 0; bh < b * h; ++bh)
          for (int64_t i : dead_rows)
            for (int64_t c = 0; c < ev; ++c) {
              const double x = g.v[size_t((bh * l + i) * ev + c)];
              if (batch1_only && bh < h)
                EXPECT_NE(x, 0.0) << pw << " batch 0 row " << i << " is not masked";
              else
                EXPECT_EQ(x, 0.0) << pw << " head " << bh << " row " << i << " col " << c;
            }
      }
    }
  }
}

// S == 0: every row is fully masked, the output is 0 (PyTorch), on both paths.
TEST(CpuSdpa, NoKeysGivesZeros) {
  for (DType d : kAttnTypes) {
    const Tensor q = random_tensor({2, 5, 8}, d), k = random_tensor({2, 0, 8}, d),
                 v = random_tensor({2, 0, 6}, d);
    const std::vector<double> zero(2 * 5 * 6, 0.0);
    EXPECT_EQ(read(scaled_dot_product_attention(q, k, v)).v, zero) << dtype_name(d);
    EXPECT_EQ(read(sdpa_math(q, k, v, std::nullopt, false, std::nullopt)).v, zero) << dtype_name(d);
  }
}

TEST(CpuSdpa, MaskWithCausalIsAnError) {
  Tensor q = random_tensor({1, 4, 8}, kFloat32);
  EXPECT_THROW(scaled_dot_product_attention(q, q, q, bool_mask({4, 4}), true), Error);
}

}  // namespace
}  // namespace tessera
