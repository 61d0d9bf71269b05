// The CPU code generator (Note [Generated loops], Note [Compile cache]): graphs built by hand
// through the IR, compiled with the system compiler, checked against naive loops in double.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "temp_dir_util.h"
#include "tessera/compiler/codegen.h"
#include "tessera/compiler/passes.h"
#include "tessera/error.h"
#include "tessera/half.h"
#include "tessera/tessera.h"

using namespace tessera;
using namespace tessera::compiler;
using namespace tessera::compiler::codegen;
namespace fs = std::filesystem;

namespace {

const Device kCpu("cpu:0");

tessera::compiler_test::TempDir* const kTempDir = tessera::compiler_test::add_temp_dir("tessera_codegen_");
std::string temp_dir() { return kTempDir->path(); }

CodegenOptions shared_cache() {
  CodegenOptions o;
  o.cache_dir = temp_dir() + "/cache";
  return o;
}

// Builds an ExportedProgram node by node.
struct Builder {
  ExportedProgram ep;
  ValueId input(const std::string& name, DType dt, std::vector<SymSize> sizes) {
    ValueId v = ep.graph.add_value({dt, kCpu, std::move(sizes)}, name);
    ep.graph.nodes.push_back({NodeKind::Placeholder, name, {}, {v}});
    ep.signature.inputs.push_back({InputKind::UserInput, name, v});
    for (const SymSize& s : ep.graph.type(v).sizes)
      for (const auto& sym : s.symbols()) ep.ranges[sym] = {0, 1 << 20};
    return v;
  }
  ValueId call(const std::string& target, std::vector<Argument> args, DType dt, std::vector<SymSize> sizes) {
    ValueId v = ep.graph.add_value({dt, kCpu, std::move(sizes)});
    ep.graph.nodes.push_back({NodeKind::Call, target, std::move(args), {v}});
    return v;
  }
  // Pointwise: the output has the sizes of `like`.
  ValueId pw(const std::string& target, std::vector<Argument> args, ValueId like) {
    return call(target, std::move(args), ep.graph.type(like).dtype, ep.graph.type(like).sizes);
  }
  ValueId reduce_last(const std::string& target, ValueId x) {
    auto sizes = ep.graph.type(x).sizes;
    sizes.back() = 1;
    return call(target, {T(x), C(std::vector<int64_t>{-1}), C(true)}, ep.graph.type(x).dtype, sizes);
  }
  void output(std::vector<ValueId> vs) {
    std::vector<Argument> args;
    for (size_t i = 0; i < vs.size(); ++i) {
      args.push_back(Argument::tensor(vs[i]));
      ep.signature.outputs.push_back({"out" + std::to_string(i), vs[i]});
    }
    ep.graph.nodes.push_back({NodeKind::Output, "", std::move(args), {}});
  }
  static Argument T(ValueId v) { return Argument::tensor(v); }
  static Argument C(Constant c) { return Argument::constant_value(std::move(c)); }
};

std::vector<float> random_values(size_t n, uint32_t seed, float lo = -3.0f, float hi = 3.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Values as the kernel sees them (bf16 inputs are rounded first) and the tensor holding them.
struct Input {
  std::vector<double> values;
  Tensor tensor;
};

Input make_input(DType dt, std::vector<int64_t> sizes, uint32_t seed, float lo = -3.0f, float hi = 3.0f) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<float> f = random_values(size_t(n), seed, lo, hi);
  Input in;
  if (dt == DType::BFloat16) {
    std::vector<BFloat16> b(f.begin(), f.end());
    for (const BFloat16& x : b) in.values.push_back(double(float(x)));
    in.tensor = tensor(b, sizes);
  } else {
    in.values.assign(f.begin(), f.end());
    in.tensor = tensor(f, sizes);
  }
  return in;
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out;
  if (t.dtype() == DType::BFloat16) {
    const BFloat16* p = t.data_ptr<BFloat16>();
    for (int64_t i = 0; i < t.numel(); ++i) out.push_back(double(float(p[i])));
  } else {
    const float* p = t.data_ptr<float>();
    for (int64_t i = 0; i < t.numel(); ++i) out.push_back(double(p[i]));
  }
  return out;
}

// Tolerances per dtype: f32 results within a few ulp of the double reference (plus the kernel's
// float accumulation), bf16 within the rounding of the output (8 bits of mantissa).
void expect_close(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  const bool bf16 = got.dtype() == DType::BFloat16;
  const double rtol = bf16 ? 1.6e-2 : 2e-5, atol = bf16 ? 1e-2 : 2e-5;
  std::vector<double> g = values_of(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    if (std::isnan(want[i]) && std::isnan(g[i])) continue;
    if (!(std::abs(g[i] - want[i]) <= atol + rtol * std::abs(want[i]))) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << want[i];
      ++bad;
    }
  }
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// x -> sigmoid(tanh(x * y + 0.5) * 2 - x) * exp(-|x| )  (six ops: mul, add, tanh, mul, sub, sigmoid,
// and then a seventh: mul with exp(neg(abs(x)))).
struct Chain {
  Builder b;
  ValueId x, y;
  explicit Chain(DType dt, std::vector<SymSize> sizes) {
    x = b.input("x", dt, sizes);
    y = b.input("y", dt, sizes);
    ValueId a = b.pw("mul.Tensor", {Builder::T(x), Builder::T(y)}, x);
    ValueId c = b.pw("add.Tensor", {Builder::T(a), Builder::C(0.5)}, x);
    ValueId d = b.pw("tanh", {Builder::T(c)}, x);
    ValueId e = b.pw("mul.Tensor", {Builder::T(d), Builder::C(int64_t(2))}, x);
    ValueId f = b.pw("sub.Tensor", {Builder::T(e), Builder::T(x)}, x);
    ValueId g = b.pw("sigmoid", {Builder::T(f)}, x);
    ValueId h = b.pw("abs", {Builder::T(x)}, x);
    ValueId i = b.pw("neg", {Builder::T(h)}, x);
    ValueId j = b.pw("exp", {Builder::T(i)}, x);
    ValueId k = b.pw("mul.Tensor", {Builder::T(g), Builder::T(j)}, x);
    b.output({k});
  }
  static std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& y) {
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      out[i] = sigmoid(std::tanh(x[i] * y[i] + 0.5) * 2 - x[i]) * std::exp(-std::abs(x[i]));
    return out;
  }
};

