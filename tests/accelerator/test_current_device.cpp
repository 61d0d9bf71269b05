// The current device per thread (Note [Current device] in tessera/current_device.h), on the
// reference accelerator, which has two devices and keeps its current device per thread.
#include <thread>

#include "accel_test_util.h"

using namespace tessera;
using accel_test::kAccel;
using accel_test::kSecond;

namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(CurrentDevice, SetDeviceChoosesWhereUnindexedTensorsLive) {
  ASSERT_EQ(device_count(kAccel), 2);
  EXPECT_EQ(current_device(DeviceType::PrivateUse1).str(), std::string(kAccel) + ":0");
  Tensor x = randn({4, 3}, dtype(kFloat64));
  set_device(Device(std::string(kAccel) + ":1"));
  EXPECT_EQ(current_device(DeviceType::PrivateUse1).index(), 1);
  Tensor on_current = x.to(kAccel);  // no index: the current device
  EXPECT_EQ(on_current.device().index(), 1) << on_current.device().str();
  // An op on it runs there and gives the CPU's values.
  Tensor y = (on_current * 2.0).to("cpu");
  std::vector<double> want;
  for (double v : accel_test::values(x)) want.push_back(2 * v);
  accel_test::expect_near_all(accel_test::values(y), want, 0, "x * 2 on device 1");
  set_device(Device(std::string(kAccel) + ":0"));
  EXPECT_EQ(x.to(kAccel).device().index(), 0);
}

TEST(CurrentDevice, TheGuardRestoresThePreviousDeviceAlsoOnAnException) {
  const Device one(std::string(kAccel) + ":1");
  {
    DeviceGuard g(one);
    EXPECT_EQ(g.previous().index(), 0);
    EXPECT_EQ(current_device(DeviceType::PrivateUse1).index(), 1);
  }
  EXPECT_EQ(current_device(DeviceType::PrivateUse1).index(), 0);
  try {
    DeviceGuard g(one);
    throw std::runtime_error("leaving the scope");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(current_device(DeviceType::PrivateUse1).index(), 0);
}

TEST(CurrentDevice, EachThreadHasItsOwn) {
  set_device(Device(std::string(kAccel) + ":1"));
  int seen_by_other = -1, after_other_set = -1;
  std::thread t([&] {
    seen_by_other = current_device(DeviceType::PrivateUse1).index();
    set_device(Device(std::string(kAccel) + ":0"));
    after_other_set = current_device(DeviceType::PrivateUse1).index();
  });
  t.join();
  EXPECT_EQ(seen_by_other, 0);  // a new thread starts on device 0
  EXPECT_EQ(after_other_set, 0);
  EXPECT_EQ(current_device(DeviceType::PrivateUse1).index(), 1);  // untouched by the other thread
  set_device(Device(std::string(kAccel) + ":0"));
}

TEST(CurrentDevice, BadDevicesAreRefusedWithTheReasonAndNothingChanges) {
  const std::string out_of_range = message_of([] { set_device(Device(std::string(kAccel) + ":2")); });
  EXPECT_NE(out_of_range.find("out of range"), std::string::npos) << out_of_range;
  EXPECT_NE(out_of_range.find("has 2 'my_hardware_device' devices"), std::string::npos) << out_of_range;
  const std::string no_index = message_of([] { set_device(Device(kAccel)); });
  EXPECT_NE(no_index.find("name the device's index"), std::string::npos) << no_index;
  const std::string cpu = message_of([] { set_device(Device("cpu:1")); });
  EXPECT_NE(cpu.find("the CPU is one device"), std::string::npos) << cpu;
  EXPECT_EQ(message_of([] { set_device(Device("cpu:0")); }), "(no error)");
  EXPECT_EQ(current_device(DeviceType::CPU).str(), "cpu:0");
  const std::string second = message_of([] { set_device(Device(std::string(kSecond) + ":1")); });
  EXPECT_NE(second.find("has 1 'second_accelerator' device "), std::string::npos) << second;
  EXPECT_EQ(current_device(DeviceType::PrivateUse1).index(), 0);
}
