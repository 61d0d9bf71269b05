// The previous minor release's runtime, as far as a plugin can tell: a host built from the frozen
// 1.2 header only (no Tessera library is linked), which finds, checks and loads a plugin exactly as
// the 1.2 runtime does (dispatcher/src/plugin_requirements.cpp and plugin_loader.cpp at ABI 1.2):
// the manifest's ABI range, dlopen, the entry point called with host ABI 1.2 and a host table of
// the 1.2 size, the header's minor against the manifest's, and only the 1.2 prefix of the device
// interface. The plugin is libabi_v1_1.so built from the live (1.3) header, which declares
// "min_host_minor": 2 and must therefore keep to the 1.2 slots here. Expected values are
// hand-computed.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "tessera/abi/1.2/plugin_abi.h"

static_assert(TESSERA_ABI_MAJOR == 1 && TESSERA_ABI_MINOR == 2,
              "this host must be built from the 1.2 header");

// ---- the host side of ABI 1.2, reduced to what this plugin uses

struct tessera_status_s {
  tessera_status_code_t code;
  std::string message;
};

namespace {
tessera_status_t status_make(tessera_status_code_t code, const char* message) {
  return new tessera_status_s{code, message ? message : ""};
}
void status_free(tessera_status_t s) { delete s; }
tessera_status_code_t status_code(tessera_status_t s) { return s ? s->code : TESSERA_STATUS_OK; }
const char* status_message(tessera_status_t s) { return s ? s->message.c_str() : ""; }
void log_message(tessera_log_level_t, const char*, const char*) {}
const char* get_env(const char*) { return nullptr; }

struct Kernel {
  std::string op;
  tessera_kernel_fn_t fn;
  void* user_data;
};
std::vector<Kernel> g_kernels;

tessera_status_t op_define(void*, const char*, const char*) { return nullptr; }
tessera_status_t kernel_register(void*, const char* op_name, int32_t, uint64_t, tessera_kernel_fn_t fn,
                                 void* user_data, uint32_t) {
  g_kernels.push_back({op_name, fn, user_data});
  return nullptr;
}
tessera_status_t fallback_register(void*, int32_t, tessera_kernel_fn_t, void*) { return nullptr; }
tessera_status_t op_forbid_fallback(void*, const char*) { return nullptr; }

// The 1.2 runtime's checks of the manifest's "abi" before it opens the library (Note [ABI range]).
std::string check_abi_range(const nlohmann::json& manifest) {
  const auto& abi = manifest.at("abi");
  const int major = abi.at("major").get<int>();
  const int minor = abi.value("minor", 0);
  const int oldest = abi.value("min_host_minor", minor);
  if (major != TESSERA_ABI_MAJOR) return "incompatible ABI major version";
  if (oldest > TESSERA_ABI_MINOR)
    return "needs a runtime of plugin ABI 1." + std::to_string(oldest) + " or newer, this runtime has 1." +
           std::to_string(TESSERA_ABI_MINOR);
  return "";
}

class Host12Test : public ::testing::Test {
 protected:
  void SetUp() override {
    host_ = tessera_host_api_t{};
    host_.struct_size = sizeof(tessera_host_api_t);  // the 1.2 size: no generator_reserve
    host_.abi_major = TESSERA_ABI_MAJOR;
    host_.abi_minor = TESSERA_ABI_MINOR;
    host_.host_ctx = this;
    host_.status_make = status_make;
    host_.status_free = status_free;
    host_.status_code = status_code;
    host_.status_message = status_message;
    host_.log = log_message;
    host_.getenv = get_env;
    host_.op_define = op_define;
    host_.kernel_register = kernel_register;
    host_.fallback_register = fallback_register;
    host_.op_forbid_fallback = op_forbid_fallback;
    graph_ = tessera_graph_api_t{};  // struct_size 0: no compiler library in this host
    host_.graph = &graph_;
    g_kernels.clear();
  }
  void TearDown() override {
    if (plugin_ && plugin_->shutdown) plugin_->shutdown(plugin_->self);
    if (lib_) dlclose(lib_);
  }
  // Loads ABI_LIB_LIVE as the 1.2 runtime would, given its manifest's "abi".
  void load(const nlohmann::json& manifest) {
    ASSERT_EQ(check_abi_range(manifest), "");
    lib_ = dlopen(ABI_LIB_LIVE, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    auto init = reinterpret_cast<tessera_plugin_init_fn_t>(dlsym(lib_, TESSERA_PLUGIN_ENTRY_NAME));
    ASSERT_NE(init, nullptr);
    tessera_status_t st = init(TESSERA_ABI_MAJOR, TESSERA_ABI_MINOR, &host_, &plugin_);
    ASSERT_EQ(st, nullptr) << status_message(st);
    ASSERT_NE(plugin_, nullptr);
    ASSERT_EQ(plugin_->abi_major, 1u);
    // The 1.2 runtime refuses a library whose header is newer than its manifest's minor.
    ASSERT_LE(plugin_->abi_minor, uint32_t(manifest["abi"]["minor"].get<int>()));
    ASSERT_NE(plugin_->device, nullptr);
    // Note [ABI versioning]: the common prefix only.
    device_ = tessera_device_interface_t{};
    std::memcpy(&device_, plugin_->device, std::min<size_t>(plugin_->device->struct_size, sizeof(device_)));
  }
  template <typename T>
  T plugin_fn(const char* name) {
    return reinterpret_cast<T>(dlsym(lib_, name));
  }

  tessera_host_api_t host_{};
  tessera_graph_api_t graph_{};
  void* lib_ = nullptr;
  const tessera_plugin_t* plugin_ = nullptr;
  tessera_device_interface_t device_{};
};

const nlohmann::json kManifest = {
    {"manifest_version", 1}, {"name", "abi_v1_1"},
    {"kind", "backend"},     {"library", "libabi_v1_1.so"},
    {"version", "1.0.0"},    {"abi", {{"major", 1}, {"minor", 3}, {"min_host_minor", 2}}}};

TEST(AbiRange12, PluginWithoutRangeIsRefusedBeforeLoading) {
  nlohmann::json m = kManifest;
  m["abi"].erase("min_host_minor");
  EXPECT_EQ(check_abi_range(m), "needs a runtime of plugin ABI 1.3 or newer, this runtime has 1.2");
  EXPECT_EQ(check_abi_range(kManifest), "");
}

TEST_F(Host12Test, PluginBuiltFrom_1_3_HeaderLoadsAndRunsIn_1_2_Runtime) {
  load(kManifest);
  EXPECT_EQ(plugin_->abi_minor, 3u) << "the plugin is the one built from the live 1.3 header";
  // Its device interface is larger than the 1.2 host knows; the host reads the 1.2 prefix.
  EXPECT_GT(plugin_->device->struct_size, sizeof(tessera_device_interface_t));
  ASSERT_EQ(g_kernels.size(), 2u);
  EXPECT_EQ(g_kernels[0].op, "add.Tensor");
  EXPECT_EQ(g_kernels[1].op, "mul.Tensor");

  char reason[64];
  ASSERT_EQ(device_.device_count(plugin_->self, reason, sizeof reason), 1);
  // a + 2 * b on the device, by hand: {1, 2, 3} + 2 * {10, 20, 30} = {21, 42, 63}.
  const float a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
  void* ha = nullptr;
  void* hb = nullptr;
  void* ho = nullptr;
  for (void** h : {&ha, &hb, &ho}) ASSERT_EQ(device_.memory_allocate(plugin_->self, 0, sizeof a, h), nullptr);
  ASSERT_EQ(device_.memory_copy_from_host(plugin_->self, 0, ha, 0, a, sizeof a, nullptr), nullptr);
  ASSERT_EQ(device_.memory_copy_from_host(plugin_->self, 0, hb, 0, b, sizeof b, nullptr), nullptr);
  const int64_t sizes[1] = {3}, strides[1] = {1};
  auto tensor = [&](void* data) {
    tessera_tensor_t t{};
    t.struct_size = offsetof(tessera_tensor_t, version);  // a 1.1-sized tensor: no version
    t.dtype = TESSERA_DTYPE_FLOAT32;
    t.device_type = TESSERA_DEVICE_PRIVATEUSE1;
    t.ndim = 1;
    t.sizes = sizes;
    t.strides = strides;
    t.numel = 3;
    t.data = data;
    return t;
  };
  const tessera_tensor_t ta = tensor(ha), tb = tensor(hb), to = tensor(ho);
  const tessera_tensor_t* inputs[2] = {&ta, &tb};
  const tessera_tensor_t* outputs[1] = {&to};
  tessera_value_t alpha{};
  alpha.kind = TESSERA_VALUE_INT;
  alpha.u.i = 2;
  tessera_kernel_call_t call{};
  call.struct_size = sizeof call;
  call.num_inputs = 2;
  call.num_outputs = 1;
  call.num_attrs = 1;
  call.inputs = inputs;
  call.outputs = outputs;
  call.attrs = &alpha;
  call.op_name = "add.Tensor";
  tessera_status_t st = g_kernels[0].fn(g_kernels[0].user_data, &call);
  ASSERT_EQ(st, nullptr) << status_message(st);
  float out[3] = {0, 0, 0};
  ASSERT_EQ(device_.memory_copy_to_host(plugin_->self, 0, out, ho, 0, sizeof out, nullptr), nullptr);
  EXPECT_EQ(std::vector<float>(out, out + 3), (std::vector<float>{21, 42, 63}));

  // A 1.1 slot the 1.2 host reads: three live blocks of 12 bytes.
  ASSERT_TRUE(TESSERA_ABI_HAS_FIELD(&device_, tessera_device_interface_t, memory_stats) &&
              device_.memory_stats);
  tessera_memory_stats_t ms{};
  ms.struct_size = sizeof ms;
  ASSERT_EQ(device_.memory_stats(plugin_->self, 0, &ms), nullptr);
  EXPECT_EQ(ms.allocated_bytes, 36u);
  EXPECT_EQ(ms.num_allocations, 3u);

  // The host table has no generator_reserve: the plugin draws from its own counter and never reads
  // past the 1.2 table.
  auto reserve = plugin_fn<int (*)(uint64_t, uint64_t*, uint64_t*)>("abi_device_reserve_random");
  ASSERT_NE(reserve, nullptr);
  uint64_t seed = 1, offset = 1;
  EXPECT_EQ(reserve(10, &seed, &offset), 0);
  EXPECT_EQ(seed, 0u);
  EXPECT_EQ(offset, 0u);
  EXPECT_EQ(reserve(5, &seed, &offset), 0);
  EXPECT_EQ(offset, 10u);

  for (void* h : {ha, hb, ho}) device_.memory_free(plugin_->self, 0, h);
}

}  // namespace