// softmax over the last dim written as amax, sub, exp, sum, div.
ExportedProgram softmax_program(DType dt, std::vector<SymSize> sizes) {
  Builder b;
  ValueId x = b.input("x", dt, sizes);
  ValueId m = b.reduce_last("amax", x);
  ValueId s = b.pw("sub.Tensor", {Builder::T(x), Builder::T(m)}, x);
  ValueId e = b.pw("exp", {Builder::T(s)}, x);
  ValueId z = b.reduce_last("sum", e);
  ValueId o = b.pw("div.Tensor", {Builder::T(e), Builder::T(z)}, x);
  b.output({o});
  return b.ep;
}

std::vector<double> softmax_reference(const std::vector<double>& x, int64_t rows, int64_t n) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, x[size_t(r * n + j)]);
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[size_t(r * n + j)] - m);
    for (int64_t j = 0; j < n; ++j) out[size_t(r * n + j)] = std::exp(x[size_t(r * n + j)] - m) / s;
  }
  return out;
}

// layer_norm over the last dim (eps 1e-5) with weight and bias, decomposed; rms_norm likewise.
ExportedProgram norm_program(DType dt, std::vector<SymSize> sizes, bool rms) {
  Builder b;
  ValueId x = b.input("x", dt, sizes);
  ValueId w = b.input("w", dt, {sizes.back()});
  ValueId bias = rms ? -1 : b.input("b", dt, {sizes.back()});
  ValueId centered = x;
  if (!rms) {
    ValueId mu = b.reduce_last("mean", x);
    centered = b.pw("sub.Tensor", {Builder::T(x), Builder::T(mu)}, x);
  }
  ValueId sq = b.pw("mul.Tensor", {Builder::T(centered), Builder::T(centered)}, x);
  ValueId var = b.reduce_last("mean", sq);
  ValueId ve = b.pw("add.Tensor", {Builder::T(var), Builder::C(1e-5)}, var);
  ValueId rstd = b.pw("rsqrt", {Builder::T(ve)}, var);
  ValueId normed = b.pw("mul.Tensor", {Builder::T(centered), Builder::T(rstd)}, x);
  ValueId scaled = b.pw("mul.Tensor", {Builder::T(normed), Builder::T(w)}, x);
  ValueId out = rms ? scaled : b.pw("add.Tensor", {Builder::T(scaled), Builder::T(bias)}, x);
  b.output({out});
  return b.ep;
}

std::vector<double> norm_reference(const std::vector<double>& x, const std::vector<double>& w,
                                   const std::vector<double>& bias, int64_t rows, int64_t n, bool rms) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    if (!rms) {
      for (int64_t j = 0; j < n; ++j) mu += x[size_t(r * n + j)];
      mu /= double(n);
    }
    for (int64_t j = 0; j < n; ++j) var += (x[size_t(r * n + j)] - mu) * (x[size_t(r * n + j)] - mu);
    var /= double(n);
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int64_t j = 0; j < n; ++j)
      out[size_t(r * n + j)] = (x[size_t(r * n + j)] - mu) * rstd * w[size_t(j)] + (rms ? 0.0 : bias[size_t(j)]);
  }
  return out;
}

bool have_compiler() { return find_toolchain().has_value(); }

#define REQUIRE_COMPILER()                                                     \
  do {                                                                         \
    std::string why;                                                           \
    if (!find_toolchain(&why)) GTEST_SKIP() << why;                            \
  } while (0)

class CodegenDtype : public ::testing::TestWithParam<DType> {};

}  // namespace

TEST(Codegen, SelectsTheIsaFromTheEnvironment) {
  const CpuIsa best = select_cpu_isa();
  setenv("TESSERA_CPU_CAPABILITY", "default", 1);
  EXPECT_EQ(select_cpu_isa(), CpuIsa::Default);
  setenv("TESSERA_CPU_CAPABILITY", "sse9", 1);
  try {
    select_cpu_isa();
    ADD_FAILURE() << "accepted sse9";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected one of default, avx2, avx512"), std::string::npos) << e.what();
  }
  unsetenv("TESSERA_CPU_CAPABILITY");
  EXPECT_EQ(select_cpu_isa(), best);
}

TEST(Codegen, GeneratedSourceIncludesNoTesseraHeader) {
  Chain c(DType::Float32, {SymSize::symbol("n")});
  GeneratedSource g = generate_cpp(c.b.ep, CpuIsa::AVX2);
  EXPECT_EQ(g.fused_groups, 1);
  EXPECT_EQ(g.extern_nodes, 0);
  EXPECT_EQ(g.symbols, std::vector<std::string>{"n"});
  EXPECT_EQ(g.source.find("#include \"tessera"), std::string::npos);
  EXPECT_EQ(g.source.find("#include <tessera"), std::string::npos);
  EXPECT_NE(g.source.find("tessera_generated_main"), std::string::npos);
}

TEST_P(CodegenDtype, PointwiseChainWithTailsMatchesReference) {
  REQUIRE_COMPILER();
  const DType dt = GetParam();
  Chain c(dt, {SymSize::symbol("n")});
  CompiledGraph cg = CompiledGraph::compile(c.b.ep, shared_cache());
  for (int64_t n : {int64_t(1), int64_t(17), int64_t(4099), int64_t(100003)}) {
    Input x = make_input(dt, {n}, 1), y = make_input(dt, {n}, 2);
    auto out = cg.run({x.tensor, y.tensor});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].dtype(), dt);
    expect_close(out[0], Chain::reference(x.values, y.values), "chain n=" + std::to_string(n));
  }
}

