// tessera::compile (Note [Compiled functions], Note [Automatic dynamic]): compiled functions against
// the same functions run eagerly (and naive loops in double), guards, recompiles and the cache.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "temp_dir_util.h"
#include "tessera/compiler/codegen.h"
#include "tessera/compiler/compile.h"
#include "tessera/compiler/export.h"
#include "tessera/compiler/passes.h"
#include "tessera/log.h"
#include "tessera/tessera.h"

namespace {

using tessera::CompiledFunction;
using tessera::CompileOptions;
using tessera::CompileStats;
using tessera::DType;
using tessera::Tensor;
namespace fs = std::filesystem;

tessera::compiler_test::TempDir* const kTempDir = tessera::compiler_test::add_temp_dir("tessera_compile_");
std::string temp_dir() { return kTempDir->path(); }

CompileOptions options(std::optional<bool> dynamic = std::nullopt, std::string backend = "cpp") {
  CompileOptions o;
  o.backend = std::move(backend);
  o.dynamic = dynamic;
  o.cache_dir = temp_dir() + "/cache";
  return o;
}

std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(tessera::Device("cpu")).to(DType::Float64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> g = values(got), w = values(want);
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " at " << i;
}

// Calls the compiled function and fn itself on the same fresh inputs and compares every output.
void expect_matches_eager(const CompiledFunction& f, const tessera::ExportFn& fn,
                          const std::vector<Tensor>& inputs, double tol, const std::string& what) {
  const std::vector<Tensor> got = f(inputs), want = fn(inputs);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    expect_close(got[i], want[i], tol, what + " output " + std::to_string(i));
}

// sigmoid(tanh(x * y + 0.5) * 2 - x)
std::vector<Tensor> chain(const std::vector<Tensor>& in) {
  return {tessera::sigmoid(tessera::tanh(in[0] * in[1] + 0.5) * 2.0 - in[0])};
}

double chain_reference(double x, double y) {
  const double t = std::tanh(double(float(x) * float(y)) + 0.5) * 2.0 - x;
  return 1.0 / (1.0 + std::exp(-t));
}

bool have_compiler() { return tessera::compiler::codegen::find_toolchain().has_value(); }

TEST(Compile, PointwiseChainMatchesNaiveLoops) {
  CompiledFunction f = tessera::compile(chain, options());
  for (int64_t b : {3, 7, 64}) {
    Tensor x = tessera::randn({b, 33}), y = tessera::randn({b, 33});
    const std::vector<double> xs = values(x), ys = values(y), got = values(f({x, y})[0]);
    ASSERT_EQ(got.size(), xs.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], chain_reference(xs[i], ys[i]), 2e-6) << b << " " << i;
  }
  const CompileStats s = f.stats();
  EXPECT_EQ(s.calls, 3);
  EXPECT_EQ(s.compiles, 2);  // static, then batch dynamic
  EXPECT_EQ(s.cache_hits, 1);
  if (have_compiler()) {
    EXPECT_EQ(f.artifacts().at(0).backend, "cpp");
  }
  EXPECT_EQ(f.artifacts().at(1).inputs, "f32[s0, 33] cpu, f32[s0, 33] cpu");
}

TEST(Compile, Bfloat16GraphsMatchEagerWithinBfloat16Tolerance) {
  // The generated code computes in float and rounds once at the store; eager rounds after each op.
  const auto bf16 = tessera::TensorOptions().dtype(DType::BFloat16);
  Tensor w = tessera::randn({40}, bf16);
  tessera::ExportFn fn = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{chain(in)[0], tessera::softmax(in[0] * w, -1)};
  };
  CompiledFunction f = tessera::compile(fn, options());
  for (int64_t b : {3, 6})
    expect_matches_eager(f, fn, {tessera::randn({b, 40}, bf16), tessera::randn({b, 40}, bf16)}, 2e-2, "bf16");
  EXPECT_EQ(f.stats().compiles, 2);
  if (have_compiler()) {
    EXPECT_EQ(f.artifacts().at(1).backend, "cpp");
  }
}

// A float32 attn_mask with bf16 queries (PyTorch accepts it and adds it in float32): captured,
// compiled and run like eager, symbolic batch included.
TEST(Compile, AttentionWithAFloat32MaskOnBfloat16Queries) {
  const auto bf16 = tessera::TensorOptions().dtype(DType::BFloat16);
  tessera::ExportFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tessera::scaled_dot_product_attention(in[0], in[1], in[2], in[3])};
  };
  CompiledFunction f = tessera::compile(fn, options());
  for (int64_t b : {2, 3}) {
    const Tensor mask = tessera::randn({b, 1, 5, 7}) + 64.0;
    expect_matches_eager(f, fn,
                         {tessera::randn({b, 2, 5, 8}, bf16), tessera::randn({b, 2, 7, 8}, bf16),
                          tessera::randn({b, 2, 7, 8}, bf16), mask},
                         1e-2, "sdpa bf16, float32 mask");
  }
  EXPECT_LE(f.stats().compiles, 2);
  if (have_compiler()) {
    for (const auto& a : f.artifacts()) EXPECT_EQ(a.backend, "cpp") << a.inputs;
  }
}

