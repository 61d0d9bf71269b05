// Cross-device copies, the CPU fallback, failed transfers and the device registry, against the
// in-process fake device of test_kernels.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "tessera/log.h"
#include "tessera/ops.h"
#include "test_kernels.h"

namespace tessera {
namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<float> values(const Tensor& t) {
  Tensor c = t.cpu().contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

class Devices : public ::testing::Test {
 protected:
  void SetUp() override { testing::setup_test_backends(); }
  Device fake{DeviceType::PrivateUse1, 0};
};

TEST_F(Devices, RoundTripThroughTheDeviceInterface) {
  Tensor x = tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  int before = testing::fake_stats().from_host.load();
  Tensor d = x.to("fake_device");
  EXPECT_EQ(d.device().type(), kPrivateUse1);
  EXPECT_EQ(d.sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(testing::fake_stats().from_host.load(), before + 1);
  int to_host = testing::fake_stats().to_host.load();
  Tensor back = d.to("cpu");
  EXPECT_TRUE(back.is_cpu());
  EXPECT_EQ(testing::fake_stats().to_host.load(), to_host + 1);
  EXPECT_EQ(values(back), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // Already there: the same tensor.
  EXPECT_TRUE(d.to(fake).is_same(d));
  EXPECT_TRUE(x.to("cpu").is_same(x));
}

TEST_F(Devices, NonContiguousSourceAndDtypeConversion) {
  Tensor x = tensor<float>({1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f}, {2, 3});
  Tensor d = x.t().to(fake);  // made contiguous on the CPU first
  EXPECT_EQ(values(d), (std::vector<float>{1.5f, 4.5f, 2.5f, 5.5f, 3.5f, 6.5f}));
  Tensor di = x.to(fake, kInt32);
  EXPECT_EQ(di.dtype(), kInt32);
  Tensor back = di.cpu();
  EXPECT_EQ(back.data_ptr<int32_t>()[5], 6);
  // Copy into a strided destination on the device: bytes move to a staging tensor, then copy_ there.
  Tensor dst = zeros({3, 2}, fake).t();
  dst.copy_(x);
  EXPECT_EQ(values(dst), (std::vector<float>{1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f}));
  // Between two devices of the same plugin: memory_copy_device.
  int d2d = testing::fake_stats().device_to_device.load();
  Tensor on1 = d.to(Device(DeviceType::PrivateUse1, 1));
  EXPECT_EQ(on1.device().index(), 1);
  EXPECT_EQ(testing::fake_stats().device_to_device.load(), d2d + 1);
  EXPECT_EQ(values(on1), values(d));
}

TEST_F(Devices, FailedTransferMarksTheDestinationUnusable) {
  Tensor x = full({64}, 1.0f);
  Tensor dst = empty({64}, fake);
  testing::fake_stats().fail_next_from_host = 1;
  std::string e = error_of([&] { dst.copy_(x); });
  EXPECT_NE(e.find("copy_: copying 256 bytes from cpu to fake_device:0 failed; the destination tensor is now "
                   "unusable"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("injected transfer failure"), std::string::npos);
  EXPECT_FALSE(dst.storage()->usable());
  EXPECT_NE(error_of([&] { add(dst, dst); }).find("unusable storage"), std::string::npos);
  EXPECT_NE(error_of([&] { dst.cpu(); }).find("unusable"), std::string::npos);
  // Other tensors are unaffected.
  EXPECT_TRUE(equal(x.to(fake), x));
}

TEST_F(Devices, CpuFallbackRunsOnCpuAndWarnsOnce) {
  ::setenv("TESSERA_LOG", "fallback", 1);
  reload_log_settings();
  manual_seed(3);
  Tensor x = rand({5});
  ::testing::internal::CaptureStderr();
  Tensor r1 = exp(x.to(fake));  // no exp kernel on the fake device
  Tensor r2 = exp(x.to(fake));
  std::string err = ::testing::internal::GetCapturedStderr();
  ::unsetenv("TESSERA_LOG");
  reload_log_settings();
  EXPECT_EQ(r1.device().type(), kPrivateUse1);
  std::vector<float> got = values(r1), in = values(x);
  for (size_t i = 0; i < in.size(); ++i) EXPECT_NEAR(got[i], std::exp(double(in[i])), 1e-6);
  EXPECT_TRUE(equal(r1, r2));
  size_t first = err.find("'exp' has no kernel on device 'fake_device'; running it on the CPU");
  EXPECT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("'exp' has no kernel", first + 1), std::string::npos) << "warned twice: " << err;
}

TEST_F(Devices, CpuFallbackForInPlaceOps) {
  Tensor a = full({3}, 2.0f, fake);
  a.mul_(full({3}, 4.0f, fake));  // no mul_ kernel on the fake device
  EXPECT_EQ(a.device().type(), kPrivateUse1);
  EXPECT_EQ(values(a), (std::vector<float>{8, 8, 8}));
}

TEST_F(Devices, CpuFallbackSwitchedOff) {
  Tensor a = full({2, 2}, 1.0f, fake);
  ::setenv("TESSERA_CPU_FALLBACK", "0", 1);
  std::string e = error_of([&] { matmul(a, a); });
  ::unsetenv("TESSERA_CPU_FALLBACK");
  EXPECT_EQ(e,
            "no kernel for 'matmul' on device 'fake_device' (dtype float32); implemented on: cpu; "
            "the CPU fallback is off for this run (TESSERA_CPU_FALLBACK=0); register a kernel for it, or allow the fallback (TESSERA_FALLBACK=allow) to run it on the CPU");
  EXPECT_EQ(values(matmul(a, a)), (std::vector<float>{2, 2, 2, 2}));
}

TEST_F(Devices, WrappedNumbersLiveOnTheTensorsDevice) {
  Tensor a = full({3}, 1.0f, fake);
  Tensor r = a + 2.0;
  EXPECT_EQ(r.device().type(), kPrivateUse1);
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_EQ(values(r), (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(values(2 * a), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(values(-a), (std::vector<float>{-1, -1, -1}));
}

TEST_F(Devices, DeviceRegistry) {
  EXPECT_EQ(device_count("fake_device"), 2);
  EXPECT_EQ(device_count(kCPU), 1);
  std::vector<DeviceInfo> list = devices();
  bool cpu = false, fake0 = false, fake1 = false;
  for (const DeviceInfo& d : list) {
    if (d.name == "cpu:0") cpu = true;
    if (d.name == "fake_device:0") {
      fake0 = true;
      EXPECT_EQ(d.properties, "{\"name\": \"fake 0\"}");
      EXPECT_EQ(d.plugin, "fake");
    }
    if (d.name == "fake_device:1") fake1 = true;
  }
  EXPECT_TRUE(cpu && fake0 && fake1);
  EXPECT_NO_THROW(synchronize(fake));
  EXPECT_EQ(backend_device(kPrivateUse1).plugin, "fake");
  EXPECT_EQ(backend_device_if_loaded(kCUDA), nullptr);
  EXPECT_NE(error_of([] { backend_device(kCUDA); }).find("device type 'cuda' is not available"),
            std::string::npos);
  EXPECT_TRUE(cpu_fallback_enabled());
}

}  // namespace
}  // namespace tessera