TEST(Codegen, EveryIsaTheCpuHasComputesTheSame) {
  REQUIRE_COMPILER();
  const SymSize batch = SymSize::symbol("batch");
  for (int level = 0; level <= int(select_cpu_isa()); ++level) {
    CodegenOptions o = shared_cache();
    o.isa = CpuIsa(level);
    CompiledGraph chain = CompiledGraph::compile(Chain(DType::Float32, {SymSize::symbol("n")}).b.ep, o);
    CompiledGraph softmax = CompiledGraph::compile(softmax_program(DType::Float32, {batch, 3, 37}), o);
    EXPECT_NE(chain.info().command.find(level == 2 ? "-mavx512f" : level == 1 ? "-mavx2" : "-fopenmp"),
              std::string::npos) << chain.info().command;
    Input x = make_input(DType::Float32, {1031}, 5), y = make_input(DType::Float32, {1031}, 6);
    expect_close(chain.run({x.tensor, y.tensor})[0], Chain::reference(x.values, y.values),
                 std::string("chain on ") + cpu_isa_name(CpuIsa(level)));
    Input s = make_input(DType::Float32, {3, 3, 37}, 7, -8.0f, 8.0f);
    expect_close(softmax.run({s.tensor})[0], softmax_reference(s.values, 9, 37),
                 std::string("softmax on ") + cpu_isa_name(CpuIsa(level)));
  }
}

TEST(Codegen, ExpAndTanhCoverTheFloatRange) {
  REQUIRE_COMPILER();
  Builder b;
  ValueId x = b.input("x", DType::Float32, {SymSize::symbol("n")});
  ValueId e = b.pw("exp", {Builder::T(x)}, x);
  ValueId t = b.pw("tanh", {Builder::T(x)}, x);
  ValueId s = b.pw("sigmoid", {Builder::T(x)}, x);
  b.output({e, t, s});
  CompiledGraph cg = CompiledGraph::compile(b.ep, shared_cache());
  std::vector<float> v = {-INFINITY, -1000.0f, -103.0f, -87.5f, -20.0f, -1.0f, -0.3f, -1e-4f, 0.0f, 1e-4f,
                          0.3f, 0.6249f, 0.6251f, 1.0f, 9.0f, 20.0f, 80.0f, 88.7f, 88.8f, 1000.0f, INFINITY, NAN};
  for (int i = 0; i < 2000; ++i) v.push_back(-90.0f + 0.09f * float(i));
  auto out = cg.run({tensor(v, {int64_t(v.size())})});
  std::vector<double> we, wt, ws;
  for (float f : v) {
    we.push_back(std::exp(double(f)));
    wt.push_back(std::tanh(double(f)));
    ws.push_back(1.0 / (1.0 + std::exp(-double(f))));
  }
  // exp's relative error only: compare relative to the value (the f32 range of exp is huge).
  const auto got = values_of(out[0]);
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(we[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "exp(" << v[i] << ")";
    } else if (std::isinf(we[i]) || we[i] > 3.4e38) {
      EXPECT_TRUE(std::isinf(got[i]) && got[i] > 0) << "exp(" << v[i] << ") = " << got[i];
    } else if (we[i] > 1e-37) {
      EXPECT_NEAR(got[i] / we[i], 1.0, 3e-7) << "exp(" << v[i] << ")";
    } else {
      EXPECT_NEAR(got[i], we[i], 1e-38) << "exp(" << v[i] << ")";
    }
  }
  expect_close(out[1], wt, "tanh");
  expect_close(out[2], ws, "sigmoid");
}

// Note [One vector math]: generated loops call the functions of the CPU plugin's kernels at the same
// ISA level (TESSERA_CPU_CAPABILITY selects both; ctest runs this at every level), so compiled and
// eager results are the same bits. Fresh random inputs over several ranges (the seed is printed;
// TESSERA_TEST_SEED reruns it), the special values, and the points where the kernels change
// branch; 100003 elements so that the loops' tails run too.
TEST(Codegen, TranscendentalsEqualEagerBitwise) {
  REQUIRE_COMPILER();
  try {
    select_cpu_isa();
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  uint64_t seed = uint64_t(std::random_device{}()) << 32 | std::random_device{}();
  if (const char* env = std::getenv("TESSERA_TEST_SEED")) seed = std::strtoull(env, nullptr, 10);
  SCOPED_TRACE("random seed " + std::to_string(seed) + " (rerun with TESSERA_TEST_SEED=" + std::to_string(seed) +
               ")");
  std::vector<float> v = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, std::numeric_limits<float>::min(),
                          -std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 0.5f, -0.5f,
                          0.625f, -0.625f, 14.5f, -14.5f, 44.0f, 88.72f, 88.73f, -87.34f, -103.28f, -103.98f,
                          -110.5f, 10.0f, -10.0f};
  std::mt19937_64 rng(seed);
  for (float range : {1.0f, 6.0f, 20.0f, 120.0f}) {
    std::uniform_real_distribution<float> d(-range, range);
    const size_t until = range == 120.0f ? 100003 : v.size() + 25000;
    while (v.size() < until) v.push_back(d(rng));
  }
  const int64_t n = int64_t(v.size());
  Builder b;
  ValueId x = b.input("x", DType::Float32, {SymSize::symbol("n")});
  const char* names[] = {"gelu", "gelu(tanh)", "exp", "tanh", "sigmoid", "silu", "erf", "log"};
  std::vector<ValueId> outs = {b.pw("gelu", {Builder::T(x)}, x),
                               b.pw("gelu", {Builder::T(x), Builder::C(std::string("tanh"))}, x),
                               b.pw("exp", {Builder::T(x)}, x),
                               b.pw("tanh", {Builder::T(x)}, x),
                               b.pw("sigmoid", {Builder::T(x)}, x),
                               b.pw("silu", {Builder::T(x)}, x),
                               b.pw("erf", {Builder::T(x)}, x),
                               b.pw("log", {Builder::T(x)}, x)};
  b.output(outs);
  CompiledGraph cg = CompiledGraph::compile(b.ep, shared_cache());
  EXPECT_EQ(cg.generated().fused_groups, 1);
  EXPECT_EQ(cg.generated().isa, select_cpu_isa());
  const Tensor in = tensor(v, {n});
  const auto got = cg.run({in});
  const Tensor want[] = {gelu(in), gelu(in, "tanh"), exp(in), tanh(in), sigmoid(in), silu(in), erf(in), log(in)};
  for (size_t k = 0; k < outs.size(); ++k) {
    const float* g = got[k].data_ptr<float>();
    const float* e = want[k].data_ptr<float>();
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; ++i) {
      const bool same = std::isnan(g[i]) ? std::isnan(e[i]) : std::bit_cast<uint32_t>(g[i]) == std::bit_cast<uint32_t>(e[i]);
      if (!same) {
        ADD_FAILURE() << names[k] << "(" << v[size_t(i)] << ") at ISA " << cpu_isa_name(cg.generated().isa)
                      << ": compiled " << g[i] << ", eager " << e[i];
        ++bad;
      }
    }
  }
}

