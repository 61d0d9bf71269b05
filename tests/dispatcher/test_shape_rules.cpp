// Shape rules (the templates of shape_rules.h at int64_t) and the dtype rules of the catalogue,
// observed through dispatch with a recording kernel.
#include <gtest/gtest.h>

#include "shape_rules.h"
#include "tessera/ops.h"
#include "test_kernels.h"

namespace tessera {
namespace {

using testing::k_noop;
using testing::last_seen;
using testing::ScopedKernel;
using V = std::vector<int64_t>;

V vec(const shape::Sizes<int64_t>& s) { return V(s.begin(), s.end()); }
V vec(IntArrayRef s) { return s.vec(); }

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

class ShapeRules : public ::testing::Test {
 protected:
  void SetUp() override { testing::setup_test_backends(); }
};

TEST_F(ShapeRules, Broadcast) {
  EXPECT_EQ(vec(shape::broadcast<int64_t>("add", V{2, 1, 3}, V{4, 3})), (V{2, 4, 3}));
  EXPECT_EQ(vec(shape::broadcast<int64_t>("add", V{}, V{5})), (V{5}));
  EXPECT_EQ(vec(shape::broadcast<int64_t>("add", V{0, 1}, V{1, 7})), (V{0, 7}));
  EXPECT_EQ(
      error_of([] {
        shape::broadcast<int64_t>("add", V{2, 3}, V{4});
      }),
      "add: shapes [2, 3] and [4] are not broadcastable (size 3 != 4 at dimension 1 from the left); make "
      "them equal or 1");
}

TEST_F(ShapeRules, Matmul) {
  EXPECT_EQ(vec(shape::matmul<int64_t>("matmul", V{3}, V{3})), V{});
  EXPECT_EQ(vec(shape::matmul<int64_t>("matmul", V{2, 3}, V{3, 5})), (V{2, 5}));
  EXPECT_EQ(vec(shape::matmul<int64_t>("matmul", V{3}, V{2, 3, 4})), (V{2, 4}));
  EXPECT_EQ(vec(shape::matmul<int64_t>("matmul", V{2, 3, 4}, V{4})), (V{2, 3}));
  EXPECT_EQ(vec(shape::matmul<int64_t>("matmul", V{3}, V{3, 4})), (V{4}));
  EXPECT_EQ(vec(shape::matmul<int64_t>("matmul", V{2, 1, 3, 4}, V{5, 4, 6})), (V{2, 5, 3, 6}));
  EXPECT_EQ(vec(shape::matmul<int64_t>("matmul", V{3, 4}, V{7, 4, 6})), (V{7, 3, 6}));
  std::string e = error_of([] { shape::matmul<int64_t>("matmul", V{2, 3}, V{4, 5}); });
  EXPECT_EQ(e.rfind("matmul: size mismatch, got 2x3 and 4x5 (3 != 4)", 0), 0u) << e;
  EXPECT_NE(error_of([] { shape::matmul<int64_t>("matmul", V{}, V{4}); }).find("at least 1 dimension"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              shape::matmul<int64_t>("matmul", V{2, 2, 3}, V{3, 3, 1});
            }).find("not broadcastable"),
            std::string::npos);
}

TEST_F(ShapeRules, Reductions) {
  EXPECT_EQ(vec(shape::reduce<int64_t>("sum", V{2, 3, 4}, V{1}, false)), (V{2, 4}));
  EXPECT_EQ(vec(shape::reduce<int64_t>("sum", V{2, 3, 4}, V{1}, true)), (V{2, 1, 4}));
  EXPECT_EQ(vec(shape::reduce<int64_t>("sum", V{2, 3, 4}, V{}, false)), V{});
  EXPECT_EQ(vec(shape::reduce<int64_t>("sum", V{2, 3, 4}, V{}, true)), (V{1, 1, 1}));
  EXPECT_EQ(vec(shape::reduce<int64_t>("sum", V{2, 3, 4}, V{-1, 0}, false)), (V{3}));
  EXPECT_NE(error_of([] {
              shape::reduce<int64_t>("sum", V{2, 3}, V{1, -1}, false);
            }).find("appears twice"),
            std::string::npos);
  EXPECT_EQ(error_of([] {
              shape::reduce<int64_t>("sum", V{2, 3}, V{2}, false);
            }),
            "sum: dimension out of range (expected to be in range of [-2, 1], but got 2)");
}

TEST_F(ShapeRules, ConvAndPool) {
  int64_t s2[2] = {2, 2}, s1[2] = {1, 1}, p1[2] = {1, 1}, p0[2] = {0, 0}, d1[2] = {1, 1}, d2[2] = {2, 2},
          k3[2] = {3, 3};
  EXPECT_EQ(vec(shape::conv2d<int64_t>("conv2d", V{1, 3, 32, 32}, V{8, 3, 3, 3}, s2, p1, d1, 1)),
            (V{1, 8, 16, 16}));
  EXPECT_EQ(vec(shape::conv2d<int64_t>("conv2d", V{1, 3, 32, 32}, V{8, 3, 3, 3}, s1, p1, d2, 1)),
            (V{1, 8, 30, 30}));
  EXPECT_EQ(vec(shape::conv2d<int64_t>("conv2d", V{3, 10, 12}, V{6, 1, 3, 5}, s1, p0, d1, 3)), (V{6, 8, 8}));
  EXPECT_EQ(error_of([] {
              int64_t s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1};
              shape::conv2d<int64_t>("conv2d", V{1, 4, 8, 8}, V{8, 3, 3, 3}, s, p, d, 1);
            }),
            "conv2d: input has 4 channels but weight of shape [8, 3, 3, 3] with groups=1 expects 3");
  EXPECT_NE(error_of([] {
              int64_t s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1};
              shape::conv2d<int64_t>("conv2d", V{1, 3, 2, 2}, V{8, 3, 3, 3}, s, p, d, 1);
            }).find("smaller than the dilated kernel extent 3"),
            std::string::npos);
  EXPECT_EQ(vec(shape::pool2d<int64_t>("max_pool2d", V{1, 3, 7, 7}, k3, s2, p0, d1)), (V{1, 3, 3, 3}));
  EXPECT_EQ(vec(shape::pool2d<int64_t>("max_pool2d", V{3, 8, 8}, k3, s2, p1, d1)), (V{3, 4, 4}));
}

