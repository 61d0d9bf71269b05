// Plugin discovery and loading, against real shared libraries built by this folder, each broken in
// one way (see plugins/), and manifests written into fresh temporary folders.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include "loader_test_util.h"
#include "tessera/allocator.h"
#include "tessera/cpu_features.h"
#include "tessera/dispatcher.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "tessera/ops.h"

namespace {

using namespace lt;
using tessera::DeviceType;
using tessera::PluginStatus;

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tessera::shutdown_plugins();
    tessera::reset_privateuse_names_for_testing();
    ASSERT_FALSE(dir_.path().empty());
    setenv("TESSERA_PLUGIN_PATH", dir_.path().c_str(), 1);
    // Only this test's plugins take part; the build's own plugins are listed as disabled.
    setenv("TESSERA_PLUGINS_SELECT", "lt_*", 1);
    unsetenv("TESSERA_PLUGINS_DISABLE");
  }
  void TearDown() override {
    tessera::shutdown_plugins();
    unsetenv("TESSERA_PLUGIN_PATH");
    unsetenv("TESSERA_PLUGINS_SELECT");
    unsetenv("TESSERA_PLUGINS_DISABLE");
    tessera::reset_privateuse_names_for_testing();
  }
  static void rediscover() { tessera::rediscover_plugins_for_testing(); }
  static tessera::PluginInfo info(const std::string& name) {
    auto p = find_plugin(name);
    EXPECT_TRUE(p.has_value()) << "plugin '" << name << "' not listed";
    return p.value_or(tessera::PluginInfo{});
  }
  // Expects `name` to be listed as failed with a reason containing `fragment`.
  static void expect_failed(const std::string& name, const std::string& fragment) {
    tessera::PluginInfo p = info(name);
    EXPECT_EQ(p.status, PluginStatus::Failed) << name << ": " << tessera::plugin_status_name(p.status);
    EXPECT_NE(p.reason.find(fragment), std::string::npos) << "reason: " << p.reason;
    EXPECT_EQ(p.reason.find('\n'), std::string::npos) << "reason spans lines: " << p.reason;
  }

  TempDir dir_;
};

// ------------------------------------------------------------------ a good plugin

TEST_F(LoaderTest, GoodPluginLoadsLazilyRegistersAndUnloads) {
  // The library is copied next to its manifest and named relatively.
  fs::copy_file(LT_LIB_GOOD, dir_.file("liblt_good.so"));
  const std::string lib = dir_.file("liblt_good.so");
  dir_.write_manifest("lt_good", backend_manifest("lt_good", "liblt_good.so", 2, "lt_npu"));
  rediscover();

  tessera::PluginInfo p = info("lt_good");
  EXPECT_EQ(p.status, PluginStatus::Available) << p.reason;
  EXPECT_EQ(p.kind, tessera::PluginKind::Backend);
  EXPECT_EQ(p.version, "1.0.0");
  EXPECT_EQ(p.library, lib);
  EXPECT_EQ(p.manifest, dir_.file("lt_good.json"));
  EXPECT_TRUE(p.has_device);
  EXPECT_EQ(p.device_type, DeviceType::PrivateUse2);
  EXPECT_EQ(p.device_name, "lt_npu");
  // Discovery named the slot, so the device parses before anything is loaded.
  EXPECT_FALSE(library_is_loaded(lib));
  tessera::Device d("lt_npu:0");
  EXPECT_EQ(d.type(), DeviceType::PrivateUse2);
  EXPECT_EQ(d.str(), "lt_npu:0");
  EXPECT_FALSE(library_is_loaded(lib)) << "parsing a device name must not load the plugin";

  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2, &why)) << why;
  EXPECT_TRUE(library_is_loaded(lib));
  EXPECT_EQ(info("lt_good").status, PluginStatus::Loaded);
  EXPECT_EQ(call_plugin_counter(lib, "lt_plugin_init_calls"), 1);

  auto& dispatcher = tessera::Dispatcher::instance();
  tessera::OperatorEntry* op = dispatcher.find_op("lt_good_fill_");
  ASSERT_NE(op, nullptr) << "the operator the plugin defined is missing";
  auto backends = dispatcher.backends_with_kernel(*op);
  EXPECT_NE(std::find(backends.begin(), backends.end(), DeviceType::PrivateUse2), backends.end());

  const tessera::BackendDevice* backend = tessera::backend_device_if_loaded(DeviceType::PrivateUse2);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->plugin, "lt_good");
  ASSERT_NE(backend->iface, nullptr);
  EXPECT_EQ(backend->iface->device_count(backend->self, nullptr, 0), 1);

  // The allocator goes through the plugin and frees through it.
  {
    tessera::Allocator* alloc = tessera::get_allocator(DeviceType::PrivateUse2);
    ASSERT_NE(alloc, nullptr);
    tessera::DataPtr block = alloc->allocate(4096, 0);
    EXPECT_NE(block.get(), nullptr);
    EXPECT_EQ(block.device(), tessera::Device(DeviceType::PrivateUse2, 0));
    EXPECT_EQ(call_plugin_counter(lib, "lt_plugin_live_allocations"), 1);
  }
  EXPECT_EQ(call_plugin_counter(lib, "lt_plugin_live_allocations"), 0);
  try {
    tessera::get_allocator(DeviceType::PrivateUse2)->allocate(size_t(1) << 41, 0);
    ADD_FAILURE() << "a 2 TiB allocation should fail";
  } catch (const tessera::Error& e) {
    EXPECT_EQ(e.code(), tessera::ErrorCode::OutOfMemory);
    std::string m = e.what();
    EXPECT_NE(m.find("lt_npu:0"), std::string::npos) << m;
    EXPECT_NE(m.find("2199023255552"), std::string::npos) << m;
  }

  // The device shows in the device list with the plugin's properties.
  bool listed = false;
  for (const auto& dev : tessera::devices()) {
    if (dev.name != "lt_npu:0") continue;
    listed = true;
    EXPECT_EQ(dev.plugin, "lt_good");
    EXPECT_NE(dev.properties.find("host test device"), std::string::npos) << dev.properties;
  }
  EXPECT_TRUE(listed) << "lt_npu:0 missing from tessera::devices()";

  tessera::shutdown_plugins();
  EXPECT_FALSE(library_is_loaded(lib));
  EXPECT_EQ(info("lt_good").status, PluginStatus::Available);
  EXPECT_EQ(tessera::backend_device_if_loaded(DeviceType::PrivateUse2), nullptr);
  backends = dispatcher.backends_with_kernel(*op);
  EXPECT_EQ(std::find(backends.begin(), backends.end(), DeviceType::PrivateUse2), backends.end())
      << "the kernel stayed registered after shutdown";
  // Used again, it loads again.
  ASSERT_TRUE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2, &why)) << why;
  EXPECT_EQ(info("lt_good").status, PluginStatus::Loaded);
}

TEST_F(LoaderTest, GoodPluginKernelRunsOnItsDevice) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 1, "lt_npu"));
  rediscover();
  tessera::Tensor t = tessera::empty({5}, tessera::TensorOptions().device("lt_npu:0").dtype(tessera::DType::Float32));
  EXPECT_EQ(t.device().type(), DeviceType::PrivateUse1);
  auto& dispatcher = tessera::Dispatcher::instance();
  dispatcher.call_boxed(dispatcher.op("lt_good_fill_"), {t, 2.5});
  tessera::Tensor host = t.to(tessera::Device("cpu"));
  const float* values = host.data_ptr<float>();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(values[i], 2.5f) << i;
}

