// tessera::compile with a compiler plugin as the backend (Note [Compiler plugin ABI]): the plugin in
// chain_compiler/ (plain C, loaded through TESSERA_PLUGIN_PATH) takes chains of elementwise float32
// ops; every other node runs through the dispatcher. Results against the same function run eagerly.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/compiler/compile.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace {

using tessera::CompiledFunction;
using tessera::CompileOptions;
using tessera::Tensor;

using LaunchesFn = uint64_t (*)();

uint64_t launches() {
  auto fn = tessera::plugin_extension<LaunchesFn>("chain_compiler", "test.chain_launches");
  EXPECT_NE(fn, nullptr);
  return fn ? fn() : 0;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << what;
  Tensor g = got.to(tessera::Device("cpu")).to(tessera::DType::Float64).contiguous();
  Tensor w = want.to(tessera::Device("cpu")).to(tessera::DType::Float64).contiguous();
  for (int64_t i = 0; i < g.numel(); ++i)
    ASSERT_NEAR(g.data_ptr<double>()[i], w.data_ptr<double>()[i],
                1e-5 * (1 + std::abs(w.data_ptr<double>()[i])))
        << what << " at " << i;
}

// sigmoid(x * y + 0.5), a linear layer, then tanh(g) * 2 - g: two chains around one linear.
struct Chains {
  Tensor w = tessera::randn({6, 8}) * 0.3;
  tessera::ExportFn fn = [this](const std::vector<Tensor>& in) {
    Tensor h = tessera::sigmoid(in[0] * in[1] + 0.5);
    Tensor g = tessera::linear(h, w.to(in[0].device()));
    return std::vector<Tensor>{tessera::tanh(g) * 2.0 - g, h};
  };
};

CompileOptions plugin_backend() {
  CompileOptions o;
  o.backend = "chain_compiler";
  return o;
}

TEST(CompilePlugin, ThePluginRunsEachChainAsOneLaunchAndTheDispatcherTheRest) {
  Chains c;
  CompiledFunction f = tessera::compile(c.fn, plugin_backend());
  for (int64_t b : {3, 5, 7}) {
    const std::vector<Tensor> in{tessera::randn({b, 8}), tessera::randn({b, 8})};
    const uint64_t before = launches();
    const std::vector<Tensor> got = f(in), want = c.fn(in);
    EXPECT_EQ(launches() - before, 2u) << "batch " << b;
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i) expect_close(got[i], want[i], "batch " + std::to_string(b));
  }
  EXPECT_EQ(f.stats().compiles, 2);  // static, then the batch dynamic
  for (const auto& a : f.artifacts()) {
    EXPECT_EQ(a.backend, "chain_compiler");
    EXPECT_EQ(a.partitions, 2u);
  }
}

TEST(CompilePlugin, OnAnotherDeviceThePluginTakesNothing) {
  Chains c;
  CompiledFunction f = tessera::compile(c.fn, plugin_backend());
  const tessera::Device dev("my_hardware_device");
  const std::vector<Tensor> in{tessera::randn({4, 8}), tessera::randn({4, 8})};
  const uint64_t before = launches();
  const std::vector<Tensor> got = f({in[0].to(dev), in[1].to(dev)}), want = c.fn(in);
  EXPECT_EQ(launches(), before);
  EXPECT_EQ(f.artifacts().at(0).partitions, 0u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i].device().str(), "my_hardware_device:0");
    expect_close(got[i], want[i], "accelerator");
  }
}

TEST(CompilePlugin, BackendsThatAreNotCompilerPluginsAreRefused) {
  auto message = [](const std::string& backend) {
    try {
      CompileOptions o;
      o.backend = backend;
      tessera::compile([](const std::vector<Tensor>& in) { return in; }, o);
    } catch (const tessera::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message("cpu").find("backend 'cpu' is a plugin of kind backend, not compiler"), std::string::npos)
      << message("cpu");
  const std::string unknown = message("tvm");
  EXPECT_NE(unknown.find("unknown backend 'tvm'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("chain_compiler"), std::string::npos) << unknown;
}

}  // namespace
