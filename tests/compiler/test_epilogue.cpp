// Linear epilogues in generated code (Note [Linear epilogues] in plugins/cpu/nn/onednn_ops.cpp):
// linear -> relu / gelu -> add(residual) chains run as one _linear_epilogue call (a oneDNN matmul
// with post-ops), checked against naive loops in double on fresh random inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "temp_dir_util.h"
#include "tessera/compiler/codegen.h"
#include "tessera/compiler/compile.h"
#include "tessera/compiler/export.h"
#include "tessera/dispatcher.h"
#include "tessera/error.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

using namespace tessera;
using namespace tessera::compiler;
namespace fs = std::filesystem;

namespace {

tessera::compiler_test::TempDir* const kTempDir = tessera::compiler_test::add_temp_dir("tessera_epilogue_");
std::string cache_dir() { return kTempDir->path(); }

codegen::CompiledGraph compile_fn(const ExportFn& fn, const std::vector<Tensor>& inputs) {
  codegen::CodegenOptions o;
  o.cache_dir = cache_dir();
  return codegen::CompiledGraph::compile(export_program(fn, inputs), o);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

std::vector<double> values(const Tensor& t) {
  Tensor f = empty(t.sizes(), kFloat64);
  f.copy_(t);
  const double* p = f.data_ptr<double>();
  return std::vector<double>(p, p + f.numel());
}

Tensor cast(const Tensor& t, DType dt) {
  Tensor out = empty(t.sizes(), dt);
  out.copy_(t);
  return out;
}

// residual + act(x @ w^T + b) over rows of x, in double.
std::vector<double> reference(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor* residual,
                              const std::function<double(double)>& act) {
  const std::vector<double> xv = values(x), wv = values(w);
  const std::vector<double> bv = b ? values(*b) : std::vector<double>();
  const std::vector<double> rv = residual ? values(*residual) : std::vector<double>();
  const int64_t n = w.size(0), k = w.size(1), rows = x.numel() / k;
  std::vector<double> y(size_t(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double s = b ? bv[size_t(j)] : 0.0;
      for (int64_t q = 0; q < k; ++q) s += xv[size_t(r * k + q)] * wv[size_t(j * k + q)];
      s = act(s);
      y[size_t(r * n + j)] = residual ? rv[size_t(r * n + j)] + s : s;
    }
  return y;
}

double gelu_erf(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }
double gelu_tanh(double v) {
  return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}
double relu(double v) { return v < 0 ? 0.0 : v; }
double identity(double v) { return v; }

void expect_close(const Tensor& got, const std::vector<double>& want, double atol, double rtol) {
  const std::vector<double> g = values(got);
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], atol + rtol * std::fabs(want[i])) << "element " << i;
}

struct Case {
  const char* name;
  DType dtype;
  const char* activation;  // "none", "relu", "gelu", "gelu_tanh"
  bool bias, residual, residual_first;
};

class EpilogueTest : public ::testing::TestWithParam<Case> {};

TEST_P(EpilogueTest, CompiledMatchesDoubleReferenceAsOneCall) {
  const Case c = GetParam();
  manual_seed(uint64_t(std::hash<std::string>()(c.name)));
  // rows = 2 * 37 (not a multiple of any block size), 48 -> 40 features.
  const Tensor x = cast(randn({2, 37, 48}), c.dtype), w = cast(randn({40, 48}) * 0.2, c.dtype);
  const Tensor b = cast(randn({40}), c.dtype), r = cast(randn({2, 37, 40}), c.dtype);
  const std::string act = c.activation;
  auto fn = [&](const std::vector<Tensor>& in) {
    Tensor y = linear(in[0], w, c.bias ? std::optional<Tensor>(b) : std::nullopt);
    if (act == "relu") y = tessera::relu(y);
    if (act == "gelu") y = gelu(y);
    if (act == "gelu_tanh") y = gelu(y, "tanh");
    if (c.residual) y = c.residual_first ? in[1] + y : y + in[1];
    return std::vector<Tensor>{y};
  };
  const std::vector<Tensor> inputs{x, r};
  codegen::CompiledGraph cg = compile_fn(fn, inputs);
  const codegen::GeneratedSource& gen = cg.generated();
  EXPECT_EQ(count(gen.source, "{  // _linear_epilogue"), 1) << gen.source;
  EXPECT_EQ(count(gen.source, "{  // linear\n"), 0);
  EXPECT_EQ(gen.extern_nodes, 1);
  EXPECT_EQ(gen.fused_groups, 0);
  const std::vector<Tensor> out = cg.run(inputs);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype(), c.dtype);
  EXPECT_EQ(out[0].sizes().vec(), (std::vector<int64_t>{2, 37, 40}));
  std::function<double(double)> f = identity;
  if (act == "relu") f = relu;
  if (act == "gelu") f = gelu_erf;
  if (act == "gelu_tanh") f = gelu_tanh;
  // bf16: inputs are exact in bf16; the result is rounded once (relative error 2^-8) and oneDNN
  // accumulates in f32.
  const double tol = c.dtype == kBFloat16 ? 1e-2 : 1e-4;
  expect_close(out[0], reference(x, w, c.bias ? &b : nullptr, c.residual ? &r : nullptr, f), tol, tol);
}