TEST(Compile, SoftmaxAndLayerNormMatchEager) {
  Tensor w = tessera::randn({48}) * 0.1 + 1.0, b = tessera::randn({48}) * 0.1;
  tessera::ExportFn fn = [&](const std::vector<Tensor>& in) {
    Tensor h = tessera::layer_norm(in[0], {48}, w, b);
    return std::vector<Tensor>{tessera::softmax(h * 2.0, -1), h};
  };
  CompiledFunction f = tessera::compile(fn, options());
  for (int64_t rows : {5, 9, 17, 2})
    expect_matches_eager(f, fn, {tessera::randn({rows, 48}) * 3.0}, 1e-5, "rows");
  EXPECT_EQ(f.stats().compiles, 2);
}

TEST(Compile, LinearGeluMatchesEager) {
  Tensor w = tessera::randn({24, 16}) * 0.25, bias = tessera::randn({24});
  tessera::ExportFn fn = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tessera::gelu(tessera::linear(in[0], w, bias)) + in[1]};
  };
  CompiledFunction f = tessera::compile(fn, options());
  for (int64_t b : {4, 6, 11})
    expect_matches_eager(f, fn, {tessera::randn({b, 16}), tessera::randn({24})}, 1e-5,
                         "batch " + std::to_string(b));
  EXPECT_EQ(f.stats().compiles, 2);
}

// samples/demo's transformer block with the batch taken from the input; the weights live on the CPU.
tessera::ExportFn transformer_block() {
  constexpr int64_t kModel = 32, kHeads = 4, kMlp = 64;
  auto p = [](std::vector<int64_t> sizes, double scale, double offset = 0) {
    return tessera::randn(sizes) * scale + offset;
  };
  const double s = 1.0 / std::sqrt(double(kModel)), s2 = 1.0 / std::sqrt(double(kMlp));
  struct Weights {
    Tensor ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2;
  };
  Weights w{p({kModel}, 0.1, 1.0),  p({kModel}, 0.1), p({kModel, kModel}, s), p({kModel}, 0.1),
            p({kModel, kModel}, s), p({kModel}, 0.1), p({kModel, kModel}, s), p({kModel}, 0.1),
            p({kModel, kModel}, s), p({kModel}, 0.1), p({kModel}, 0.1, 1.0),  p({kModel}, 0.1),
            p({kMlp, kModel}, s),   p({kMlp}, 0.1),   p({kModel, kMlp}, s2),  p({kModel}, 0.1)};
  return [w](const std::vector<Tensor>& in) {
    using namespace tessera;
    const Device dev = in[0].device();
    auto on = [&](const Tensor& t) { return t.to(dev); };
    const Tensor& x = in[0];
    const int64_t b = x.size(0), l = x.size(1), dh = kModel / kHeads;
    Tensor h = layer_norm(x, {kModel}, on(w.ln1_w), on(w.ln1_b));
    Tensor q = linear(h, on(w.wq), on(w.bq)).view({b, l, kHeads, dh}).transpose(1, 2);
    Tensor k = linear(h, on(w.wk), on(w.bk)).view({b, l, kHeads, dh}).transpose(1, 2);
    Tensor v = linear(h, on(w.wv), on(w.bv)).view({b, l, kHeads, dh}).transpose(1, 2);
    Tensor a = scaled_dot_product_attention(q, k, v, std::nullopt, /*is_causal=*/true);
    a = a.transpose(1, 2).reshape({b, l, kModel});
    Tensor x1 = x + linear(a, on(w.wo), on(w.bo));
    Tensor h2 = layer_norm(x1, {kModel}, on(w.ln2_w), on(w.ln2_b));
    return std::vector<Tensor>{x1 + linear(gelu(linear(h2, on(w.w1), on(w.b1))), on(w.w2), on(w.b2))};
  };
}

TEST(Compile, TransformerBlockMatchesEager) {
  const tessera::ExportFn block = transformer_block();
  CompiledFunction f = tessera::compile(block, options());
  for (auto [b, l] : {std::pair<int64_t, int64_t>{2, 5}, {3, 7}, {4, 9}})
    expect_matches_eager(f, block, {tessera::randn({b, l, 32})}, 1e-4, "block");
  EXPECT_LE(f.stats().compiles, 2);
}

