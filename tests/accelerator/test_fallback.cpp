// The CPU fallback for ops the accelerator lacks: correct results, one warning per op under
// TESSERA_LOG=fallback, an error naming where the op is implemented under TESSERA_CPU_FALLBACK=0,
// and never for an op the plugin forbids (conv2d on my_hardware_device).
#include <cstdlib>

#include <tessera/capabilities.h>
#include <tessera/plugin_loader.h>

#include <algorithm>

#include "accel_test_util.h"

using namespace tessera;
using accel_test::kAccel;
using accel_test::values;

namespace {
int count_occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}
std::string resolution_of(const std::string& op, DType t) {
  // Resolution answers for loaded backends (plugins load lazily).
  EXPECT_TRUE(ensure_backend_loaded(DeviceType::CPU));
  EXPECT_TRUE(ensure_backend_loaded(DeviceType::PrivateUse1));
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry* e = d.find_op(op);
  if (!e) {
    for (const std::string& n : d.op_names())
      if (n.rfind(op + ".", 0) == 0) return resolution_name(d.resolution(*d.find_op(n), DeviceType::PrivateUse1, t));
    return "unknown op " + op;
  }
  return resolution_name(d.resolution(*e, DeviceType::PrivateUse1, t));
}
struct EnvGuard {
  std::string name;
  EnvGuard(const char* n, const char* v) : name(n) { setenv(n, v, 1); reload_log_settings(); }
  ~EnvGuard() { unsetenv(name.c_str()); reload_log_settings(); }
};
}  // namespace

TEST(CpuFallback, OpsTheAcceleratorLacksRunOnTheCpuWithCorrectResults) {
  Tensor x = randn({4, 7}, tessera::dtype(kFloat64));
  Tensor d = x.to(kAccel);
  EXPECT_EQ(resolution_of("exp", kFloat64), "fallback");
  EXPECT_EQ(resolution_of("add", kFloat64), "kernel");
  Tensor e = exp(d), s = softmax(d, 1);
  EXPECT_TRUE(e.is(kAccel)) << "fallback results go back to the device";
  EXPECT_TRUE(s.is(kAccel));
  std::vector<double> vx = values(x), we, ws(vx.size());
  for (double v : vx) we.push_back(std::exp(v));
  for (int i = 0; i < 4; ++i) {
    double m = -1e300, z = 0;
    for (int j = 0; j < 7; ++j) m = std::max(m, vx[size_t(i * 7 + j)]);
    for (int j = 0; j < 7; ++j) z += std::exp(vx[size_t(i * 7 + j)] - m);
    for (int j = 0; j < 7; ++j) ws[size_t(i * 7 + j)] = std::exp(vx[size_t(i * 7 + j)] - m) / z;
  }
  accel_test::expect_near_all(values(e), we, 1e-12, "exp via fallback");
  accel_test::expect_near_all(values(s), ws, 1e-12, "softmax via fallback");
}

TEST(CpuFallback, ADtypeOutsideTheKernelMaskFallsBack) {
  // add is registered for f32/f64/i32/i64 only: float16 goes through the CPU fallback.
  EXPECT_EQ(resolution_of("add", kFloat16), "fallback");
  Tensor x = randn({3, 4}).to(kFloat16);
  Tensor y = x.to(kAccel) + x.to(kAccel);
  EXPECT_EQ(y.dtype(), kFloat16);
  accel_test::expect_near_all(values(y), values(x + x), 0, "float16 add via fallback");
}

TEST(CpuFallback, WarnsOncePerOpUnderTesseraLogFallback) {
  EnvGuard log("TESSERA_LOG", "fallback");
  Tensor d = randn({5}).to(kAccel);
  testing::internal::CaptureStderr();
  (void)sigmoid(d);
  (void)sigmoid(d);
  (void)tanh(d);
  (void)tanh(d);
  (void)sigmoid(d);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_occurrences(err, "'sigmoid"), 1) << err;
  EXPECT_EQ(count_occurrences(err, "'tanh"), 1) << err;
  EXPECT_NE(err.find(kAccel), std::string::npos) << err;
}

TEST(CpuFallback, DisabledFallbackNamesWhereTheOpIsImplemented) {
  EnvGuard off("TESSERA_CPU_FALLBACK", "0");
  Tensor d = randn({5}).to(kAccel);
  try {
    (void)erf(d);
    FAIL() << "erf must not fall back with TESSERA_CPU_FALLBACK=0";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("erf"), std::string::npos) << m;
    EXPECT_NE(m.find(kAccel), std::string::npos) << m;
    EXPECT_NE(m.find("implemented on: cpu"), std::string::npos) << m;
    EXPECT_NE(m.find("TESSERA_CPU_FALLBACK=0"), std::string::npos) << m;
  }
  // The accelerator's own kernels still run.
  accel_test::expect_near_all(values(d + d), values(d.to("cpu") + d.to("cpu")), 0, "add with fallback off");
}

