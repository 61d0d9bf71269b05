/* lt_old_minor: built against an older minor ABI whose tessera_plugin_t ended before `shutdown` and
 * whose device interface ended before `device_properties`. The fields beyond each struct_size hold
 * poison: a runtime that reads past the common prefix crashes. */
#include "host_device.h"

static tessera_device_interface_t lt_iface = LT_DEVICE_INTERFACE_INIT;
static tessera_plugin_t lt_plugin;

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_minor;
  if (host_abi_major != TESSERA_ABI_MAJOR)
    return host->status_make(TESSERA_STATUS_ABI_MISMATCH, "lt_old_minor: incompatible ABI major version");
  lt_host = host;
  lt_iface.struct_size = (uint32_t)offsetof(tessera_device_interface_t, device_properties);
  lt_iface.device_properties = (size_t(*)(void*, int32_t, char*, size_t))(uintptr_t)0x1;
  lt_plugin.struct_size = (uint32_t)offsetof(tessera_plugin_t, shutdown);
  lt_plugin.abi_major = TESSERA_ABI_MAJOR;
  lt_plugin.abi_minor = 0;
  lt_plugin.name = "lt_old_minor";
  lt_plugin.version = "0.9.0";
  lt_plugin.self = &lt_plugin;
  lt_plugin.device = &lt_iface;
  lt_plugin.shutdown = (void (*)(void*))(uintptr_t)0x1;
  *out_plugin = &lt_plugin;
  return NULL;
}
