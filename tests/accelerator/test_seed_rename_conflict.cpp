// Seed example, scenario 3: the application gives privateuse1 another name first. The manifest's
// plugin then fails with the renaming error (listed as failed, with the reason), and the process
// keeps working on the CPU.
#include <tessera/plugin_loader.h>

#include "seed_util.h"

TEST(SeedExample, ARenameConflictFailsThePluginAndTheProcessKeepsWorking) {
  tessera::rename_privateuse1_backend("other_npu");
  bool listed = false;
  for (const tessera::PluginInfo& p : tessera::plugins()) {
    if (p.name != "my_hardware_device") continue;
    listed = true;
    EXPECT_EQ(p.status, tessera::PluginStatus::Failed) << tessera::plugin_status_name(p.status);
    EXPECT_NE(p.reason.find("other_npu"), std::string::npos) << p.reason;
    EXPECT_NE(p.reason.find("my_hardware_device"), std::string::npos) << p.reason;
  }
  EXPECT_TRUE(listed) << "the plugin stays listed, as failed";
  EXPECT_EQ(tessera::privateuse1_backend_name(), "other_npu");
  EXPECT_THROW((void)tessera::Device("my_hardware_device"), tessera::Error);
  EXPECT_EQ(tessera::device_count("other_npu"), 0);
  // Everything else keeps working.
  auto x = tessera::randn({2, 3});
  auto y = x + x;
  std::vector<double> want;
  for (double v : accel_test::values(x)) want.push_back(2 * v);
  accel_test::expect_near_all(accel_test::values(y), want, 0, "cpu add after the conflict");
}