TEST_P(CodegenDtype, SoftmaxPatternWithSymbolicBatch) {
  REQUIRE_COMPILER();
  const DType dt = GetParam();
  const SymSize batch = SymSize::symbol("batch");
  CompiledGraph cg = CompiledGraph::compile(softmax_program(dt, {batch, 3, 37}), shared_cache());
  EXPECT_EQ(cg.generated().fused_groups, 1);
  for (int64_t b : {int64_t(1), int64_t(5), int64_t(300)}) {
    Input x = make_input(dt, {b, 3, 37}, uint32_t(b), -8.0f, 8.0f);
    auto out = cg.run({x.tensor});
    ASSERT_EQ(out[0].sizes().size(), 3u);
    EXPECT_EQ(out[0].size(0), b);
    expect_close(out[0], softmax_reference(x.values, b * 3, 37), "softmax batch=" + std::to_string(b));
  }
}

TEST_P(CodegenDtype, LayerNormAndRmsNormPatterns) {
  REQUIRE_COMPILER();
  const DType dt = GetParam();
  for (bool rms : {false, true}) {
    const SymSize rows = SymSize::symbol("rows");
    CompiledGraph cg = CompiledGraph::compile(norm_program(dt, {rows, 131}, rms), shared_cache());
    EXPECT_EQ(cg.generated().fused_groups, 1) << cg.generated().source;
    for (int64_t r : {int64_t(1), int64_t(9), int64_t(513)}) {
      Input x = make_input(dt, {r, 131}, 7, -2.0f, 4.0f), w = make_input(dt, {131}, 8), b = make_input(dt, {131}, 9);
      auto out = rms ? cg.run({x.tensor, w.tensor}) : cg.run({x.tensor, w.tensor, b.tensor});
      expect_close(out[0], norm_reference(x.values, w.values, b.values, r, 131, rms),
                   std::string(rms ? "rms_norm" : "layer_norm") + " rows=" + std::to_string(r));
    }
  }
}

TEST_P(CodegenDtype, SingleNodeNormsAndSoftmaxAreDecomposedAndFused) {
  REQUIRE_COMPILER();
  const DType dt = GetParam();
  const SymSize rows = SymSize::symbol("rows");
  const int64_t n = 77;
  for (const char* target : {"softmax", "log_softmax", "layer_norm", "rms_norm"}) {
    Builder b;
    ValueId x = b.input("x", dt, {rows, n});
    const std::string t = target;
    ValueId w = -1, bias = -1, y;
    if (t == "softmax" || t == "log_softmax") {
      y = b.pw(t, {Builder::T(x), Builder::C(int64_t(-1))}, x);
    } else {
      w = b.input("w", dt, {n});
      if (t == "layer_norm") {
        bias = b.input("b", dt, {n});
        y = b.pw(t, {Builder::T(x), Builder::C(std::vector<int64_t>{n}), Builder::T(w), Builder::T(bias),
                     Builder::C(1e-5)}, x);
      } else {
        y = b.pw(t, {Builder::T(x), Builder::C(std::vector<int64_t>{n}), Builder::T(w), Argument::none()}, x);
      }
    }
    b.output({y});
    CompiledGraph cg = CompiledGraph::compile(b.ep, shared_cache());
    EXPECT_EQ(cg.generated().fused_groups, 1) << target;
    EXPECT_EQ(cg.generated().extern_nodes, 0) << target;
    for (int64_t r : {int64_t(1), int64_t(6), int64_t(300)}) {
      Input xi = make_input(dt, {r, n}, 21, -4.0f, 5.0f), wi = make_input(dt, {n}, 22), bi = make_input(dt, {n}, 23);
      std::vector<Tensor> args = {xi.tensor};
      if (w >= 0) args.push_back(wi.tensor);
      if (bias >= 0) args.push_back(bi.tensor);
      auto out = cg.run(args);
      std::vector<double> want;
      if (t == "softmax" || t == "log_softmax") {
        want = softmax_reference(xi.values, r, n);
        if (t == "log_softmax")
          for (double& v : want) v = std::log(v);
      } else {
        // rms_norm's eps=None is float32's machine epsilon; the reference uses 1e-5 below, so
        // compare rms_norm with its own eps instead.
        want = norm_reference(xi.values, wi.values, bi.values, r, n, t == "rms_norm");
        if (t == "rms_norm") {
          for (int64_t i = 0; i < r; ++i) {
            double ms = 0;
            for (int64_t j = 0; j < n; ++j) ms += xi.values[size_t(i * n + j)] * xi.values[size_t(i * n + j)];
            const double rstd = 1.0 / std::sqrt(ms / double(n) + double(std::numeric_limits<float>::epsilon()));
            for (int64_t j = 0; j < n; ++j)
              want[size_t(i * n + j)] = xi.values[size_t(i * n + j)] * rstd * wi.values[size_t(j)];
          }
        }
      }
      expect_close(out[0], want, t + " rows=" + std::to_string(r));
    }
  }
}