TEST_F(LoaderTest, RegistrationsAfterInitApplyAtOnceAndAreUndoneAtShutdown) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu"));
  rediscover();
  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2, &why)) << why;
  auto& dispatcher = tessera::Dispatcher::instance();
  EXPECT_EQ(call_plugin_counter(LT_LIB_GOOD, "lt_good_register_unknown"), 0);
  EXPECT_EQ(call_plugin_counter(LT_LIB_GOOD, "lt_good_register_late"), 0);
  tessera::OperatorEntry* late = dispatcher.find_op("lt_good_late_");
  ASSERT_NE(late, nullptr);
  auto backends = dispatcher.backends_with_kernel(*late);
  EXPECT_NE(std::find(backends.begin(), backends.end(), DeviceType::PrivateUse2), backends.end());
  tessera::shutdown_plugins();
  backends = dispatcher.backends_with_kernel(*late);
  EXPECT_EQ(std::find(backends.begin(), backends.end(), DeviceType::PrivateUse2), backends.end());
}

TEST_F(LoaderTest, OpDefineRefusesAtTheCallWhatTheCommitWouldRefuse) {
  dir_.write_manifest("lt_op_define", backend_manifest("lt_op_define", LT_LIB_OP_DEFINE, 2, "lt_opdefdev"));
  rediscover();
  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2, &why)) << why;
  EXPECT_EQ(info("lt_op_define").status, PluginStatus::Loaded) << info("lt_op_define").reason;
  // One bit per call in plugins/op_define.c, set when the call went as expected.
  const int results = call_plugin_counter(LT_LIB_OP_DEFINE, "lt_op_define_results");
  for (int bit = 0; bit < 9; ++bit) EXPECT_TRUE(results >> bit & 1) << "op_define call " << bit;
  auto& dispatcher = tessera::Dispatcher::instance();
  EXPECT_NE(dispatcher.find_op("lt_opdef_ok"), nullptr);
  EXPECT_NE(dispatcher.find_op("lt_opdef_chain"), nullptr);
  for (const char* refused : {"lt_opdef_big", "lt_opdef_nometa", "lt_opdef_like", "lt_opdef_lists", "lt_opdef_dtype"})
    EXPECT_EQ(dispatcher.find_op(refused), nullptr) << refused;
  EXPECT_EQ(dispatcher.schema(dispatcher.op("add.Tensor")).str(),
            "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
}

TEST_F(LoaderTest, SdkDevicePluginLoadsAndReportsErrorsAsStatuses) {
  dir_.write_manifest("lt_sdk_device", backend_manifest("lt_sdk_device", LT_LIB_SDK_DEVICE, 3, "lt_sdkdev"));
  rediscover();
  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(DeviceType::PrivateUse3, &why)) << why;
  const tessera::BackendDevice* b = tessera::backend_device_if_loaded(DeviceType::PrivateUse3);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->iface->device_count(b->self, nullptr, 0), 2);
  char props[128];
  size_t need = b->iface->device_properties(b->self, 1, props, sizeof(props));
  EXPECT_EQ(std::string(props), "{\"name\": \"sdk test device 1\", \"memory\": 1073741824}");
  EXPECT_EQ(need, std::string(props).size());
  EXPECT_NE(tessera::Dispatcher::instance().find_op("lt_sdk_fill_"), nullptr);
  tessera::Allocator* alloc = tessera::get_allocator(DeviceType::PrivateUse3);
  { tessera::DataPtr block = alloc->allocate(256, 1); EXPECT_NE(block.get(), nullptr); }
  try {
    alloc->allocate(size_t(2) << 30, 1);
    ADD_FAILURE() << "a 2 GiB allocation should fail";
  } catch (const tessera::Error& e) {
    EXPECT_EQ(e.code(), tessera::ErrorCode::OutOfMemory);
    EXPECT_NE(std::string(e.what()).find("sdk test device 1 holds 1 GiB"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lt_sdkdev:1"), std::string::npos) << e.what();
  }
}

TEST_F(LoaderTest, ConcurrentFirstUsesLoadOnce) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu"));
  rediscover();
  std::atomic<int> go{0}, ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      if (tessera::ensure_backend_loaded(DeviceType::PrivateUse2)) ok.fetch_add(1);
    });
  go = 1;
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(call_plugin_counter(LT_LIB_GOOD, "lt_plugin_init_calls"), 1);
}

// ------------------------------------------------------------------ shutdown and plugin generations

// The reference accelerator numbers its memory handles from 1 in every fresh instance, so after a
// reload a new tensor gets the very handle an old one still holds.
class AcceleratorGenerationTest : public LoaderTest {
 protected:
  void SetUp() override {
    LoaderTest::SetUp();
    setenv("TESSERA_PLUGINS_SELECT", "my_hardware_device", 1);
    rediscover();
    auto p = find_plugin("my_hardware_device");
    if (!p || p->status != PluginStatus::Available) GTEST_FAIL() << "my_hardware_device is not available";
  }
  static tessera::Tensor on_device(const std::vector<float>& values) {
    return tessera::tensor<float>(values, {int64_t(values.size())}).to(tessera::Device("my_hardware_device:0"));
  }
  static std::vector<float> host_values(const tessera::Tensor& t) {
    tessera::Tensor h = t.to(tessera::Device("cpu"));
    return std::vector<float>(h.data_ptr<float>(), h.data_ptr<float>() + h.numel());
  }
};

TEST_F(AcceleratorGenerationTest, TensorOfAnEndedPluginGenerationIsRefusedNotAliased) {
  tessera::Tensor old = on_device({1, 1, 1, 1});
  tessera::shutdown_plugins();
  tessera::Tensor fresh = on_device({2, 2, 2, 2});  // loads the plugin again
  auto expect_refused = [](const std::function<void()>& use, const char* what) {
    try {
      use();
      ADD_FAILURE() << what << ": a tensor of a shut-down plugin was used";
    } catch (const tessera::Error& e) {
      EXPECT_NE(std::string(e.what()).find("shut down"), std::string::npos) << what << ": " << e.what();
    }
  };
  expect_refused([&] { host_values(old); }, "read");
  expect_refused([&] { old.fill_(7.0); }, "fill_");
  expect_refused([&] { old.copy_(tessera::tensor<float>({9, 9, 9, 9}, {4})); }, "copy_ from the host");
  expect_refused([&] { tessera::add(old, fresh); }, "add");
  EXPECT_EQ(host_values(fresh), (std::vector<float>{2, 2, 2, 2})) << "the old tensor wrote into the new one";
  old = tessera::Tensor();  // releasing it frees nothing of the new generation
  EXPECT_EQ(host_values(fresh), (std::vector<float>{2, 2, 2, 2}));
}

TEST_F(AcceleratorGenerationTest, ShutdownWhileOtherThreadsRunOpsWaitsForThem) {
  std::atomic<bool> stop{false};
  std::atomic<int> completed{0};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w)
    workers.emplace_back([&, w] {
      while (!stop.load()) {
        try {
          float base = float(w + 1);
          tessera::Tensor a = on_device({base, base, base});
          tessera::Tensor b = on_device({10, 20, 30});
          std::vector<float> sum = host_values(tessera::add(a, b));
          if (sum != std::vector<float>{base + 10, base + 20, base + 30}) {
            std::lock_guard lock(failures_mutex);
            failures.push_back("wrong sum");
          }
          completed.fetch_add(1);
        } catch (const tessera::Error& e) {
          // Allowed: the call started during a shutdown, or its tensors belong to a generation that
          // ended, or (a remaining race) the plugin was unloaded between the lazy load of a new
          // tensor's allocator and its use, which reads as "no backend plugin provides".
          std::string m = e.what();
          if (m.find("shut down") == std::string::npos && m.find("no backend plugin provides") == std::string::npos) {
            std::lock_guard lock(failures_mutex);
            failures.push_back(m);
          }
        }
      }
    });
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    tessera::shutdown_plugins();
  }
  // After the last shutdown the workers must get back to work: the plugin loads again and sums
  // complete. On a slow machine (TSan, a loaded CI host) one iteration can take longer than the
  // 2 ms between shutdowns, so wait for completions instead of assuming some happened in between.
  const int before = completed.load();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (completed.load() < before + 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop = true;
  for (auto& t : workers) t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " failure(s), first: " << failures.front();
  EXPECT_GE(completed.load(), before + 3) << "no sums completed within 60 s of the last shutdown";
}

