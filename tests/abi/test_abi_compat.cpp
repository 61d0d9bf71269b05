// A plugin built from the frozen 1.0 header loads and runs in this runtime, with the host defaults
// for every slot it lacks; so does one built from the frozen 1.2 header (the previous minor
// release), with the host defaults for the 1.3 slots; the same plugin built from the live header
// reaches the 1.1 slots (memory statistics, the typed extension lookup) and the 1.3 ones (memory
// info, the host's generator). Expected values are hand-computed.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <vector>

#include "loader_test_util.h"
#include "tessera/capabilities.h"
#include "tessera/dispatcher.h"
#include "tessera/generator.h"
#include "tessera/ops.h"
#include "tessera/plugin_loader.h"
#include "tessera/tensor.h"

namespace {

using namespace lt;
using tessera::Device;
using tessera::DeviceType;

class AbiCompatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tessera::shutdown_plugins();
    tessera::reset_privateuse_names_for_testing();
    ASSERT_FALSE(dir_.path().empty());
    setenv("TESSERA_PLUGIN_PATH", dir_.path().c_str(), 1);
    setenv("TESSERA_PLUGINS_SELECT", "abi_*", 1);
    setenv("TESSERA_CPU_FALLBACK", "0", 1);  // a kernel that did not run on the plugin is an error
    unsetenv("TESSERA_PLUGINS_DISABLE");
  }
  void TearDown() override {
    tessera::shutdown_plugins();
    unsetenv("TESSERA_PLUGIN_PATH");
    unsetenv("TESSERA_PLUGINS_SELECT");
    unsetenv("TESSERA_CPU_FALLBACK");
    tessera::reset_privateuse_names_for_testing();
  }
  // Writes the manifest of `name` (library `lib`, ABI 1.`minor`) on privateuse1 as `device`.
  void install(const std::string& name, const std::string& lib, int minor, const std::string& device,
               int min_host_minor = -1) {
    json m = backend_manifest(name, lib, 1, device);
    m["abi"] = {{"major", 1}, {"minor", minor}};
    if (min_host_minor >= 0) m["abi"]["min_host_minor"] = min_host_minor;
    dir_.write_manifest(name, m);
    tessera::rediscover_plugins_for_testing();
  }
  TempDir dir_;
};

std::vector<float> to_host(const tessera::Tensor& t) {
  tessera::Tensor c = t.to(Device(DeviceType::CPU)).contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

TEST_F(AbiCompatTest, PluginBuiltFromFrozen_1_0_HeaderRunsOpsIn_1_1_Runtime) {
  install("abi_v1_0", ABI_LIB_V1_0, 0, "abi10");
  const Device dev("abi10:0");
  tessera::Tensor a = tessera::tensor(std::vector<float>{1.5f, -2.0f, 3.25f, 0.5f, 8.0f, -1.0f}, {2, 3}).to(dev);
  tessera::Tensor b = tessera::tensor(std::vector<float>{0.5f, 4.0f, -1.25f, 2.0f, 0.25f, 3.0f}, {2, 3}).to(dev);
  auto p = find_plugin("abi_v1_0");
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->status, tessera::PluginStatus::Loaded) << p->reason;

  tessera::Tensor sum = tessera::add(a, b, 2);
  EXPECT_EQ(sum.device(), dev);
  EXPECT_EQ(sum.sizes().vec(), (std::vector<int64_t>{2, 3}));
  // a + 2 * b, by hand.
  EXPECT_EQ(to_host(sum), (std::vector<float>{2.5f, 6.0f, 0.75f, 4.5f, 8.5f, 5.0f}));
  tessera::Tensor prod = tessera::mul(a, b);
  EXPECT_EQ(to_host(prod), (std::vector<float>{0.75f, -8.0f, -4.0625f, 1.0f, 2.0f, -3.0f}));
  EXPECT_EQ(call_plugin_counter(ABI_LIB_V1_0, "abi_device_kernel_calls"), 2) << "the plugin's kernels did not run";

  // Its device interface and header are 1.0-sized; the 1.1 slots read as absent.
  const tessera::BackendDevice* backend = tessera::backend_device_if_loaded(DeviceType::PrivateUse1);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->iface->struct_size, 152u);
  EXPECT_FALSE(TESSERA_ABI_HAS_FIELD(backend->iface, tessera_device_interface_t, memory_stats));
  EXPECT_EQ(backend->iface->memory_stats, nullptr);
  // Host defaults: statistics not reported, no extension, nothing released.
  EXPECT_FALSE(tessera::memory_stats(dev).reported);
  EXPECT_EQ(tessera::plugin_proc_address("abi_v1_0", TESSERA_EXT_EMPTY_CACHE), nullptr);
  EXPECT_EQ(tessera::empty_cache(dev), 0u);

  // Its properties, without a trailing NUL.
  bool listed = false;
  for (const auto& d : tessera::devices())
    if (d.device == dev) {
      listed = true;
      EXPECT_EQ(d.properties, "{\"name\": \"abi_v1_0\", \"memory\": 0}");
    }
  EXPECT_TRUE(listed);
}