// The same graphs run eagerly through the CPU backend's kernels agree with the generated code.
TEST_P(CodegenDtype, AgreesWithEagerOps) {
  REQUIRE_COMPILER();
  const DType dt = GetParam();
  const SymSize rows = SymSize::symbol("rows");
  Chain c(dt, {rows, 129});
  CompiledGraph chain = CompiledGraph::compile(c.b.ep, shared_cache());
  Input x = make_input(dt, {5, 129}, 31), y = make_input(dt, {5, 129}, 32);
  const Tensor eager_chain =
      mul(sigmoid(sub(mul(tanh(add(mul(x.tensor, y.tensor), scalar_tensor(0.5, dt))), scalar_tensor(2.0, dt)),
                      x.tensor)),
          exp(neg(abs(x.tensor))));
  expect_close(chain.run({x.tensor, y.tensor})[0], values_of(eager_chain), "chain vs eager");
  for (const char* target : {"softmax", "log_softmax", "layer_norm", "rms_norm"}) {
    Builder b;
    ValueId xv = b.input("x", dt, {rows, 129});
    const std::string t = target;
    ValueId w = -1, out;
    if (t == "softmax" || t == "log_softmax") {
      out = b.pw(t, {Builder::T(xv), Builder::C(int64_t(-1))}, xv);
    } else {
      w = b.input("w", dt, {129});
      out = b.pw(t, {Builder::T(xv), Builder::C(std::vector<int64_t>{129}), Builder::T(w)}, xv);
    }
    b.output({out});
    CompiledGraph cg = CompiledGraph::compile(b.ep, shared_cache());
    Input wi = make_input(dt, {129}, 33);
    Tensor eager = t == "softmax"       ? softmax(x.tensor, -1)
                   : t == "log_softmax" ? log_softmax(x.tensor, -1)
                   : t == "layer_norm"  ? layer_norm(x.tensor, {129}, wi.tensor)
                                        : rms_norm(x.tensor, {129}, wi.tensor);
    auto got = w >= 0 ? cg.run({x.tensor, wi.tensor}) : cg.run({x.tensor});
    expect_close(got[0], values_of(eager), t + " vs eager");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CodegenDtype, ::testing::Values(DType::Float32, DType::BFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Codegen, ZeroSizedDimsGiveEmptyResults) {
  REQUIRE_COMPILER();
  const SymSize batch = SymSize::symbol("batch");
  CompiledGraph cg = CompiledGraph::compile(softmax_program(DType::Float32, {batch, 3, 37}), shared_cache());
  auto out = cg.run({make_input(DType::Float32, {0, 3, 37}, 1).tensor});
  EXPECT_EQ(out[0].numel(), 0);
  EXPECT_EQ(out[0].size(0), 0);
  Chain c(DType::Float32, {SymSize::symbol("n")});
  CompiledGraph chain = CompiledGraph::compile(c.b.ep, shared_cache());
  EXPECT_EQ(chain.run({make_input(DType::Float32, {0}, 1).tensor, make_input(DType::Float32, {0}, 2).tensor})[0].numel(), 0);
}

TEST(Codegen, RowReductionsAreOutputsToo) {
  REQUIRE_COMPILER();
  Builder b;
  ValueId x = b.input("x", DType::Float32, {SymSize::symbol("r"), 45});
  ValueId s = b.call("sum", {Builder::T(x), Builder::C(std::vector<int64_t>{1}), Builder::C(false)}, DType::Float32,
                     {SymSize::symbol("r")});
  ValueId m = b.reduce_last("mean", x);
  ValueId mx = b.reduce_last("amax", x);
  ValueId mn = b.reduce_last("amin", x);
  b.output({s, m, mx, mn});
  CompiledGraph cg = CompiledGraph::compile(b.ep, shared_cache());
  Input in = make_input(DType::Float32, {6, 45}, 3);
  in.tensor.data_ptr<float>()[50] = NAN;  // row 1: amax and amin propagate NaN as PyTorch does
  in.values[50] = NAN;
  auto out = cg.run({in.tensor});
  std::vector<double> sum(6, 0), mean(6), amax(6, -INFINITY), amin(6, INFINITY);
  for (int r = 0; r < 6; ++r) {
    for (int j = 0; j < 45; ++j) {
      const double v = in.values[size_t(r * 45 + j)];
      sum[size_t(r)] += v;
      amax[size_t(r)] = std::isnan(v) || std::isnan(amax[size_t(r)]) ? NAN : std::max(amax[size_t(r)], v);
      amin[size_t(r)] = std::isnan(v) || std::isnan(amin[size_t(r)]) ? NAN : std::min(amin[size_t(r)], v);
    }
    mean[size_t(r)] = sum[size_t(r)] / 45;
  }
  // sum and mean over a dim are the contract's `sum` and `mean` (with dim, keepdim): one group.
  EXPECT_EQ(cg.generated().fused_groups, 1);
  EXPECT_EQ(cg.generated().extern_nodes, 0);
  EXPECT_EQ(out[0].dim(), 1);
  expect_close(out[0], sum, "sum");
  expect_close(out[1], mean, "mean");
  expect_close(out[2], amax, "amax");
  expect_close(out[3], amin, "amin");
}

// sum(x, -1, keepdim=False) has shape [n]: against [n, n] it broadcasts along the last dim (one
// value per column), not per row, although the reduction computed it per row.
TEST(Codegen, FlatReductionBroadcastsFromTheRight) {
  REQUIRE_COMPILER();
  Builder b;
  const SymSize n = SymSize::symbol("n");
  ValueId x = b.input("x", DType::Float32, {n, n});
  ValueId s = b.call("sum", {Builder::T(x), Builder::C(std::vector<int64_t>{-1}), Builder::C(false)}, DType::Float32, {n});
  ValueId y = b.pw("sub.Tensor", {Builder::T(x), Builder::T(s)}, x);
  b.output({y});
  CompiledGraph cg = CompiledGraph::compile(b.ep, shared_cache());
  Input in = make_input(DType::Float32, {7, 7}, 41);
  std::vector<double> sums(7, 0), want(49);
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 7; ++j) sums[size_t(i)] += in.values[size_t(i * 7 + j)];
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 7; ++j) want[size_t(i * 7 + j)] = in.values[size_t(i * 7 + j)] - sums[size_t(j)];
  expect_close(cg.run({in.tensor})[0], want, "x - sum(x, -1)");
}