// Note [Asymmetric fence] (dispatcher/src/host_api.h): a call inside a kernel keeps
// shutdown_plugins() waiting, calls that start meanwhile are refused, and threads that made calls
// and exited leave nothing behind that shutdown would wait for.
struct BlockingKernel {
  std::atomic<bool> inside{false};
  std::atomic<bool> release{false};
};
tessera_status_t k_block_until_released(void* ud, const tessera_kernel_call_t* c) {
  auto* k = static_cast<BlockingKernel*>(ud);
  k->inside = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!k->release && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  const tessera_tensor_t* out = c->outputs[0];
  for (int64_t i = 0; i < out->numel; ++i) static_cast<float*>(out->data)[i] = 42.0f;
  return nullptr;
}
tessera_status_t k_write_seven(void*, const tessera_kernel_call_t* c) {
  const tessera_tensor_t* out = c->outputs[0];
  for (int64_t i = 0; i < out->numel; ++i) static_cast<float*>(out->data)[i] = 7.0f;
  return nullptr;
}

TEST_F(AcceleratorGenerationTest, ShutdownWaitsForACallInsideAKernelAndRefusesNewOnes) {
  using namespace tessera;
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry& op = d.define_op("test_block_in_kernel(Tensor self) -> Tensor", "relu", "test");
  BlockingKernel k;
  [[maybe_unused]] RegistrationHandle h = d.register_kernel(op, DeviceType::CPU, Functionality::Dense,
                                           KernelEntry{k_block_until_released, &k, TESSERA_DTYPE_MASK_ALL, 0, "test"});
  OperatorEntry& quick = d.define_op("test_quick_in_kernel(Tensor self) -> Tensor", "relu", "test");
  [[maybe_unused]] RegistrationHandle hq = d.register_kernel(quick, DeviceType::CPU, Functionality::Dense,
                                            KernelEntry{k_write_seven, nullptr, TESSERA_DTYPE_MASK_ALL, 0, "test"});
  const Tensor x = tensor<float>({1, 1, 1, 1}, {4});
  auto call_quick = [&] { return std::get<Tensor>(d.call_boxed(quick, {x})[0]).data_ptr<float>()[0]; };
  std::atomic<float> result{0};
  std::thread caller([&] { result = std::get<Tensor>(d.call_boxed(op, {x})[0]).data_ptr<float>()[3]; });
  while (!k.inside) std::this_thread::yield();
  std::atomic<bool> shut{false};
  std::thread shutter([&] {
    shutdown_plugins();
    shut = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(shut.load()) << "shutdown_plugins() returned while a call was inside a kernel";
  // Meanwhile a new call is refused (or, if the shutdown has not raised its flag yet, runs).
  try {
    EXPECT_EQ(call_quick(), 7.0f);
    EXPECT_FALSE(shut.load());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("being shut down"), std::string::npos) << e.what();
  }
  k.release = true;
  caller.join();
  shutter.join();
  EXPECT_TRUE(shut.load());
  EXPECT_EQ(result.load(), 42.0f);

  // Threads that call and exit hand their slots back: a shutdown after them does not wait.
  std::vector<std::thread> churn;
  std::atomic<int> sevens{0};
  for (int i = 0; i < 64; ++i) churn.emplace_back([&] { sevens += call_quick() == 7.0f; });
  for (auto& t : churn) t.join();
  EXPECT_EQ(sevens.load(), 64);
  const auto t0 = std::chrono::steady_clock::now();
  shutdown_plugins();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(LoaderTest, ListingPluginsLoadsNoLibrary) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu"));
  dir_.write_manifest("lt_old_minor", backend_manifest("lt_old_minor", LT_LIB_OLD_MINOR, 3, "lt_old"));
  dir_.write_manifest("lt_no_entry", plain_manifest("lt_no_entry", LT_LIB_NO_ENTRY));
  rediscover();
  auto list = tessera::plugins();
  int mine = 0;
  for (const auto& p : list)
    if (p.name.rfind("lt_", 0) == 0) {
      ++mine;
      EXPECT_EQ(p.status, PluginStatus::Available) << p.name << ": " << p.reason;
    }
  EXPECT_EQ(mine, 3);
  EXPECT_FALSE(library_is_loaded(LT_LIB_GOOD));
  EXPECT_FALSE(library_is_loaded(LT_LIB_OLD_MINOR));
  EXPECT_FALSE(library_is_loaded(LT_LIB_NO_ENTRY));
  // The build's own plugins, if any, are disabled by TESSERA_PLUGINS_SELECT with a reason.
  for (const auto& p : list)
    if (p.name.rfind("lt_", 0) != 0) {
      EXPECT_EQ(p.status, PluginStatus::Disabled) << p.name;
      EXPECT_NE(p.reason.find("TESSERA_PLUGINS_SELECT"), std::string::npos) << p.reason;
    }
}

// ------------------------------------------------------------------ manifests

TEST_F(LoaderTest, InvalidJsonGivesFileLineAndColumn) {
  const std::string text = "{\n  \"manifest_version\": 1,\n  \"name\": \"lt_bad_json\",\n  \"kind\": backend\n}\n";
  std::string path = dir_.write("lt_bad_json.json", text);
  rediscover();
  tessera::PluginInfo p = info("lt_bad_json");
  EXPECT_EQ(p.status, PluginStatus::Failed);
  // Line 4 is `  "kind": backend`; the offending byte is the 'b' at column 11.
  EXPECT_EQ(p.reason.rfind(path + ":4:11: invalid JSON: ", 0), 0u) << p.reason;
  EXPECT_EQ(p.reason.find('\n'), std::string::npos);
}

TEST_F(LoaderTest, InvalidJsonOnFirstLineAndTruncated) {
  std::string a = dir_.write("lt_trunc.json", "{\"manifest_version\": 1, \"name\": ");
  std::string b = dir_.write("lt_comma.json", "{\"manifest_version\": 1,, \"name\": \"x\"}");
  rediscover();
  EXPECT_EQ(info("lt_comma").reason.rfind(b + ":1:24: invalid JSON: ", 0), 0u) << info("lt_comma").reason;
  EXPECT_EQ(info("lt_trunc").reason.rfind(a + ":1:", 0), 0u) << info("lt_trunc").reason;
}

TEST_F(LoaderTest, UnknownManifestVersion) {
  json m = backend_manifest("lt_v7", LT_LIB_GOOD, 2, "lt_npu");
  m["manifest_version"] = 7;
  dir_.write_manifest("lt_v7", m);
  rediscover();
  expect_failed("lt_v7", "unknown manifest_version 7");
  expect_failed("lt_v7", "reads 1");
}

TEST_F(LoaderTest, MissingFieldNamesFieldAndType) {
  json m = backend_manifest("lt_nolib", LT_LIB_GOOD, 2, "lt_npu");
  m.erase("library");
  dir_.write_manifest("lt_nolib", m);
  json n = backend_manifest("lt_noabi", LT_LIB_GOOD, 2, "lt_npu");
  n["abi"].erase("major");
  dir_.write_manifest("lt_noabi", n);
  json d = backend_manifest("lt_nodevice", LT_LIB_GOOD, 2, "lt_npu");
  d.erase("device");
  dir_.write_manifest("lt_nodevice", d);
  rediscover();
  expect_failed("lt_nolib", "missing field 'library' (string)");
  expect_failed("lt_noabi", "missing field 'abi.major' (integer)");
  expect_failed("lt_nodevice", "missing field 'device' (object)");
}

TEST_F(LoaderTest, WrongTypeNamesFieldAndExpectedType) {
  json m = backend_manifest("lt_prio", LT_LIB_GOOD, 2, "lt_npu");
  m["priority"] = "high";
  dir_.write_manifest("lt_prio", m);
  json n = backend_manifest("lt_feat", LT_LIB_GOOD, 2, "lt_npu");
  n["requires"] = {{"cpu_features", "avx2"}};
  dir_.write_manifest("lt_feat", n);
  json v = backend_manifest("lt_ver", LT_LIB_GOOD, 2, "lt_npu");
  v["version"] = 3;
  dir_.write_manifest("lt_ver", v);
  rediscover();
  expect_failed("lt_prio", "field 'priority' must be an integer, got a string");
  expect_failed("lt_feat", "field 'requires.cpu_features' must be an array of strings, got a string");
  expect_failed("lt_ver", "field 'version' must be a string, got an integer");
}

TEST_F(LoaderTest, UnknownKind) {
  json m = backend_manifest("lt_gpu_kind", LT_LIB_GOOD, 2, "lt_npu");
  m["kind"] = "gpu";
  dir_.write_manifest("lt_gpu_kind", m);
  rediscover();
  expect_failed("lt_gpu_kind", "unknown kind 'gpu' (expected backend, compiler, quantizer or kernels)");
}

// A misspelt kind is refused by name with the valid words (Note [Plugin kinds]); the words are the
// traits table's, so a kind added there is listed without another edit.
TEST_F(LoaderTest, MisspeltKindNamesTheWordAndTheValidKinds) {
  json m = plain_manifest("lt_compilr_kind", LT_LIB_GOOD);
  m["kind"] = "compilr";
  dir_.write_manifest("lt_compilr_kind", m);
  rediscover();
  expect_failed("lt_compilr_kind", "unknown kind 'compilr' (expected " + tessera::plugin_kind_words() + ")");
  for (const tessera::PluginKindTraits& t : tessera::plugin_kinds()) {
    EXPECT_NE(tessera::plugin_kind_words().find(t.word), std::string::npos) << t.word;
    EXPECT_EQ(tessera::plugin_kind_from_word(t.word), t.kind) << t.word;
    EXPECT_STREQ(tessera::plugin_kind_name(t.kind), t.word);
  }
  EXPECT_FALSE(tessera::plugin_kind_from_word("compilr").has_value());
  EXPECT_FALSE(tessera::plugin_kind_from_word("Backend").has_value());  // words are exact
  EXPECT_THROW(tessera::load_plugins_of_kind("compilr"), tessera::Error);
}

// Note [Autocast policies from the manifest]: the entries reach PluginInfo; a wrong
// policy word, an op the contract lacks, an op given twice, a non-list and a manifest without a
// device are refused by name.
TEST_F(LoaderTest, AutocastPoliciesInTheManifest) {
  json ok = backend_manifest("lt_ac_ok", LT_LIB_GOOD, 2, "lt_npu");
  ok["autocast"] = {{"float32", {"gelu", "add.Tensor"}}, {"none", {"matmul"}}};
  dir_.write_manifest("lt_ac_ok", ok);
  json word = backend_manifest("lt_ac_word", LT_LIB_GOOD, 2, "lt_npu");
  word["autocast"] = {{"fp32", {"gelu"}}};
  dir_.write_manifest("lt_ac_word", word);
  json op = backend_manifest("lt_ac_op", LT_LIB_GOOD, 2, "lt_npu");
  op["autocast"] = {{"float32", {"gelu", "frobnicate"}}};
  dir_.write_manifest("lt_ac_op", op);
  json twice = backend_manifest("lt_ac_twice", LT_LIB_GOOD, 2, "lt_npu");
  twice["autocast"] = {{"float32", {"gelu"}}, {"none", {"gelu"}}};
  dir_.write_manifest("lt_ac_twice", twice);
  json list = backend_manifest("lt_ac_list", LT_LIB_GOOD, 2, "lt_npu");
  list["autocast"] = {{"float32", "gelu"}};
  dir_.write_manifest("lt_ac_list", list);
  json nodev = plain_manifest("lt_ac_nodev", LT_LIB_GOOD);
  nodev["kind"] = "compiler";
  nodev["autocast"] = {{"float32", {"gelu"}}};
  dir_.write_manifest("lt_ac_nodev", nodev);
  rediscover();
  const tessera::PluginInfo good = info("lt_ac_ok");
  EXPECT_EQ(good.status, PluginStatus::Available) << good.reason;
  const std::vector<std::pair<std::string, std::string>> want = {
      {"gelu", "float32"}, {"add.Tensor", "float32"}, {"matmul", "none"}};
  EXPECT_EQ(good.autocast, want);
  expect_failed("lt_ac_word", "unknown autocast policy 'autocast.fp32' (expected lower_precision, float32, promote or none)");
  expect_failed("lt_ac_op", "autocast.float32 names 'frobnicate', which is not an op of the contract");
  expect_failed("lt_ac_twice", "autocast lists 'gelu' twice; give each op one policy");
  expect_failed("lt_ac_list", "field 'autocast.float32' must be an array of strings, got a string");
  expect_failed("lt_ac_nodev", "field 'autocast' needs a 'device'");
}

TEST_F(LoaderTest, UnknownFieldsAreAccepted) {
  json m = backend_manifest("lt_extra", LT_LIB_GOOD, 2, "lt_npu");
  m["x-vendor-note"] = "anything";
  dir_.write_manifest("lt_extra", m);
  rediscover();
  EXPECT_EQ(info("lt_extra").status, PluginStatus::Available) << info("lt_extra").reason;
}

TEST_F(LoaderTest, OversizedManifestIsRefusedBeforeItIsRead) {
  json m = backend_manifest("lt_huge", LT_LIB_GOOD, 2, "lt_npu");
  m["description"] = std::string((size_t(1) << 20) + 16, 'x');  // valid JSON, just too large
  dir_.write_manifest("lt_huge", m);
  dir_.write_manifest("lt_small", backend_manifest("lt_small", LT_LIB_GOOD, 3, "lt_npu3"));
  rediscover();
  expect_failed("lt_huge", dir_.file("lt_huge.json") + ": the manifest is ");
  expect_failed("lt_huge", "more than the 1048576 allowed");
  EXPECT_EQ(info("lt_small").status, PluginStatus::Available) << info("lt_small").reason;
}

TEST_F(LoaderTest, DuplicateKeysAreRefusedAtEveryLevel) {
  std::string good = backend_manifest("lt_dup", LT_LIB_GOOD, 2, "lt_npu").dump();
  // The same key again at the top, after the first one (nlohmann would keep the last).
  dir_.write("lt_dup.json", good.substr(0, good.size() - 1) + ", \"name\": \"lt_other\"}");
  json n = backend_manifest("lt_dup_nested", LT_LIB_GOOD, 3, "lt_npu3");
  std::string nested = n.dump();
  const std::string abi = "\"abi\":{";
  nested.insert(nested.find(abi) + abi.size(), "\"major\":7,");
  dir_.write("lt_dup_nested.json", nested);
  rediscover();
  expect_failed("lt_dup", "key 'name' appears twice in one object");
  expect_failed("lt_dup_nested", "key 'major' appears twice in one object");
}

TEST_F(LoaderTest, NulByteInALibraryPathIsRefused) {
  json m = backend_manifest("lt_nul", std::string(LT_LIB_GOOD) + std::string(1, '\0') + ".evil", 2, "lt_npu");
  dir_.write_manifest("lt_nul", m);
  json r = backend_manifest("lt_nul_req", LT_LIB_GOOD, 3, "lt_npu3");
  r["requires"] = {{"libraries", {"libc.so.6", std::string("libm.so.6") + std::string(1, '\0')}}};
  dir_.write_manifest("lt_nul_req", r);
  rediscover();
  expect_failed("lt_nul", "field 'library' holds a NUL byte");
  expect_failed("lt_nul_req", "field 'requires.libraries[1]' holds a NUL byte");
}

TEST_F(LoaderTest, InvalidUtf8AndControlBytesInAReasonAreEscaped) {
  dir_.write("lt_badutf.json", "{\"manifest_version\": 1, \"name\": \"lt_badutf\", \"version\": \"1.0\xff\x1b[31m\"}");
  rediscover();
  tessera::PluginInfo p = info("lt_badutf");
  EXPECT_EQ(p.status, PluginStatus::Failed);
  EXPECT_NE(p.reason.find("invalid JSON"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("\\xff"), std::string::npos) << p.reason;
  for (unsigned char c : p.reason) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "raw byte " << int(c) << " in: " << p.reason;
}

TEST_F(LoaderTest, MalformedSelectDisableOrPathIsRefusedNamingTheVariable) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu"));
  auto discovery_error = [] {
    try {
      rediscover();
    } catch (const tessera::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  setenv("TESSERA_PLUGINS_SELECT", "lt_good,,cpu", 1);
  EXPECT_NE(discovery_error().find("TESSERA_PLUGINS_SELECT='lt_good,,cpu' has an empty item"), std::string::npos);
  setenv("TESSERA_PLUGINS_SELECT", "lt_*", 1);
  setenv("TESSERA_PLUGINS_DISABLE", "lt_[good", 1);
  EXPECT_NE(discovery_error().find("TESSERA_PLUGINS_DISABLE='lt_[good' has an invalid item 'lt_[good'"),
            std::string::npos);
  EXPECT_THROW(tessera::plugins(), tessera::Error) << "the failed discovery must not count as done";
  unsetenv("TESSERA_PLUGINS_DISABLE");
  setenv("TESSERA_PLUGIN_PATH", (dir_.path() + "::/nonexistent").c_str(), 1);
  EXPECT_NE(discovery_error().find("TESSERA_PLUGIN_PATH='" + dir_.path() + "::/nonexistent' has an empty item"),
            std::string::npos);
  setenv("TESSERA_PLUGIN_PATH", dir_.path().c_str(), 1);
  EXPECT_EQ(discovery_error(), "");
  EXPECT_EQ(info("lt_good").status, PluginStatus::Available);
}

// ------------------------------------------------------------------ libraries

TEST_F(LoaderTest, MissingLibraryFile) {
  dir_.write_manifest("lt_gone", backend_manifest("lt_gone", "liblt_gone.so", 2, "lt_npu"));
  rediscover();
  expect_failed("lt_gone", "library file '" + dir_.file("liblt_gone.so") + "' not found");
}

TEST_F(LoaderTest, TextFileNamedSoIsNotASharedLibrary) {
  dir_.write("liblt_text.so", "this is not a shared library\n");
  dir_.write_manifest("lt_text", backend_manifest("lt_text", "liblt_text.so", 2, "lt_npu"));
  rediscover();
  EXPECT_EQ(info("lt_text").status, PluginStatus::Available);  // lazily: nothing opened yet
  std::string why;
  EXPECT_FALSE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2, &why));
  expect_failed("lt_text", "cannot load library '" + dir_.file("liblt_text.so") + "'");
  EXPECT_NE(why.find("lt_text"), std::string::npos) << why;
  EXPECT_NE(why.find("lt_npu"), std::string::npos) << why;
}

TEST_F(LoaderTest, NoEntryPoint) {
  dir_.write_manifest("lt_no_entry", backend_manifest("lt_no_entry", LT_LIB_NO_ENTRY, 2, "lt_npu"));
  rediscover();
  EXPECT_FALSE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2));
  expect_failed("lt_no_entry", "no entry point 'tessera_plugin_init'");
  EXPECT_FALSE(library_is_loaded(LT_LIB_NO_ENTRY));
}