TEST(Compile, TransformerBlockOnTheReferenceAccelerator) {
  const tessera::Device dev("my_hardware_device");
  const tessera::ExportFn block = transformer_block();
  CompiledFunction f = tessera::compile(block, options());
  for (auto [b, l] : {std::pair<int64_t, int64_t>{2, 5}, {3, 7}, {4, 9}}) {
    Tensor x = tessera::randn({b, l, 32});
    const Tensor got = f({x.to(dev)})[0], want = block({x})[0];
    EXPECT_EQ(got.device().str(), "my_hardware_device:0");
    expect_close(got, want, 1e-4, "block on the accelerator");
  }
  EXPECT_LE(f.stats().compiles, 2);
  for (const auto& a : f.artifacts()) EXPECT_EQ(a.backend, "interpreter");
}

// Note [Compiled artifacts as device graphs]: on the CPU (no TESSERA_EXT_DEVICE_GRAPHS) mode
// "reduce-overhead" runs every call as in "default", with the same results and no graph; an unknown
// mode is refused.
TEST(Compile, ReduceOverheadRunsAsDefaultWhereNoGraphsAreRecorded) {
  const tessera::ExportFn block = transformer_block();
  CompileOptions o = options();
  o.mode = "reduce-overhead";
  CompiledFunction cpu = tessera::compile(block, o);
  for (int call = 0; call < 3; ++call) {
    const Tensor x = tessera::randn({2, 5, 32});
    expect_close(cpu({x})[0], block({x})[0], 1e-4, "cpu call " + std::to_string(call));
  }
  EXPECT_EQ(cpu.stats().graphs, 0);
  EXPECT_EQ(cpu.stats().graph_replays, 0);
  EXPECT_EQ(cpu.stats().compiles, 1);
  o.mode = "max-speed";
  try {
    tessera::compile(block, o);
    ADD_FAILURE() << "an unknown mode was accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"reduce-overhead\""), std::string::npos) << e.what();
  }
}

// The reference accelerator records its queues into graphs (TESSERA_EXT_DEVICE_GRAPHS), so the whole
// runtime path runs here: the first call warms up, the second records and replays, later calls
// replay; every call matches eager on its own fresh inputs (the static buffers are refilled), an
// earlier call's outputs survive later replays, inputs of other sizes run without the graph, and
// a program the recording cannot hold (the transformer block: ops the accelerator lacks run on the
// CPU fallback, which reads device memory) runs as usual after one warning.
TEST(Compile, ReduceOverheadReplaysTheAcceleratorsRecordedGraph) {
  const tessera::Device dev("my_hardware_device");
  tessera::manual_seed(31);
  const Tensor w = tessera::randn({8, 6}).to(dev);
  auto fn = [&](const std::vector<Tensor>& in) {
    Tensor h = tessera::relu(tessera::matmul(in[0], w));
    return std::vector<Tensor>{tessera::relu(h * in[1] + in[1]), h * h};
  };
  CompileOptions o = options(false, "interpreter");
  o.mode = "reduce-overhead";
  CompiledFunction f = tessera::compile(fn, o);
  std::vector<std::vector<Tensor>> got, want;
  for (int call = 0; call < 5; ++call) {
    const std::vector<Tensor> in{tessera::randn({4, 8}).to(dev), tessera::randn({4, 6}).to(dev)};
    got.push_back(f(in));
    std::vector<Tensor> w_cpu = fn(in);
    for (Tensor& t : w_cpu) t = t.to(tessera::Device("cpu"));
    want.push_back(std::move(w_cpu));
  }
  for (size_t call = 0; call < got.size(); ++call)
    for (size_t i = 0; i < got[call].size(); ++i) {
      EXPECT_EQ(got[call][i].device().str(), "my_hardware_device:0");
      expect_close(got[call][i], want[call][i], 1e-6,
                   "call " + std::to_string(call) + " output " + std::to_string(i));
    }
  EXPECT_EQ(f.stats().graphs, 1);
  EXPECT_EQ(f.stats().graph_replays, 4);
  // Other sizes: a new artifact of its own (dynamic = false), warmed up, then recorded.
  for (int call = 0; call < 3; ++call) {
    const std::vector<Tensor> in{tessera::randn({3, 8}).to(dev), tessera::randn({3, 6}).to(dev)};
    expect_close(f(in)[0], fn(in)[0].to(tessera::Device("cpu")), 1e-6, "other sizes");
  }
  EXPECT_EQ(f.stats().graphs, 2);
  EXPECT_EQ(f.stats().graph_replays, 6);

  const tessera::ExportFn block = transformer_block();
  CompileOptions ob = options();
  ob.mode = "reduce-overhead";
  CompiledFunction g = tessera::compile(block, ob);
  testing::internal::CaptureStderr();
  for (int call = 0; call < 3; ++call) {
    const Tensor x = tessera::randn({2, 5, 32});
    expect_close(g({x.to(dev)})[0], block({x})[0], 1e-4, "block call " + std::to_string(call));
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("could not be captured into a device graph"), std::string::npos) << err;
  EXPECT_EQ(g.stats().graphs, 0);
}