// A view of a value kept in a scratch slot aliases the slot: the slot stays reserved while the
// view is read. Here the second group's value has the same byte size and would otherwise take the
// first group's slot before the view of it is read.
TEST(Codegen, ViewOfASlotValueKeepsTheSlot) {
  REQUIRE_COMPILER();
  Builder b;
  ValueId x = b.input("x", DType::Float32, {4, 8});
  ValueId y = b.input("y", DType::Float32, {4, 8});
  ValueId a = b.pw("mul.Tensor", {Builder::T(x), Builder::C(2.0)}, x);
  ValueId av = b.call("view", {Builder::T(a), Builder::C(std::vector<int64_t>{32})}, DType::Float32, {32});
  ValueId c = b.pw("mul.Tensor", {Builder::T(y), Builder::C(3.0)}, y);
  ValueId cv = b.call("view", {Builder::T(c), Builder::C(std::vector<int64_t>{32})}, DType::Float32, {32});
  b.output({b.pw("add.Tensor", {Builder::T(av), Builder::T(cv)}, av)});
  CompiledGraph cg = CompiledGraph::compile(b.ep, shared_cache());
  EXPECT_NE(cg.generated().source.find("slot1"), std::string::npos) << cg.generated().source;
  Input xi = make_input(DType::Float32, {4, 8}, 21), yi = make_input(DType::Float32, {4, 8}, 22);
  std::vector<double> want(32);
  for (size_t i = 0; i < 32; ++i) want[i] = 2.0 * xi.values[i] + 3.0 * yi.values[i];
  expect_close(cg.run({xi.tensor, yi.tensor})[0], want, "view of a slot value");
}

TEST(Codegen, ExternNodesRunThroughTheHostWithPlannedBuffers) {
  REQUIRE_COMPILER();
  // gelu(linear(x, w, bias)) + x, then linear again: two extern nodes around fused groups.
  Builder b;
  const SymSize batch = SymSize::symbol("batch");
  ValueId x = b.input("x", DType::Float32, {batch, 16});
  ValueId w = b.input("w", DType::Float32, {16, 16});
  ValueId l1 = b.call("linear", {Builder::T(x), Builder::T(w), Argument::none()}, DType::Float32, {batch, 16});
  ValueId g = b.pw("gelu", {Builder::T(l1)}, l1);
  ValueId r = b.pw("add.Tensor", {Builder::T(g), Builder::T(x)}, l1);
  ValueId l2 = b.call("linear", {Builder::T(r), Builder::T(w), Argument::none()}, DType::Float32, {batch, 16});
  ValueId o = b.pw("relu", {Builder::T(l2)}, l2);
  b.output({o, l2});
  // Without linear epilogues (Note [Linear epilogues]), which would take gelu and the add into the
  // first linear: this test is about fused groups between extern nodes.
  const char* before = std::getenv("TESSERA_COMPILE_EPILOGUES");
  const std::string saved = before ? before : "";
  setenv("TESSERA_COMPILE_EPILOGUES", "0", 1);
  CompiledGraph cg = CompiledGraph::compile(b.ep, shared_cache());
  if (before) setenv("TESSERA_COMPILE_EPILOGUES", saved.c_str(), 1);
  else unsetenv("TESSERA_COMPILE_EPILOGUES");
  EXPECT_EQ(cg.generated().extern_nodes, 2);
  EXPECT_EQ(cg.generated().fused_groups, 2);
  // l1 and l2 stay in the tensors linear returned; only r needs a scratch slot.
  EXPECT_NE(cg.generated().source.find("slot0"), std::string::npos) << cg.generated().source;
  EXPECT_EQ(cg.generated().source.find("slot1"), std::string::npos) << cg.generated().source;
  EXPECT_EQ(cg.generated().extern_outputs, std::vector<ValueId>{l2});
  for (int64_t n : {int64_t(1), int64_t(3), int64_t(64)}) {
    Input xi = make_input(DType::Float32, {n, 16}, 11), wi = make_input(DType::Float32, {16, 16}, 12, -0.5f, 0.5f);
    auto out = cg.run({xi.tensor, wi.tensor});
    std::vector<double> want(size_t(n * 16));
    auto lin = [&](const std::vector<double>& in) {
      std::vector<double> y(size_t(n * 16), 0);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < 16; ++k)
          for (int64_t j = 0; j < 16; ++j) y[size_t(i * 16 + k)] += in[size_t(i * 16 + j)] * wi.values[size_t(k * 16 + j)];
      return y;
    };
    std::vector<double> y = lin(xi.values);
    for (size_t i = 0; i < y.size(); ++i) y[i] = 0.5 * y[i] * (1 + std::erf(y[i] / std::sqrt(2.0))) + xi.values[i];
    y = lin(y);
    for (size_t i = 0; i < y.size(); ++i) want[i] = std::max(y[i], 0.0);
    ASSERT_EQ(out.size(), 2u);
    expect_close(out[0], want, "linear-gelu-add-linear-relu n=" + std::to_string(n));
    expect_close(out[1], y, "the second linear, returned as is n=" + std::to_string(n));
  }
}