TEST_F(LoaderTest, FailedInitLeavesNothingRegisteredAndOthersWork) {
  dir_.write_manifest("lt_init_error", backend_manifest("lt_init_error", LT_LIB_INIT_ERROR, 3, "lt_errdev"));
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu"));
  rediscover();
  std::string why;
  EXPECT_FALSE(tessera::ensure_backend_loaded(DeviceType::PrivateUse3, &why));
  expect_failed("lt_init_error", "tessera_plugin_init failed: lt_init_error: the device is on fire");
  EXPECT_FALSE(library_is_loaded(LT_LIB_INIT_ERROR));
  auto& dispatcher = tessera::Dispatcher::instance();
  EXPECT_EQ(dispatcher.find_op("lt_init_error_op"), nullptr) << "an operator of a failed init stayed defined";
  if (tessera::OperatorEntry* add = dispatcher.find_op("add.Tensor")) {
    auto backends = dispatcher.backends_with_kernel(*add);
    EXPECT_EQ(std::find(backends.begin(), backends.end(), DeviceType::PrivateUse3), backends.end())
        << "a kernel of a failed init stayed registered";
  }
  EXPECT_EQ(tessera::backend_device_if_loaded(DeviceType::PrivateUse3), nullptr);
  EXPECT_THROW(tessera::get_allocator(DeviceType::PrivateUse3), tessera::Error);
  // Every other plugin keeps working.
  EXPECT_TRUE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2, &why)) << why;
}

