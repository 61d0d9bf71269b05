// The CUDA compiler plugin (plugins/cuda/compiler, Note [Fused CUDA kernels]) through the compiler
// plugin ABI: which nodes it takes of real captured graphs (runs here: get_capability needs no GPU),
// and on a GPU, tessera::compile with it against the same function run eagerly on cuda (skips with
// the reason where no GPU is usable).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cuda_compiler_ext.h"
#include "tessera/compiler/compile.h"
#include "tessera/compiler/export.h"
#include "tessera/compiler/graph_abi.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace {

using tessera::Tensor;
constexpr const char* kPlugin = "tessera_cuda_compiler";

tessera::CompileOptions with_backend(const std::string& backend) {
  tessera::CompileOptions o;
  o.backend = backend;
  return o;
}

const tessera_compiler_interface_t* compiler_table() {
  std::string why;
  EXPECT_TRUE(tessera::load_plugin(kPlugin, &why)) << why;
  auto fn = tessera::plugin_extension<tessera_ext_compiler_fn_t>(kPlugin, TESSERA_EXT_COMPILER);
  EXPECT_NE(fn, nullptr) << "the plugin offers no compiler table";
  return fn ? fn() : nullptr;
}

// x, y (8, 16), b (16), w (16, 32): a chain, a matmul, a chain of another shape, then two ops whose
// output types differ back to back.
std::vector<Tensor> program(const std::vector<Tensor>& in) {
  const Tensor &x = in[0], &y = in[1], &b = in[2], &w = in[3];
  Tensor t = tessera::gelu(x * 2.5 + y);  // mul, add, gelu
  Tensor u = tessera::sub(t, b, 0.5);     // sub with alpha, b broadcast
  Tensor m = tessera::matmul(u, w);       // the dispatcher's (cuBLASLt)
  Tensor v = tessera::relu(m) * 0.5;      // relu, mul: (8, 32)
  Tensor p = tessera::sigmoid(x);         // (8, 16)
  Tensor q = b * 3.0;                     // (16): another type, another group
  return {v, p, q};
}

std::vector<Tensor> inputs(tessera::DType dt) {
  return {tessera::randn({8, 16}).to(dt), tessera::randn({8, 16}).to(dt), tessera::randn({16}).to(dt),
          tessera::randn({16, 32}).to(dt)};
}

// The plugin's groups by node target, in node order ("-1" for nodes it leaves).
std::vector<std::pair<std::string, int32_t>> capability(tessera::compiler::ExportedProgram& ep,
                                                        const char* device) {
  const tessera_compiler_interface_t* c = compiler_table();
  if (!c) return {};
  tessera::compiler::GraphHandle h(ep, false);
  std::vector<int32_t> groups(ep.graph.nodes.size(), -2);
  tessera_status_t s = c->get_capability(c->self, h.get(), device, groups.data());
  EXPECT_EQ(s, nullptr);
  std::vector<std::pair<std::string, int32_t>> out;
  for (size_t i = 0; i < groups.size(); ++i)
    if (ep.graph.nodes[i].kind == tessera::compiler::NodeKind::Call)
      out.emplace_back(ep.graph.nodes[i].target, groups[i]);
  return out;
}

TEST(CudaCompilerPlugin, TakesChainsOfOneTypeAndLeavesTheRestToTheDispatcher) {
  tessera::manual_seed(1);
  tessera::compiler::ExportedProgram ep = tessera::export_program(program, inputs(tessera::kFloat32));
  const auto got = capability(ep, "cuda:0");
  const std::vector<std::pair<std::string, int32_t>> want = {
      {"mul.Tensor", 0}, {"add.Tensor", 0}, {"gelu", 0},    {"sub.Tensor", 0}, {"matmul", -1},
      {"relu", 1},       {"mul.Tensor", 1}, {"sigmoid", 2}, {"mul.Tensor", 3}};
  EXPECT_EQ(got, want);
  // Not on another device, and not for integer tensors.
  for (const auto& [target, group] : capability(ep, "cpu")) EXPECT_EQ(group, -1) << target;
  tessera::compiler::ExportedProgram ints = tessera::export_program(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::relu(in[0] + in[1])}; },
      {tessera::ones({4}, tessera::TensorOptions().dtype(tessera::kInt64)),
       tessera::ones({4}, tessera::TensorOptions().dtype(tessera::kInt64))});
  for (const auto& [target, group] : capability(ints, "cuda:0")) EXPECT_EQ(group, -1) << target;
}