TEST_F(ShapeRules, CatStackAttention) {
  V a{2, 3}, b{2, 5};
  IntArrayRef ab[] = {a, b};
  EXPECT_EQ(vec(shape::cat<int64_t>("cat", ab, 2, 1)), (V{2, 8}));
  EXPECT_NE(error_of([&] { shape::cat<int64_t>("cat", ab, 2, 0); }).find("Expected size 3 but got size 5"),
            std::string::npos);
  IntArrayRef aa[] = {a, a, a};
  EXPECT_EQ(vec(shape::stack<int64_t>("stack", aa, 3, 1)), (V{2, 3, 3}));
  EXPECT_EQ(vec(shape::stack<int64_t>("stack", aa, 3, -1)), (V{2, 3, 3}));
  EXPECT_NE(error_of([&] { shape::stack<int64_t>("stack", ab, 2, 0); }).find("equal size"),
            std::string::npos);
  EXPECT_EQ(vec(shape::attention<int64_t>("sdpa", V{2, 4, 5, 8}, V{2, 4, 7, 8}, V{2, 4, 7, 6})),
            (V{2, 4, 5, 6}));
}

// ---- dtype rules through dispatch

TEST_F(ShapeRules, BinaryPromotion) {
  ScopedKernel k("add.Tensor", kCPU, k_noop);
  Tensor i32 = empty({2, 3}, kInt32), f32 = empty({3}, kFloat32), f64 = empty({3}, kFloat64);
  Tensor out = add(i32, f32);
  EXPECT_EQ(out.dtype(), kFloat32);
  EXPECT_EQ(vec(out.sizes()), (V{2, 3}));
  EXPECT_EQ(last_seen().input_dtypes, (std::vector<int32_t>{int32_t(kFloat32), int32_t(kFloat32)}));
  EXPECT_EQ(add(f32, f64).dtype(), kFloat64);
  EXPECT_EQ(add(empty({2}, kBool), empty({2}, kUInt8)).dtype(), kUInt8);
  EXPECT_EQ(add(empty({2}, kInt8), empty({2}, kUInt8)).dtype(), kInt16);
  // 0-dim tensors and wrapped numbers only raise the category.
  EXPECT_EQ(add(f32, empty({}, kFloat64)).dtype(), kFloat32);
  EXPECT_EQ(add(empty({3}, kInt8), empty({}, kInt64)).dtype(), kInt8);
  EXPECT_EQ(add(empty({3}, kInt8), empty({}, kFloat64)).dtype(), kFloat64);
  EXPECT_EQ((i32 + 2).dtype(), kInt32);
  EXPECT_EQ((i32 + 2.5).dtype(), kFloat32);
  EXPECT_EQ((empty({2}, kBool) + 1).dtype(), kInt64);
  EXPECT_EQ((f64 + 1.5).dtype(), kFloat64);
  EXPECT_EQ((2.5 + i32).dtype(), kFloat32);
}