// Note [Fallback report]: every fallback is counted per op, device and dtype.
TEST(CpuFallback, TheReportCountsEveryFallbackByOpDeviceAndDtype) {
  clear_fallback_report();
  Tensor d = randn({6}).to(kAccel);
  Tensor h = randn({6}, tessera::dtype(kFloat64)).to(kAccel);
  for (int i = 0; i < 3; ++i) (void)erf(d);
  (void)erf(h);
  (void)(d + d);  // the accelerator's own kernel: not counted
  const std::vector<FallbackCount> r = fallback_report();
  ASSERT_EQ(r.size(), 2u) << fallback_report_string();
  EXPECT_EQ(r[0].op, "erf");
  EXPECT_EQ(r[0].device, kAccel);
  EXPECT_EQ(r[0].dtype, kFloat32);
  EXPECT_EQ(r[0].calls, 3);
  EXPECT_EQ(r[1].dtype, kFloat64);
  EXPECT_EQ(r[1].calls, 1);
  EXPECT_NE(fallback_report_string().find(std::string("erf on ") + kAccel + " (float32): 3 calls"), std::string::npos)
      << fallback_report_string();
  clear_fallback_report();
  EXPECT_TRUE(fallback_report().empty());
  EXPECT_EQ(fallback_report_string(), "no CPU fallback ran\n");
}

TEST(CpuFallback, TesseraFallbackErrorForbidsItForTheRun) {
  Tensor d = randn({5}).to(kAccel);
  {
    EnvGuard strict("TESSERA_FALLBACK", "error");
    clear_fallback_report();
    try {
      (void)erf(d);
      FAIL() << "erf must not fall back with TESSERA_FALLBACK=error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("no kernel for 'erf' on device"), std::string::npos) << m;
      EXPECT_NE(m.find("the CPU fallback is off for this run (TESSERA_FALLBACK=error)"), std::string::npos) << m;
    }
    EXPECT_TRUE(fallback_report().empty());
    accel_test::expect_near_all(values(d + d), values(d.to("cpu") + d.to("cpu")), 0, "own kernels still run");
  }
  {
    EnvGuard typo("TESSERA_FALLBACK", "sometimes");
    try {
      (void)erf(d);
      FAIL() << "an unknown policy must be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("TESSERA_FALLBACK='sometimes' is not a fallback policy; use allow or error"),
                std::string::npos)
          << e.what();
    }
  }
  EnvGuard allow("TESSERA_FALLBACK", "allow");
  accel_test::expect_near_all(values(erf(d)), values(erf(d.to("cpu"))), 0, "erf through the fallback");
}

TEST(CpuFallback, AnOpThePluginForbidsNeverFallsBack) {
  EXPECT_EQ(resolution_of("conv2d", kFloat32), "none");
  Tensor x = randn({1, 2, 5, 5}).to(kAccel), w = randn({3, 2, 3, 3}).to(kAccel);
  try {
    (void)conv2d(x, w);
    FAIL() << "conv2d is forbidden to fall back on " << kAccel;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("conv2d"), std::string::npos) << m;
    EXPECT_NE(m.find("forbidden"), std::string::npos) << m;
  }
  // The same op still runs on the CPU.
  EXPECT_EQ(conv2d(x.to("cpu"), w.to("cpu")).sizes()[1], 3);
}

// Note [Device capabilities]: what each plugin offers, as its source declares it
// (samples/my_hardware_device/src/plugin.cpp: streams, events with timing, memory statistics, async
// execution, no memory_record_stream; plugins/cpu/src/plugin.cpp: feature bits 0, so synchronous).
TEST(DeviceCapabilities, AnswerFromThePluginsSlotsNotItsName) {
  const DeviceCapabilities a = device_capabilities(Device(kAccel));
  EXPECT_EQ(a.device, kAccel);
  EXPECT_EQ(a.plugin, "my_hardware_device");
  EXPECT_GE(a.device_count, 1);
  EXPECT_TRUE(a.streams);
  EXPECT_TRUE(a.events);
  EXPECT_TRUE(a.event_timing);
  EXPECT_TRUE(a.async_execution);
  EXPECT_TRUE(a.memory_stats);
  EXPECT_FALSE(a.record_stream);
  EXPECT_FALSE(a.graph_capture);
  EXPECT_TRUE(a.pinned_host_memory && a.memory_info) << a.str();  // the ABI 1.3 slots
  EXPECT_NE(a.absent.find("peer access"), std::string::npos) << a.absent;
  // Its kernels take float32 (add, mul, ...) and no complex or quantized dtype.
  EXPECT_NE(std::find(a.dtypes.begin(), a.dtypes.end(), kFloat32), a.dtypes.end()) << a.str();
  EXPECT_EQ(std::find(a.dtypes.begin(), a.dtypes.end(), kQInt8), a.dtypes.end()) << a.str();
  EXPECT_NE(a.str().find(std::string(kAccel) + " (plugin my_hardware_device, "), std::string::npos) << a.str();

  const DeviceCapabilities cpu = device_capabilities(Device("cpu"));
  EXPECT_EQ(cpu.device, "cpu");
  EXPECT_TRUE(cpu.memory_stats);
  EXPECT_FALSE(cpu.async_execution);
  // Both hold and copy every dense dtype (their copy_ kernels take them all); int8 kernels of the
  // CPU sit under the Quantized functionality and are not dense dtypes.
  EXPECT_EQ(cpu.dtypes.size(), 10u) << cpu.str();
  EXPECT_EQ(a.dtypes, cpu.dtypes) << a.str();
  EXPECT_TRUE(cpu.streams && cpu.events) << cpu.str();
  try {
    (void)device_capabilities(Device("meta"));
    FAIL() << "meta has no plugin";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the meta device runs shape rules only"), std::string::npos) << e.what();
  }
}