// Operands that both broadcast (4, 1) + (1, 5) fuse; a new output type starts a new group; a dtype
// conversion is left to the dispatcher.
TEST(CudaCompilerPlugin, BroadcastsGroupsByTypeAndLeavesConversions) {
  tessera::manual_seed(2);
  tessera::compiler::ExportedProgram ep = tessera::export_program(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{in[0] + in[1], tessera::gelu(in[0], "tanh"),
                                   tessera::exp(in[0]).to(tessera::kFloat16)};
      },
      {tessera::randn({4, 1}), tessera::randn({1, 5})});
  const auto got = capability(ep, "cuda:0");
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].first, "add.Tensor");
  EXPECT_GE(got[0].second, 0) << "(4, 1) + (1, 5): both operands broadcast to (4, 5)";
  EXPECT_EQ(got[1].first, "gelu");
  EXPECT_GE(got[1].second, 0) << "gelu(approximate='tanh') is fused";
  EXPECT_NE(got[1].second, got[0].second) << "(4, 1) is another type than (4, 5)";
  EXPECT_EQ(got[2].first, "exp");
  EXPECT_EQ(got[2].second, got[1].second);
  EXPECT_EQ(got[3].second, -1) << got[3].first << ": a dtype conversion stays with the dispatcher";
}

// A long chain is cut every 8 nodes, so that no partition needs more than the kernel's 16 inputs
// and 8 outputs.
TEST(CudaCompilerPlugin, LongChainsAreCutSoThatEveryPartitionCompiles) {
  tessera::manual_seed(6);
  tessera::compiler::ExportedProgram ep = tessera::export_program(
      [](const std::vector<Tensor>& in) {
        std::vector<Tensor> out;
        Tensor t = in[0];
        for (int i = 0; i < 20; ++i) {
          t = t * in[1] + in[2];  // two nodes, two inputs read from outside each time
          if (i % 2 == 0) out.push_back(t);
        }
        return out;
      },
      {tessera::randn({4}), tessera::randn({4}), tessera::randn({4})});
  const auto got = capability(ep, "cuda:0");
  ASSERT_EQ(got.size(), 40u);
  std::map<int32_t, int> sizes;
  for (const auto& [target, group] : got) {
    ASSERT_GE(group, 0) << target;
    ++sizes[group];
  }
  EXPECT_EQ(sizes.size(), 5u);
  for (const auto& [group, n] : sizes) EXPECT_EQ(n, 8) << "group " << group;
}

