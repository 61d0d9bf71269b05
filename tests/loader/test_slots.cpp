// Privateuse slots claimed by manifests (Note [Manifest claims on privateuse slots]): priority
// decides between manifests, an explicit rename by the application wins until the plugin loads,
// and a device name whose plugin failed says why. Real manifests in fresh folders, real plugins.
#include <gtest/gtest.h>

#include "loader_test_util.h"
#include "tessera/error.h"

namespace {

using namespace lt;
using tessera::DeviceType;
using tessera::PluginStatus;

class SlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tessera::shutdown_plugins();
    tessera::reset_privateuse_names_for_testing();
    ASSERT_FALSE(dir_.path().empty());
    ASSERT_FALSE(other_.path().empty());
    setenv("TESSERA_PLUGIN_PATH", (dir_.path() + ":" + other_.path()).c_str(), 1);
    setenv("TESSERA_PLUGINS_SELECT", "lt_*", 1);
    unsetenv("TESSERA_PLUGINS_DISABLE");
  }
  void TearDown() override {
    tessera::shutdown_plugins();
    unsetenv("TESSERA_PLUGIN_PATH");
    unsetenv("TESSERA_PLUGINS_SELECT");
    tessera::reset_privateuse_names_for_testing();
  }
  static tessera::PluginInfo info(const std::string& name) {
    auto p = find_plugin(name);
    EXPECT_TRUE(p.has_value()) << "plugin '" << name << "' not listed";
    return p.value_or(tessera::PluginInfo{});
  }
  static json with_priority(json m, int priority) {
    m["priority"] = priority;
    return m;
  }
  static std::string parse_error(const std::string& device) {
    try {
      (void)tessera::Device(device);
    } catch (const tessera::Error& e) {
      return e.what();
    }
    return "(parsed)";
  }

  TempDir dir_;    // searched first
  TempDir other_;  // searched second
};

// The low-priority manifest is found first (first folder, first file name); the high one still wins.
TEST_F(SlotTest, HigherPriorityWinsASlotWhateverTheDiscoveryOrder) {
  dir_.write_manifest("lt_a_low", with_priority(backend_manifest("lt_a_low", LT_LIB_GOOD, 1, "lt_low"), 5));
  other_.write_manifest("lt_b_high", with_priority(backend_manifest("lt_b_high", LT_LIB_OLD_MINOR, 1, "lt_high"), 50));
  tessera::rediscover_plugins_for_testing();
  EXPECT_EQ(info("lt_b_high").status, PluginStatus::Available) << info("lt_b_high").reason;
  EXPECT_EQ(tessera::privateuse_backend_name(1), "lt_high");
  const tessera::PluginInfo low = info("lt_a_low");
  EXPECT_EQ(low.status, PluginStatus::Failed) << tessera::plugin_status_name(low.status);
  EXPECT_NE(low.reason.find("lt_b_high"), std::string::npos) << low.reason;
  EXPECT_NE(low.reason.find("priority 50 over 5"), std::string::npos) << low.reason;
}

TEST_F(SlotTest, HigherPriorityWinsASlotInTheOtherOrderToo) {
  dir_.write_manifest("lt_a_high", with_priority(backend_manifest("lt_a_high", LT_LIB_GOOD, 2, "lt_high"), 50));
  other_.write_manifest("lt_b_low", with_priority(backend_manifest("lt_b_low", LT_LIB_OLD_MINOR, 2, "lt_low"), 5));
  tessera::rediscover_plugins_for_testing();
  EXPECT_EQ(info("lt_a_high").status, PluginStatus::Available) << info("lt_a_high").reason;
  EXPECT_EQ(tessera::privateuse_backend_name(2), "lt_high");
  EXPECT_EQ(info("lt_b_low").status, PluginStatus::Failed);
}

TEST_F(SlotTest, ApplicationRenameWinsOverAClaimUntilThePluginLoads) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu"));
  tessera::rediscover_plugins_for_testing();
  EXPECT_EQ(tessera::Device("lt_npu:0").type(), DeviceType::PrivateUse2);  // the claim names the slot

  ASSERT_NO_THROW(tessera::rename_privateuse_backend(2, "lt_app_npu"));
  EXPECT_EQ(tessera::privateuse_backend_name(2), "lt_app_npu");
  EXPECT_EQ(tessera::Device("lt_app_npu:1"), tessera::Device(DeviceType::PrivateUse2, 1));
  const tessera::PluginInfo p = info("lt_good");
  EXPECT_EQ(p.status, PluginStatus::Failed) << tessera::plugin_status_name(p.status);
  EXPECT_NE(p.reason.find("lt_npu"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("lt_app_npu"), std::string::npos) << p.reason;
  EXPECT_EQ(p.reason.find('\n'), std::string::npos) << p.reason;
  std::string why;
  EXPECT_FALSE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2, &why));
  EXPECT_FALSE(library_is_loaded(LT_LIB_GOOD));
  // The old name says what happened to its plugin.
  const std::string msg = parse_error("lt_npu");
  EXPECT_NE(msg.find("plugin 'lt_good'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lt_app_npu"), std::string::npos) << msg;
}

TEST_F(SlotTest, ApplicationTakingTheClaimedNameForAnotherSlotWins) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu"));
  tessera::rediscover_plugins_for_testing();
  ASSERT_NO_THROW(tessera::rename_privateuse_backend(3, "lt_npu"));
  EXPECT_EQ(tessera::Device("lt_npu").type(), DeviceType::PrivateUse3);
  EXPECT_EQ(tessera::privateuse_backend_name(2), "privateuse2");
  const tessera::PluginInfo p = info("lt_good");
  EXPECT_EQ(p.status, PluginStatus::Failed);
  EXPECT_NE(p.reason.find("privateuse3"), std::string::npos) << p.reason;
}

TEST_F(SlotTest, OnceThePluginLoadedItsNameIsFinal) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu"));
  tessera::rediscover_plugins_for_testing();
  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2, &why)) << why;
  try {
    tessera::rename_privateuse_backend(2, "lt_app_npu");
    ADD_FAILURE() << "renaming a loaded plugin's slot must fail";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("lt_npu"), std::string::npos) << e.what();
  }
  EXPECT_EQ(info("lt_good").status, PluginStatus::Loaded);
  tessera::shutdown_plugins();
  // Still final after an unload: the loaded plugin's tensors carried that name.
  EXPECT_THROW(tessera::rename_privateuse_backend(2, "lt_app_npu"), tessera::Error);
  EXPECT_EQ(info("lt_good").status, PluginStatus::Available);
}

TEST_F(SlotTest, ADeviceWhosePluginFailedSaysWhy) {
  json m = backend_manifest("lt_abi2", LT_LIB_GOOD, 1, "lt_broken_npu");
  m["abi"]["major"] = TESSERA_ABI_MAJOR + 1;
  dir_.write_manifest("lt_abi2", m);
  tessera::rediscover_plugins_for_testing();
  const std::string msg = parse_error("lt_broken_npu:0");
  EXPECT_NE(msg.find("unknown device type 'lt_broken_npu'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("plugin 'lt_abi2'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("incompatible ABI major version"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  try {
    (void)tessera::device_type_from_name("lt_broken_npu");
    ADD_FAILURE() << "parsed";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("incompatible ABI major version"), std::string::npos) << e.what();
  }
  // A name no plugin mentions keeps the plain message.
  EXPECT_EQ(parse_error("lt_nobody").find("plugin '"), std::string::npos);
}

}  // namespace