// ------------------------------------------------------------------ ABI

TEST_F(LoaderTest, AbiMajorMismatchInManifestIsRefusedWithoutLoading) {
  json m = backend_manifest("lt_abi2", LT_LIB_ABI2, 2, "lt_npu");
  m["abi"]["major"] = 2;
  dir_.write_manifest("lt_abi2", m);
  rediscover();
  expect_failed("lt_abi2", "incompatible ABI major version (plugin: 2, runtime: 1)");
  EXPECT_FALSE(library_is_loaded(LT_LIB_ABI2));
}

TEST_F(LoaderTest, AbiMajorMismatchInPluginHeaderIsRefused) {
  dir_.write_manifest("lt_abi2", backend_manifest("lt_abi2", LT_LIB_ABI2, 2, "lt_npu"));
  rediscover();
  EXPECT_FALSE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2));
  expect_failed("lt_abi2", "incompatible ABI major version (plugin: 2, runtime: 1)");
  EXPECT_FALSE(library_is_loaded(LT_LIB_ABI2));
  EXPECT_EQ(tessera::backend_device_if_loaded(DeviceType::PrivateUse2), nullptr);
}

TEST_F(LoaderTest, OlderMinorPluginLoadsReadingOnlyItsPrefix) {
  dir_.write_manifest("lt_old_minor", backend_manifest("lt_old_minor", LT_LIB_OLD_MINOR, 3, "lt_old"));
  rediscover();
  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(DeviceType::PrivateUse3, &why)) << why;
  const tessera::BackendDevice* b = tessera::backend_device_if_loaded(DeviceType::PrivateUse3);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->iface->struct_size, offsetof(tessera_device_interface_t, device_properties));
  EXPECT_FALSE(TESSERA_ABI_HAS_FIELD(b->iface, tessera_device_interface_t, device_properties));
  EXPECT_EQ(b->iface->device_properties, nullptr) << "a field past the plugin's struct_size was read";
  EXPECT_EQ(b->iface->device_count(b->self, nullptr, 0), 1);
  {
    tessera::DataPtr block = tessera::get_allocator(DeviceType::PrivateUse3)->allocate(64, 0);
    EXPECT_EQ(call_plugin_counter(LT_LIB_OLD_MINOR, "lt_plugin_live_allocations"), 1);
  }
  EXPECT_EQ(call_plugin_counter(LT_LIB_OLD_MINOR, "lt_plugin_live_allocations"), 0);
  // Its header ends before `shutdown` (which holds poison): shutting down must not call it.
  tessera::shutdown_plugins();
  EXPECT_EQ(info("lt_old_minor").status, PluginStatus::Available);
}