INSTANTIATE_TEST_SUITE_P(
    Linear, EpilogueTest,
    ::testing::Values(Case{"relu_f32", kFloat32, "relu", true, false, false},
                      Case{"gelu_f32", kFloat32, "gelu", true, false, false},
                      Case{"gelu_tanh_f32", kFloat32, "gelu_tanh", true, false, false},
                      Case{"residual_f32", kFloat32, "none", true, true, true},
                      Case{"residual_second_no_bias_f32", kFloat32, "none", false, true, false},
                      Case{"gelu_residual_f32", kFloat32, "gelu", true, true, true},
                      Case{"relu_residual_no_bias_f32", kFloat32, "relu", false, true, false},
                      Case{"gelu_bf16", kBFloat16, "gelu", true, false, false},
                      Case{"gelu_residual_bf16", kBFloat16, "gelu", true, true, true},
                      Case{"residual_bf16", kBFloat16, "none", false, true, false}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// x @ w + b -> relu -> + r, and linear without bias + b -> gelu: the product, the bias add, the
// activation and the residual become one call (matmul's weight as a transposed view, no copy).
TEST(Epilogue, MatmulAndBiasAddFuse) {
  manual_seed(16);
  const Tensor x = randn({3, 20, 32}), w = randn({32, 24}) * 0.2, b = randn({24}), r = randn({3, 20, 24});
  const Tensor wl = randn({24, 32}) * 0.2;
  auto fn = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tessera::relu(matmul(in[0], w) + b) + in[1], gelu(b + linear(in[0], wl))};
  };
  codegen::CompiledGraph cg = compile_fn(fn, {x, r});
  EXPECT_EQ(count(cg.generated().source, "{  // _linear_epilogue"), 2) << cg.generated().source;
  EXPECT_EQ(cg.generated().fused_groups, 0);
  const std::vector<Tensor> out = cg.run({x, r});
  ASSERT_EQ(out.size(), 2u);
  expect_close(out[0], reference(x, w.t().contiguous(), &b, &r, relu), 1e-4, 1e-4);
  expect_close(out[1], reference(x, wl, &b, nullptr, gelu_erf), 1e-4, 1e-4);
}

// relu(conv2d(x, w, b, stride 2, padding 1)) and gelu(conv2d(x, w)) (groups 2) in double.
std::vector<double> conv_reference(const Tensor& x, const Tensor& w, const Tensor* b, int64_t stride, int64_t pad,
                                   int64_t groups, const std::function<double(double)>& act) {
  const std::vector<double> xv = values(x), wv = values(w), bv = b ? values(*b) : std::vector<double>();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t oc = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t oh = (h + 2 * pad - kh) / stride + 1, ow = (wd + 2 * pad - kw) / stride + 1;
  std::vector<double> y(size_t(n * oc * oh * ow));
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t o = 0; o < oc; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = b ? bv[size_t(o)] : 0.0;
          const int64_t g = o / (oc / groups);
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                const int64_t ih = i * stride - pad + p, iw = j * stride - pad + q;
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                s += xv[size_t(((ni * c + g * cg + ci) * h + ih) * wd + iw)] * wv[size_t(((o * cg + ci) * kh + p) * kw + q)];
              }
          y[size_t(((ni * oc + o) * oh + i) * ow + j)] = act(s);
        }
  (void)c;
  return y;
}