// On the CPU the plugin takes nothing: tessera::compile with it runs every node through the
// dispatcher and gives eager's results.
TEST(CudaCompilerPlugin, OnTheCpuItTakesNothing) {
  tessera::manual_seed(3);
  tessera::CompiledFunction f = tessera::compile(program, with_backend(kPlugin));
  const std::vector<Tensor> in = inputs(tessera::kFloat32);
  const std::vector<Tensor> got = f(in), want = program(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(tessera::allclose(got[i], want[i])) << i;
  EXPECT_EQ(f.artifacts().at(0).partitions, 0u);
  const tessera_compiler_interface_t* c = compiler_table();
  ASSERT_NE(c, nullptr);
  char buffer[64];
  EXPECT_EQ(c->compatibility_info(c->self, "cpu", buffer, sizeof buffer), 0u);
}

// ---- On a GPU.

tessera_cuda_compiler_stats_t stats() {
  tessera_cuda_compiler_stats_t out{};
  if (auto fn = tessera::plugin_extension<tessera_ext_cuda_compiler_stats_fn_t>(
          kPlugin, TESSERA_EXT_CUDA_COMPILER_STATS))
    fn(nullptr, &out);
  return out;
}

std::string no_gpu_reason() { return tessera::device_count("cuda") > 0 ? "" : "no usable CUDA device"; }

double tolerance(tessera::DType dt) {
  return dt == tessera::kFloat32 ? 1e-5 : dt == tessera::kFloat16 ? 4e-3 : 3e-2;
}

// Each chain runs as one kernel (the plugin's launch counter moves by the partition count per call)
// and matches eager mode on cuda; a second compile of the same program is served by the disk cache.
TEST(CudaCompilerPluginGpu, CompiledChainsMatchEagerOnCuda) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / "tessera_cuda_compiler_test_cache";
  std::filesystem::remove_all(cache);
  ASSERT_EQ(setenv("TESSERA_CACHE_DIR", cache.c_str(), 1), 0);
  const tessera::Device cuda("cuda:0");
  for (tessera::DType dt : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16}) {
    SCOPED_TRACE(tessera::dtype_name(dt));
    tessera::manual_seed(4);
    std::vector<Tensor> in = inputs(dt);
    for (Tensor& t : in) t = t.to(cuda);
    for (int round = 0; round < 2; ++round) {
      tessera::CompiledFunction f = tessera::compile(program, with_backend(kPlugin));
      const tessera_cuda_compiler_stats_t before = stats();
      const std::vector<Tensor> got = f(in), want = program(in);
      const tessera_cuda_compiler_stats_t after = stats();
      ASSERT_EQ(f.artifacts().at(0).partitions, 4u);
      EXPECT_EQ(after.launches - before.launches, 4u);
      if (round == 1) {
        EXPECT_EQ(after.compiles, before.compiles) << "the second compile was not served from the cache";
      }
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].device(), cuda);
        EXPECT_TRUE(tessera::allclose(got[i].to("cpu").to(tessera::kFloat64),
                                      want[i].to("cpu").to(tessera::kFloat64), tolerance(dt), tolerance(dt)))
            << "output " << i;
      }
    }
  }
  unsetenv("TESSERA_CACHE_DIR");
  std::filesystem::remove_all(cache);
}

// A strided (transposed) input and a broadcast one read the right elements; `auto` on cuda picks
// the plugin.
TEST(CudaCompilerPluginGpu, StridedAndBroadcastInputsAndAutoSelection) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  const tessera::Device cuda("cuda:0");
  auto fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tessera::silu(in[0] * in[1] + in[2]) / 3.0};
  };
  tessera::manual_seed(5);
  const Tensor a = tessera::randn({33, 65}).to(cuda), bt = tessera::randn({65, 33}).to(cuda),
               c = tessera::randn({65}).to(cuda);
  const std::vector<Tensor> in{a, bt.t(), c};
  tessera::CompiledFunction f = tessera::compile(fn, with_backend("auto"));
  const std::vector<Tensor> got = f(in), want = fn(in);
  EXPECT_EQ(f.artifacts().at(0).backend, kPlugin) << f.artifacts().at(0).selection;
  EXPECT_TRUE(tessera::allclose(got[0].to("cpu"), want[0].to("cpu"), 1e-5, 1e-5));
}