// Note [ABI range]: lt_newer_minor is built against the next minor (its structs grew) and reads
// host_abi_minor; its manifest says so and declares that it works with this runtime's minor too.
TEST_F(LoaderTest, NewerMinorPluginLoads) {
  json m = backend_manifest("lt_newer_minor", LT_LIB_NEWER_MINOR, 1, "lt_new");
  m["abi"]["minor"] = TESSERA_ABI_MINOR + 1;
  m["abi"]["min_host_minor"] = TESSERA_ABI_MINOR;
  dir_.write_manifest("lt_newer_minor", m);
  rediscover();
  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(DeviceType::PrivateUse1, &why)) << why;
  const tessera::BackendDevice* b = tessera::backend_device_if_loaded(DeviceType::PrivateUse1);
  ASSERT_NE(b, nullptr);
  EXPECT_GT(b->iface->struct_size, sizeof(tessera_device_interface_t));
  EXPECT_NE(b->iface->device_properties, nullptr);
  char props[256];
  b->iface->device_properties(b->self, 0, props, sizeof(props));
  EXPECT_NE(std::string(props).find("host test device 0"), std::string::npos);
}

// Without the declaration a plugin of a newer minor is refused before its library is opened, saying
// which side to upgrade; a manifest that understates the library's minor is refused after init.
TEST_F(LoaderTest, APluginOutsideItsAbiRangeIsRefusedNamingTheSideToUpgrade) {
  const std::string runtime = std::to_string(TESSERA_ABI_MAJOR) + "." + std::to_string(TESSERA_ABI_MINOR);
  const std::string next = std::to_string(TESSERA_ABI_MAJOR) + "." + std::to_string(TESSERA_ABI_MINOR + 1);
  json newer = backend_manifest("lt_newer_minor", LT_LIB_NEWER_MINOR, 1, "lt_new");
  newer["abi"]["minor"] = TESSERA_ABI_MINOR + 1;
  dir_.write_manifest("lt_newer_minor", newer);
  json understated = backend_manifest("lt_understated", LT_LIB_NEWER_MINOR, 2, "lt_under");
  dir_.write_manifest("lt_understated", understated);  // says this runtime's minor; the library is newer
  json too_old = backend_manifest("lt_range_typo", LT_LIB_GOOD, 3, "lt_typo");
  too_old["abi"]["min_host_minor"] = TESSERA_ABI_MINOR + 1;
  dir_.write_manifest("lt_range_typo", too_old);
  rediscover();
  expect_failed("lt_newer_minor", "needs a runtime of plugin ABI " + next + " or newer (built against " + next +
                                      "), this runtime has " + runtime + ": upgrade Tessera");
  EXPECT_FALSE(library_is_loaded(LT_LIB_NEWER_MINOR));
  std::string why;
  EXPECT_FALSE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2, &why));
  expect_failed("lt_understated", "the library was built against plugin ABI " + next + " but its manifest says " +
                                      runtime + " (abi.minor): the manifest and the library come from different builds");
  expect_failed("lt_range_typo", "abi.min_host_minor (" + std::to_string(TESSERA_ABI_MINOR + 1) +
                                     ") is newer than abi.minor (" + std::to_string(TESSERA_ABI_MINOR) + ")");
}

// ------------------------------------------------------------------ requirements

TEST_F(LoaderTest, UnmetCpuFeatures) {
  json m = backend_manifest("lt_avx9000", LT_LIB_GOOD, 2, "lt_npu");
  m["requires"] = {{"cpu_features", {"avx9000"}}};
  dir_.write_manifest("lt_avx9000", m);
  json ok = plain_manifest("lt_sse2", LT_LIB_GOOD);
#if defined(__x86_64__)
  ok["requires"] = {{"cpu_features", {"sse2"}}};
#endif
  dir_.write_manifest("lt_sse2", ok);
  rediscover();
  expect_failed("lt_avx9000", "unmet requirements: cpu_features not supported by this CPU: avx9000");
  EXPECT_EQ(info("lt_sse2").status, PluginStatus::Available) << info("lt_sse2").reason;
}