TEST(Epilogue, Conv2dWithActivationIsOneCall) {
  for (DType dt : {kFloat32, kBFloat16}) {
    manual_seed(dt == kFloat32 ? 17 : 18);
    const Tensor x = cast(randn({2, 4, 9, 11}), dt), w = cast(randn({6, 4, 3, 3}) * 0.2, dt);
    const Tensor b = cast(randn({6}), dt), wg = cast(randn({6, 2, 3, 3}) * 0.2, dt);
    auto fn = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{tessera::relu(conv2d(in[0], w, b, {2, 2}, {1, 1})),
                                 gelu(conv2d(in[0], wg, std::nullopt, {1, 1}, {0, 0}, {1, 1}, 2))};
    };
    codegen::CompiledGraph cg = compile_fn(fn, {x});
    EXPECT_EQ(count(cg.generated().source, "{  // _conv2d_epilogue"), 2) << cg.generated().source;
    EXPECT_EQ(cg.generated().fused_groups, 0);
    const std::vector<Tensor> out = cg.run({x});
    ASSERT_EQ(out.size(), 2u);
    const double tol = dt == kBFloat16 ? 1e-2 : 1e-4;
    expect_close(out[0], conv_reference(x, w, &b, 2, 1, 1, relu), tol, tol);
    expect_close(out[1], conv_reference(x, wg, nullptr, 1, 0, 2, gelu_erf), tol, tol);
  }
}

// A 1x1 conv with an activation: the fused call runs oneDNN's gemm kernel on NCHW (Note [Row-major
// 1x1 convolution] in onednn_ops.cpp), the activation as its post-op.
TEST(Epilogue, OneByOneConv2dWithActivation) {
  for (DType dt : {kFloat32, kBFloat16}) {
    manual_seed(dt == kFloat32 ? 23 : 24);
    const Tensor x = cast(randn({2, 24, 7, 9}), dt), w = cast(randn({40, 24, 1, 1}) * 0.2, dt), b = cast(randn({40}), dt);
    auto fn = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{tessera::relu(conv2d(in[0], w, b)), gelu(conv2d(in[0], w, std::nullopt, {2, 2}))};
    };
    codegen::CompiledGraph cg = compile_fn(fn, {x});
    EXPECT_EQ(count(cg.generated().source, "{  // _conv2d_epilogue"), 2) << cg.generated().source;
    const std::vector<Tensor> out = cg.run({x});
    ASSERT_EQ(out.size(), 2u);
    const double tol = dt == kBFloat16 ? 1e-2 : 1e-4;
    expect_close(out[0], conv_reference(x, w, &b, 1, 0, 1, relu), tol, tol);
    expect_close(out[1], conv_reference(x, w, nullptr, 2, 0, 1, gelu_erf), tol, tol);
  }
}

// A linear whose result has another reader keeps its own node: the activation's input must exist.
TEST(Epilogue, NotFusedWhenTheLinearResultIsReadTwice) {
  manual_seed(11);
  const Tensor x = randn({16, 32}), w = randn({24, 32}) * 0.2, b = randn({24});
  auto fn = [&](const std::vector<Tensor>& in) {
    Tensor l = linear(in[0], w, b);
    return std::vector<Tensor>{gelu(l), l};
  };
  codegen::CompiledGraph cg = compile_fn(fn, {x});
  EXPECT_EQ(count(cg.generated().source, "_linear_epilogue"), 0);
  const std::vector<Tensor> out = cg.run({x});
  ASSERT_EQ(out.size(), 2u);
  expect_close(out[0], reference(x, w, &b, nullptr, gelu_erf), 1e-4, 1e-4);
  expect_close(out[1], reference(x, w, &b, nullptr, identity), 1e-4, 1e-4);
}