// Note [Linear epilogues on CUDA]: a compiled block on cuda runs linear -> bias -> gelu -> residual
// add as one _linear_epilogue (the interpreter artifact's graph shows it) and matches eager mode,
// through the interpreter and through `auto` (the plugin takes the elementwise rest).
TEST(CudaCompilerPluginGpu, LinearEpiloguesRunFusedOnCuda) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  const tessera::Device cuda("cuda:0");
  tessera::manual_seed(6);
  const Tensor w1 = (tessera::randn({64, 32}) * 0.2).to(cuda), b1 = tessera::randn({64}).to(cuda);
  const Tensor w2 = (tessera::randn({32, 64}) * 0.2).to(cuda);
  auto fn = [&](const std::vector<Tensor>& in) {
    Tensor h = tessera::gelu(tessera::linear(in[0], w1) + b1, "tanh");
    return std::vector<Tensor>{tessera::linear(h, w2) + in[0], tessera::relu(tessera::matmul(in[0], w1.t()))};
  };
  const std::vector<Tensor> in{tessera::randn({4, 7, 32}).to(cuda)};
  const std::vector<Tensor> want = fn(in);
  for (const char* backend : {"interpreter", "auto"}) {
    SCOPED_TRACE(backend);
    tessera::CompiledFunction f = tessera::compile(fn, with_backend(backend));
    const std::vector<Tensor> got = f(in);
    if (std::string(backend) == "interpreter") {
      const std::string graph = f.artifacts().at(0).graph;
      size_t fused = 0;
      for (size_t p = graph.find("_linear_epilogue"); p != std::string::npos;
           p = graph.find("_linear_epilogue", p + 1))
        ++fused;
      EXPECT_EQ(fused, 3u) << graph;
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(tessera::allclose(got[i].to("cpu"), want[i].to("cpu"), 1e-4, 1e-4)) << "output " << i;
  }
}

// Note [Compiled artifacts as device graphs]: mode "reduce-overhead" on cuda: the first call warms
// up, the second captures and replays, later calls replay; every call matches eager on its own
// fresh inputs, and an earlier call's outputs are not overwritten by later replays. A program that
// draws random numbers is not captured.
TEST(CudaCompilerPluginGpu, ReduceOverheadReplaysACudaGraph) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  const tessera::Device cuda("cuda:0");
  tessera::manual_seed(7);
  const Tensor w = (tessera::randn({48, 32}) * 0.2).to(cuda), b = tessera::randn({48}).to(cuda);
  auto fn = [&](const std::vector<Tensor>& in) {
    Tensor h = tessera::gelu(tessera::linear(in[0], w, b));
    return std::vector<Tensor>{tessera::softmax(h * 0.5 + in[1], -1), tessera::sum(h, {1})};
  };
  for (const char* backend : {"auto", "interpreter"}) {
    SCOPED_TRACE(backend);
    tessera::CompileOptions o = with_backend(backend);
    o.mode = "reduce-overhead";
    tessera::CompiledFunction f = tessera::compile(fn, o);
    std::vector<std::vector<Tensor>> kept, wanted;
    for (int call = 0; call < 5; ++call) {
      const std::vector<Tensor> in{tessera::randn({6, 32}).to(cuda), tessera::randn({6, 48}).to(cuda)};
      kept.push_back(f(in));
      wanted.push_back(fn(in));
    }
    for (size_t call = 0; call < kept.size(); ++call)
      for (size_t i = 0; i < kept[call].size(); ++i)
        EXPECT_TRUE(tessera::allclose(kept[call][i].to("cpu"), wanted[call][i].to("cpu"), 1e-4, 1e-4))
            << "call " << call << " output " << i;
    EXPECT_EQ(f.stats().graphs, 1);
    EXPECT_EQ(f.stats().graph_replays, 4);
  }
  auto noisy = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0] *
                               tessera::rand({64, 64}, tessera::TensorOptions().device(in[0].device()))};
  };
  tessera::CompileOptions o = with_backend("auto");
  o.mode = "reduce-overhead";
  tessera::CompiledFunction g = tessera::compile(noisy, o);
  const Tensor x = tessera::ones({64, 64}).to(cuda);
  for (int call = 0; call < 3; ++call) EXPECT_EQ(g({x})[0].sizes(), x.sizes());
  EXPECT_EQ(g.stats().graphs, 0) << "a program with random ops was captured";
}

}  // namespace