TEST_F(AbiCompatTest, PluginBuiltFromLiveHeaderReportsMemoryStats) {
  install("abi_v1_1", ABI_LIB_V1_1, TESSERA_ABI_MINOR, "abi11");
  const Device dev("abi11:0");
  tessera::Tensor a = tessera::tensor(std::vector<float>{1, 2, 3, 4}, {4}).to(dev);  // 16 bytes
  tessera::MemoryStats s = tessera::memory_stats(dev);
  ASSERT_TRUE(s.reported);
  EXPECT_EQ(s.allocated_bytes, 16u);
  EXPECT_EQ(s.num_allocations, 1u);
  {
    tessera::Tensor b = tessera::tensor(std::vector<float>{1, 1, 1, 1, 1, 1, 1, 1}, {8}).to(dev);  // 32 bytes
    s = tessera::memory_stats(dev);
    EXPECT_EQ(s.allocated_bytes, 48u);
    EXPECT_EQ(s.peak_allocated_bytes, 48u);
    EXPECT_EQ(s.num_allocations, 2u);
  }
  // b's block went to the plugin's cache: still reserved, no longer allocated; the peak stays.
  s = tessera::memory_stats(dev);
  EXPECT_EQ(s.allocated_bytes, 16u);
  EXPECT_EQ(s.reserved_bytes, 48u);
  EXPECT_EQ(s.peak_allocated_bytes, 48u);
  EXPECT_EQ(s.num_allocations, 1u);
  EXPECT_EQ(tessera::devices().size() > 0, true);
}

TEST_F(AbiCompatTest, ExtensionLookupIsTypedAndReachesThePlugin) {
  install("abi_v1_1", ABI_LIB_V1_1, TESSERA_ABI_MINOR, "abi11");
  const Device dev("abi11:0");
  { tessera::Tensor b = tessera::tensor(std::vector<float>(10, 2.0f), {10}).to(dev); }  // 40 bytes, cached
  auto fn = tessera::plugin_extension<tessera_ext_empty_cache_fn_t>("abi_v1_1", TESSERA_EXT_EMPTY_CACHE);
  ASSERT_NE(fn, nullptr);
  EXPECT_EQ(tessera::plugin_proc_address("abi_v1_1", "tessera.no_such_extension"), nullptr);
  EXPECT_EQ(tessera::plugin_proc_address("no_such_plugin", TESSERA_EXT_EMPTY_CACHE), nullptr);
  EXPECT_THROW(tessera::plugin_proc_address("abi_v1_1", ""), tessera::Error);
  // Through the runtime's wrapper: the cached 40 bytes come back, and a second call finds nothing.
  EXPECT_EQ(tessera::memory_stats(dev).reserved_bytes, 40u);
  EXPECT_EQ(tessera::empty_cache(dev), 40u);
  EXPECT_EQ(tessera::memory_stats(dev).reserved_bytes, 0u);
  EXPECT_EQ(tessera::empty_cache(dev), 0u);
  EXPECT_EQ(call_plugin_counter(ABI_LIB_V1_1, "abi_device_empty_cache_calls"), 2);
}

