// Helpers shared by the accelerator tests: device properties, kernel counters, naive references.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <tessera/dispatcher.h>
#include <tessera/log.h>
#include <tessera/tessera.h>

namespace accel_test {

inline constexpr const char* kAccel = "my_hardware_device";
inline constexpr const char* kSecond = "second_accelerator";

// The device's properties JSON (through the device interface, as `tessera devices` reads it).
inline nlohmann::json properties(const std::string& type_name, int index = 0) {
  const tessera::BackendDevice& b = tessera::backend_device(tessera::device_type_from_name(type_name));
  std::string buf(size_t(4096), '\0');
  size_t need = b.iface->device_properties(b.self, index, buf.data(), buf.size());
  if (need > buf.size()) {
    buf.assign(need, '\0');
    b.iface->device_properties(b.self, index, buf.data(), buf.size());
  }
  return nlohmann::json::parse(std::string(buf.c_str()));
}

// How many times the accelerator ran its kernel for `op` on device `index`.
inline int64_t kernel_count(const std::string& op, const std::string& type_name = kAccel, int index = 0) {
  nlohmann::json p = properties(type_name, index);
  if (!p.contains("kernel_counts") || !p["kernel_counts"].contains(op)) return -1;
  return p["kernel_counts"][op].get<int64_t>();
}

// Values of a tensor as doubles (copies to the CPU).
inline std::vector<double> values(const tessera::Tensor& t) {
  tessera::Tensor c = t.to("cpu").to(tessera::kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

inline void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol,
                            const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " at element " << i;
  }
}

}  // namespace accel_test
