// The generated device header for a device that is absent: device_count() answers 0 (and
// is_available() false) instead of throwing, both when no plugin provides the name and when the
// plugin that would provide it failed. Its own process: the failure renames nothing for good.
#include <gtest/gtest.h>

#include <tessera/absent_device.h>
#include <tessera/my_hardware_device.h>
#include <tessera/plugin_loader.h>

namespace {

TEST(GeneratedDeviceHeader, DeviceCountIsZeroWhenNoPluginProvidesTheName) {
  EXPECT_EQ(tessera::absent_device::device_count(), 0);
  EXPECT_FALSE(tessera::absent_device::is_available());
  EXPECT_THROW((void)tessera::absent_device::device(), tessera::Error);  // the parse still says why
}

TEST(GeneratedDeviceHeader, DeviceCountIsZeroWhenThePluginLostItsSlot) {
  // The application takes privateuse1 before the accelerator loads: its plugin fails.
  tessera::rename_privateuse1_backend("app_npu");
  EXPECT_EQ(tessera::my_hardware_device::device_count(), 0);
  EXPECT_FALSE(tessera::my_hardware_device::is_available());
  bool failed = false;
  for (const tessera::PluginInfo& p : tessera::plugins())
    if (p.name == "my_hardware_device") failed = p.status == tessera::PluginStatus::Failed;
  EXPECT_TRUE(failed);
}

}  // namespace
