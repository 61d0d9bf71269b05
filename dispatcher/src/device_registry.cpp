// The backend device registry: the device interface each backend registered, and the host's own
// interface for the CPU when no plugin provides one.
#include "tessera/dispatcher.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "dispatcher_state.h"
#include "host_api.h"
#include "op_registry.h"
#include "profiler.h"
#include "sparse_internal.h"
#include "stream_state.h"
#include "tessera/env.h"
#include "tessera/log.h"
#include "tessera/plugin_loader.h"


namespace tessera {

// ------------------------------------------------------------------------------------------------
// Backend device registry

namespace {

struct DeviceRegistry {
  std::mutex mutex;
  std::deque<BackendDevice> store;
  std::array<std::atomic<const BackendDevice*>, kNumDeviceTypes> devices{};
};
DeviceRegistry& device_registry() {
  static DeviceRegistry* r = new DeviceRegistry();
  return *r;
}

// The host's own device interface for the CPU when no plugin registers one: host memory,
// handle == pointer (Note [Device memory] in plugin_abi.h).
int32_t host_device_count(void*, char*, size_t) { return 1; }
tessera_status_t host_get_current(void*, int32_t* out) {
  *out = 0;
  return nullptr;
}
tessera_status_t host_set_current(void*, int32_t) { return nullptr; }
tessera_status_t host_copy_from_host(void*, int32_t, void* dst, uint64_t off, const void* src, uint64_t n,
                                     void*) {
  if (n) std::memcpy(static_cast<char*>(dst) + off, src, n);
  return nullptr;
}
tessera_status_t host_copy_to_host(void*, int32_t, void* dst, const void* src, uint64_t off, uint64_t n,
                                   void*) {
  if (n) std::memcpy(dst, static_cast<const char*>(src) + off, n);
  return nullptr;
}
tessera_status_t host_copy_device(void*, int32_t, void* dst, uint64_t doff, int32_t, const void* src,
                                  uint64_t soff, uint64_t n, void*) {
  if (n) std::memmove(static_cast<char*>(dst) + doff, static_cast<const char*>(src) + soff, n);
  return nullptr;
}
tessera_status_t host_sync(void*, int32_t) { return nullptr; }
size_t host_properties(void*, int32_t, char* buffer, size_t capacity) {
  const char* json = "{\"name\": \"host CPU\", \"provider\": \"builtin\"}";
  size_t n = std::strlen(json);
  if (buffer && capacity) {
    size_t c = std::min(n, capacity - 1);
    std::memcpy(buffer, json, c);
    buffer[c] = '\0';
  }
  return n;
}
const tessera_device_interface_t* host_interface() {
  static tessera_device_interface_t iface = [] {
    tessera_device_interface_t i{};
    i.struct_size = sizeof(i);
    i.device_count = host_device_count;
    i.device_get_current = host_get_current;
    i.device_set_current = host_set_current;
    i.memory_copy_from_host = host_copy_from_host;
    i.memory_copy_to_host = host_copy_to_host;
    i.memory_copy_device = host_copy_device;
    i.device_synchronize = host_sync;
    i.device_properties = host_properties;
    return i;
  }();
  return &iface;
}

}  // namespace

void register_backend_device(DeviceType type, const BackendDevice& backend) {
  DeviceRegistry& r = device_registry();
  std::lock_guard lock(r.mutex);
  const BackendDevice* p = &r.store.emplace_back(backend);
  r.devices[size_t(type)].store(p, std::memory_order_release);
}

void unregister_backend_device(DeviceType type) {
  DeviceRegistry& r = device_registry();
  std::lock_guard lock(r.mutex);
  r.devices[size_t(type)].store(nullptr, std::memory_order_release);
}

const BackendDevice* backend_device_if_loaded(DeviceType type) {
  return device_registry().devices[size_t(type)].load(std::memory_order_acquire);
}

const BackendDevice& backend_device(DeviceType type) {
  if (const BackendDevice* p = backend_device_if_loaded(type)) return *p;
  std::string why;
  ensure_backend_loaded(type, &why);
  if (const BackendDevice* p = backend_device_if_loaded(type)) return *p;
  if (type == DeviceType::CPU) {
    static const BackendDevice host{host_interface(), nullptr, "builtin"};
    return host;
  }
  detail::throw_error(ErrorCode::Unavailable,
                      "device type '" + device_type_name(type) + "' is not available: " +
                          (why.empty() ? std::string("no backend plugin provides it") : why) +
                          "; run `tessera plugins` or set TESSERA_LOG=plugins to see why");
}


}  // namespace tessera

