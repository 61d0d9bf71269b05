// The reference accelerator's own smoke test, built out of tree against the installed runtime:
// the plugin loads under its manifest name, keeps its memory to itself, runs its kernels on its
// queue and leaves the rest to the CPU fallback.
#include <cmath>
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <tessera/dispatcher.h>
#include <tessera/my_hardware_device.h>  // generated
#include <tessera/plugin_loader.h>
#include <tessera/tessera.h>

using namespace tessera;

namespace {
int64_t add_kernel_count() {
  for (const DeviceInfo& d : devices()) {
    if (d.name != "my_hardware_device:0") continue;
    const std::string key = "\"add.Tensor\": ";
    const size_t pos = d.properties.find(key);
    return pos == std::string::npos ? -1 : std::stoll(d.properties.substr(pos + key.size()));
  }
  return -1;
}
}  // namespace

TEST(MyHardwareDevice, LoadsFromThisBuild) {
  bool found = false;
  for (const PluginInfo& p : plugins()) {
    if (p.name == "my_hardware_device" && p.status != PluginStatus::Shadowed) {
      found = true;
      EXPECT_NE(p.status, PluginStatus::Failed) << p.reason;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(device_count("my_hardware_device"), 2);
}

TEST(MyHardwareDevice, AddRunsOnTheDeviceAndMatchesTheCpu) {
  Tensor x = randn({16, 8}, device("my_hardware_device:1"));
  EXPECT_NE(reinterpret_cast<uintptr_t>(x.storage()->data()) >> 63, 0u) << "device memory is an opaque handle";
  Tensor xd0 = x.to("my_hardware_device:0");
  const int64_t before = add_kernel_count();
  Tensor y = xd0 + xd0;
  EXPECT_EQ(add_kernel_count(), before + 1);
  Tensor xc = x.to("cpu"), yc = y.to("cpu");
  for (int64_t i = 0; i < xc.numel(); ++i) ASSERT_EQ(yc.data_ptr<float>()[i], 2 * xc.data_ptr<float>()[i]);
}

TEST(MyHardwareDevice, MissingOpsFallBackToTheCpu) {
  Tensor x = randn({5}, tessera::dtype(kFloat64));
  Tensor e = exp(x.to("my_hardware_device")).to("cpu");
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_NEAR(e.data_ptr<double>()[i], std::exp(x.data_ptr<double>()[i]), 1e-12);
}

TEST(MyHardwareDevice, GeneratedDeviceHeader) {
  namespace mhd = tessera::my_hardware_device;
  EXPECT_EQ(mhd::device_count(), 2);
  Tensor x = randn({3});
  Tensor y = mhd::to_my_hardware_device(x, 1);
  EXPECT_TRUE(mhd::is_my_hardware_device(y));
  EXPECT_FALSE(mhd::is_my_hardware_device(x));
  EXPECT_EQ(y.device(), mhd::device(1));
}