TEST(Compile, HundredBatchSizesCompileAtMostTwice) {
  CompiledFunction f = tessera::compile(chain, options());
  for (int64_t b = 1; b <= 100; ++b) {
    Tensor x = tessera::randn({b, 8}), y = tessera::randn({b, 8});
    const std::vector<double> xs = values(x), ys = values(y), got = values(f({x, y})[0]);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], chain_reference(xs[i], ys[i]), 2e-6) << b;
  }
  const CompileStats s = f.stats();
  EXPECT_LE(s.compiles, 2);
  EXPECT_EQ(s.calls, 100);
  EXPECT_EQ(s.cache_hits, 100 - s.compiles);
  ASSERT_EQ(s.recompile_reasons.size(), 1u);
  EXPECT_EQ(s.recompile_reasons[0], "x0: dim 0 is 2, expected 1");
  EXPECT_GT(s.compile_seconds, 0);
}

// Note [Binding symbols]: the interpreter and generated code bind a program's symbols with one
// function, so both refuse two sizes for one symbol with the same message.
TEST(Compile, InterpreterAndGeneratedCodeRefuseOneSymbolWithTwoSizesAlike) {
  if (!have_compiler()) GTEST_SKIP() << "no C++ compiler";
  tessera::ExportOptions opts;
  opts.dynamic_shapes = {{{0, tessera::Dim{"batch", 1, 64}}}, {{0, tessera::Dim{"batch", 1, 64}}}};
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * in[1]}; };
  const auto ep = tessera::export_program(fn, {tessera::randn({3, 4}), tessera::randn({3, 4})}, opts);
  tessera::compiler::codegen::CodegenOptions co;
  co.cache_dir = temp_dir() + "/cache";
  const auto cg = tessera::compiler::codegen::CompiledGraph::compile(ep, co);
  const std::vector<Tensor> bad = {tessera::ones({5, 4}), tessera::ones({6, 4})};
  auto message = [&](auto run) -> std::string {
    try {
      run();
    } catch (const tessera::Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string interpreted = message([&] { ep.run(bad); });
  const std::string generated = message([&] { cg.run(bad); });
  EXPECT_NE(interpreted.find("input 'x1' has size 6 at dimension 0 but batch is 5 from an earlier input"),
            std::string::npos) << interpreted;
  EXPECT_NE(generated.find("input 'x1' has size 6 at dimension 0 but batch is 5 from an earlier input"),
            std::string::npos) << generated;
  // Equal sizes run, and both ways give the same values.
  const std::vector<Tensor> good = {tessera::randn({5, 4}), tessera::randn({5, 4})};
  expect_close(cg.run(good)[0], ep.run(good)[0], 0, "generated vs interpreted");
}

TEST(Compile, GuardFailuresOnDtypeRankAndSize) {
  CompiledFunction f = tessera::compile(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::exp(in[0]) * 2.0}; },
      options());
  auto run = [&](const Tensor& x) {
    const std::vector<double> xs = values(x), got = values(f({x})[0]);
    ASSERT_EQ(f({x})[0].dtype(), x.dtype());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], std::exp(xs[i]) * 2.0, 1e-5 * (1 + std::exp(xs[i]) * 2));
  };
  run(tessera::randn({4, 6}));
  run(tessera::randn({4, 6}, tessera::TensorOptions().dtype(DType::Float64)));
  run(tessera::randn({2, 4, 6}));
  run(tessera::randn({4, 10}));
  const CompileStats s = f.stats();
  EXPECT_EQ(s.compiles, 4);
  ASSERT_EQ(s.recompile_reasons.size(), 3u);
  EXPECT_EQ(s.recompile_reasons[0], "x0: dtype is float64, expected float32");
  EXPECT_EQ(s.recompile_reasons[1], "x0: rank is 3, expected 2");
  EXPECT_EQ(s.recompile_reasons[2], "x0: dim 1 is 10, expected 6");
  // Only the changed dim became symbolic.
  EXPECT_EQ(f.artifacts().back().inputs, "f32[4, s0] cpu");
}

TEST(Compile, DynamicFalseAlwaysSpecialises) {
  CompiledFunction f = tessera::compile(chain, options(false));
  for (int64_t b : {2, 3, 4, 3})
    expect_matches_eager(f, chain, {tessera::randn({b, 5}), tessera::randn({b, 5})}, 1e-6, "static");
  EXPECT_EQ(f.stats().compiles, 3);
  for (const auto& a : f.artifacts()) EXPECT_EQ(a.inputs.find('s'), std::string::npos) << a.inputs;
}

TEST(Compile, DynamicTrueStartsSymbolicAndZeroOneAreNotSpecial) {
  CompiledFunction f = tessera::compile(chain, options(true));
  for (int64_t b : {6, 1, 0, 9})
    expect_matches_eager(f, chain, {tessera::randn({b, 5}), tessera::randn({b, 5})}, 1e-6, "dynamic");
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.artifacts().at(0).inputs, "f32[s0, s1] cpu, f32[s0, s1] cpu");
}

