// lt_sdk_device: a C++ plugin written with the SDK only (TESSERA_PLUGIN_ENTRY, DeviceBase,
// TESSERA_SDK_KERNEL): two host-memory devices and one kernel.
#include <cstdlib>
#include <string>

#include "tessera/sdk.hpp"

namespace {

constexpr uint64_t kCapacity = uint64_t(1) << 30;

class HostMemoryDevice final : public tessera::sdk::DeviceBase {
 public:
  int32_t device_count(std::string* reason) override { return 2; }
  void* allocate(int32_t device, uint64_t nbytes) override {
    if (nbytes > kCapacity)
      throw tessera::sdk::Error(TESSERA_STATUS_OUT_OF_MEMORY,
                                "sdk test device " + std::to_string(device) + " holds 1 GiB");
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
  std::string properties(int32_t device) override {
    return "{\"name\": \"sdk test device " + std::to_string(device) + "\", \"memory\": " +
           std::to_string(kCapacity) + "}";
  }
};

HostMemoryDevice g_device;
tessera_plugin_t g_plugin = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = "lt_sdk_device",
    .version = "1.2.0",
    .features = 0,
    .self = nullptr,    // set at init
    .device = nullptr,  // set at init
    .shutdown = nullptr,
    .get_proc_address = nullptr,
};

void fill(const tessera::sdk::KernelCall& call) {
  tessera::sdk::TensorView out = call.output(0);
  TESSERA_SDK_CHECK(out.dtype() == TESSERA_DTYPE_FLOAT32, "lt_sdk_fill_: float32 only");
  float* p = out.host_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = float(call.attr_double(0));
}

}  // namespace

TESSERA_PLUGIN_ENTRY(&g_plugin) {
  g_plugin.self = g_device.self();
  g_plugin.device = g_device.interface();
  host.define_op("lt_sdk_fill_(Tensor(a!) self, float value) -> Tensor(a!)", nullptr);
  host.register_kernel("lt_sdk_fill_", TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32), TESSERA_SDK_KERNEL(fill));
}
