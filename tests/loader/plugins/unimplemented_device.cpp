// lt_unimplemented_device: a host-memory device (SDK only) whose add.Tensor kernel is registered for
// every floating dtype but answers UNIMPLEMENTED on every call, so each add runs on the CPU fallback.
#include <cstdlib>
#include <cstring>
#include <string>

#include "tessera/sdk.hpp"

namespace {

class HostMemoryDevice final : public tessera::sdk::DeviceBase {
 public:
  int32_t device_count(std::string* reason) override { return 1; }
  void* allocate(int32_t device, uint64_t nbytes) override {
    void* p = std::malloc(nbytes ? nbytes : 1);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void free(int32_t device, void* handle) noexcept override { std::free(handle); }
  void copy_from_host(int32_t device, void* dst, uint64_t dst_offset, const void* src, uint64_t nbytes,
                      void* stream) override {
    std::memcpy(static_cast<char*>(dst) + dst_offset, src, nbytes);
  }
  void copy_to_host(int32_t device, void* dst, const void* src, uint64_t src_offset, uint64_t nbytes,
                    void* stream) override {
    std::memcpy(dst, static_cast<const char*>(src) + src_offset, nbytes);
  }
  std::string properties(int32_t device) override { return "{\"name\": \"unimplemented test device\"}"; }
};

HostMemoryDevice g_device;
tessera_plugin_t g_plugin = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = "lt_unimplemented_device",
    .version = "1.0.0",
    .features = 0,
    .self = nullptr,    // set at init
    .device = nullptr,  // set at init
    .shutdown = nullptr,
    .get_proc_address = nullptr,
};

void add_declines(const tessera::sdk::KernelCall& call) {
  throw tessera::sdk::Error(TESSERA_STATUS_UNIMPLEMENTED, "lt_unimplemented_device declines every add");
}

}  // namespace

TESSERA_PLUGIN_ENTRY(&g_plugin) {
  g_plugin.self = g_device.self();
  g_plugin.device = g_device.interface();
  host.register_kernel("add.Tensor",
                       TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT64),
                       TESSERA_SDK_KERNEL(add_declines));
}