TEST_F(ShapeRules, DivisionComparisonsLogicalWhere) {
  ScopedKernel kd("div.Tensor", kCPU, k_noop), ke("eq.Tensor", kCPU, k_noop), kl("logical_and", kCPU, k_noop),
      kw("where.self", kCPU, k_noop);
  Tensor i32 = empty({4}, kInt32), i64 = empty({4}, kInt64);
  EXPECT_EQ(div(i32, i64).dtype(), kFloat32);
  EXPECT_EQ(last_seen().input_dtypes, (std::vector<int32_t>{int32_t(kFloat32), int32_t(kFloat32)}));
  EXPECT_EQ((i32 / 2).dtype(), kFloat32);
  EXPECT_EQ(div(empty({4}, kFloat64), i32).dtype(), kFloat64);
  EXPECT_EQ(eq(i32, empty({4}, kFloat32)).dtype(), kBool);
  EXPECT_EQ(last_seen().input_dtypes, (std::vector<int32_t>{int32_t(kFloat32), int32_t(kFloat32)}));
  EXPECT_EQ(logical_and(i32, empty({4}, kBool)).dtype(), kBool);
  Tensor w = where(empty({2, 1}, kBool), i32, empty({}, kFloat64));
  EXPECT_EQ(w.dtype(), kFloat64);  // the 0-dim float raises int32 to float: PyTorch gives the 0-dim's dtype
  EXPECT_EQ(vec(w.sizes()), (V{2, 4}));
  EXPECT_EQ(error_of([&] { where(i32, i32, i32); }),
            "where.self: condition must be a bool tensor, got int32; build it with a comparison (e.g. gt) or "
            ".to(kBool)");
  EXPECT_NE(error_of([] { sub(empty({2}, kBool), empty({2}, kBool)); }).find("Subtraction, the `-` operator, with a bool tensor"),
            std::string::npos);
}

