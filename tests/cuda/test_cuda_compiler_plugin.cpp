// The CUDA compiler plugin (plugins/cuda/compiler, Note [Fused CUDA kernels]) through the compiler
// plugin ABI: which nodes it takes of real captured graphs (runs here: get_capability needs no GPU),
// and on a GPU, tessera::compile with it against the same function run eagerly on cuda (skips with
// the reason where no GPU is usable).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cuda_compiler_ext.h"
#include "host_kernel.h"
#include "nvrtc_loader.h"
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

// Note [Fused row reductions]: last-dim reductions join the elementwise steps around them;
// softmax and the norms are taken whole; what fusing would not help is left.
TEST(CudaCompilerPlugin, TakesReductionsWithTheStepsAroundThem) {
  tessera::manual_seed(7);
  const Tensor x = tessera::randn({4, 16}), y = tessera::randn({4, 16}), w = tessera::randn({16}),
               b = tessera::randn({16}), wt = tessera::randn({16, 8});
  auto groups_of = [](const std::vector<std::pair<std::string, int32_t>>& got) {
    std::vector<int32_t> out;
    for (const auto& [target, group] : got) out.push_back(group);
    return out;
  };
  {  // A scaled, masked softmax: one kernel.
    tessera::compiler::ExportedProgram ep = tessera::export_program(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{tessera::softmax(in[0] * 0.125 + in[1], -1)};
        },
        {x, y});
    const auto got = capability(ep, "cuda:0");
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[2].first, "softmax");
    EXPECT_GE(got[0].second, 0);
    EXPECT_EQ(groups_of(got), std::vector<int32_t>(3, got[0].second));
  }
  {  // softmax alone: the dispatcher's kernel; over dim 0: not a row reduction.
    tessera::compiler::ExportedProgram alone = tessera::export_program(
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::softmax(in[0], -1)}; }, {x});
    const auto got = capability(alone, "cuda:0");
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].second, -1) << "one softmax alone saves nothing";
    tessera::compiler::ExportedProgram dim0 = tessera::export_program(
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::softmax(in[0] * 2.0, 0)}; },
        {x});
    const auto got0 = capability(dim0, "cuda:0");
    ASSERT_EQ(got0.size(), 2u);
    EXPECT_GE(got0[0].second, 0) << got0[0].first;
    EXPECT_EQ(got0[1].second, -1) << "softmax over dim 0";
  }
  {  // The residual add and layer_norm: one kernel; the matmul after it stays with cuBLASLt.
    tessera::compiler::ExportedProgram ep = tessera::export_program(
        [](const std::vector<Tensor>& in) {
          Tensor h = tessera::layer_norm(in[0] + in[1], {16}, in[2], in[3]);
          return std::vector<Tensor>{tessera::matmul(h, in[4])};
        },
        {x, y, w, b, wt});
    const auto got = capability(ep, "cuda:0");
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[1].first, "layer_norm");
    EXPECT_GE(got[0].second, 0);
    EXPECT_EQ(got[1].second, got[0].second);
    EXPECT_EQ(got[2].second, -1) << got[2].first;
  }
  {  // An RMS norm written out: x * rsqrt(mean(x * x, -1, keepdim) + eps) * w, one kernel.
    tessera::compiler::ExportedProgram ep = tessera::export_program(
        [](const std::vector<Tensor>& in) {
          Tensor ms = tessera::mean(in[0] * in[0], {-1}, true);
          return std::vector<Tensor>{in[0] * tessera::rsqrt(ms + 1e-6) * in[1]};
        },
        {x, w});
    const auto got = capability(ep, "cuda:0");
    ASSERT_EQ(got.size(), 6u);
    EXPECT_GE(got[0].second, 0);
    EXPECT_EQ(groups_of(got), std::vector<int32_t>(6, got[0].second));
  }
  {  // A keepdim=False sum is [rows]: it broadcasts from the right, so the op reading it starts
     // another kernel; a reduction over dim 0 is left to the dispatcher.
    tessera::compiler::ExportedProgram ep = tessera::export_program(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{tessera::sum(in[0] * in[1], {-1}, false) * 2.0,
                                     tessera::sum(in[0], {0}, true)};
        },
        {x, y});
    const auto got = capability(ep, "cuda:0");
    ASSERT_EQ(got.size(), 4u);
    EXPECT_GE(got[0].second, 0);
    EXPECT_EQ(got[1].second, got[0].second) << "mul and sum";
    EXPECT_GE(got[2].second, 0);
    EXPECT_NE(got[2].second, got[0].second) << "the [rows] value is read by another kernel";
    EXPECT_EQ(got[3].second, -1) << "a sum over dim 0";
  }
  {  // A few long rows: a block per row would idle the GPU, so the reduction is left.
    tessera::compiler::ExportedProgram ep = tessera::export_program(
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::sum(in[0] * in[0], {-1}, true)}; },
        {tessera::randn({4, 8192})});
    const auto got = capability(ep, "cuda:0");
    ASSERT_EQ(got.size(), 2u);
    EXPECT_GE(got[0].second, 0) << "the square is still a kernel of its own";
    EXPECT_EQ(got[1].second, -1) << "4 rows of 8192";
  }
}

