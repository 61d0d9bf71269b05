// current_device / set_device (Note [Current device] in tessera/current_device.h).
#include "tessera/current_device.h"

#include "host_api.h"
#include "plugin_allocator.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"

namespace tessera {

Device current_device(DeviceType type) {
  TESSERA_CHECK(type != DeviceType::Meta, "current_device: the meta device has no devices; it runs shape rules only");
  if (type == DeviceType::CPU) return Device(DeviceType::CPU, 0);
  PluginCallGuard in_flight;  // Note [In-flight plugin calls]
  const BackendDevice& b = backend_device(type);  // loads the plugin, or throws naming why none provides it
  int32_t index = 0;
  if (b.iface && b.iface->device_get_current)
    throw_status(b.iface->device_get_current(b.self, &index), "current_device(" + device_type_name(type) + ")");
  TESSERA_CHECK(index >= 0 && index < loader::PluginAllocator::kMaxDevices, "current_device(", device_type_name(type), "): plugin '", b.plugin,
                "' reported device index ", index, ", outside 0..", loader::PluginAllocator::kMaxDevices - 1);
  return Device(type, int(index));
}

void set_device(Device device) {
  const DeviceType type = device.type();
  const std::string name = device_type_name(type);
  TESSERA_CHECK(type != DeviceType::Meta, "set_device: the meta device has no devices; it runs shape rules only");
  TESSERA_CHECK(device.has_index(), "set_device('", device.str(), "'): name the device's index, e.g. '", name,
                ":0' (the device without an index means the current one)");
  if (type == DeviceType::CPU) {
    TESSERA_CHECK(device.index() == 0, "set_device('", device.str(),
                       "'): the CPU is one device, cpu:0");
    return;
  }
  PluginCallGuard in_flight;
  const BackendDevice& b = backend_device(type);
  const int32_t count = b.iface && b.iface->device_count ? b.iface->device_count(b.self, nullptr, 0) : 0;
  TESSERA_CHECK(device.index() < count, "set_device('", device.str(), "'): device index ",
                     int(device.index()), " is out of range: plugin '", b.plugin, "' has ", count, " '", name,
                     "' device", count == 1 ? "" : "s", " (see `tessera devices`)");
  if (!b.iface->device_set_current) {
    TESSERA_CHECK(device.index() == 0, "set_device('", device.str(), "'): plugin '", b.plugin,
                  "' does not implement device_set_current, so device 0 stays current; name the index in each "
                  "device instead ('", device.str(), "')");
    return;
  }
  throw_status(b.iface->device_set_current(b.self, device.index()), "set_device(" + device.str() + ")");
}

}  // namespace tessera
