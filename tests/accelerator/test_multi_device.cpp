// Several third-party devices in one process: the reference accelerator on privateuse1 and a second
// emulated accelerator (same source, another manifest) on privateuse2.
#include "accel_test_util.h"

using namespace tessera;
using accel_test::kAccel;
using accel_test::kSecond;
using accel_test::values;

TEST(MultiDevice, BothAcceleratorsAreLoadedUnderTheirNames) {
  EXPECT_EQ(device_count(kAccel), 2);
  EXPECT_EQ(device_count(kSecond), 1);
  EXPECT_EQ(Device(kSecond).type(), DeviceType::PrivateUse2);
  EXPECT_EQ(device_type_name(DeviceType::PrivateUse2), kSecond);
  EXPECT_EQ(device_type_name(DeviceType::PrivateUse1), kAccel);
}

TEST(MultiDevice, TensorsMoveBetweenAcceleratorsAndTheCpu) {
  Tensor x = randn({6, 5}, tessera::dtype(kFloat64));
  Tensor on_first = x.to("my_hardware_device:1");
  Tensor on_second = on_first.to(kSecond);
  EXPECT_TRUE(on_second.is(kSecond));
  Tensor back_first = on_second.to("my_hardware_device:0");
  EXPECT_TRUE(back_first.is(kAccel));
  accel_test::expect_near_all(values(back_first), values(x), 0, "cpu -> accel:1 -> second -> accel:0 -> cpu");

  // Each accelerator runs its own kernel.
  const int64_t first = accel_test::kernel_count("add.Tensor", kAccel, 0);
  const int64_t second = accel_test::kernel_count("add.Tensor", kSecond, 0);
  Tensor s2 = on_second + on_second;
  Tensor s1 = back_first + back_first;
  EXPECT_EQ(accel_test::kernel_count("add.Tensor", kSecond, 0) - second, 1);
  EXPECT_EQ(accel_test::kernel_count("add.Tensor", kAccel, 0) - first, 1);
  std::vector<double> want;
  for (double v : values(x)) want.push_back(2 * v);
  accel_test::expect_near_all(values(s2), want, 0, "add on the second accelerator");
  accel_test::expect_near_all(values(s1), want, 0, "add on the first accelerator");
}

TEST(MultiDevice, AnOpMixingDevicesNamesBoth) {
  Tensor a = randn({3, 3}, device(kAccel));
  Tensor b = randn({3, 3}, device(kSecond));
  try {
    (void)add(a, b);
    FAIL() << "adding tensors on two accelerators must fail";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(kAccel), std::string::npos) << m;
    EXPECT_NE(m.find(kSecond), std::string::npos) << m;
  }
  Tensor c = randn({3, 3});
  try {
    (void)mul(c, b);
    FAIL() << "multiplying a cpu tensor by an accelerator tensor must fail";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cpu"), std::string::npos) << m;
    EXPECT_NE(m.find(kSecond), std::string::npos) << m;
  }
  // Two devices of the same accelerator are different devices too.
  Tensor d1 = randn({3, 3}, device("my_hardware_device:1"));
  EXPECT_THROW((void)add(a, d1), Error);
}