// add with alpha != 1 is not a residual add; relu after the add is not an epilogue oneDNN runs.
TEST(Epilogue, NotFusedForScaledAddOrActivationAfterTheAdd) {
  manual_seed(12);
  const Tensor x = randn({16, 32}), w = randn({24, 32}) * 0.2, r = randn({16, 24});
  auto fn = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{add(in[1], linear(in[0], w), 2.0), tessera::relu(linear(in[0], w) + in[1])};
  };
  codegen::CompiledGraph cg = compile_fn(fn, {x, r});
  EXPECT_EQ(count(cg.generated().source, "{  // _linear_epilogue"), 1);  // linear + r only, relu apart
  const std::vector<Tensor> out = cg.run({x, r});
  std::vector<double> plain = reference(x, w, nullptr, nullptr, identity), rv = values(r);
  std::vector<double> scaled(plain.size()), relu_sum(plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    scaled[i] = rv[i] + 2.0 * plain[i];
    relu_sum[i] = relu(plain[i] + rv[i]);
  }
  expect_close(out[0], scaled, 1e-4, 1e-4);
  expect_close(out[1], relu_sum, 1e-4, 1e-4);
}

TEST(Epilogue, OffWithTheEnvironmentVariable) {
  manual_seed(13);
  const Tensor x = randn({8, 16}), w = randn({12, 16}) * 0.2, b = randn({12});
  auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::relu(linear(in[0], w, b))}; };
  const char* before = std::getenv("TESSERA_COMPILE_EPILOGUES");
  const std::string saved = before ? before : "";
  ASSERT_EQ(setenv("TESSERA_COMPILE_EPILOGUES", "0", 1), 0);
  codegen::CompiledGraph off = compile_fn(fn, {x});
  ASSERT_EQ(setenv("TESSERA_COMPILE_EPILOGUES", "maybe", 1), 0);
  EXPECT_THROW(compile_fn(fn, {x}), Error);
  if (before) setenv("TESSERA_COMPILE_EPILOGUES", saved.c_str(), 1);
  else unsetenv("TESSERA_COMPILE_EPILOGUES");
  EXPECT_EQ(count(off.generated().source, "_linear_epilogue"), 0);
  EXPECT_EQ(off.generated().fused_groups, 1);
  expect_close(off.run({x})[0], reference(x, w, &b, nullptr, relu), 1e-4, 1e-4);
}

// The demo's transformer block (smaller): the output projection + residual, the first MLP linear +
// GELU and the second + residual become three epilogue calls; the result matches eager mode.
TEST(Epilogue, TransformerBlockFusesThreeEpiloguesAndCopiesNoHeads) {
  manual_seed(14);
  const int64_t l = 32, d = 64, h = 4, f = 128;
  auto p = [](std::vector<int64_t> s, double scale) { return randn(s) * scale; };
  const Tensor ln_w = p({d}, 0.1) + 1.0, ln_b = p({d}, 0.1), wq = p({d, d}, 0.125), bq = p({d}, 0.1),
               wk = p({d, d}, 0.125), bk = p({d}, 0.1), wv = p({d, d}, 0.125), bv = p({d}, 0.1),
               wo = p({d, d}, 0.125), bo = p({d}, 0.1), w1 = p({f, d}, 0.125), b1 = p({f}, 0.1),
               w2 = p({d, f}, 0.09), b2 = p({d}, 0.1);
  auto block = [&](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    Tensor hn = layer_norm(x, {d}, ln_w, ln_b);
    Tensor q = linear(hn, wq, bq).view({1, l, h, d / h}).transpose(1, 2);
    Tensor k = linear(hn, wk, bk).view({1, l, h, d / h}).transpose(1, 2);
    Tensor v = linear(hn, wv, bv).view({1, l, h, d / h}).transpose(1, 2);
    Tensor a = scaled_dot_product_attention(q, k, v, std::nullopt, true).transpose(1, 2).reshape({1, l, d});
    Tensor x1 = x + linear(a, wo, bo);
    Tensor h2 = layer_norm(x1, {d}, ln_w, ln_b);
    return std::vector<Tensor>{x1 + linear(gelu(linear(h2, w1, b1)), w2, b2)};
  };
  const Tensor x = randn({1, l, d});
  codegen::CompiledGraph cg = compile_fn(block, {x});
  EXPECT_EQ(count(cg.generated().source, "{  // _linear_epilogue"), 3);
  EXPECT_EQ(count(cg.generated().source, "{  // linear\n"), 3);  // q, k, v
  // The heads' permuted views reach attention (and its output the reshape) without copies.
  EXPECT_GE(cg.generated().strided_values.size(), 4u);
  expect_close(cg.run({x})[0], values(block({x})[0]), 2e-4, 2e-4);
}