TEST_F(ShapeRules, UnaryAndReductionDtypes) {
  ScopedKernel k1("exp", kCPU, k_noop), k2("sum", kCPU, k_noop), k3("argmax", kCPU, k_noop),
      k4("amax", kCPU, k_noop);
  EXPECT_EQ(exp(empty({3}, kInt32)).dtype(), kFloat32);
  EXPECT_EQ(last_seen().input_dtypes, std::vector<int32_t>{int32_t(kFloat32)});
  EXPECT_EQ(exp(empty({3}, kFloat64)).dtype(), kFloat64);
  EXPECT_EQ(sum(empty({3}, kInt32)).dtype(), kInt64);
  EXPECT_EQ(sum(empty({3}, kBool)).dtype(), kInt64);
  EXPECT_EQ(sum(empty({3, 4}, kFloat32), {1}, true).sizes().vec(), (V{3, 1}));
  EXPECT_EQ(last_seen().attr_kinds, (std::vector<int32_t>{TESSERA_VALUE_INT_LIST, TESSERA_VALUE_BOOL}));
  Tensor am = argmax(empty({3, 4}, kFloat32), 1);
  EXPECT_EQ(am.dtype(), kInt64);
  EXPECT_EQ(vec(am.sizes()), V{3});
  EXPECT_EQ(argmax(empty({3, 4}, kFloat32)).dim(), 0);
  EXPECT_EQ(last_seen().attr_kinds, (std::vector<int32_t>{TESSERA_VALUE_NONE, TESSERA_VALUE_BOOL}));
  EXPECT_EQ(error_of([] { mean(empty({3}, kInt64)); }),
            "mean: expected a floating input, got int64; convert with .to(kFloat32) first");
  EXPECT_NE(error_of([] {
              amax(empty({0, 3}, kFloat32), {0});
            }).find("cannot reduce over dimension 0 of size 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { neg(empty({2}, kBool)); }).find("not supported for bool"), std::string::npos);
}

TEST_F(ShapeRules, InPlaceRules) {
  ScopedKernel k("add_.Tensor", kCPU, k_noop);
  Tensor f = empty({2, 3}, kFloat32);
  Tensor& r = f.add_(empty({3}, kInt32));
  EXPECT_TRUE(r.is_same(f));
  EXPECT_EQ(last_seen().input_dtypes, (std::vector<int32_t>{int32_t(kFloat32), int32_t(kFloat32)}));
  EXPECT_EQ(last_seen().num_outputs, 1);
  Tensor i = empty({3}, kInt32);
  EXPECT_EQ(error_of([&] { i.add_(empty({3}, kFloat32)); }),
            "add_.Tensor: result type float32 can't be cast to the desired output type int32; use the "
            "out-of-place op");
  EXPECT_NE(error_of([&] {
              empty({3}, kFloat32).add_(empty({2, 3}, kFloat32));
            }).find("doesn't match the broadcast shape"),
            std::string::npos);
}

TEST_F(ShapeRules, NnOps) {
  ScopedKernel k1("matmul", kCPU, k_noop), k2("conv2d", kCPU, k_noop), k3("embedding", kCPU, k_noop),
      k4("scaled_dot_product_attention", kCPU, k_noop), k5("layer_norm", kCPU, k_noop),
      k6("index_select", kCPU, k_noop), k7("gather", kCPU, k_noop), k8("cat", kCPU, k_noop),
      k9("max_pool2d", kCPU, k_noop), k10("linear", kCPU, k_noop), k11("softmax", kCPU, k_noop);
  EXPECT_EQ(
      error_of([] {
        matmul(empty({2, 3}, kFloat32), empty({3, 2}, kFloat64));
      }),
      "matmul: expected self and other to have the same dtype, got float32 and float64; convert one with "
      ".to(float32)");
  EXPECT_EQ(vec(matmul(empty({5, 2, 3}), empty({3, 4})).sizes()), (V{5, 2, 4}));
  EXPECT_EQ(vec(conv2d(empty({2, 3, 9, 9}), empty({4, 3, 3, 3}), std::nullopt, {2}, {1}).sizes()),
            (V{2, 4, 5, 5}));
  EXPECT_EQ(last_seen().attr_kinds.size(), 4u);
  EXPECT_EQ(vec(embedding(empty({10, 4}), empty({2, 3}, kInt64)).sizes()), (V{2, 3, 4}));
  EXPECT_NE(error_of([] {
              embedding(empty({10, 4}), empty({2}, kFloat32));
            }).find("indices must be an int64 or int32"),
            std::string::npos);
  EXPECT_EQ(vec(scaled_dot_product_attention(empty({2, 5, 8}), empty({2, 7, 8}), empty({2, 7, 6})).sizes()),
            (V{2, 5, 6}));
  EXPECT_EQ(last_seen().input_dtypes.size(), 4u);
  EXPECT_EQ(last_seen().input_dtypes[3], -1);  // absent attn_mask
  EXPECT_EQ(layer_norm(empty({2, 3, 4}, kFloat16), {4}).dtype(), kFloat16);
  EXPECT_NE(error_of([] { layer_norm(empty({2, 3, 4}, kInt32), {4}); }).find("takes floating tensors only"),
            std::string::npos);
  EXPECT_EQ(error_of([] {
              layer_norm(empty({2, 3, 4}), {3});
            }),
            "layer_norm: given normalized_shape=[3], expected input with shape [*, 3], but got input of size "
            "[2, 3, 4]");
  EXPECT_EQ(vec(index_select(empty({4, 5}), 1, empty({3}, kInt64)).sizes()), (V{4, 3}));
  EXPECT_EQ(vec(gather(empty({4, 5}), 1, empty({4, 2}, kInt64)).sizes()), (V{4, 2}));
  Tensor c = cat({empty({2, 3}, kInt32), empty({2, 2}, kFloat32)}, 1);
  EXPECT_EQ(vec(c.sizes()), (V{2, 5}));
  EXPECT_EQ(c.dtype(), kFloat32);
  EXPECT_EQ(last_seen().input_dtypes, (std::vector<int32_t>{int32_t(kFloat32), int32_t(kFloat32)}));
  EXPECT_EQ(vec(max_pool2d(empty({1, 2, 8, 8}), {2}).sizes()), (V{1, 2, 4, 4}));
  EXPECT_EQ(vec(linear(empty({7, 3}), empty({5, 3}), empty({5})).sizes()), (V{7, 5}));
  EXPECT_NE(error_of([] {
              linear(empty({7, 3}), empty({5, 4}));
            }).find("has 3 features but weight"),
            std::string::npos);
  EXPECT_NE(error_of([] { softmax(empty({2, 3}), 2); }).find("dimension out of range"), std::string::npos);
}

TEST_F(ShapeRules, MetaTensorsRunOnlyTheShapeRule) {
  Device meta(DeviceType::Meta);
  Tensor a = empty({5, 2, 3}, meta), b = empty({3, 4}, meta);
  Tensor m = matmul(a, b);
  EXPECT_EQ(m.device().type(), kMeta);
  EXPECT_EQ(vec(m.sizes()), (V{5, 2, 4}));
  Tensor s = (m + 1.5).sum({0}, true);
  EXPECT_EQ(vec(s.sizes()), (V{1, 2, 4}));
  EXPECT_EQ(exp(empty({3}, dtype(kInt32).device(meta))).dtype(), kFloat32);
  Tensor to_meta = full({2, 2}, 1.0f).to(meta);
  EXPECT_EQ(to_meta.device().type(), kMeta);
  EXPECT_NE(error_of([&] { to_meta.cpu(); }).find("the source is a meta tensor, which holds no data"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              matmul(a, empty({4, 4}, meta));
            }).find("matmul: size mismatch, got 5x2x3 and 4x4 (3 != 4)"),
            std::string::npos);
}

TEST_F(ShapeRules, FactoriesAndRandom) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(vec(a.sizes()), V{5});
  EXPECT_EQ(arange(0, 1, 0.25).numel(), 4);
  EXPECT_EQ(arange(0, 1, 0.25).dtype(), kFloat32);
  EXPECT_EQ(arange(10, 0, -3).numel(), 4);
  EXPECT_NE(error_of([] { arange(0, 5, 0); }).find("step must be nonzero"), std::string::npos);
  EXPECT_NE(error_of([] { rand({3}, kInt32); }).find("expected a floating tensor"), std::string::npos);
}

}  // namespace
}  // namespace tessera