// extension_of_kind (Note [Plugin kinds]) gives every caller the same one-line errors: an unknown
// name lists the plugins of the kind, a plugin of another kind says which kind it is.
TEST_F(LoaderTest, ExtensionOfKindNamesThePluginAndTheKinds) {
  dir_.write_manifest("lt_ext_backend", backend_manifest("lt_ext_backend", LT_LIB_GOOD, 2, "lt_npu"));
  dir_.write_manifest("lt_ext_quant", plain_manifest("lt_ext_quant", LT_LIB_GOOD));
  rediscover();
  auto message = [](const std::string& name) {
    try {
      tessera::extension_of_kind(tessera::PluginKind::Quantizer, name, {.who = "test"});
    } catch (const tessera::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string unknown = message("lt_no_such");
  EXPECT_NE(unknown.find("test: unknown plugin 'lt_no_such'; expected a quantizer plugin (found: lt_ext_quant"),
            std::string::npos)
      << unknown;
  const std::string other = message("lt_ext_backend");
  EXPECT_NE(other.find("test: plugin 'lt_ext_backend' is a backend plugin, not a quantizer"), std::string::npos)
      << other;
  EXPECT_EQ(info("lt_ext_backend").status, PluginStatus::Available);  // refused before anything loads
}

// A compiler or quantizer plugin whose library offers no extension fails at load (so `tessera plugins
// --load` and `doctor` do not call it loaded), and a manifest that failed to read is named with its
// reason, not as a plugin of the default kind.
TEST_F(LoaderTest, APluginWithoutItsKindsExtensionFailsToLoad) {
  json m = plain_manifest("lt_no_ext_compiler", LT_LIB_GOOD);
  m["kind"] = "compiler";
  m["abi"]["minor"] = TESSERA_ABI_MINOR;
  dir_.write_manifest("lt_no_ext_compiler", m);
  json typo = plain_manifest("lt_typo_compiler", LT_LIB_GOOD);
  typo["kind"] = "compilr";
  dir_.write_manifest("lt_typo_compiler", typo);
  rediscover();
  std::string why;
  EXPECT_FALSE(tessera::load_plugin("lt_no_ext_compiler", &why));
  expect_failed("lt_no_ext_compiler", std::string("compiler plugin offers no extension '") + TESSERA_EXT_COMPILER + "'");
  auto message = [](const std::string& name) {
    try {
      tessera::extension_of_kind(tessera::PluginKind::Compiler, name, {.who = "compile", .role = "backend"});
    } catch (const tessera::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string typo_message = message("lt_typo_compiler");
  EXPECT_NE(typo_message.find("compile: backend 'lt_typo_compiler' cannot be used: "), std::string::npos) << typo_message;
  EXPECT_NE(typo_message.find("lt_typo_compiler.json: unknown kind 'compilr' (expected backend, compiler, quantizer or "
                              "kernels)"),
            std::string::npos)
      << typo_message;
  EXPECT_EQ(typo_message.find("is a backend plugin"), std::string::npos) << typo_message;
}

// The manifest's feature names are read by the SDK's probe (Note [CPU feature probe]); GCC's own
// detection (which also checks the OS's register state) is the independent reference.
TEST(CpuFeatureNames, AgreeWithTheCompilersDetection) {
#if defined(__x86_64__)
  const tessera::sdk::CpuFeatures f = tessera::sdk::CpuFeatures::detect();
  __builtin_cpu_init();
  EXPECT_EQ(f.has("sse4_1"), bool(__builtin_cpu_supports("sse4.1")));
  EXPECT_EQ(f.has("sse4.2"), bool(__builtin_cpu_supports("sse4.2")));
  EXPECT_EQ(f.has("AVX2"), bool(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(f.has("fma"), bool(__builtin_cpu_supports("fma")));
  EXPECT_EQ(f.has("avx512f"), bool(__builtin_cpu_supports("avx512f")));
  EXPECT_EQ(f.has("avx512_bw"), bool(__builtin_cpu_supports("avx512bw")));
  EXPECT_EQ(f.has("avx512-vnni"), bool(__builtin_cpu_supports("avx512vnni")));
  EXPECT_EQ(f.has("avx512_bf16"), bool(__builtin_cpu_supports("avx512bf16")));
  EXPECT_TRUE(f.has("sse2"));  // every x86-64 CPU
#endif
  EXPECT_FALSE(tessera::sdk::CpuFeatures::detect().has("avx9000"));
  EXPECT_FALSE(tessera::sdk::CpuFeatures::detect().has(""));
  tessera::sdk::CpuCapability level{};
  std::string error;
  EXPECT_FALSE(tessera::sdk::parse_cpu_capability("AVX2", &level, &error));  // words are exact
  EXPECT_NE(error.find("TESSERA_CPU_CAPABILITY='AVX2'"), std::string::npos) << error;
  ASSERT_TRUE(tessera::sdk::parse_cpu_capability("avx2", &level, &error));
  EXPECT_EQ(level, tessera::sdk::CpuCapability::AVX2);
}

TEST_F(LoaderTest, UnmetLibraries) {
  json m = backend_manifest("lt_needs_lib", LT_LIB_GOOD, 2, "lt_npu");
  m["requires"] = {{"libraries", {"libc.so.6", "libdoesnotexist.so.7"}}};
  dir_.write_manifest("lt_needs_lib", m);
  json ok = plain_manifest("lt_needs_libc", LT_LIB_GOOD);
  ok["requires"] = {{"libraries", {"libc.so.6"}}};
  dir_.write_manifest("lt_needs_libc", ok);
  rediscover();
  expect_failed("lt_needs_lib", "libraries not found by the dynamic loader: libdoesnotexist.so.7");
  EXPECT_EQ(info("lt_needs_lib").reason.find("libc.so.6"), std::string::npos);
  EXPECT_EQ(info("lt_needs_libc").status, PluginStatus::Available) << info("lt_needs_libc").reason;
}

TEST_F(LoaderTest, RequiredLibrariesAreFoundWithoutRunningThem) {
  const std::string marker = dir_.file("constructor-ran");
  setenv("LT_CTOR_MARKER", marker.c_str(), 1);
  fs::copy_file(LT_LIB_CTOR_MARKER, dir_.file("liblt_required.so"));
  setenv("LD_LIBRARY_PATH", dir_.path().c_str(), 1);
  json m = plain_manifest("lt_needs_ctor", LT_LIB_GOOD);
  m["requires"] = {{"libraries", {"liblt_required.so", dir_.file("liblt_required.so")}}};
  dir_.write_manifest("lt_needs_ctor", m);
  rediscover();
  unsetenv("LD_LIBRARY_PATH");
  unsetenv("LT_CTOR_MARKER");
  EXPECT_EQ(info("lt_needs_ctor").status, PluginStatus::Available) << info("lt_needs_ctor").reason;
  EXPECT_FALSE(fs::exists(marker)) << "discovery ran the constructor of a required library";
  EXPECT_FALSE(library_is_loaded(dir_.file("liblt_required.so")));
}

TEST_F(LoaderTest, RequiredLibraryInAWorldWritableFolderIsRefused) {
  const std::string open_dir = dir_.file("open");
  ASSERT_TRUE(fs::create_directory(open_dir));
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  fs::copy_file(LT_LIB_CTOR_MARKER, open_dir + "/liblt_required.so");
  json m = plain_manifest("lt_needs_open", LT_LIB_GOOD);
  m["requires"] = {{"libraries", {open_dir + "/liblt_required.so"}}};
  dir_.write_manifest("lt_needs_open", m);
  rediscover();
  expect_failed("lt_needs_open", "required library");
  expect_failed("lt_needs_open", "chmod o-w '" + open_dir + "'");
}

// ------------------------------------------------------------------ slots, security, selection

TEST_F(LoaderTest, SameSlotDifferentNamesFailsTheSecond) {
  dir_.write_manifest("lt_slot_a", backend_manifest("lt_slot_a", LT_LIB_GOOD, 1, "lt_dev_a"));
  dir_.write_manifest("lt_slot_b", backend_manifest("lt_slot_b", LT_LIB_OLD_MINOR, 1, "lt_dev_b"));
  rediscover();
  EXPECT_EQ(info("lt_slot_a").status, PluginStatus::Available) << info("lt_slot_a").reason;
  expect_failed("lt_slot_b", "privateuse1");
  expect_failed("lt_slot_b", "lt_dev_a");  // the rename rule's message names the current name
  EXPECT_EQ(tessera::privateuse_backend_name(1), "lt_dev_a");
}

TEST_F(LoaderTest, SlotAlreadyRenamedByTheApplication) {
  tessera::rename_privateuse_backend(2, "lt_app_dev");
  dir_.write_manifest("lt_slot_a", backend_manifest("lt_slot_a", LT_LIB_GOOD, 2, "lt_dev_a"));
  dir_.write_manifest("lt_slot_same", backend_manifest("lt_slot_same", LT_LIB_OLD_MINOR, 3, "lt_other"));
  rediscover();
  expect_failed("lt_slot_a", "lt_app_dev");
  EXPECT_EQ(info("lt_slot_same").status, PluginStatus::Available);
}

TEST_F(LoaderTest, WorldWritableFolderIsRefused) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu"));
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0777), 0);
  rediscover();
  expect_failed("lt_good", "world-writable");
  expect_failed("lt_good", "chmod o-w '" + dir_.path() + "'");
  ::chmod(dir_.path().c_str(), 0700);
}

TEST_F(LoaderTest, WorldWritableManifestFileIsRefused) {
  std::string path = dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu"));
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  rediscover();
  expect_failed("lt_good", "chmod o-w '" + path + "'");
}

// A link in a safe folder to a file in a world-writable one: the file is checked where it lives.
TEST_F(LoaderTest, SymlinkedLibraryInAWorldWritableFolderIsRefused) {
  const std::string open_dir = dir_.file("open");
  ASSERT_TRUE(fs::create_directory(open_dir));
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  fs::copy_file(LT_LIB_GOOD, open_dir + "/liblt_good.so");
  fs::create_symlink(open_dir + "/liblt_good.so", dir_.file("liblt_good.so"));
  dir_.write_manifest("lt_good", backend_manifest("lt_good", "liblt_good.so", 2, "lt_npu"));
  rediscover();
  expect_failed("lt_good", "resolves to '" + open_dir + "/liblt_good.so'");
  expect_failed("lt_good", "chmod o-w '" + open_dir + "'");
}

TEST_F(LoaderTest, SymlinkedManifestInAWorldWritableFolderIsRefused) {
  TempDir elsewhere;
  const std::string open_dir = elsewhere.file("open");
  ASSERT_TRUE(fs::create_directory(open_dir));
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  std::ofstream(open_dir + "/lt_good.json") << backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu").dump();
  fs::create_symlink(open_dir + "/lt_good.json", dir_.file("lt_good.json"));
  rediscover();
  expect_failed("lt_good", "manifest");
  expect_failed("lt_good", "chmod o-w '" + open_dir + "'");
}

TEST_F(LoaderTest, WorldWritableAncestorIsRefusedButStickyOneIsAccepted) {
  const std::string open_dir = dir_.file("open"), inner = dir_.file("open/inner");
  ASSERT_TRUE(fs::create_directories(inner));
  ASSERT_EQ(::chmod(inner.c_str(), 0700), 0);
  fs::copy_file(LT_LIB_GOOD, inner + "/liblt_good.so");
  dir_.write_manifest("lt_good", backend_manifest("lt_good", inner + "/liblt_good.so", 2, "lt_npu"));
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  rediscover();
  expect_failed("lt_good", "the folder '" + open_dir + "' above the library");
  // With the sticky bit (like /tmp) nobody else can rename or replace `inner`.
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);
  rediscover();
  EXPECT_EQ(info("lt_good").status, PluginStatus::Available) << info("lt_good").reason;
}

TEST_F(LoaderTest, FilesOwnedByAnotherUserAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  fs::copy_file(LT_LIB_GOOD, dir_.file("liblt_good.so"));
  ASSERT_EQ(::chown(dir_.file("liblt_good.so").c_str(), 65534, 65534), 0);
  dir_.write_manifest("lt_good", backend_manifest("lt_good", "liblt_good.so", 2, "lt_npu"));
  std::string other = dir_.write_manifest("lt_other", plain_manifest("lt_other", LT_LIB_GOOD));
  ASSERT_EQ(::chown(other.c_str(), 65534, 65534), 0);
  rediscover();
  expect_failed("lt_good", "owned by uid 65534, neither root nor the current user");
  expect_failed("lt_other", "owned by uid 65534");
}

TEST_F(LoaderTest, ShadowingByPriority) {
  TempDir second;
  json low = backend_manifest("lt_shadow", LT_LIB_OLD_MINOR, 2, "lt_npu");
  low["priority"] = 10;
  json high = backend_manifest("lt_shadow", LT_LIB_GOOD, 2, "lt_npu");
  high["priority"] = 20;
  high["version"] = "2.0.0";
  std::string low_path = dir_.write_manifest("lt_shadow", low);
  std::string high_path = second.write_manifest("lt_shadow", high);
  setenv("TESSERA_PLUGIN_PATH", (dir_.path() + ":" + second.path()).c_str(), 1);
  rediscover();
  auto winner = find_plugin(high_path), loser = find_plugin(low_path);
  ASSERT_TRUE(winner && loser);
  EXPECT_EQ(winner->status, PluginStatus::Available);
  EXPECT_EQ(loser->status, PluginStatus::Shadowed);
  EXPECT_NE(loser->reason.find("shadowed by 'lt_shadow' 2.0.0 from " + high_path), std::string::npos) << loser->reason;
  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(DeviceType::PrivateUse2, &why)) << why;
  EXPECT_TRUE(library_is_loaded(LT_LIB_GOOD));
  EXPECT_FALSE(library_is_loaded(LT_LIB_OLD_MINOR));
}

TEST_F(LoaderTest, ShadowingSkipsAWinnerWhoseRequirementsFail) {
  TempDir second;
  json high = backend_manifest("lt_shadow", LT_LIB_GOOD, 2, "lt_npu");
  high["priority"] = 50;
  high["requires"] = {{"cpu_features", {"avx9000"}}};
  json low = backend_manifest("lt_shadow", LT_LIB_OLD_MINOR, 2, "lt_npu");
  low["priority"] = 5;
  std::string high_path = dir_.write_manifest("lt_shadow", high);
  std::string low_path = second.write_manifest("lt_shadow", low);
  setenv("TESSERA_PLUGIN_PATH", (dir_.path() + ":" + low_path).c_str(), 1);  // a manifest file works too
  rediscover();
  EXPECT_EQ(find_plugin(high_path)->status, PluginStatus::Failed);
  EXPECT_EQ(find_plugin(low_path)->status, PluginStatus::Available);
}

TEST_F(LoaderTest, SelectAndDisableGlobs) {
  dir_.write_manifest("lt_sel_one", plain_manifest("lt_sel_one", LT_LIB_GOOD));
  dir_.write_manifest("lt_sel_two", plain_manifest("lt_sel_two", LT_LIB_GOOD));
  dir_.write_manifest("lt_other", plain_manifest("lt_other", LT_LIB_GOOD));
  setenv("TESSERA_PLUGINS_SELECT", "lt_sel_*, lt_nothing", 1);
  setenv("TESSERA_PLUGINS_DISABLE", "*_two", 1);
  rediscover();
  EXPECT_EQ(info("lt_sel_one").status, PluginStatus::Available);
  EXPECT_EQ(info("lt_sel_two").status, PluginStatus::Disabled);
  EXPECT_NE(info("lt_sel_two").reason.find("TESSERA_PLUGINS_DISABLE (pattern '*_two')"), std::string::npos)
      << info("lt_sel_two").reason;
  EXPECT_EQ(info("lt_other").status, PluginStatus::Disabled);
  EXPECT_NE(info("lt_other").reason.find("TESSERA_PLUGINS_SELECT"), std::string::npos) << info("lt_other").reason;
}

TEST_F(LoaderTest, LogExplainsEveryDecision) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 2, "lt_npu"));
  dir_.write("lt_broken.json", "{");
  setenv("TESSERA_LOG", "plugins", 1);
  tessera::reload_log_settings();
  testing::internal::CaptureStderr();
  rediscover();
  tessera::ensure_backend_loaded(DeviceType::PrivateUse2);
  std::string log = testing::internal::GetCapturedStderr();
  unsetenv("TESSERA_LOG");
  tessera::reload_log_settings();
  EXPECT_NE(log.find("accepted 'lt_good'"), std::string::npos) << log;
  EXPECT_NE(log.find("rejected 'lt_broken'"), std::string::npos) << log;
  EXPECT_NE(log.find("loaded 'lt_good'"), std::string::npos) << log;
  EXPECT_NE(log.find("lt_good: initialised"), std::string::npos) << "plugin log lines go through TESSERA_LOG\n" << log;
}

// ------------------------------------------------------------------ the build's own plugins

// A program that only uses the CPU loads no plugin library but the CPU backend's.
TEST(LoaderCpuOnly, CpuOpLoadsOnlyTheCpuPlugin) {
  unsetenv("TESSERA_PLUGIN_PATH");
  unsetenv("TESSERA_PLUGINS_SELECT");
  unsetenv("TESSERA_PLUGINS_DISABLE");
  tessera::reset_privateuse_names_for_testing();
  tessera::rediscover_plugins_for_testing();
  auto cpu = find_plugin("cpu");
  if (!cpu || cpu->status != PluginStatus::Available) GTEST_SKIP() << "the build has no loadable cpu plugin";
  tessera::Tensor a = tessera::ones({4});
  tessera::Tensor b = tessera::add(a, a);
  EXPECT_EQ(b.device().type(), DeviceType::CPU);
  for (const auto& p : tessera::plugins()) {
    if (p.name == "cpu") EXPECT_EQ(p.status, PluginStatus::Loaded);
    else EXPECT_NE(p.status, PluginStatus::Loaded) << "plugin '" << p.name << "' was loaded by a CPU-only program";
  }
  tessera::shutdown_plugins();
}

}  // namespace
