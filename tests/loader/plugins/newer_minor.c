/* lt_newer_minor: built against a newer minor ABI whose structs grew fields at the end. The
 * runtime reads only the common prefix. */
#include "host_device.h"

struct lt_future_device_interface {
  tessera_device_interface_t base;
  void* future_function;
};
struct lt_future_plugin {
  tessera_plugin_t base;
  uint64_t future_flags;
  void* future_table;
};

static struct lt_future_device_interface lt_iface = {LT_DEVICE_INTERFACE_INIT, NULL};
static struct lt_future_plugin lt_plugin;

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_minor;
  if (host_abi_major != TESSERA_ABI_MAJOR)
    return host->status_make(TESSERA_STATUS_ABI_MISMATCH, "lt_newer_minor: incompatible ABI major version");
  lt_host = host;
  lt_iface.base.struct_size = sizeof(lt_iface);
  lt_plugin.base.struct_size = sizeof(lt_plugin);
  lt_plugin.base.abi_major = TESSERA_ABI_MAJOR;
  lt_plugin.base.abi_minor = TESSERA_ABI_MINOR + 1;
  lt_plugin.base.name = "lt_newer_minor";
  lt_plugin.base.version = "1.1.0";
  lt_plugin.base.self = &lt_plugin;
  lt_plugin.base.device = &lt_iface.base;
  lt_plugin.base.shutdown = lt_shutdown;
  lt_plugin.future_flags = ~UINT64_C(0);
  *out_plugin = &lt_plugin.base;
  return NULL;
}
