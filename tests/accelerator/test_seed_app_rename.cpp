// Seed example, scenario 1: the application names privateuse1 before any plugin loads; the
// manifest asks for the same name (a no-op), and the plugin loads.
#include <tessera/plugin_loader.h>

#include "seed_util.h"

TEST(SeedExample, ApplicationRenamesBeforeThePluginLoads) {
  tessera::rename_privateuse1_backend("my_hardware_device");
  EXPECT_EQ(tessera::privateuse1_backend_name(), "my_hardware_device");
  accel_test::run_seed_example();
  tessera::rename_privateuse1_backend("my_hardware_device");  // same name again: a no-op
}
