// tessera::memory_stats(device) through the ABI 1.1 memory_stats slot of real backends: the host's
// CPU allocator, the reference accelerator's emulated memory and the OpenCL caching allocator.
// Expected sizes follow each allocator's documented rounding, computed here by hand.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace {

using tessera::Device;
using tessera::MemoryStats;
using tessera::Tensor;

TEST(MemoryStats, CpuReportsTheCachingAllocator) {
  const Device cpu("cpu");
  tessera::cpu_allocator_empty_cache();
  const MemoryStats before = tessera::memory_stats(cpu);
  ASSERT_TRUE(before.reported);
  const uint64_t block = uint64_t(3) << 20;  // 3 MiB: cached (>= 1 MiB), a multiple of its class step (256 KiB)
  {
    Tensor t = tessera::empty({int64_t(block / 4)}, tessera::kFloat32);
    const MemoryStats during = tessera::memory_stats(cpu);
    EXPECT_EQ(during.allocated_bytes, before.allocated_bytes + block);
    EXPECT_EQ(during.num_allocations, before.num_allocations + 1);
    EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
    EXPECT_GE(during.reserved_bytes, during.allocated_bytes);
  }
  // The block went to the cache: no longer allocated, still reserved; the peak stays.
  const MemoryStats after = tessera::memory_stats(cpu);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.num_allocations, before.num_allocations);
  EXPECT_EQ(after.reserved_bytes, after.allocated_bytes + block);
  EXPECT_GE(after.peak_allocated_bytes, before.allocated_bytes + block);
  tessera::cpu_allocator_empty_cache();
  EXPECT_EQ(tessera::memory_stats(cpu).reserved_bytes, after.allocated_bytes);
}

TEST(MemoryStats, ReferenceAcceleratorReportsItsBuffers) {
  const Device dev("my_hardware_device:0");
  Tensor host = tessera::tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {6});
  const MemoryStats before = tessera::memory_stats(dev);
  ASSERT_TRUE(before.reported);
  uint64_t peak_during = 0;
  {
    Tensor a = host.to(dev);                                     // 24 bytes
    Tensor b = tessera::tensor(std::vector<double>{1, 2}, {2}).to(dev);  // 16 bytes
    const MemoryStats s = tessera::memory_stats(dev);
    EXPECT_EQ(s.allocated_bytes, before.allocated_bytes + 40);
    EXPECT_EQ(s.reserved_bytes, s.allocated_bytes);  // the emulator keeps no cache
    EXPECT_EQ(s.num_allocations, before.num_allocations + 2);
    EXPECT_GE(s.peak_allocated_bytes, s.allocated_bytes);
    peak_during = s.peak_allocated_bytes;
  }
  const MemoryStats after = tessera::memory_stats(dev);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.num_allocations, before.num_allocations);
  EXPECT_EQ(after.peak_allocated_bytes, peak_during);
  EXPECT_THROW(tessera::memory_stats(Device("my_hardware_device:7")), tessera::Error);
}

TEST(MemoryStats, OpenclReportsItsCachingAllocator) {
  bool have_opencl = false;
  for (const auto& d : tessera::devices()) have_opencl |= d.device.type() == tessera::DeviceType::OpenCL;
  if (!have_opencl) GTEST_SKIP() << "no OpenCL device (no ICD); `tessera devices` says why";
  const Device dev("opencl:0");
  const MemoryStats before = tessera::memory_stats(dev);
  ASSERT_TRUE(before.reported);
  {
    Tensor a = tessera::tensor(std::vector<float>(250, 1.0f), {250}).to(dev);  // 1000 bytes -> class 1024
    const MemoryStats s = tessera::memory_stats(dev);
    EXPECT_EQ(s.allocated_bytes, before.allocated_bytes + 1024);
    EXPECT_EQ(s.num_allocations, before.num_allocations + 1);
    EXPECT_GE(s.peak_allocated_bytes, s.allocated_bytes);
  }
  const MemoryStats after = tessera::memory_stats(dev);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(after.reserved_bytes, after.allocated_bytes + 1024);  // cached for reuse
}

std::string run_cli(const std::string& args) {
  FILE* f = popen(("'" TESSERA_CLI "' " + args + " 2>&1").c_str(), "r");
  if (!f) return "popen failed";
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
  const int st = pclose(f);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) out += "\n(exit status " + std::to_string(st) + ")";
  return out;
}

TEST(MemoryStats, DevicesVerboseShowsThemForEveryDevice) {
  const std::string text = run_cli("devices --verbose");
  // Every device line is followed by its memory line; the CLI process allocated nothing on the
  // accelerator, so its statistics are all zero.
  const size_t at = text.find("my_hardware_device:0");
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_NE(text.find("\n  memory: allocated 0 B, reserved 0 B, peak 0 B, 0 allocations", at), std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  memory: allocated", text.find("cpu:0")), std::string::npos) << text;
  EXPECT_EQ(run_cli("devices").find("memory:"), std::string::npos);

  const nlohmann::json j = nlohmann::json::parse(run_cli("devices --json --verbose"), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  bool seen = false;
  for (const auto& d : j["devices"]) {
    ASSERT_TRUE(d.contains("memory_stats")) << d.dump();
    if (d["name"] != "my_hardware_device:0") continue;
    seen = true;
    EXPECT_EQ(d["memory_stats"]["reported"], true);
    EXPECT_EQ(d["memory_stats"]["allocated_bytes"], 0);
    EXPECT_EQ(d["memory_stats"]["num_allocations"], 0);
  }
  EXPECT_TRUE(seen) << j.dump(1);
}

}  // namespace
