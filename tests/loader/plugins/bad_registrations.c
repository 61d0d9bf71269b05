/* lt_badreg: a backend plugin that registers a kernel wrongly and carries on, ignoring the status
 * the host returned (Note [Dangling registrations] in dispatcher/src/host_api.cpp). What it gets
 * wrong is chosen by LT_BADREG_MODE:
 *   typo     a kernel for "lt_badreg_fil_" (the op it defines is "lt_badreg_fill_")
 *   dup      two kernels for "lt_badreg_fill_"
 *   replace  two kernels for "lt_badreg_fill_", the second with TESSERA_KERNEL_FLAG_REPLACE (fine)
 * Before each of these it registers a kernel for "neg", so that a rollback can be seen. */
#include <string.h>

#include "host_device.h"

static tessera_device_interface_t lt_iface = LT_DEVICE_INTERFACE_INIT;
static tessera_plugin_t lt_plugin;

static tessera_status_t lt_kernel(void* user_data, const tessera_kernel_call_t* call) {
  (void)call;
  return lt_host->status_make(TESSERA_STATUS_UNIMPLEMENTED, (const char*)user_data);
}

static void lt_register(const tessera_host_api_t* host, const char* op, const char* which, uint32_t flags) {
  tessera_status_t st = host->kernel_register(host->host_ctx, op, TESSERA_FUNCTIONALITY_DENSE,
                                              TESSERA_DTYPE_MASK_ALL, lt_kernel, (void*)which, flags);
  host->status_free(st); /* ignored on purpose */
}

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_major;
  (void)host_abi_minor;
  lt_host = host;
  const char* mode = host->getenv("LT_BADREG_MODE");
  if (!mode) mode = "";
  tessera_status_t st =
      host->op_define(host->host_ctx, "lt_badreg_fill_(Tensor(a!) self, float value) -> Tensor(a!)", NULL);
  if (st) return st;
  lt_register(host, "neg", "neg", TESSERA_KERNEL_FLAG_NONE);
  if (strcmp(mode, "typo") == 0) {
    lt_register(host, "lt_badreg_fil_", "typo", TESSERA_KERNEL_FLAG_NONE);
  } else {
    lt_register(host, "lt_badreg_fill_", "first", TESSERA_KERNEL_FLAG_NONE);
    if (strcmp(mode, "dup") == 0) lt_register(host, "lt_badreg_fill_", "second", TESSERA_KERNEL_FLAG_NONE);
    if (strcmp(mode, "replace") == 0) lt_register(host, "lt_badreg_fill_", "second", TESSERA_KERNEL_FLAG_REPLACE);
  }
  lt_plugin.struct_size = sizeof(tessera_plugin_t);
  lt_plugin.abi_major = TESSERA_ABI_MAJOR;
  lt_plugin.abi_minor = TESSERA_ABI_MINOR;
  lt_plugin.name = "lt_badreg";
  lt_plugin.version = "1.0.0";
  lt_plugin.features = 0;
  lt_plugin.self = &lt_plugin;
  lt_plugin.device = &lt_iface;
  lt_plugin.shutdown = lt_shutdown;
  *out_plugin = &lt_plugin;
  return NULL;
}
