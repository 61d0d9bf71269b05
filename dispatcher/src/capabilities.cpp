// device_capabilities (Note [Device capabilities] in tessera/capabilities.h).
#include "tessera/capabilities.h"

#include "op_registry.h"
#include "plugin_registry.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"

namespace tessera {

// A device-interface slot the plugin's struct reaches and fills (Note [ABI versioning]).
#define TESSERA_HAS_SLOT(d, name) ((d) && TESSERA_ABI_HAS_FIELD(d, tessera_device_interface_t, name) && (d)->name)

DeviceCapabilities device_capabilities(const Device& device) {
  const DeviceType type = device.type();
  TESSERA_CHECK(type != DeviceType::Meta, "device_capabilities: the meta device runs shape rules only; it has no plugin");
  const BackendDevice& b = backend_device(type);  // loads the plugin, or throws naming why none provides it
  DeviceCapabilities c;
  c.device = device_type_name(type);
  c.plugin = b.plugin;
  const tessera_device_interface_t* d = b.iface;
  c.device_count = d && d->device_count ? d->device_count(b.self, nullptr, 0) : 0;
  c.streams = TESSERA_HAS_SLOT(d, stream_create) && TESSERA_HAS_SLOT(d, stream_synchronize);
  c.events = TESSERA_HAS_SLOT(d, event_create) && TESSERA_HAS_SLOT(d, event_record) && TESSERA_HAS_SLOT(d, event_wait) &&
             TESSERA_HAS_SLOT(d, event_synchronize);
  c.event_timing = c.events && TESSERA_HAS_SLOT(d, event_elapsed_time);
  c.memory_stats = type == DeviceType::CPU || TESSERA_HAS_SLOT(d, memory_stats);  // the host answers for the CPU
  c.device_to_device_copy = TESSERA_HAS_SLOT(d, memory_copy_device);
  c.record_stream = TESSERA_HAS_SLOT(d, memory_record_stream);
  c.memory_info = type == DeviceType::CPU || TESSERA_HAS_SLOT(d, memory_info);  // the host answers for the CPU
  c.pinned_host_memory = TESSERA_HAS_SLOT(d, pinned_allocate) && TESSERA_HAS_SLOT(d, pinned_free);
  c.async_pinned_copy = c.pinned_host_memory && TESSERA_HAS_SLOT(d, memory_copy_from_pinned);
  {
    loader::Registry& reg = loader::registry();
    std::lock_guard lock(reg.mutex);
    for (const auto& rec : reg.records)
      if (rec->info.name == b.plugin && rec->info.status == PluginStatus::Loaded)
        c.async_execution = (rec->header.features & TESSERA_PLUGIN_FEATURE_ASYNC) != 0;
  }
  c.empty_cache = plugin_extension<tessera_ext_empty_cache_fn_t>(b.plugin, TESSERA_EXT_EMPTY_CACHE) != nullptr;
  c.absent = "graph capture and peer access have no slot in plugin ABI " +
             std::to_string(TESSERA_ABI_MAJOR) + "." + std::to_string(TESSERA_ABI_MINOR);
  uint64_t mask = 0;
  Dispatcher& disp = Dispatcher::instance();
  const size_t slot = size_t(int(Functionality::Dense) * kNumBackendSlots + int(type));
  for (const std::string& name : disp.op_names())
    if (const OperatorEntry* op = disp.find_op(name))
      if (const KernelEntry* k = op->slots[slot].load(std::memory_order_acquire)) mask |= k->dtype_mask;
  for (int t = 0; t < kNumDTypes; ++t)
    if (mask & dtype_bit(DType(t))) c.dtypes.push_back(DType(t));
  return c;
}

std::string DeviceCapabilities::str() const {
  std::string s = device + " (plugin " + plugin + ", " + std::to_string(device_count) +
                  (device_count == 1 ? " device):" : " devices):");
  const std::pair<const char*, bool> flags[] = {
      {"streams", streams},         {"events", events},
      {"event timing", event_timing}, {"async execution", async_execution},
      {"memory stats", memory_stats}, {"device-to-device copy", device_to_device_copy},
      {"record stream", record_stream}, {"empty cache", empty_cache},
      {"graph capture", graph_capture}, {"pinned host memory", pinned_host_memory},
      {"peer access", peer_access},   {"memory info", memory_info},
      {"async copy from pinned memory", async_pinned_copy}};
  std::string yes, no;
  for (const auto& [name, on] : flags) {
    std::string& list = on ? yes : no;
    list += (list.empty() ? "" : ", ") + std::string(name);
  }
  std::string types;
  for (DType t : dtypes) types += (types.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s + " " + (yes.empty() ? "nothing optional" : yes) + "; not: " + (no.empty() ? "-" : no) + "; dtypes: " +
         (types.empty() ? "none" : types);
}

}  // namespace tessera