TEST(Codegen, ExternNodesRunCapturedViewsAndNumbersInTensorPositions) {
  REQUIRE_COMPILER();
  // f64 values are extern nodes: a core view, then mul.Tensor with a C++ number as `other`.
  Builder b;
  const SymSize n = SymSize::symbol("n");
  ValueId x = b.input("x", DType::Float64, {n, 4});
  ValueId v = b.call("view", {Builder::T(x), Builder::C(std::vector<int64_t>{-1})}, DType::Float64, {n * 4});
  ValueId y = b.call("mul.Tensor", {Builder::T(v), Builder::C(2.5)}, DType::Float64, {n * 4});
  b.output({y});
  CompiledGraph cg = CompiledGraph::compile(b.ep, shared_cache());
  for (int64_t rows : {1, 3}) {
    Input in = make_input(DType::Float32, {rows, 4}, uint32_t(rows));
    Tensor out = cg.run({in.tensor.to(DType::Float64)})[0];
    ASSERT_EQ(out.sizes().vec(), std::vector<int64_t>{rows * 4});
    const double* p = out.data_ptr<double>();
    for (size_t i = 0; i < in.values.size(); ++i) EXPECT_EQ(p[i], in.values[i] * 2.5) << i;
  }
}

TEST(Codegen, BadInputsGetOneLineErrors) {
  REQUIRE_COMPILER();
  CompiledGraph cg = CompiledGraph::compile(softmax_program(DType::Float32, {SymSize::symbol("batch"), 3, 37}),
                                            shared_cache());
  try {
    cg.run({make_input(DType::Float32, {2, 4, 37}, 1).tensor});
    ADD_FAILURE() << "accepted a wrong size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dim 1 of input 'x' is 4; the graph needs 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cg.run({make_input(DType::BFloat16, {2, 3, 37}, 1).tensor}), Error);
  EXPECT_THROW(cg.run({}), Error);
}

TEST(CodegenCache, SecondCompileIsAHitAndACorruptEntryIsRebuilt) {
  REQUIRE_COMPILER();
  CodegenOptions opts;
  opts.cache_dir = temp_dir() + "/hit";
  Chain c(DType::Float32, {SymSize::symbol("n")});
  CompiledGraph first = CompiledGraph::compile(c.b.ep, opts);
  EXPECT_FALSE(first.info().cache_hit);
  EXPECT_FALSE(first.info().command.empty());
  CompiledGraph second = CompiledGraph::compile(c.b.ep, opts);
  EXPECT_TRUE(second.info().cache_hit);
  EXPECT_EQ(second.info().key, first.info().key);
  // Replace the library by its first half (a new file: the loaded one stays mapped intact): the
  // next compile must not trust it.
  {
    const std::string lib = first.info().library_path, half = lib + ".half";
    fs::copy_file(lib, half);
    fs::resize_file(half, fs::file_size(lib) / 2);
    fs::rename(half, lib);
  }
  CompiledGraph third = CompiledGraph::compile(c.b.ep, opts);
  EXPECT_FALSE(third.info().cache_hit);
  // Garbage in the meta file: same.
  { std::ofstream(opts.cache_dir + "/" + first.info().key + ".meta") << "tessera-compile-cache 1\nkey nonsense\n"; }
  CompiledGraph fourth = CompiledGraph::compile(c.b.ep, opts);
  EXPECT_FALSE(fourth.info().cache_hit);
  Input x = make_input(DType::Float32, {33}, 1), y = make_input(DType::Float32, {33}, 2);
  expect_close(fourth.run({x.tensor, y.tensor})[0], Chain::reference(x.values, y.values), "after rebuild");
  // A different ISA is a different entry.
  CodegenOptions base = opts;
  base.isa = CpuIsa::Default;
  EXPECT_NE(CompiledGraph::compile(c.b.ep, base).info().key, first.info().key);
}

TEST(CodegenCache, TwoProcessesCompilingTheSameGraphAtOnce) {
  REQUIRE_COMPILER();
  const std::string dir = temp_dir() + "/race";
  Chain c(DType::Float32, {SymSize::symbol("n")});
  c.b.ep.graph.values[size_t(c.x)].name = "x_race";  // a source no other test compiled
  pid_t kids[2];
  for (pid_t& k : kids) {
    k = fork();
    ASSERT_GE(k, 0);
    if (k == 0) {
      try {
        CodegenOptions o;
        o.cache_dir = dir;
        CompiledGraph cg = CompiledGraph::compile(c.b.ep, o);
        Input x = make_input(DType::Float32, {100}, 1), y = make_input(DType::Float32, {100}, 2);
        const auto got = values_of(cg.run({x.tensor, y.tensor})[0]);
        const auto want = Chain::reference(x.values, y.values);
        for (size_t i = 0; i < got.size(); ++i)
          if (std::abs(got[i] - want[i]) > 1e-5) _exit(3);
        _exit(cg.info().cache_hit ? 10 : 11);
      } catch (...) {
        _exit(2);
      }
    }
  }
  int codes[2];
  for (int i = 0; i < 2; ++i) {
    int status = 0;
    ASSERT_EQ(waitpid(kids[i], &status, 0), kids[i]);
    ASSERT_TRUE(WIFEXITED(status));
    codes[i] = WEXITSTATUS(status);
  }
  // Both succeeded; the lock let exactly one of them compile.
  EXPECT_EQ(std::min(codes[0], codes[1]), 10) << codes[0] << " " << codes[1];
  EXPECT_EQ(std::max(codes[0], codes[1]), 11) << codes[0] << " " << codes[1];
  int libraries = 0, metas = 0, others = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() == 35 && name.ends_with(".so")) ++libraries;
    else if (name.ends_with(".meta")) ++metas;
    else if (!name.ends_with(".lock")) ++others;
  }
  EXPECT_EQ(libraries, 1);
  EXPECT_EQ(metas, 1);
  EXPECT_EQ(others, 0);
}