TEST(Compile, AutomaticDynamicSpecialisesZeroAndOne) {
  CompiledFunction f = tessera::compile(chain, options());
  for (int64_t b : {4, 5, 1, 6, 7})
    expect_matches_eager(f, chain, {tessera::randn({b, 3}), tessera::randn({b, 3})}, 1e-6, "automatic");
  EXPECT_EQ(f.stats().compiles, 3);  // 4, then s0 in [2, max], then 1
  EXPECT_EQ(f.artifacts().at(2).inputs, "f32[1, 3] cpu, f32[1, 3] cpu");
}

TEST(Compile, AutomaticDynamicCanBeDisabledFromTheEnvironment) {
  setenv("TESSERA_AUTOMATIC_DYNAMIC", "0", 1);
  CompiledFunction f = tessera::compile(chain, options());
  setenv("TESSERA_AUTOMATIC_DYNAMIC", "maybe", 1);
  try {
    tessera::compile(chain, options());
    ADD_FAILURE() << "accepted TESSERA_AUTOMATIC_DYNAMIC=maybe";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TESSERA_AUTOMATIC_DYNAMIC='maybe' is not a boolean"),
              std::string::npos)
        << e.what();
  }
  unsetenv("TESSERA_AUTOMATIC_DYNAMIC");
  for (int64_t b : {2, 3, 4})
    expect_matches_eager(f, chain, {tessera::randn({b, 5}), tessera::randn({b, 5})}, 1e-6, "");
  EXPECT_EQ(f.stats().compiles, 3);
}

TEST(Compile, DimsTheProgramForcesToAConstantStayStatic) {
  // The size read from the input becomes a constant of the graph: dim 0 cannot be symbolic.
  tessera::ExportFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0] + tessera::full({in[0].size(0)}, 1.5)};
  };
  CompiledFunction f = tessera::compile(fn, options());
  for (int64_t n : {3, 5, 7, 5}) expect_matches_eager(f, fn, {tessera::randn({n})}, 1e-6, "n");
  EXPECT_EQ(f.stats().compiles, 3);
  for (const auto& a : f.artifacts()) EXPECT_EQ(a.inputs.find('s'), std::string::npos) << a.inputs;
}

TEST(Compile, RecompileLimitRunsTheMostGeneralArtifact) {
  CompileOptions o = options(false);
  o.recompile_limit = 3;
  o.name = "limited";
  CompiledFunction f = tessera::compile(chain, o);
  testing::internal::CaptureStderr();
  for (int64_t b = 2; b <= 9; ++b)
    expect_matches_eager(f, chain, {tessera::randn({b, 4}), tessera::randn({b, 4})}, 1e-6, "limit");
  // Another dtype: the general artifact refuses it, fn runs eagerly.
  const auto f64 = tessera::TensorOptions().dtype(DType::Float64);
  expect_matches_eager(f, chain, {tessera::randn({3, 4}, f64), tessera::randn({3, 4}, f64)}, 1e-12, "f64");
  const std::string err = testing::internal::GetCapturedStderr();
  const CompileStats s = f.stats();
  EXPECT_EQ(s.compiles, 4);  // three, then the general one
  EXPECT_TRUE(s.limit_reached);
  EXPECT_EQ(s.eager_calls, 1);
  EXPECT_EQ(f.artifacts().back().inputs, "f32[s0, s1] cpu, f32[s0, s1] cpu");
  const std::string warning =
      "'limited' reached its recompile limit of 3 (last guard failure: x0: dim 0 is 5, expected";
  const size_t at = err.find(warning);
  EXPECT_NE(at, std::string::npos) << err << "|" << s.recompile_reasons.size();
  EXPECT_EQ(err.find("recompile limit", at + warning.size()), std::string::npos) << "warned twice: " << err;
}

TEST(Compile, InterpreterBackendAndUncapturableFunctions) {
  CompiledFunction f = tessera::compile(chain, options(std::nullopt, "interpreter"));
  for (int64_t b : {2, 3})
    expect_matches_eager(f, chain, {tessera::randn({b, 5}), tessera::randn({b, 5})}, 1e-6, "");
  EXPECT_EQ(f.artifacts().at(0).backend, "interpreter");
  EXPECT_EQ(f.stats().interpreted, 2);
  // Reading a value cannot be captured: the function runs eagerly, with one warning.
  tessera::ExportFn reads = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0] * in[0].sum().item().to<double>()};
  };
  CompiledFunction g = tessera::compile(reads, options());
  testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) expect_matches_eager(g, reads, {tessera::randn({4})}, 1e-6, "reads");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("'compiled_fn' cannot be captured (export: item() reads"), std::string::npos) << err;
  EXPECT_EQ(g.artifacts().at(0).backend, "eager");
  EXPECT_EQ(g.stats().compiles, 1);
  EXPECT_THROW(tessera::compile(chain, options(std::nullopt, "tvm")), tessera::Error);
}