// The plugin's source for a program it takes whole, over the host prelude (the extension
// TESSERA_EXT_CUDA_COMPILER_SOURCE), built and run on CPU tensors: the lowering of softmax,
// log_softmax, layer_norm, rms_norm and hand-written reductions, and the row kernel, checked
// against double loops without a GPU.
namespace cf = tessera::cuda_fuser;

std::string source_of(tessera::compiler::ExportedProgram& ep, int32_t host) {
  std::string why;
  EXPECT_TRUE(tessera::load_plugin(kPlugin, &why)) << why;
  auto fn = tessera::plugin_extension<tessera_ext_cuda_compiler_source_fn_t>(
      kPlugin, TESSERA_EXT_CUDA_COMPILER_SOURCE);
  if (!fn) {
    ADD_FAILURE() << "the plugin offers no " << TESSERA_EXT_CUDA_COMPILER_SOURCE;
    return {};
  }
  tessera::compiler::GraphHandle h(ep, false);
  size_t length = 0;
  try {
    tessera::throw_status(fn(nullptr, h.get(), host, nullptr, 0, &length), "source");
    std::string text(length, '\0');
    tessera::throw_status(fn(nullptr, h.get(), host, text.data(), text.size(), &length), "source");
    return text;
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
    return {};
  }
}

// Runs the host kernel over CPU tensors of a domain; each tensor's strides are given per dim of
// the domain (right-aligned, 0 where it broadcasts), written here and not by the plugin.
void run_host(const std::string& source, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
              const std::vector<int64_t>& domain) {
  std::string error;
  tessera::cuda_fuser_test::FusedFn fn = tessera::cuda_fuser_test::build_host(source, &error);
  ASSERT_NE(fn, nullptr) << error;
  cf::TsArgs a{};
  a.rank = int64_t(domain.size());
  a.n = 1;
  for (size_t d = 0; d < domain.size(); ++d) a.sizes[d] = domain[d], a.n *= domain[d];
  for (size_t k = 0; k < in.size(); ++k) {
    a.in[k] = in[k].raw_const_data_ptr();
    const size_t skip = domain.size() - size_t(in[k].dim());
    for (size_t d = skip; d < domain.size(); ++d)
      a.strides[k][d] = in[k].size(int64_t(d - skip)) == 1 ? 0 : in[k].stride(int64_t(d - skip));
  }
  for (size_t o = 0; o < out.size(); ++o) a.out[o] = out[o].raw_data_ptr();
  fn(a);
}

std::vector<double> values(const Tensor& t) {
  Tensor d = t.to(tessera::kFloat64).contiguous();
  const double* p = d.const_data_ptr<double>();
  return std::vector<double>(p, p + d.numel());
}

void expect_near_all(const Tensor& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  const std::vector<double> g = values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i << ": got " << g[i];
    else
      EXPECT_NEAR(g[i], want[i], tol * (1 + std::abs(want[i]))) << what << " element " << i;
  }
}