// The kernel's own checks, called through the dispatcher as generated code would.
TEST(Epilogue, KernelRefusesBadArgumentsWithOneLine) {
  ASSERT_NO_THROW(linear(randn({2, 3}), randn({4, 3})));  // loads the CPU backend
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry* op = d.find_op("_linear_epilogue");
  ASSERT_NE(op, nullptr);
  auto call = [&](const Tensor& x, const Tensor& w, const Tensor& r, const std::string& act) {
    return d.call_boxed(*op, Stack{x, w, std::monostate{}, std::optional<Tensor>(r), act});
  };
  const Tensor x = randn({5, 3}), w = randn({4, 3});
  try {
    call(x, w, randn({5, 3}), "relu");
    FAIL() << "a residual of the wrong shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("residual has shape [5, 3] but the output is [5, 4]"), std::string::npos)
        << e.what();
  }
  try {
    call(x, w, randn({5, 4}), "swish");
    FAIL() << "an unknown activation was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("activation='swish' is not supported"), std::string::npos) << e.what();
  }
  // The process keeps working: a good call after the refusals.
  const Tensor r = randn({5, 4});
  const Stack out = call(x, w, r, "none");
  expect_close(std::get<Tensor>(out[0]), reference(x, w, nullptr, &r, identity), 1e-5, 1e-5);
}

}  // namespace

// Note [Linear epilogues on CUDA]: the pass follows the node's device. A float16 chain exported on
// the CPU is left alone there (the CPU kernels take float32 / bfloat16); the same graph retyped to
// cuda:0 becomes one _linear_epilogue and one _conv2d_epilogue, which the CUDA plugin registers for
// float16 (the resolution is read from the loaded plugin, no GPU needed).
TEST(Epilogue, CudaGraphsFuseWhereTheCudaPluginHasTheKernels) {
  std::string why;
  if (!ensure_backend_loaded(DeviceType::CUDA, &why)) GTEST_SKIP() << "no CUDA plugin in this build: " << why;
  manual_seed(21);
  const Tensor x = cast(randn({4, 16}), kFloat16), w = cast(randn({8, 16}), kFloat16),
               b = cast(randn({8}), kFloat16);
  const Tensor r = cast(randn({4, 8}), kFloat16);
  const Tensor img = cast(randn({1, 3, 6, 6}), kFloat16), k = cast(randn({4, 3, 3, 3}), kFloat16);
  auto fn = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{gelu(linear(in[0], w, b), "tanh") + in[1], tessera::relu(conv2d(in[2], k))};
  };
  ExportedProgram cpu = export_program(fn, {x, r, img});
  ExportedProgram on_cuda = cpu;
  EXPECT_FALSE(codegen::fuse_linear_epilogues(cpu)) << cpu.graph_string();
  for (ValueInfo& v : on_cuda.graph.values) v.type.device = Device("cuda:0");
  ASSERT_TRUE(codegen::fuse_linear_epilogues(on_cuda)) << on_cuda.graph_string();
  int epilogues = 0, conv_epilogues = 0, others = 0;
  for (const Node& n : on_cuda.graph.nodes) {
    if (n.target == "_linear_epilogue") {
      ++epilogues;
      ASSERT_EQ(n.args.size(), 5u);
      EXPECT_EQ(n.args[2].kind, compiler::Argument::Kind::Tensor) << "the bias";
      EXPECT_EQ(n.args[3].kind, compiler::Argument::Kind::Tensor) << "the residual";
      EXPECT_EQ(std::get<std::string>(n.args[4].constant), "gelu_tanh");
    }
    if (n.target == "_conv2d_epilogue") {
      ++conv_epilogues;
      EXPECT_EQ(std::get<std::string>(n.args.back().constant), "relu");
    }
    others += n.target == "conv2d" || n.target == "relu" || n.target == "gelu" || n.target == "linear";
  }
  EXPECT_EQ(epilogues, 1) << on_cuda.graph_string();
  EXPECT_EQ(conv_epilogues, 1) << on_cuda.graph_string();
  EXPECT_EQ(others, 0) << on_cuda.graph_string();
}
