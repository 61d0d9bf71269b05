/* lt_abi2: built for a (hypothetical) ABI major 2: its header says abi_major 2. */
#include "host_device.h"

static tessera_device_interface_t lt_iface = LT_DEVICE_INTERFACE_INIT;
static tessera_plugin_t lt_plugin;

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_major;
  (void)host_abi_minor;
  lt_host = host;
  lt_plugin.struct_size = sizeof(tessera_plugin_t);
  lt_plugin.abi_major = 2;
  lt_plugin.abi_minor = 0;
  lt_plugin.name = "lt_abi2";
  lt_plugin.version = "2.0.0";
  lt_plugin.self = &lt_plugin;
  lt_plugin.device = &lt_iface;
  lt_plugin.shutdown = lt_shutdown;
  *out_plugin = &lt_plugin;
  return NULL;
}
