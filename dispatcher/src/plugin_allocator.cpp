// The Allocator over a backend plugin's device interface. Note [Plugin allocators outlive their
// plugin] in plugin_allocator.h.
#include "plugin_allocator.h"

#include "pinned_memory.h"
#include "stream_state.h"
#include "tessera/error.h"

namespace tessera::loader {

DataPtr PluginAllocator::allocate(size_t nbytes, int device_index) {
  PluginCallGuard in_flight;  // Note [In-flight plugin calls]
  TESSERA_CHECK_CODE(alive_.load(std::memory_order_acquire), ErrorCode::Unavailable, "cannot allocate on '",
                     device_type_name(type_), "': its plugin '", plugin_, "' was shut down");
  int index = device_index;
  if (index < 0) {
    index = 0;
    int32_t current = 0;
    if (iface_->device_get_current) {
      tessera_status_t st = iface_->device_get_current(self_, &current);
      if (!st) index = current;
      status_free(st);
    }
  }
  TESSERA_CHECK(index >= 0 && index < kMaxDevices, "device index ", index, " of '", device_type_name(type_),
                "' is out of range (0..", kMaxDevices - 1, ")");
  Device device(type_, index);
  if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, device);
  void* handle = nullptr;
  tessera_status_t st = iface_->memory_allocate(self_, index, nbytes, &handle);
  if (st) {
    tessera_status_code_t code = st->code;
    std::string message = st->message;
    status_free(st);
    detail::throw_error(
        code == TESSERA_STATUS_OUT_OF_MEMORY ? ErrorCode::OutOfMemory : error_code_of(code),
        detail::str_cat(code == TESSERA_STATUS_OUT_OF_MEMORY ? "out of memory: " : "", "cannot allocate ", nbytes,
                        " bytes on device '", device.str(), "' (plugin '", plugin_, "': ", message,
                        "); free tensors on that device or allocate less"));
  }
  // Note [Stream-ordered allocation] (docs/plugins.md): memory made while a stream is current is
  // used on that stream, so its later free waits for the stream's work, as after record_stream.
  if (void* stream = current_stream_handle(type_, index);
      stream && TESSERA_ABI_HAS_FIELD(iface_, tessera_device_interface_t, memory_record_stream) &&
      iface_->memory_record_stream) {
    DataPtr data(handle, &slots_[index], &PluginAllocator::free_handle, device, &alive_);
    if (tessera_status_t rs = iface_->memory_record_stream(self_, index, handle, stream)) {
      const tessera_status_code_t code = rs->code;
      const std::string message = status_message_of(rs);
      status_free(rs);
      detail::throw_error(error_code_of(code), detail::str_cat("allocating ", nbytes, " bytes on '", device.str(),
                                                               "': record_stream failed (plugin '", plugin_,
                                                               "': ", message, ")"));
    }
    return data;
  }
  return DataPtr(handle, &slots_[index], &PluginAllocator::free_handle, device, &alive_);
}

// The block stays registered as pinned until its last tensor is gone. After shutdown the plugin is
// not called again: blocks still held stay valid host memory (plugin_abi.h, pinned_free).
void PluginAllocator::free_pinned(void* ctx, void* host_ptr) {
  auto* a = static_cast<PluginAllocator*>(ctx);
  detail::pinned_unregister(host_ptr);
  PluginCallGuard in_flight(std::nothrow);
  if (in_flight.entered() && a->alive_.load(std::memory_order_acquire))
    a->iface_->pinned_free(a->self_, host_ptr);
}

DataPtr PluginAllocator::allocate_pinned(size_t nbytes) {
  PluginCallGuard in_flight;  // Note [In-flight plugin calls]
  TESSERA_CHECK_CODE(alive_.load(std::memory_order_acquire), ErrorCode::Unavailable,
                     "cannot allocate pinned memory for '", device_type_name(type_), "': its plugin '",
                     plugin_, "' was shut down");
  TESSERA_INTERNAL_ASSERT(has_pinned());
  void* block = nullptr;
  if (tessera_status_t st = iface_->pinned_allocate(self_, nbytes, &block)) {
    const tessera_status_code_t code = st->code;
    const std::string message = status_message_of(st);
    status_free(st);
    detail::throw_error(code == TESSERA_STATUS_OUT_OF_MEMORY ? ErrorCode::OutOfMemory : error_code_of(code),
                        detail::str_cat("cannot allocate ", nbytes, " bytes of pinned host memory for '",
                                        device_type_name(type_), "' (plugin '", plugin_, "': ", message,
                                        "); allocate less, or use ordinary host memory"));
  }
  TESSERA_CHECK_CODE(
      block != nullptr, ErrorCode::Internal, "plugin '", plugin_,
      "': pinned_allocate returned no error and a NULL block (plugin_abi.h: never NULL on success)");
  detail::pinned_register(block, type_);
  return DataPtr(block, this, &PluginAllocator::free_pinned, Device(DeviceType::CPU, -1));
}

}  // namespace tessera::loader
