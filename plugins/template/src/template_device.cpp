// template_device: the smallest complete backend plugin. Copy the folder, then follow README.md
// (find/replace "template_device" and "TEMPLATE_DEVICE", replace each TODO with your runtime).
//
// What it shows:
//   - the device interface (tessera_device_interface_t): count, memory, copies, streams, events,
//     properties. This skeleton keeps "device" memory in host RAM so that it runs anywhere; a real
//     device returns its own opaque handles (see samples/my_hardware_device for an emulated one).
//   - one kernel ("add.Tensor", float32) registered with the dtypes it supports; every other op and
//     dtype reaches the runtime's CPU fallback.
//   - the entry point (TESSERA_PLUGIN_ENTRY) and error reporting through status objects.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <tessera/sdk.hpp>

namespace {

constexpr const char* kPluginName = "template_device";
constexpr int32_t kNumDevices = 1;  // TODO: ask your runtime; never fail, return 0 with a reason
thread_local int32_t g_current_device = 0;

tessera_status_t invalid(const std::string& message) {
  return tessera::sdk::make_status(TESSERA_STATUS_INVALID_ARGUMENT, std::string(kPluginName) + ": " + message);
}

// ---------------------------------------------------------------- device interface

int32_t device_count(void*, char* reason, size_t capacity) {
  // TODO: when no device is usable, write a one-line reason with a fix-it hint and return 0.
  (void)reason;
  (void)capacity;
  return kNumDevices;
}

tessera_status_t device_get_current(void*, int32_t* out_index) {
  *out_index = g_current_device;
  return nullptr;
}

tessera_status_t device_set_current(void*, int32_t index) {
  if (index < 0 || index >= kNumDevices) return invalid("device index " + std::to_string(index) + " out of range");
  g_current_device = index;
  return nullptr;
}

tessera_status_t memory_allocate(void*, int32_t, uint64_t nbytes, void** out_handle) {
  // TODO: allocate device memory; return your runtime's opaque handle.
  *out_handle = std::malloc(nbytes ? nbytes : 1);
  if (!*out_handle)
    return tessera::sdk::make_status(TESSERA_STATUS_OUT_OF_MEMORY,
                                     std::string(kPluginName) + ": out of memory allocating " + std::to_string(nbytes) + " bytes");
  return nullptr;
}

void memory_free(void*, int32_t, void* handle) { std::free(handle); }

tessera_status_t memory_copy_from_host(void*, int32_t, void* dst, uint64_t dst_offset, const void* src, uint64_t nbytes,
                                       void*) {
  // TODO: an asynchronous device runtime stages `src` (the host may reuse it once this returns).
  std::memcpy(static_cast<char*>(dst) + dst_offset, src, nbytes);
  return nullptr;
}

tessera_status_t memory_copy_to_host(void*, int32_t, void* dst, const void* src, uint64_t src_offset, uint64_t nbytes,
                                     void*) {
  // TODO: wait for the stream before returning: the host reads `dst` right after.
  std::memcpy(dst, static_cast<const char*>(src) + src_offset, nbytes);
  return nullptr;
}

tessera_status_t memory_copy_device(void*, int32_t, void* dst, uint64_t dst_offset, int32_t, const void* src,
                                    uint64_t src_offset, uint64_t nbytes, void*) {
  std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, nbytes);
  return nullptr;
}

// This skeleton is synchronous: one implicit stream (NULL), events complete at once.
// TODO: map streams and events to your runtime's queues and events.
tessera_status_t stream_create(void*, int32_t, void** out_stream) {
  *out_stream = nullptr;
  return nullptr;
}
void stream_destroy(void*, int32_t, void*) {}
tessera_status_t stream_synchronize(void*, int32_t, void*) { return nullptr; }
tessera_status_t event_create(void*, int32_t, void** out_event) {
  *out_event = nullptr;
  return nullptr;
}
void event_destroy(void*, int32_t, void*) {}
tessera_status_t event_record(void*, int32_t, void*, void*) { return nullptr; }
tessera_status_t event_wait(void*, int32_t, void*, void*) { return nullptr; }
tessera_status_t event_synchronize(void*, int32_t, void*) { return nullptr; }
tessera_status_t device_synchronize(void*, int32_t) { return nullptr; }

size_t device_properties(void*, int32_t device, char* buffer, size_t capacity) {
  // TODO: report your device's real name, memory and capabilities.
  const std::string json = std::string("{\"name\": \"") + kPluginName + ":" + std::to_string(device) +
                           "\", \"memory\": {\"total\": 0}, \"capability\": {\"streams\": false}}";
  if (buffer && capacity) {
    const size_t n = json.size() < capacity - 1 ? json.size() : capacity - 1;
    std::memcpy(buffer, json.data(), n);
    buffer[n] = '\0';
  }
  return json.size() + 1;
}

const tessera_device_interface_t kDeviceInterface = {
    .struct_size = sizeof(tessera_device_interface_t),
    .device_count = device_count,
    .device_get_current = device_get_current,
    .device_set_current = device_set_current,
    .memory_allocate = memory_allocate,
    .memory_free = memory_free,
    .memory_copy_from_host = memory_copy_from_host,
    .memory_copy_to_host = memory_copy_to_host,
    .memory_copy_device = memory_copy_device,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_synchronize = stream_synchronize,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_wait = event_wait,
    .event_synchronize = event_synchronize,
    .device_synchronize = device_synchronize,
    .device_properties = device_properties,
};

// ---------------------------------------------------------------- kernels

// out = self + alpha * other, float32, same shape, contiguous. Anything else answers UNIMPLEMENTED,
// which sends the call to the CPU fallback. TODO: launch your device's kernel instead.
void add_f32(const tessera::sdk::KernelCall& call) {
  const auto a = call.input(0), b = call.input(1), out = call.output(0);
  bool same_shape = a.ndim() == out.ndim() && b.ndim() == out.ndim();
  for (int i = 0; same_shape && i < out.ndim(); ++i) same_shape = a.size(i) == out.size(i) && b.size(i) == out.size(i);
  if (!same_shape || !a.is_contiguous() || !b.is_contiguous() || !out.is_contiguous() ||
      a.dtype() != TESSERA_DTYPE_FLOAT32 || b.dtype() != TESSERA_DTYPE_FLOAT32) {
    throw tessera::sdk::Error(TESSERA_STATUS_UNIMPLEMENTED,
                              std::string(kPluginName) + ": add.Tensor takes same-shape contiguous float32 only");
  }
  const float alpha = float(call.attr_double(0));
  const float* pa = a.host_ptr<const float>();
  const float* pb = b.host_ptr<const float>();
  float* po = out.host_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] + alpha * pb[i];
}

tessera_plugin_t plugin_header = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .name = "template_device",
    .version = "0.1.0",
    .device = &kDeviceInterface,
};

}  // namespace

TESSERA_PLUGIN_ENTRY(&plugin_header) {
  host.register_kernel("add.Tensor", TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32), TESSERA_SDK_KERNEL(add_f32));
}
