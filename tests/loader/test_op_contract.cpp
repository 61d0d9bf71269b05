// The op contract at load time (Note [Dangling registrations], dispatcher/src/host_api.cpp): a kernel
// for an op nobody defined, or a second kernel for one op, fails the plugin's load even when the
// plugin ignores the status it got; and `tessera ops` lists the contract with who implements what.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>

#include "loader_test_util.h"
#include "tessera/dispatcher.h"
#include "tessera/device.h"

namespace {

using namespace lt;
using tessera::DeviceType;
using tessera::PluginStatus;

class OpContractLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tessera::shutdown_plugins();
    tessera::reset_privateuse_names_for_testing();
    ASSERT_FALSE(dir_.path().empty());
    setenv("TESSERA_PLUGIN_PATH", dir_.path().c_str(), 1);
    setenv("TESSERA_PLUGINS_SELECT", "lt_*", 1);
    unsetenv("TESSERA_PLUGINS_DISABLE");
    dir_.write_manifest("lt_badreg", backend_manifest("lt_badreg", LT_LIB_BAD_REGISTRATIONS, 2, "lt_regdev"));
  }
  void TearDown() override {
    tessera::shutdown_plugins();
    unsetenv("TESSERA_PLUGIN_PATH");
    unsetenv("TESSERA_PLUGINS_SELECT");
    unsetenv("LT_BADREG_MODE");
    tessera::reset_privateuse_names_for_testing();
  }
  // Loads lt_badreg in `mode`; returns its listing afterwards.
  tessera::PluginInfo load(const char* mode) {
    setenv("LT_BADREG_MODE", mode, 1);
    tessera::rediscover_plugins_for_testing();
    std::string why;
    tessera::load_plugin("lt_badreg", &why);
    auto p = find_plugin("lt_badreg");
    EXPECT_TRUE(p.has_value());
    return p.value_or(tessera::PluginInfo{});
  }
  static bool neg_has_kernel_on_slot2() {
    auto& d = tessera::Dispatcher::instance();
    auto b = d.backends_with_kernel(d.op("neg"));
    return std::find(b.begin(), b.end(), DeviceType::PrivateUse2) != b.end();
  }
  TempDir dir_;
};

TEST_F(OpContractLoadTest, KernelForAnUnknownOpFailsTheLoadNamingPluginNameAndClosestOps) {
  tessera::PluginInfo p = load("typo");
  EXPECT_EQ(p.status, PluginStatus::Failed) << tessera::plugin_status_name(p.status);
  for (const char* fragment : {"plugin 'lt_badreg'", "unknown operator 'lt_badreg_fil_'",
                               "closest defined: lt_badreg_fill_"})
    EXPECT_NE(p.reason.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << p.reason;
  EXPECT_EQ(p.reason.find('\n'), std::string::npos) << p.reason;
  // The rollback of a failed init: its other kernel and its op are gone, the library is unloaded.
  EXPECT_FALSE(neg_has_kernel_on_slot2());
  EXPECT_EQ(tessera::Dispatcher::instance().find_op("lt_badreg_fill_"), nullptr);
  EXPECT_FALSE(library_is_loaded(LT_LIB_BAD_REGISTRATIONS));
}

TEST_F(OpContractLoadTest, SecondKernelForTheSameOpFailsTheLoad) {
  tessera::PluginInfo p = load("dup");
  EXPECT_EQ(p.status, PluginStatus::Failed) << tessera::plugin_status_name(p.status);
  for (const char* fragment : {"plugin 'lt_badreg'", "a kernel for 'lt_badreg_fill_' is already registered",
                               "TESSERA_KERNEL_FLAG_REPLACE"})
    EXPECT_NE(p.reason.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << p.reason;
  EXPECT_FALSE(neg_has_kernel_on_slot2());
}

TEST_F(OpContractLoadTest, ReplacingAKernelIsAllowedWhenAskedFor) {
  tessera::PluginInfo p = load("replace");
  EXPECT_EQ(p.status, PluginStatus::Loaded) << p.reason;
  EXPECT_TRUE(neg_has_kernel_on_slot2());
}

TEST_F(OpContractLoadTest, CorrectPluginStillLoads) {
  tessera::PluginInfo p = load("");
  EXPECT_EQ(p.status, PluginStatus::Loaded) << p.reason;
  EXPECT_TRUE(neg_has_kernel_on_slot2());
}

// `tessera ops --json`, run as a process against lt_badreg (loads) and the schema of add.Tensor.
TEST(OpsCliTest, JsonListsSchemaTagsAndWhichDevicesImplementEachOp) {
  TempDir dir;
  dir.write_manifest("lt_badreg", backend_manifest("lt_badreg", LT_LIB_BAD_REGISTRATIONS, 2, "lt_regdev"));
  std::string cmd = "LT_BADREG_MODE=replace TESSERA_PLUGIN_PATH='" + dir.path() +
                    "' TESSERA_PLUGINS_SELECT='lt_*' '" TESSERA_CLI "' ops --json 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  int st = pclose(f);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  json j = json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out.substr(0, 400);
  const json* add = nullptr;
  const json* fill = nullptr;
  for (const auto& o : j["ops"]) {
    if (o["name"] == "add.Tensor") add = &o;
    if (o["name"] == "lt_badreg_fill_") fill = &o;
  }
  ASSERT_NE(add, nullptr);
  EXPECT_EQ((*add)["schema"], "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  EXPECT_EQ((*add)["tags"], json::array({"pointwise"}));
  EXPECT_EQ((*add)["provider"], "builtin");
  EXPECT_FALSE((*add)["doc"].get<std::string>().empty());
  // lt_badreg has no add kernel: its device reaches add.Tensor through the CPU fallback only, and
  // neg through its own kernel for every dtype.
  ASSERT_TRUE((*add)["devices"].contains("lt_regdev")) << (*add)["devices"].dump();
  EXPECT_FALSE((*add)["devices"]["lt_regdev"].contains("kernel"));
  ASSERT_NE(fill, nullptr);
  EXPECT_EQ((*fill)["provider"], "lt_badreg");
  EXPECT_EQ((*fill)["devices"]["lt_regdev"]["kernel"].size(), size_t(tessera::kNumPlainDTypes));
}

TEST(OpsCliTest, UnknownOpNameIsAnErrorAndHelpExplains) {
  std::string cmd = "TESSERA_PLUGINS_SELECT='lt_none' '" TESSERA_CLI "' ops no_such_op 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[1024];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  int st = pclose(f);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << out;
  EXPECT_NE(out.find("no operator matches"), std::string::npos) << out;
}

}  // namespace
