// ISA level selection of the CPU plugin: the pure selection function on fake feature sets, and the
// refusal of an unsupported TESSERA_CPU_CAPABILITY by the real plugin through the loader.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "isa.h"
#include "vec_kernels.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace tessera::cpu {
namespace {

CpuFeatures full_avx512() {
  CpuFeatures f;
  f.sse4_2 = f.avx2 = f.fma = f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.os_ymm = f.os_zmm = true;
  return f;
}

TEST(CpuCapability, BestLevelFromFeatures) {
  CpuFeatures f = full_avx512();
  EXPECT_EQ(max_capability(f), Capability::AVX512);
  f.os_zmm = false;  // the OS does not save ZMM state
  EXPECT_EQ(max_capability(f), Capability::AVX2);
  f = full_avx512();
  f.avx512bw = false;
  EXPECT_EQ(max_capability(f), Capability::AVX2);
  f.fma = false;
  EXPECT_EQ(max_capability(f), Capability::Default);
  f = full_avx512();
  f.os_ymm = false;
  f.os_zmm = false;
  EXPECT_EQ(max_capability(f), Capability::Default);
  EXPECT_STREQ(capability_name(Capability::AVX512), "avx512");
  EXPECT_STREQ(capability_name(Capability::AVX2), "avx2");
  EXPECT_STREQ(capability_name(Capability::Default), "default");
}

TEST(CpuCapability, RequestedLevels) {
  Capability c;
  std::string err;
  ASSERT_TRUE(select_capability(full_avx512(), "", &c, &err));
  EXPECT_EQ(c, Capability::AVX512);
  ASSERT_TRUE(select_capability(full_avx512(), "avx2", &c, &err));
  EXPECT_EQ(c, Capability::AVX2);
  ASSERT_TRUE(select_capability(full_avx512(), "default", &c, &err));
  EXPECT_EQ(c, Capability::Default);
  CpuFeatures avx2_only = full_avx512();
  avx2_only.avx512f = false;
  EXPECT_FALSE(select_capability(avx2_only, "avx512", &c, &err));
  EXPECT_NE(err.find("avx512f"), std::string::npos) << err;
  EXPECT_NE(err.find("best: avx2"), std::string::npos) << err;
  CpuFeatures no_zmm = full_avx512();
  no_zmm.os_zmm = false;
  EXPECT_FALSE(select_capability(no_zmm, "avx512", &c, &err));
  EXPECT_NE(err.find("os-zmm-state"), std::string::npos) << err;
  EXPECT_FALSE(select_capability(full_avx512(), "avx1024", &c, &err));
  EXPECT_NE(err.find("expected one of default, avx2, avx512"), std::string::npos) << err;
}

TEST(CpuCapability, DetectedFeaturesAreConsistent) {
  const CpuFeatures f = detect_cpu_features();
  EXPECT_TRUE(f.sse4_2);
  if (f.os_zmm) {
    EXPECT_TRUE(f.os_ymm);
  }
#if defined(__GNUC__)
  __builtin_cpu_init();
  EXPECT_EQ(f.avx2, bool(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(f.avx512f, bool(__builtin_cpu_supports("avx512f")));
#endif
}

// Every level's kernel table agrees with double references (and so with each other); each level
// the CPU lacks is skipped.
TEST(CpuCapability, KernelTablesOfEveryLevelAgree) {
  const Capability best = max_capability(detect_cpu_features());
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(-10, 10);
  const int64_t n = 1000;  // not a multiple of any vector width: tails are covered
  std::vector<float> x(n), y(n), out(n);
  for (auto& v : x) v = d(g);
  for (auto& v : y) v = d(g);
  for (Capability c : {Capability::Default, Capability::AVX2, Capability::AVX512}) {
    if (int(c) > int(best)) continue;
    const VecKernels* k = kernels_for(c);
    SCOPED_TRACE(k->name);
    k->unary_f32[int(UnaryOp::Exp)](x.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], std::exp(double(x[i])), 2e-6 * std::exp(double(x[i])));
    k->unary_f32[int(UnaryOp::Tanh)](x.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], std::tanh(double(x[i])), 2e-6 * std::fabs(std::tanh(double(x[i]))));
    k->unary_f32[int(UnaryOp::Erf)](x.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], std::erf(double(x[i])), 2e-6 * std::fabs(std::erf(double(x[i]))));
    k->binary_f32[int(BinaryOp::Add)](x.data(), 1, y.data(), 0, out.data(), n, 0.5f);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], double(x[i]) + 0.5 * double(y[0]), 1e-5);
    EXPECT_NEAR(k->sum_f32(x.data(), n), [&] { double s = 0; for (float v : x) s += v; return s; }(), 1e-9);
    float mx = -INFINITY;
    for (float v : x) mx = std::max(mx, v);
    EXPECT_EQ(k->max_f32(x.data(), n), mx);
    // 16-bit conversions round to nearest even
    std::vector<uint16_t> h(n);
    k->f32_to_f16(x.data(), h.data(), n);
    k->f16_to_f32(h.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], float(_Float16(x[i]))) << x[i];
    k->f32_to_bf16(x.data(), h.data(), n);
    k->bf16_to_f32(h.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], x[i], std::fabs(x[i]) * (1.0 / 256));
  }
}

// The real plugin refuses a level it cannot run, with a message naming the variable and the fix.
void expect_refused(const char* level, const char* must_mention) {
  ::setenv("TESSERA_CPU_CAPABILITY", level, 1);
  rediscover_plugins_for_testing();
  std::string why;
  EXPECT_FALSE(load_plugin("cpu", &why)) << "TESSERA_CPU_CAPABILITY=" << level << " was accepted";
  EXPECT_NE(why.find("TESSERA_CPU_CAPABILITY"), std::string::npos) << why;
  EXPECT_NE(why.find(must_mention), std::string::npos) << why;
  bool listed_failed = false;
  for (const PluginInfo& p : plugins())
    if (p.name == "cpu" && p.status == PluginStatus::Failed) listed_failed = true;
  EXPECT_TRUE(listed_failed);
  ::unsetenv("TESSERA_CPU_CAPABILITY");
  shutdown_plugins();
  rediscover_plugins_for_testing();
}

TEST(CpuCapability, PluginRefusesUnknownLevel) { expect_refused("avx1024", "expected one of"); }

TEST(CpuCapability, PluginRefusesLevelTheCpuLacks) {
  const Capability best = max_capability(detect_cpu_features());
  if (best == Capability::AVX512) GTEST_SKIP() << "this CPU supports every level; covered by RequestedLevels";
  expect_refused("avx512", "asks for more than this CPU supports");
}

TEST(CpuCapability, PluginAcceptsEveryLevelTheCpuHas) {
  const Capability best = max_capability(detect_cpu_features());
  for (Capability c : {Capability::Default, Capability::AVX2, Capability::AVX512}) {
    if (int(c) > int(best)) continue;
    ::setenv("TESSERA_CPU_CAPABILITY", capability_name(c), 1);
    shutdown_plugins();
    rediscover_plugins_for_testing();
    std::string why;
    EXPECT_TRUE(load_plugin("cpu", &why)) << capability_name(c) << ": " << why;
    for (const DeviceInfo& d : devices()) {
      if (d.device.is_cpu()) {
        EXPECT_NE(d.properties.find(std::string("\"capability\": \"") + capability_name(c) + "\""),
                  std::string::npos)
            << d.properties;
      }
    }
  }
  ::unsetenv("TESSERA_CPU_CAPABILITY");
  shutdown_plugins();
  rediscover_plugins_for_testing();
}

}  // namespace
}  // namespace tessera::cpu
