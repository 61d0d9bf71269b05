// CompileOptions::backend = "auto" (Note [Compiler plugin priority]): the highest-priority compiler
// plugin serving the inputs' device runs the artifact, whatever the discovery order; ties go to the
// smaller name; a plugin that does not load is passed over; the plugins passed over are reported.
// AutoPriority runs twice (CMakeLists.txt): with the folder of chain_compiler_high found first, then
// with the folder of chain_compiler_low found first. AutoInstalled sees only the build's plugins.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "compile_plugin_util.h"
#include "tessera/compiler/compile.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace {

using tessera::CompiledFunction;
using tessera::Device;
using tessera::Tensor;
using namespace tessera::compile_plugin_test;

// expect_close, with the result on the device of the eager one.
void expect_close_on_its_device(const Tensor& got, const Tensor& want, const std::string& what) {
  EXPECT_EQ(got.device(), want.device()) << what;
  expect_close(got, want, what);
}

// Position of plugin `name` in discovery order; -1 when not listed.
long discovery_index(const std::string& name) {
  const std::vector<tessera::PluginInfo> all = tessera::plugins();
  auto it =
      std::find_if(all.begin(), all.end(), [&](const tessera::PluginInfo& p) { return p.name == name; });
  return it == all.end() ? -1 : long(it - all.begin());
}

TEST(AutoPriority, TheDiscoveryOrderIsTheOneThisRunAskedFor) {
  const char* first = std::getenv("TESSERA_TEST_FOUND_FIRST");
  ASSERT_NE(first, nullptr) << "run through ctest (compiler.priority.*)";
  const long high = discovery_index("chain_compiler_high"), low = discovery_index("chain_compiler_low");
  ASSERT_GE(high, 0);
  ASSERT_GE(low, 0);
  EXPECT_EQ(high < low, std::string(first) == "first") << "high at " << high << ", low at " << low;
}

TEST(AutoPriority, TheHighestPriorityCompilerOfTheCpuWinsAndTheOthersAreReported) {
  Chains c;
  CompiledFunction f = tessera::compile(c.fn, with_backend("auto"));
  const std::vector<Tensor> in{tessera::randn({3, 8}), tessera::randn({3, 8})};
  const std::vector<Tensor> got = f(in), want = c.fn(in);
  for (size_t i = 0; i < 2; ++i) expect_close_on_its_device(got[i], want[i], "output " + std::to_string(i));
  const tessera::ArtifactInfo a = f.artifacts().at(0);
  EXPECT_EQ(a.backend, "chain_compiler_high") << a.selection;
  EXPECT_EQ(a.partitions, 2u);
  // The broken one ranks first (priority 30) but does not load; the loser is named with its priority.
  EXPECT_NE(a.selection.find("auto for cpu: chain_compiler_high (priority 20) over "), std::string::npos)
      << a.selection;
  EXPECT_NE(a.selection.find("chain_compiler_low (priority 10)"), std::string::npos) << a.selection;
  EXPECT_NE(a.selection.find("chain_compiler_broken"), std::string::npos) << a.selection;
  EXPECT_NE(a.selection.find("no_such_library.so"), std::string::npos) << a.selection;
}

#ifdef TESSERA_TEST_ACCELERATOR_COMPILER
TEST(AutoPriority, EqualPrioritiesGoToTheSmallerNameAboveTheAcceleratorsOwn) {
  Chains c;
  CompiledFunction f = tessera::compile(c.fn, with_backend("auto"));
  const Device dev("my_hardware_device");
  const std::vector<Tensor> in{tessera::randn({3, 8}), tessera::randn({3, 8})};
  const std::vector<Tensor> got = f({in[0].to(dev), in[1].to(dev)}),
                            want = c.fn({in[0].to(dev), in[1].to(dev)});
  for (size_t i = 0; i < 2; ++i) expect_close_on_its_device(got[i], want[i], "output " + std::to_string(i));
  const tessera::ArtifactInfo a = f.artifacts().at(0);
  EXPECT_EQ(a.backend, "chain_compiler_tie_a") << a.selection;
  EXPECT_EQ(a.partitions, 0u) << "chain_compiler takes nothing off the CPU";
  EXPECT_NE(a.selection.find("auto for my_hardware_device:0: chain_compiler_tie_a (priority 60) over "
                             "chain_compiler_tie_b (priority 60), my_hardware_device_compiler (priority 50)"),
            std::string::npos)
      << a.selection;
}
#endif

TEST(AutoInstalled, WithoutACompilerForTheCpuAutoIsCpp) {
  auto fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tessera::relu(in[0] * 3.0 - 1.0)};
  };
  CompiledFunction f = tessera::compile(fn, with_backend("auto"));
  const Tensor x = tessera::randn({5, 4});
  expect_close_on_its_device(f({x}).at(0), fn({x}).at(0), "cpu");
  const tessera::ArtifactInfo a = f.artifacts().at(0);
  // "interpreter" where the machine has no C++ compiler (compile_test covers that path).
  EXPECT_TRUE(a.backend == "cpp" || a.backend == "interpreter") << a.backend;
  EXPECT_EQ(a.selection, "auto for cpu: cpp (no compiler plugin serves cpu)");
}

#ifdef TESSERA_TEST_ACCELERATOR_COMPILER
TEST(AutoInstalled, TheAcceleratorsInputsGoToItsCompiler) {
  Chains c;
  CompiledFunction f = tessera::compile(c.fn, with_backend("auto"));
  const Device dev("my_hardware_device");
  for (int64_t b : {2, 4, 6}) {
    const std::vector<Tensor> in{tessera::randn({b, 8}).to(dev), tessera::randn({b, 8}).to(dev)};
    const std::vector<Tensor> got = f(in), want = c.fn(in);
    for (size_t i = 0; i < 2; ++i) expect_close_on_its_device(got[i], want[i], "batch " + std::to_string(b));
  }
  for (const tessera::ArtifactInfo& a : f.artifacts()) {
    EXPECT_EQ(a.backend, "my_hardware_device_compiler") << a.selection;
    EXPECT_EQ(a.partitions, 2u);
    EXPECT_EQ(a.selection, "auto for my_hardware_device:0: my_hardware_device_compiler (priority 50)");
  }
  // The CPU inputs of the same function still get cpp.
  const std::vector<Tensor> in{tessera::randn({3, 8}), tessera::randn({3, 8})};
  const std::vector<Tensor> got = f(in), want = c.fn(in);
  for (size_t i = 0; i < 2; ++i) expect_close_on_its_device(got[i], want[i], "cpu");
  EXPECT_NE(f.artifacts().back().selection.find("cpp (no compiler plugin serves cpu)"), std::string::npos);
}
#endif

}  // namespace