TEST(CudaCompilerPlugin, LoweredReductionsRunOnTheHostLikeDoubleLoops) {
  tessera::manual_seed(8);
  const int64_t rows = 6, k = 40;
  for (tessera::DType dt : {tessera::kFloat32, tessera::kBFloat16}) {
    SCOPED_TRACE(tessera::dtype_name(dt));
    const double tol = dt == tessera::kFloat32 ? 1e-5 : 3e-2;
    Tensor x = tessera::randn({rows, k}).to(dt), y = tessera::randn({rows, k}).to(dt),
           w = tessera::randn({k}).to(dt), b = tessera::randn({k}).to(dt);
    {
      Tensor xn = tessera::randn({rows, k});
      xn.data_ptr<float>()[2 * k + 7] = NAN;  // row 2 holds a NaN
      x = xn.to(dt);
    }
    const std::vector<double> X = values(x), Y = values(y), W = values(w), B = values(b);
    // Softmax and log_softmax of 0.125x + y.
    {
      tessera::compiler::ExportedProgram ep = tessera::export_program(
          [](const std::vector<Tensor>& in) {
            Tensor s = in[0] * 0.125 + in[1];
            return std::vector<Tensor>{tessera::softmax(s, -1), tessera::log_softmax(s, -1)};
          },
          {x, y});
      for (const auto& [target, group] : capability(ep, "cuda:0")) ASSERT_EQ(group, 0) << target;
      std::vector<double> sm, lsm;
      for (int64_t r = 0; r < rows; ++r) {
        double hi = -INFINITY, z = 0;
        bool nan = false;
        std::vector<double> s(static_cast<size_t>(k), 0.0);
        for (int64_t j = 0; j < k; ++j) {
          s[size_t(j)] = 0.125 * X[size_t(r * k + j)] + Y[size_t(r * k + j)];
          nan |= std::isnan(s[size_t(j)]);
          hi = std::max(hi, s[size_t(j)]);
        }
        for (double v : s) z += std::exp(v - hi);
        for (double v : s) {
          sm.push_back(nan ? NAN : std::exp(v - hi) / z);
          lsm.push_back(nan ? NAN : v - hi - std::log(z));
        }
      }
      Tensor o0 = tessera::empty({rows, k}, tessera::TensorOptions().dtype(dt)), o1 = tessera::empty_like(o0);
      run_host(source_of(ep, 1), {x, y}, {o0, o1}, {rows, k});
      expect_near_all(o0, sm, tol, "softmax");
      expect_near_all(o1, lsm, tol, "log_softmax");
    }
    // layer_norm(x + y) with weight and bias; rms_norm(y) with weight.
    {
      tessera::compiler::ExportedProgram ep = tessera::export_program(
          [](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{tessera::layer_norm(in[0] + in[1], {40}, in[2], in[3], 1e-5),
                                       tessera::rms_norm(in[1], {40}, in[2], 1e-6)};
          },
          {x, y, w, b});
      for (const auto& [target, group] : capability(ep, "cuda:0")) ASSERT_EQ(group, 0) << target;
      std::vector<double> ln, rms;
      for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0, sq = 0;
        for (int64_t j = 0; j < k; ++j) mean += X[size_t(r * k + j)] + Y[size_t(r * k + j)];
        mean /= double(k);
        for (int64_t j = 0; j < k; ++j) {
          const double c = X[size_t(r * k + j)] + Y[size_t(r * k + j)] - mean;
          var += c * c;
          sq += Y[size_t(r * k + j)] * Y[size_t(r * k + j)];
        }
        var /= double(k);
        sq /= double(k);
        for (int64_t j = 0; j < k; ++j) {
          const double v = X[size_t(r * k + j)] + Y[size_t(r * k + j)];
          ln.push_back((v - mean) / std::sqrt(var + 1e-5) * W[size_t(j)] + B[size_t(j)]);
          rms.push_back(Y[size_t(r * k + j)] / std::sqrt(sq + 1e-6) * W[size_t(j)]);
        }
      }
      Tensor o0 = tessera::empty({rows, k}, tessera::TensorOptions().dtype(dt)), o1 = tessera::empty_like(o0);
      run_host(source_of(ep, 1), {x, y, w, b}, {o0, o1}, {rows, k});
      expect_near_all(o0, ln, 4 * tol, "layer_norm");
      expect_near_all(o1, rms, 4 * tol, "rms_norm");
    }
    // Hand-written: y * rsqrt(mean(y * y, -1, keepdim) + 1e-6) * w, with the row values amax(y)
    // (keepdim=False) and sum(y, keepdim) as outputs too.
    {
      tessera::compiler::ExportedProgram ep = tessera::export_program(
          [](const std::vector<Tensor>& in) {
            Tensor ms = tessera::mean(in[0] * in[0], {-1}, true);
            return std::vector<Tensor>{in[0] * tessera::rsqrt(ms + 1e-6) * in[1],
                                       tessera::amax(in[0], {-1}, false), tessera::sum(in[0], {-1}, true)};
          },
          {y, w});
      for (const auto& [target, group] : capability(ep, "cuda:0")) ASSERT_EQ(group, 0) << target;
      std::vector<double> norm, hi, total;
      for (int64_t r = 0; r < rows; ++r) {
        double sq = 0, m = -INFINITY, s = 0;
        for (int64_t j = 0; j < k; ++j) {
          const double v = Y[size_t(r * k + j)];
          sq += v * v;
          m = std::max(m, v);
          s += v;
        }
        for (int64_t j = 0; j < k; ++j)
          norm.push_back(Y[size_t(r * k + j)] / std::sqrt(sq / double(k) + 1e-6) * W[size_t(j)]);
        hi.push_back(m);
        total.push_back(s);
      }
      Tensor o0 = tessera::empty({rows, k}, tessera::TensorOptions().dtype(dt));
      Tensor o1 = tessera::empty({rows}, tessera::TensorOptions().dtype(dt));
      Tensor o2 = tessera::empty({rows, 1}, tessera::TensorOptions().dtype(dt));
      run_host(source_of(ep, 1), {y, w}, {o0, o1, o2}, {rows, k});
      expect_near_all(o0, norm, 4 * tol, "hand-written rms norm");
      expect_near_all(o1, hi, tol, "amax");
      expect_near_all(o2, total, 4 * tol, "sum");
    }
  }
}

