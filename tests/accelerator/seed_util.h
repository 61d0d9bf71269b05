// The seed example's body, shared by the three renaming scenarios (test_seed_*.cpp).
#pragma once
#include "accel_test_util.h"

namespace accel_test {

// randn on the accelerator, x + x; the add kernel ran on the device and y == 2x on the CPU.
inline void run_seed_example() {
  auto x = tessera::randn({2, 3}, tessera::device("my_hardware_device"));
  const int64_t before = kernel_count("add.Tensor");
  auto y = x + x;
  EXPECT_EQ(kernel_count("add.Tensor"), before + 1) << "the accelerator's add kernel did not run";
  EXPECT_TRUE(y.is("my_hardware_device"));
  std::vector<double> want;
  for (double v : values(x)) want.push_back(2 * v);
  expect_near_all(values(y), want, 0, "y = x + x");
}

}  // namespace accel_test
