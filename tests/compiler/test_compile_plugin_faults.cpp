// A compiler plugin that misbehaves (chain_compiler_faulty, TESSERA_TEST_CHAIN_FAULT) is refused with
// a message naming what it did, and with backend "auto" the next candidate compiles the function
// instead; the failure is remembered, so later artifacts do not ask the failing plugin again.
// TESSERA_PLUGIN_PATH (CMakeLists.txt) lists chain_compiler_faulty (priority 40) and
// chain_compiler_backup (priority 10), both for the CPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "compile_plugin_util.h"
#include "tessera/compiler/compile.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace {

using tessera::CompiledFunction;
using tessera::Tensor;
using namespace tessera::compile_plugin_test;

struct Fault {
  explicit Fault(const char* which) { ::setenv("TESSERA_TEST_CHAIN_FAULT", which, 1); }
  ~Fault() { ::unsetenv("TESSERA_TEST_CHAIN_FAULT"); }
};

// How many times chain_compiler_faulty's compile ran in this process.
uint64_t faulty_compiles() {
  auto fn = reinterpret_cast<uint64_t (*)()>(tessera::plugin_proc_address("chain_compiler_faulty", "test.chain_compiles"));
  return fn ? fn() : 0;
}

std::string error_of(CompiledFunction& f, const std::vector<Tensor>& in) {
  try {
    f(in);
  } catch (const tessera::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CompilePluginFaults, AFailingCompileFallsBackToTheNextCandidateAndIsRemembered) {
  Fault fault("fail_compile");
  Chains c;
  CompiledFunction f = tessera::compile(c.fn, with_backend("auto"));
  const std::vector<Tensor> in{tessera::randn({3, 8}), tessera::randn({3, 8})};
  const std::vector<Tensor> got = f(in), want = c.fn(in);
  for (size_t i = 0; i < 2; ++i) expect_close(got[i], want[i], "output " + std::to_string(i));
  const tessera::ArtifactInfo a = f.artifacts().at(0);
  EXPECT_EQ(a.backend, "chain_compiler_backup") << a.selection;
  EXPECT_EQ(a.partitions, 2u);
  const uint64_t compiles = faulty_compiles();
  EXPECT_GE(compiles, 1u) << "the faulty plugin was chosen first and asked to compile";
  // A new shape makes a new artifact: the faulty plugin is passed over without being asked again.
  const std::vector<Tensor> in5{tessera::randn({5, 8}), tessera::randn({5, 8})};
  const std::vector<Tensor> got5 = f(in5), want5 = c.fn(in5);
  for (size_t i = 0; i < 2; ++i) expect_close(got5[i], want5[i], "output " + std::to_string(i) + " at batch 5");
  ASSERT_EQ(f.artifacts().size(), 2u);
  const tessera::ArtifactInfo b = f.artifacts().at(1);
  EXPECT_EQ(b.backend, "chain_compiler_backup") << b.selection;
  EXPECT_EQ(faulty_compiles(), compiles) << b.selection;
  EXPECT_NE(b.selection.find("chain_compiler_faulty (priority 40) failed to compile earlier: "), std::string::npos)
      << b.selection;
  EXPECT_NE(b.selection.find("compile fails on request"), std::string::npos) << b.selection;
}

TEST(CompilePluginFaults, AnOkStatusWithoutAnExecutableIsRefused) {
  Fault fault("null_executable");
  Chains c;
  CompiledFunction f = tessera::compile(c.fn, with_backend("chain_compiler_faulty"));
  const std::string e = error_of(f, {tessera::randn({3, 8}), tessera::randn({3, 8})});
  EXPECT_NE(e.find("compiler plugin 'chain_compiler_faulty': compile returned an OK status but no executable"),
            std::string::npos)
      << e;
  // With "auto" the next candidate takes it.
  CompiledFunction g = tessera::compile(c.fn, with_backend("auto"));
  const std::vector<Tensor> in{tessera::randn({2, 8}), tessera::randn({2, 8})};
  const std::vector<Tensor> got = g(in), want = c.fn(in);
  for (size_t i = 0; i < 2; ++i) expect_close(got[i], want[i], "output " + std::to_string(i));
  EXPECT_EQ(g.artifacts().at(0).backend, "chain_compiler_backup") << g.artifacts().at(0).selection;
}

TEST(CompilePluginFaults, ClaimingAPlaceholderIsRefused) {
  Fault fault("claim_placeholder");
  Chains c;
  CompiledFunction f = tessera::compile(c.fn, with_backend("chain_compiler_faulty"));
  const std::string e = error_of(f, {tessera::randn({3, 8}), tessera::randn({3, 8})});
  EXPECT_NE(e.find("get_capability put node 0 (a placeholder) in group 0; only call nodes can be claimed"),
            std::string::npos)
      << e;
  // The process keeps working: the same function without the fault compiles through the plugin.
  ::unsetenv("TESSERA_TEST_CHAIN_FAULT");
  CompiledFunction g = tessera::compile(c.fn, with_backend("chain_compiler_faulty"));
  const std::vector<Tensor> in{tessera::randn({3, 8}), tessera::randn({3, 8})};
  const std::vector<Tensor> got = g(in), want = c.fn(in);
  for (size_t i = 0; i < 2; ++i) expect_close(got[i], want[i], "output " + std::to_string(i));
  EXPECT_EQ(g.artifacts().at(0).backend, "chain_compiler_faulty");
}

}  // namespace
