/* The body of the C compile test, included after one plugin ABI header (frozen 1.0, 1.2, or live): the
 * header compiles as strict C11, every versioned struct starts with its size, and
 * TESSERA_ABI_HAS_FIELD reads only the common prefix. */
#include <stdio.h>
#include <string.h>

_Static_assert(offsetof(tessera_plugin_t, struct_size) == 0, "tessera_plugin_t starts with struct_size");
_Static_assert(offsetof(tessera_host_api_t, struct_size) == 0, "tessera_host_api_t starts with struct_size");
_Static_assert(offsetof(tessera_device_interface_t, struct_size) == 0, "device interface starts with struct_size");
_Static_assert(offsetof(tessera_tensor_t, struct_size) == 0, "tessera_tensor_t starts with struct_size");
_Static_assert(offsetof(tessera_kernel_call_t, struct_size) == 0, "tessera_kernel_call_t starts with struct_size");
_Static_assert(TESSERA_ABI_MAJOR == 1, "ABI major 1");

static int check(int cond, const char* what) {
  if (!cond) fprintf(stderr, "abi C test (ABI %d.%d): %s\n", TESSERA_ABI_MAJOR, TESSERA_ABI_MINOR, what);
  return cond ? 0 : 1;
}

int main(void) {
  int failures = 0;
  tessera_plugin_t plugin = {0};
  tessera_device_interface_t device = {0};
  const tessera_plugin_t* none = NULL;
  tessera_plugin_init_fn_t entry = NULL;
  plugin.struct_size = (uint32_t)offsetof(tessera_plugin_t, shutdown);
  failures += check(TESSERA_ABI_HAS_FIELD(&plugin, tessera_plugin_t, device), "an older header has `device`");
  failures += check(!TESSERA_ABI_HAS_FIELD(&plugin, tessera_plugin_t, shutdown), "an older header lacks `shutdown`");
  plugin.struct_size = sizeof(tessera_plugin_t);
  failures += check(TESSERA_ABI_HAS_FIELD(&plugin, tessera_plugin_t, shutdown), "a current header has `shutdown`");
  failures += check(!TESSERA_ABI_HAS_FIELD(none, tessera_plugin_t, name), "NULL has no field");
  device.struct_size = sizeof(device);
  failures += check(TESSERA_ABI_HAS_FIELD(&device, tessera_device_interface_t, device_properties), "properties");
#if TESSERA_ABI_MINOR >= 1
  device.struct_size = (uint32_t)offsetof(tessera_device_interface_t, memory_stats);
  failures += check(!TESSERA_ABI_HAS_FIELD(&device, tessera_device_interface_t, memory_stats),
                    "a 1.0 device interface lacks memory_stats");
  plugin.struct_size = (uint32_t)offsetof(tessera_plugin_t, get_proc_address);
  failures += check(!TESSERA_ABI_HAS_FIELD(&plugin, tessera_plugin_t, get_proc_address),
                    "a 1.0 plugin header lacks get_proc_address");
  {
    tessera_ext_empty_cache_fn_t empty_cache = NULL;
    failures += check(empty_cache == NULL && sizeof(TESSERA_EXT_EMPTY_CACHE) > 1, "extension name and type");
  }
#endif
#if TESSERA_ABI_MINOR >= 2
  device.struct_size = (uint32_t)offsetof(tessera_device_interface_t, event_elapsed_time);
  failures += check(TESSERA_ABI_HAS_FIELD(&device, tessera_device_interface_t, memory_stats) &&
                        !TESSERA_ABI_HAS_FIELD(&device, tessera_device_interface_t, event_elapsed_time) &&
                        !TESSERA_ABI_HAS_FIELD(&device, tessera_device_interface_t, memory_record_stream),
                    "a 1.1 device interface lacks the stream slots");
  {
    tessera_host_api_t host;
    tessera_graph_size_t size;
    memset(&host, 0, sizeof(host));
    memset(&size, 0, sizeof(size));
    host.struct_size = (uint32_t)offsetof(tessera_host_api_t, graph);
    failures += check(!TESSERA_ABI_HAS_FIELD(&host, tessera_host_api_t, graph), "a 1.1 host table lacks graph");
    host.struct_size = sizeof(host);
    failures += check(TESSERA_ABI_HAS_FIELD(&host, tessera_host_api_t, graph), "a 1.2 host table has graph");
    size.struct_size = sizeof(size);
    failures += check(TESSERA_ABI_HAS_FIELD(&size, tessera_graph_size_t, max), "graph size fields");
  }
#endif
#if TESSERA_ABI_MINOR >= 3
  device.struct_size = (uint32_t)offsetof(tessera_device_interface_t, memory_info);
  failures += check(TESSERA_ABI_HAS_FIELD(&device, tessera_device_interface_t, memory_record_stream) &&
                        !TESSERA_ABI_HAS_FIELD(&device, tessera_device_interface_t, memory_info) &&
                        !TESSERA_ABI_HAS_FIELD(&device, tessera_device_interface_t, memory_copy_from_pinned),
                    "a 1.2 device interface lacks the 1.3 memory slots");
  {
    tessera_host_api_t host;
    memset(&host, 0, sizeof(host));
    host.struct_size = (uint32_t)offsetof(tessera_host_api_t, generator_reserve);
    failures += check(!TESSERA_ABI_HAS_FIELD(&host, tessera_host_api_t, generator_reserve),
                      "a 1.2 host table lacks generator_reserve");
  }
#endif
  failures += check(TESSERA_DTYPE_MASK_ALL == ((UINT64_C(1) << TESSERA_DTYPE_COUNT_) - 1), "mask of all dtypes");
  failures += check(sizeof(TESSERA_PLUGIN_ENTRY_NAME) > 1, "entry point name");
  failures += check(entry == NULL, "entry point type");
  if (failures == 0) printf("abi C test: ok (ABI %d.%d)\n", TESSERA_ABI_MAJOR, TESSERA_ABI_MINOR);
  return failures == 0 ? 0 : 1;
}