TEST(CodegenCache, DebugDirectoryKeepsGraphSourceAndCommand) {
  REQUIRE_COMPILER();
  const std::string dbg = temp_dir() + "/debug";
  setenv("TESSERA_COMPILE_DEBUG", dbg.c_str(), 1);
  CodegenOptions o;
  o.cache_dir = temp_dir() + "/debug-cache";
  CompiledGraph cg = CompiledGraph::compile(softmax_program(DType::Float32, {4, 8}), o);
  unsetenv("TESSERA_COMPILE_DEBUG");
  const std::string stem = dbg + "/" + cg.info().key;
  EXPECT_TRUE(fs::exists(stem + ".graph.txt"));
  EXPECT_TRUE(fs::exists(stem + ".cpp"));
  std::ifstream cmd(stem + ".cmd");
  std::string line;
  std::getline(cmd, line);
  EXPECT_NE(line.find("-fopenmp"), std::string::npos) << line;
}

TEST(CodegenCache, DirectoryFollowsTheEnvironment) {
  const char* old_home = getenv("HOME");
  const std::string home = old_home ? old_home : "";
  unsetenv("TESSERA_CACHE_DIR");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(cache_directory(), "/home/someone/.cache/tessera/compile");
  setenv("XDG_CACHE_HOME", "/var/cache/me", 1);
  EXPECT_EQ(cache_directory(), "/var/cache/me/tessera/compile");
  setenv("TESSERA_CACHE_DIR", "/tmp/tc", 1);
  EXPECT_EQ(cache_directory(), "/tmp/tc");
  CodegenOptions o;
  o.cache_dir = "/explicit";
  EXPECT_EQ(cache_directory(o), "/explicit");
  unsetenv("TESSERA_CACHE_DIR");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", home.c_str(), 1);
}

TEST(CodegenCache, RefusesADirectoryOthersCanWrite) {
  REQUIRE_COMPILER();
  CodegenOptions o;
  o.cache_dir = temp_dir() + "/shared-cache";
  fs::create_directories(o.cache_dir);
  fs::permissions(o.cache_dir, fs::perms::all);
  Chain c(DType::Float32, {8});
  try {
    CompiledGraph::compile(c.b.ep, o);
    ADD_FAILURE() << "used a world-writable cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chmod go-w"), std::string::npos) << e.what();
  }
  fs::permissions(o.cache_dir, fs::perms::owner_all, fs::perm_options::replace);
  EXPECT_NO_THROW(CompiledGraph::compile(c.b.ep, o));
  // A directory the cache creates itself is private.
  o.cache_dir = temp_dir() + "/new-private-cache";
  EXPECT_NO_THROW(CompiledGraph::compile(c.b.ep, o));
  EXPECT_EQ(fs::status(o.cache_dir).permissions() & (fs::perms::group_all | fs::perms::others_all), fs::perms::none);
}

TEST(Codegen, RefusesGraphsItCannotBind) {
  Builder b;
  ValueId x = b.input("x", DType::Float32, {SymSize::symbol("n") * 2});
  b.output({b.pw("exp", {Builder::T(x)}, x)});
  try {
    generate_cpp(b.ep, CpuIsa::Default);
    ADD_FAILURE() << "generated a graph whose symbol no input binds";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("symbol 'n' is not the size of any input dimension"), std::string::npos)
        << e.what();
  }
  Builder d;
  ValueId y = d.input("y", DType::Float32, {4});
  d.ep.graph.values[size_t(y)].type.device = Device("meta");
  d.output({y});
  EXPECT_THROW(generate_cpp(d.ep, CpuIsa::Default), Error);
}

// Every compile verifies what codegen's rewrites leave (Note [Passes]): a node the op contract does
// not have (add.Scalar, which decompose_for_codegen once emitted) is refused before any C++ is
// generated, naming the rewrite; the norms' decomposition itself passes the verifier.
TEST(Codegen, RewrittenGraphsAreVerifiedInEveryCompile) {
  Builder b;
  ValueId x = b.input("x", DType::Float32, {SymSize::symbol("rows"), 8});
  ValueId y = b.pw("add.Scalar", {Builder::T(x), Builder::C(1.0)}, x);
  b.output({y});
  try {
    CompiledGraph::compile(b.ep, shared_cache());
    ADD_FAILURE() << "compiled a graph with an op the contract does not have";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pass 'decompose_for_codegen' left a broken program: verify: node 1 "
                                         "('add.Scalar'): the op is not in this runtime's op contract"),
              std::string::npos)
        << e.what();
  }
  for (const char* target : {"layer_norm", "rms_norm"}) {
    Builder n;
    ValueId in = n.input("x", DType::Float32, {SymSize::symbol("rows"), 16});
    n.output({n.pw(target, {Builder::T(in), Builder::C(std::vector<int64_t>{16})}, in)});
    ExportedProgram p = n.ep;
    EXPECT_TRUE(decompose_for_codegen(p)) << target;
    EXPECT_GT(p.graph.nodes.size(), n.ep.graph.nodes.size()) << target;
    EXPECT_NO_THROW(verify(p)) << target << "\n" << p.graph_string();
    EXPECT_EQ(p.graph_string().find(".Scalar"), std::string::npos) << p.graph_string();
  }
}

TEST(CodegenCache, NoCompilerIsReportedAsUnavailable) {
  setenv("CXX", "/nonexistent/tessera-test-c++", 1);
  std::string why;
  EXPECT_FALSE(find_toolchain(&why).has_value());
  EXPECT_NE(why.find("set CXX"), std::string::npos) << why;
  try {
    Chain c(DType::Float32, {8});
    CompiledGraph::compile(c.b.ep, shared_cache());
    ADD_FAILURE() << "compiled without a compiler";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unavailable) << e.what();
  }
  unsetenv("CXX");
  (void)have_compiler;
}
