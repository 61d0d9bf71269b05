// Seed example, scenario 2: no renaming in the application; the manifest alone names the slot, so
// Device("my_hardware_device") parses before the plugin's library is loaded.
#include <tessera/plugin_loader.h>

#include "seed_util.h"

TEST(SeedExample, TheManifestAloneNamesTheDevice) {
  EXPECT_EQ(tessera::Device("my_hardware_device").type(), tessera::DeviceType::PrivateUse1);
  accel_test::run_seed_example();
  EXPECT_EQ(tessera::privateuse1_backend_name(), "my_hardware_device");
}