TEST_F(AbiCompatTest, PluginBuiltFromFrozen_1_2_HeaderRunsIn_1_3_RuntimeWithHostDefaults) {
  install("abi_v1_2", ABI_LIB_V1_2, 2, "abi12");
  const Device dev("abi12:0");
  tessera::Tensor a = tessera::tensor(std::vector<float>{1.5f, -2.0f, 3.25f}, {3}).to(dev);
  tessera::Tensor b = tessera::tensor(std::vector<float>{0.5f, 4.0f, -1.25f}, {3}).to(dev);
  auto p = find_plugin("abi_v1_2");
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->status, tessera::PluginStatus::Loaded) << p->reason;
  EXPECT_EQ(to_host(tessera::add(a, b, 2)), (std::vector<float>{2.5f, 6.0f, 0.75f}));
  EXPECT_EQ(call_plugin_counter(ABI_LIB_V1_2, "abi_device_kernel_calls"), 1)
      << "the plugin's kernel did not run";

  // A 1.2-sized device interface (it ends before the 1.3 memory_info) with its 1.1 slots.
  const tessera::BackendDevice* backend = tessera::backend_device_if_loaded(DeviceType::PrivateUse1);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->iface->struct_size, offsetof(tessera_device_interface_t, memory_info));
  EXPECT_FALSE(TESSERA_ABI_HAS_FIELD(backend->iface, tessera_device_interface_t, memory_info));
  EXPECT_EQ(tessera::memory_stats(dev).allocated_bytes, 24u);
  // Host defaults of the 1.3 slots: no memory info (a clear error), no pinned memory, synchronous
  // copies; the capabilities say so.
  const tessera::DeviceCapabilities caps = tessera::device_capabilities(dev);
  EXPECT_TRUE(caps.memory_stats);
  EXPECT_FALSE(caps.memory_info);
  EXPECT_FALSE(caps.pinned_host_memory);
  EXPECT_FALSE(caps.async_pinned_copy);
  try {
    tessera::memory_info(dev);
    ADD_FAILURE() << "memory_info of a 1.2 plugin must throw";
  } catch (const tessera::Error& e) {
    EXPECT_EQ(e.code(), tessera::ErrorCode::Unimplemented);
    EXPECT_NE(std::string(e.what()).find("does not report free/total memory"), std::string::npos) << e.what();
  }
  tessera::Tensor pinned = tessera::empty({3}, tessera::TensorOptions(tessera::kFloat32).pinned_memory(dev));
  EXPECT_FALSE(pinned.is_pinned());
  EXPECT_TRUE(pinned.device().is_cpu());
  float* pp = pinned.data_ptr<float>();
  pp[0] = 7.0f, pp[1] = 8.0f, pp[2] = 9.0f;
  tessera::Tensor moved = pinned.to(dev, /*non_blocking=*/true);
  EXPECT_EQ(to_host(moved), (std::vector<float>{7.0f, 8.0f, 9.0f}));
}

TEST_F(AbiCompatTest, LivePluginDeclaringRangeUsesThe_1_3_SlotsInThisRuntime) {
  install("abi_v1_1", ABI_LIB_V1_1, TESSERA_ABI_MINOR, "abi11", /*min_host_minor=*/2);
  const Device dev("abi11:0");
  tessera::Tensor a = tessera::tensor(std::vector<float>{1, 2, 3, 4}, {4}).to(dev);  // 16 bytes
  auto p = find_plugin("abi_v1_1");
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->status, tessera::PluginStatus::Loaded) << p->reason;
  // memory_info: 1 GiB in all, less the 16 bytes of `a`.
  const tessera::MemoryInfo info = tessera::memory_info(dev);
  EXPECT_EQ(info.total_bytes, uint64_t(1) << 30);
  EXPECT_EQ(info.free_bytes, (uint64_t(1) << 30) - 16);
  EXPECT_TRUE(tessera::device_capabilities(dev).memory_info);
  // A device index the plugin does not have.
  try {
    tessera::memory_info(Device("abi11:3"));
    ADD_FAILURE() << "memory_info of device 3 must throw";
  } catch (const tessera::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("device index 3 of 'abi11' is out of range: plugin 'abi_v1_1' reports 1 "
                                   "device(s), 0..0"),
        std::string::npos)
        << e.what();
  }
  // The host offers generator_reserve: the plugin draws from abi11:0's default generator.
  void* lib = dlopen(ABI_LIB_V1_1, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto reserve =
      reinterpret_cast<int (*)(uint64_t, uint64_t*, uint64_t*)>(dlsym(lib, "abi_device_reserve_random"));
  ASSERT_NE(reserve, nullptr);
  tessera::Generator g = tessera::Generator::default_generator(dev);
  g.manual_seed(1234);
  g.set_offset(40);
  uint64_t seed = 0, offset = 0;
  EXPECT_EQ(reserve(10, &seed, &offset), 1);
  EXPECT_EQ(seed, 1234u);
  EXPECT_EQ(offset, 40u);
  EXPECT_EQ(g.offset(), 50u);
  dlclose(lib);
}

}  // namespace