TEST(Compile, WithoutACompilerRunsTheInterpreterWithOneWarning) {
  setenv("CXX", "/nonexistent/tessera-test-c++", 1);
  testing::internal::CaptureStderr();
  CompiledFunction f = tessera::compile(chain, options());
  CompiledFunction g = tessera::compile(chain, options(true));
  for (int64_t b : {2, 3, 4}) {
    expect_matches_eager(f, chain, {tessera::randn({b, 5}), tessera::randn({b, 5})}, 1e-6, "f");
    expect_matches_eager(g, chain, {tessera::randn({b, 5}), tessera::randn({b, 5})}, 1e-6, "g");
  }
  const std::string err = testing::internal::GetCapturedStderr();
  unsetenv("CXX");
  for (const auto& a : f.artifacts()) EXPECT_EQ(a.backend, "interpreter");
  EXPECT_EQ(g.artifacts().at(0).backend, "interpreter");
  size_t warnings = 0;
  for (size_t at = err.find("no C++ compiler"); at != std::string::npos;
       at = err.find("no C++ compiler", at + 1))
    ++warnings;
  EXPECT_LE(warnings, 1u) << err;  // one per process (an earlier test in this process may have printed it)
}

TEST(Compile, LogSaysWhatHappens) {
  setenv("TESSERA_LOG", "compile,dynamic", 1);
  tessera::reload_log_settings();
  CompileOptions o = options();
  o.name = "logged";
  CompiledFunction f = tessera::compile(chain, o);
  testing::internal::CaptureStderr();
  for (int64_t b : {2, 3}) f({tessera::randn({b, 5}), tessera::randn({b, 5})});
  const std::string err = testing::internal::GetCapturedStderr();
  unsetenv("TESSERA_LOG");
  tessera::reload_log_settings();
  EXPECT_NE(err.find("[tessera:compile] info: 'logged': artifact 1"), std::string::npos) << err;
  EXPECT_NE(err.find("[tessera:compile] info: 'logged': recompiling: x0: dim 0 is 3, expected 2"),
            std::string::npos)
      << err;
  EXPECT_NE(
      err.find("[tessera:dynamic] info: 'logged': x0 dim 0 changed from 2 to 3; it is dynamic from now on"),
      std::string::npos)
      << err;
  EXPECT_NE(err.find("for f32[s0, 5] cpu, f32[s0, 5] cpu"), std::string::npos) << err;
}

TEST(Compile, ConcurrentCallsCompileOnceAndAgree) {
  CompiledFunction f = tessera::compile(chain, options(true));
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      CompiledFunction mine = f;  // copies share artifacts and stats
      for (int64_t b = 1; b <= 10; ++b) {
        // The feature dim (16) never equals a batch size here: dynamic dims of equal size share a
        // symbol (duck sizing), so a first capture at batch 3 with 3 features would guard
        // batch == features and compile again for the next batch size.
        Tensor x = tessera::randn({b + t, 16}), y = tessera::randn({b + t, 16});
        const std::vector<double> xs = values(x), ys = values(y), got = values(mine({x, y})[0]);
        for (size_t i = 0; i < got.size(); ++i)
          if (std::abs(got[i] - chain_reference(xs[i], ys[i])) > 2e-6) ++bad;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().calls, 40);
}

TEST(Compile, TwoProcessesCompilingTheSameGraphShareOneCacheEntry) {
  if (!have_compiler()) GTEST_SKIP() << "no C++ compiler";
  const std::string dir = temp_dir() + "/two-processes";
  pid_t kids[2];
  for (pid_t& k : kids) {
    k = fork();
    ASSERT_GE(k, 0);
    if (k == 0) {
      try {
        setenv("TESSERA_CACHE_DIR", dir.c_str(), 1);
        // A graph no other test compiles: the chain with another constant.
        tessera::ExportFn fn = [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{tessera::sigmoid(in[0] * 0.625 + in[1])};
        };
        CompiledFunction f = tessera::compile(fn);
        Tensor x = tessera::randn({16, 8}), y = tessera::randn({16, 8});
        const std::vector<double> xs = values(x), ys = values(y), got = values(f({x, y})[0]);
        for (size_t i = 0; i < got.size(); ++i)
          if (std::abs(got[i] - 1.0 / (1.0 + std::exp(-(double(float(xs[i]) * 0.625f) + ys[i])))) > 2e-6)
            _exit(3);
        if (f.artifacts().at(0).backend != "cpp") _exit(4);
        _exit(f.stats().disk_cache_hits == 1 ? 10 : 11);
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
  EXPECT_EQ(std::min(codes[0], codes[1]), 10) << codes[0] << " " << codes[1];
  EXPECT_EQ(std::max(codes[0], codes[1]), 11) << codes[0] << " " << codes[1];
  int libraries = 0;
  for (const auto& e : fs::directory_iterator(dir)) libraries += e.path().extension() == ".so";
  EXPECT_EQ(libraries, 1);
}

TEST(Compile, ReferenceAcceleratorInputsRunThroughTheInterpreter) {
  const tessera::Device dev("my_hardware_device");
  Tensor w = tessera::randn({6}) * 0.5;
  tessera::ExportFn fn = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tessera::softmax(in[0] * w.to(in[0].device()) + in[1], -1),
                               tessera::exp(in[1])};
  };
  CompiledFunction f = tessera::compile(fn, options());
  for (int64_t b : {2, 5, 8}) {
    Tensor x = tessera::randn({b, 6}), y = tessera::randn({b, 6});
    const std::vector<Tensor> got = f({x.to(dev), y.to(dev)}), want = fn({x, y});
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(got[i].device().str(), "my_hardware_device:0");
      expect_close(got[i], want[i], 1e-5, "accelerator");
    }
  }
  EXPECT_EQ(f.stats().compiles, 2);
  for (const auto& a : f.artifacts()) EXPECT_EQ(a.backend, "interpreter");
  // The same function on CPU inputs is a new artifact (a device guard), generated when it can be.
  f({tessera::randn({3, 6}), tessera::randn({3, 6})});
  EXPECT_EQ(f.stats().recompile_reasons.back(), "x0: device is cpu, expected my_hardware_device:0");
}

}  // namespace

