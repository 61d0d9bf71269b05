// template_device: the smallest complete backend plugin. Copy the folder, then follow README.md
// (find/replace "template_device" and "TEMPLATE_DEVICE", replace each TODO with your runtime).
//
// What it shows:
//   - the device interface through tessera::sdk::DeviceBase (which fills tessera_device_interface_t):
//     count, memory, copies, streams, events, properties. This skeleton keeps "device" memory in
//     host RAM so that it runs anywhere; a real device returns its own opaque handles (see
//     samples/my_hardware_device for an emulated one).
//   - one kernel ("add.Tensor", float32) registered with the dtypes it supports; every other op and
//     dtype reaches the runtime's CPU fallback.
//   - the entry point (TESSERA_PLUGIN_ENTRY) and error reporting through status objects.
//   - op names and argument positions from the op contract (tessera/op_names.h, installed with the
//     SDK): tessera::op::add_Tensor::name, ::tensor::self, ::attr::alpha. A misspelt op or argument
//     does not compile.
#include <cstdlib>
#include <cstring>
#include <string>

#include <tessera/op_names.h>
#include <tessera/sdk.hpp>

namespace {

constexpr const char* kPluginName = "template_device";
constexpr int32_t kNumDevices = 1;  // TODO: ask your runtime; never fail, return 0 with a reason

// ---------------------------------------------------------------- device interface

// tessera::sdk::DeviceBase fills the C device table (tessera_device_interface_t) and turns the
// exceptions thrown here into status objects. Streams and events keep its synchronous defaults
// (one in-order queue per device). TODO: override stream_* and event_* for an asynchronous runtime.
class TemplateDevice final : public tessera::sdk::DeviceBase {
 public:
  int32_t device_count(std::string* reason) override {
    // TODO: when no device is usable, set a one-line reason with a fix-it hint and return 0.
    (void)reason;
    return kNumDevices;
  }

  void* allocate(int32_t device, uint64_t nbytes) override {
    // TODO: allocate device memory; return your runtime's opaque handle.
    void* handle = std::malloc(nbytes ? nbytes : 1);
    if (!handle)
      throw tessera::sdk::Error(TESSERA_STATUS_OUT_OF_MEMORY, std::string(kPluginName) + ": out of memory allocating " +
                                                                  std::to_string(nbytes) + " bytes");
    return handle;
  }
  void free(int32_t device, void* handle) noexcept override { std::free(handle); }

  void copy_from_host(int32_t device, void* dst, uint64_t dst_offset, const void* src, uint64_t nbytes,
                      void* stream) override {
    // TODO: an asynchronous device runtime stages `src` (the host may reuse it once this returns).
    std::memcpy(static_cast<char*>(dst) + dst_offset, src, nbytes);
  }
  void copy_to_host(int32_t device, void* dst, const void* src, uint64_t src_offset, uint64_t nbytes,
                    void* stream) override {
    // TODO: wait for the stream before returning: the host reads `dst` right after.
    std::memcpy(dst, static_cast<const char*>(src) + src_offset, nbytes);
  }
  void copy_device(int32_t dst_device, void* dst, uint64_t dst_offset, int32_t src_device, const void* src,
                   uint64_t src_offset, uint64_t nbytes, void* stream) override {
    std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, nbytes);
  }

  std::string properties(int32_t device) override {
    // TODO: report your device's real name, memory and capabilities.
    return std::string("{\"name\": \"") + kPluginName + ":" + std::to_string(device) +
           "\", \"memory\": {\"total\": 0}, \"capability\": {\"streams\": false}}";
  }
};

TemplateDevice g_device;

// ---------------------------------------------------------------- kernels

// out = self + alpha * other, float32, same shape, contiguous. Anything else answers UNIMPLEMENTED,
// which sends the call to the CPU fallback. TODO: launch your device's kernel instead.
void add_f32(const tessera::sdk::KernelCall& call) {
  using Add = tessera::op::add_Tensor;
  const auto a = call.input(Add::tensor::self), b = call.input(Add::tensor::other), out = call.output(0);
  bool same_shape = a.ndim() == out.ndim() && b.ndim() == out.ndim();
  for (int i = 0; same_shape && i < out.ndim(); ++i) same_shape = a.size(i) == out.size(i) && b.size(i) == out.size(i);
  if (!same_shape || !a.is_contiguous() || !b.is_contiguous() || !out.is_contiguous() ||
      a.dtype() != TESSERA_DTYPE_FLOAT32 || b.dtype() != TESSERA_DTYPE_FLOAT32) {
    throw tessera::sdk::Error(TESSERA_STATUS_UNIMPLEMENTED,
                              std::string(kPluginName) + ": add.Tensor takes same-shape contiguous float32 only");
  }
  const float alpha = float(call.attr_double(Add::attr::alpha));
  const float* pa = a.host_ptr<const float>();
  const float* pb = b.host_ptr<const float>();
  float* po = out.host_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] + alpha * pb[i];
}

tessera_plugin_t plugin_header = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = "template_device",
    .version = "0.1.0",
    .features = 0,
    .self = g_device.self(),
    .device = g_device.interface(),
    .shutdown = nullptr,
    .get_proc_address = nullptr,
};

}  // namespace

TESSERA_PLUGIN_ENTRY(&plugin_header) {
  host.register_kernel(tessera::op::add_Tensor::name, TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32),
                       TESSERA_SDK_KERNEL(add_f32));
}