// Programs with row reductions the plugin takes whole: x, y (6, 40), w, b (40).
std::vector<Tensor> row_programs(const std::vector<Tensor>& in) {
  const Tensor &x = in[0], &y = in[1], &w = in[2], &b = in[3];
  Tensor s = x * 0.125 + y;
  Tensor ms = tessera::mean(y * y, {-1}, true);
  return {tessera::softmax(s, -1),
          tessera::log_softmax(s, -1),
          tessera::layer_norm(x + y, {40}, w, b, 1e-5),
          tessera::rms_norm(y, {40}, w, 1e-6),
          y * tessera::rsqrt(ms + 1e-6) * w,
          tessera::amax(y, {-1}, false),
          tessera::sum(x - y, {-1}, true)};
}

std::vector<Tensor> row_inputs(tessera::DType dt) {
  return {tessera::randn({6, 40}).to(dt), tessera::randn({6, 40}).to(dt), tessera::randn({40}).to(dt),
          tessera::randn({40}).to(dt)};
}

// NVRTC compiles the device source of every lowered row program (the block reductions, the passes).
TEST(CudaCompilerPlugin, LoweredReductionsCompileWithNvrtc) {
  const cf::NvrtcApi& api = cf::nvrtc_api();
  ASSERT_TRUE(api.loaded) << api.error;
  for (tessera::DType dt : {tessera::kFloat32, tessera::kFloat64, tessera::kFloat16}) {
    SCOPED_TRACE(tessera::dtype_name(dt));
    tessera::manual_seed(9);
    tessera::compiler::ExportedProgram ep = tessera::export_program(row_programs, row_inputs(dt));
    // The whole function is more than one kernel: compile each group's nodes as their own program.
    const auto groups = capability(ep, "cuda:0");
    std::map<int32_t, int> sizes;
    for (const auto& [target, group] : groups) {
      EXPECT_GE(group, 0) << target;
      ++sizes[group];
    }
    EXPECT_LE(sizes.size(), 4u);
    for (int which = 0; which < 3; ++which) {
      tessera::compiler::ExportedProgram one = tessera::export_program(
          [which](const std::vector<Tensor>& in) {
            std::vector<Tensor> all = row_programs(in);
            if (which == 0) return std::vector<Tensor>{all[0], all[1]};
            if (which == 1) return std::vector<Tensor>{all[2], all[3]};
            return std::vector<Tensor>{all[4], all[5], all[6]};
          },
          row_inputs(dt));
      const std::string source = source_of(one, 0);
      ASSERT_FALSE(source.empty());
      const cf::Cubin c = cf::compile_cubin(api, source, 90);
      EXPECT_TRUE(c.error.empty()) << c.error << "\n" << source;
    }
  }
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

// Note [Fused row reductions] on the GPU: softmax, log_softmax, layer_norm, rms_norm and a
// hand-written norm with their neighbours run as fused kernels and match eager mode on cuda,
// NaN rows included.
TEST(CudaCompilerPluginGpu, RowReductionsMatchEagerOnCuda) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  const tessera::Device cuda("cuda:0");
  for (tessera::DType dt : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16}) {
    SCOPED_TRACE(tessera::dtype_name(dt));
    tessera::manual_seed(10);
    std::vector<Tensor> in = row_inputs(dt);
    {
      Tensor x = tessera::randn({6, 40});
      x.data_ptr<float>()[3 * 40 + 11] = NAN;
      in[0] = x.to(dt);
    }
    for (Tensor& t : in) t = t.to(cuda);
    tessera::CompiledFunction f = tessera::compile(row_programs, with_backend(kPlugin));
    const tessera_cuda_compiler_stats_t before = stats();
    const std::vector<Tensor> got = f(in), want = row_programs(in);
    const tessera_cuda_compiler_stats_t after = stats();
    const size_t partitions = f.artifacts().at(0).partitions;
    EXPECT_GE(partitions, 1u);
    EXPECT_EQ(after.launches - before.launches, partitions);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].device(), cuda);
      EXPECT_EQ(got[i].sizes(), want[i].sizes()) << "output " << i;
      expect_near_all(got[i].to("cpu"), values(want[i].to("cpu")), 4 * tolerance(dt),
                      "output " + std::to_string(i));
    }
  }
}

}  // namespace
