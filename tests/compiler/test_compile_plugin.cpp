// tessera::compile with a compiler plugin as the backend (Note [Compiler plugin ABI]): the plugin in
// chain_compiler/ (plain C, loaded through TESSERA_PLUGIN_PATH) takes chains of elementwise float32
// ops; every other node runs through the dispatcher. Results against the same function run eagerly.
#include <gtest/gtest.h>

#include "compile_plugin_util.h"
#include "tessera/compiler/compile.h"
#include "tessera/compiler/compiled_program.h"
#include "tessera/compiler/program_file.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace {

using tessera::CompiledFunction;
using tessera::CompileOptions;
using tessera::CompiledProgram;
using tessera::Tensor;
using namespace tessera::compile_plugin_test;

using LaunchesFn = uint64_t (*)();

uint64_t launches() {
  auto fn = tessera::plugin_extension<LaunchesFn>("chain_compiler", "test.chain_launches");
  EXPECT_NE(fn, nullptr);
  return fn ? fn() : 0;
}

TEST(CompilePlugin, ThePluginRunsEachChainAsOneLaunchAndTheDispatcherTheRest) {
  Chains c;
  CompiledFunction f = tessera::compile(c.fn, with_backend("chain_compiler"));
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
    EXPECT_EQ(a.compatibility, "") << "a 1.2 compiler table reports none";
  }
}

TEST(CompilePlugin, OnAnotherDeviceThePluginTakesNothing) {
  Chains c;
  CompiledFunction f = tessera::compile(c.fn, with_backend("chain_compiler"));
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
  EXPECT_NE(message("cpu").find("backend 'cpu' is a backend plugin, not a compiler"), std::string::npos)
      << message("cpu");
  const std::string unknown = message("tvm");
  EXPECT_NE(unknown.find("unknown backend 'tvm'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("chain_compiler"), std::string::npos) << unknown;
}

// A plugin whose compiler table ends at the 1.2 slots (chain_compiler) compiles ahead of time as
// before: its artifact carries no compatibility string, and loading it checks nothing
// (Note [Compiled artifact compatibility]).
TEST(CompilePlugin, CompiledProgramOfA12PluginIsNotChecked) {
  Chains c;
  const std::vector<Tensor> in{tessera::randn({4, 8}), tessera::randn({4, 8})};
  tessera::ExportOptions options;
  options.parameters = {{"w", c.w}};
  CompiledProgram cp = CompiledProgram::compile(tessera::export_program(c.fn, in, options), "chain_compiler",
                                                tessera::Device("cpu"));
  ASSERT_TRUE(cp.program().compiled);
  EXPECT_EQ(cp.program().compiled->backend, "chain_compiler");
  EXPECT_EQ(cp.program().compiled->compatibility, "");
  EXPECT_EQ(tessera::compiler::compatibility_info("chain_compiler", tessera::Device("cpu")), "");
  EXPECT_EQ(tessera::compiler::validate_compatibility("chain_compiler", tessera::Device("cpu"), "anything"),
            tessera::compiler::Compatibility::NotChecked);
  const std::string path = ::testing::TempDir() + "chain_compiled.tsr";
  cp.save(path);
  CompiledProgram loaded = CompiledProgram::load(path);
  EXPECT_EQ(loaded.verdict(), tessera::compiler::Compatibility::NotChecked);
  EXPECT_EQ(loaded.recompile_reason(), "");
  EXPECT_EQ(loaded.partitions(), 2u);
  EXPECT_EQ(loaded.program().compiled->group_of_node, cp.program().compiled->group_of_node);
  const uint64_t before = launches();
  const std::vector<Tensor> got = loaded(in), want = c.fn(in);
  EXPECT_EQ(launches() - before, 2u);
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) expect_close(got[i], want[i], "output " + std::to_string(i));
  // A program without a record is not a compiled program; a wrong input gets run()'s error.
  EXPECT_THROW(CompiledProgram::load(tessera::export_program(c.fn, in, options)), tessera::Error);
  EXPECT_THROW(loaded({in[0]}), tessera::Error);
  std::remove(path.c_str());
}

}  // namespace