namespace {

// clamp against hand-worked values, NaN compared as NaN.
void expect_values(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  const std::vector<double> g = values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " at " << i << ": " << g[i];
    } else {
      EXPECT_EQ(g[i], want[i]) << what << " at " << i;
    }
  }
}

}  // namespace

// clamp was added by an entry in ops.json, its shape rule, a CPU kernel and CTS cases
// (docs/adding-an-op.md): it runs eagerly, exports with a dynamic batch, and runs interpreted and
// compiled, with PyTorch's results (NaN stays NaN; min(max(x, -1), 1.5)).
TEST(Compile, ClampRunsEagerlyExportedInterpretedAndCompiled) {
  tessera::ExportFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tessera::clamp(in[0], -1, 1.5) * 2.0};
  };
  auto input = [](int64_t batch) {
    std::vector<float> v;
    for (int64_t b = 0; b < batch; ++b)
      for (float x : {-3.0f, -0.5f, NAN, 0.25f, 2.0f, float(b)}) v.push_back(x);
    return tessera::tensor(v, {batch, 6});
  };
  auto want = [](int64_t batch) {
    std::vector<double> v;
    for (int64_t b = 0; b < batch; ++b)
      for (double x : {-2.0, -1.0, double(NAN), 0.5, 3.0, 2.0 * std::min(double(b), 1.5)}) v.push_back(x);
    return v;
  };
  expect_values(fn({input(3)})[0], want(3), "eager");

  tessera::ExportOptions opts;
  opts.dynamic_shapes = {{{0, tessera::Dim{"batch", 1, 64}}}};
  opts.input_names = {"x"};
  const tessera::compiler::ExportedProgram ep = tessera::export_program(fn, {input(3)}, opts);
  EXPECT_NE(ep.graph_string().find("%1: f32[batch, 6] cpu = clamp(%x, -1, 1.5)"), std::string::npos)
      << ep.graph_string();
  for (int64_t b : {1, 4}) expect_values(ep.run({input(b)})[0], want(b), "exported, batch " + std::to_string(b));

  CompiledFunction interpreted = tessera::compile(fn, options(true, "interpreter"));
  CompiledFunction compiled = tessera::compile(fn, options(true));
  for (int64_t b : {2, 5}) {
    expect_values(interpreted({input(b)})[0], want(b), "interpreted, batch " + std::to_string(b));
    expect_values(compiled({input(b)})[0], want(b), "compiled, batch " + std::to_string(b));
  }
  EXPECT_EQ(compiled.stats().compiles, 1);
  // An int32 tensor with float bounds computes in float32, as PyTorch's promotion says.
  Tensor r = tessera::clamp(tessera::tensor(std::vector<int32_t>{-5, 0, 9}), -1.5, 2.5);
  EXPECT_EQ(r.dtype(), DType::Float32);
  expect_values(r, {-1.5, 0, 2.5}, "int32 with float bounds");
  // min > max gives max; one bound alone.
  expect_values(tessera::clamp(tessera::tensor(std::vector<float>{-1, 0, 3}), 2, 1), {1, 1, 1}, "min > max");
  expect_values(tessera::clamp(tessera::tensor(std::vector<float>{-1, 0, 3}), std::nullopt, 0.5), {-1, 0, 0.5},
                "max only");
}

