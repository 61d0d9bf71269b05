// The `tessera` tool reports what really happened: `check` marks a case whose kernel answered
// UNIMPLEMENTED (and so ran on the CPU fallback) as `fb`, and `devices` lists failed backends.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>

#include "loader_test_util.h"

namespace {

using namespace lt;

// Runs the built `tessera` with `env` and `args` (stderr merged) and the test's plugin folder.
std::string run_tessera(const std::string& plugin_dir, const std::string& env, const std::string& args, int* status) {
  const std::string cmd = "TESSERA_PLUGIN_PATH='" + plugin_dir + "' " + env + " '" TESSERA_CLI "' " + args + " 2>&1";
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const int st = pclose(f);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return out;
}

TEST(CheckCommand, AKernelThatAnswersUnimplementedIsReportedAsFallback) {
  TempDir dir;
  dir.write_manifest("lt_unimplemented_device",
                     backend_manifest("lt_unimplemented_device", LT_LIB_UNIMPLEMENTED_DEVICE, 3, "lt_unimpl"));
  int status = -1;
  const std::string env = "TESSERA_PLUGINS_SELECT='lt_*,cpu' TESSERA_LOG=fallback";
  const std::string out = run_tessera(dir.path(), env, "check --device lt_unimpl --ops add --dtypes float32,float64 --json", &status);
  EXPECT_EQ(status, 0) << out;
  const size_t brace = out.find("{\"device\"");
  ASSERT_NE(brace, std::string::npos) << out;
  json j = json::parse(out.substr(brace, out.rfind('}') + 1 - brace), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  int add_cases = 0;
  for (const auto& c : j["cases"]) {
    if (c.value("op", "") != "add") continue;
    ++add_cases;
    EXPECT_EQ(c.value("outcome", ""), "fallback") << c.dump();
    EXPECT_EQ(c.value("resolution", ""), "fallback") << c.dump();
  }
  EXPECT_EQ(add_cases, 2) << out;
  EXPECT_EQ(j["summary"].value("pass", -1), 0) << out;
  // The fallback warning says what happened.
  EXPECT_NE(out.find("'add.Tensor' answered UNIMPLEMENTED on device 'lt_unimpl'"), std::string::npos) << out;
  EXPECT_EQ(out.find("'add.Tensor' has no kernel"), std::string::npos) << out;

  const std::string table = run_tessera(dir.path(), env, "check --device lt_unimpl --ops add --dtypes float32", &status);
  EXPECT_EQ(status, 0) << table;
  EXPECT_NE(table.find("fb"), std::string::npos) << table;
  EXPECT_NE(table.find("0 pass, 1 fallback"), std::string::npos) << table;
}

TEST(DevicesCommand, ListsFailedBackendsWithTheirReason) {
  TempDir dir;
  dir.write_manifest("lt_init_error", backend_manifest("lt_init_error", LT_LIB_INIT_ERROR, 2, "lt_failing"));
  int status = -1;
  const std::string out = run_tessera(dir.path(), "TESSERA_PLUGINS_SELECT='lt_*'", "devices --json", &status);
  EXPECT_EQ(status, 0) << out;
  const size_t brace = out.find('{');
  ASSERT_NE(brace, std::string::npos) << out;
  json j = json::parse(out.substr(brace), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  ASSERT_TRUE(j.contains("failed_backends") && j["failed_backends"].is_array()) << out;
  bool found = false;
  for (const auto& f : j["failed_backends"]) {
    if (f.value("plugin", "") != "lt_init_error") continue;
    found = true;
    EXPECT_EQ(f.value("type", ""), "lt_failing");
    EXPECT_NE(f.value("reason", "").find("tessera_plugin_init failed"), std::string::npos) << f.dump();
  }
  EXPECT_TRUE(found) << out;

  const std::string text = run_tessera(dir.path(), "TESSERA_PLUGINS_SELECT='lt_*'", "devices", &status);
  EXPECT_EQ(status, 0) << text;
  EXPECT_NE(text.find("plugin lt_init_error"), std::string::npos) << text;
  EXPECT_NE(text.find("failed: tessera_plugin_init failed"), std::string::npos) << text;
}

// A CPU ISA request the machine cannot meet fails the cpu plugin; `tessera devices` says so instead
// of listing only the kernel-less built-in CPU.
TEST(DevicesCommand, ABogusCpuCapabilityShowsTheFailedCpuPlugin) {
  TempDir dir;
  int status = -1;
  const std::string out =
      run_tessera(dir.path(), "TESSERA_PLUGINS_SELECT=cpu TESSERA_CPU_CAPABILITY=bogus", "devices --json", &status);
  EXPECT_EQ(status, 0) << out;
  const size_t brace = out.find('{');
  ASSERT_NE(brace, std::string::npos) << out;
  json j = json::parse(out.substr(brace), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  bool found = false;
  for (const auto& f : j["failed_backends"])
    if (f.value("plugin", "") == "cpu") {
      found = true;
      EXPECT_NE(f.value("reason", "").find("bogus"), std::string::npos) << f.dump();
    }
  EXPECT_TRUE(found) << out;
}

}  // namespace