// Note [Random ops in a program]: a compiled function draws fresh numbers on every call, from the
// default generator as the eager function does, so after the same manual_seed both draw the same
// numbers; an exported program run twice draws twice.
TEST(Compile, RandomOpsDrawFreshNumbersEveryCallAsEagerDoes) {
  const auto fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0] + tessera::rand({64}), tessera::randn({3, 5})};
  };
  const Tensor x = tessera::arange(0, 64).to(DType::Float32);
  for (const char* backend : {"interpreter", "cpp"}) {
    SCOPED_TRACE(backend);
    CompiledFunction f = tessera::compile(fn, options(false, backend));
    f({x});  // the capture draws too: take it out of the comparison
    const std::vector<Tensor> a = f({x}), b = f({x});
    EXPECT_FALSE(tessera::equal(a[0], b[0])) << "two calls drew the same uniform numbers";
    EXPECT_FALSE(tessera::equal(a[1], b[1])) << "two calls drew the same normal numbers";
    tessera::manual_seed(1234);
    const std::vector<Tensor> got = f({x});
    tessera::manual_seed(1234);
    const std::vector<Tensor> want = fn({x});
    EXPECT_TRUE(tessera::equal(got[0], want[0])) << "the compiled call drew other numbers than eager";
    EXPECT_TRUE(tessera::equal(got[1], want[1]));
    const std::vector<double> u = values(got[0] - x);
    for (double v : u) {
      EXPECT_GE(v, 0);
      EXPECT_LT(v, 1);
    }
  }
  tessera::compiler::ExportedProgram ep = tessera::export_program(fn, {x});
  EXPECT_FALSE(tessera::equal(ep.run({x})[1], ep.run({x})[1])) << "an exported program repeated its numbers";
}

// Note [Constants written in place]: a tensor the function allocates and fills in place is a
// constant of the program; a call writes a fresh copy, so an earlier call's output is not
// overwritten by a later call and the constant stays as captured, through the passes too.
TEST(Compile, OutputsOfTensorsFilledInPlaceAreFreshEveryCall) {
  const auto fn = [](const std::vector<Tensor>& in) {
    Tensor t = tessera::zeros({4});
    t.add_(in[0]);
    Tensor u = tessera::zeros({4}) * 2.0;  // a chain the folding pass could compute ahead
    u.add_(in[0], 3.0);
    return std::vector<Tensor>{t, u};
  };
  const Tensor one = tessera::ones({4}), five = tessera::full({4}, 5.0);
  for (const char* backend : {"interpreter", "cpp"}) {
    SCOPED_TRACE(backend);
    CompiledFunction f = tessera::compile(fn, options(false, backend));
    const std::vector<Tensor> a = f({one});
    const std::vector<Tensor> b = f({five});
    expect_values(a[0], {1, 1, 1, 1}, "the first call's output after a second call");
    expect_values(a[1], {3, 3, 3, 3}, "the first call's second output after a second call");
    expect_values(b[0], {5, 5, 5, 5}, "the second call");
    expect_values(b[1], {15, 15, 15, 15}, "the second call's second output");
  }
  tessera::compiler::ExportedProgram ep = tessera::export_program(fn, {one});
  tessera::compiler::PassManager::default_pipeline().run(ep);
  EXPECT_NE(ep.graph_string().find("clone("), std::string::npos) << ep.graph_string();
  // The constants' bytes (an allocation's, whatever they are) before and after two runs.
  std::map<std::string, std::vector<unsigned char>> before;
  auto bytes = [](const Tensor& w) {
    const Tensor c = w.contiguous();
    const auto* p = static_cast<const unsigned char*>(c.raw_const_data_ptr());
    return std::vector<unsigned char>(p, p + c.numel() * int64_t(c.itemsize()));
  };
  for (const auto& [name, w] : ep.weights) before[name] = bytes(w);
  const std::vector<Tensor> first = ep.run({one});
  ep.run({five});
  expect_values(first[0], {1, 1, 1, 1}, "an exported program's first run");
  expect_values(first[1], {3, 3, 3, 3}, "an exported program's first run, second output");
  ASSERT_FALSE(ep.weights.empty());
  for (const auto& [name, w] : ep.weights) EXPECT_EQ(bytes(w), before[name]) << "constant " << name << " was written by a run";
  // A chain from a tensor fn closes over, written in place after it: folding must not make the
  // chain's result a constant that runs then write.
  const Tensor w = tessera::ones({4});
  tessera::compiler::ExportedProgram chain = tessera::export_program(
      [&w](const std::vector<Tensor>& in) {
        Tensor c = w * 2.0;
        c.add_(in[0]);
        return std::vector<Tensor>{c};
      },
      {one});
  tessera::compiler::PassManager::default_pipeline().run(chain);
  const Tensor c1 = chain.run({one})[0];
  const Tensor c2 = chain.run({five})[0];
  expect_values(c1, {3, 3, 3, 3}, "the first run of a folded chain written in place");
  expect_values(c2, {7, 7, 7, 7}, "the second run of a folded chain written in place");
}
