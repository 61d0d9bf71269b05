/* lt_good: a minimal, correct backend plugin on a privateuse slot with a host-memory device. It
 * defines one in-place operator and registers a float32 kernel for it. */
#include "host_device.h"

static tessera_device_interface_t lt_iface = LT_DEVICE_INTERFACE_INIT;
static tessera_plugin_t lt_plugin;

/* lt_good_fill_(Tensor(a!) self, float value): every element of a contiguous float32 tensor = value. */
static tessera_status_t lt_fill_kernel(void* user_data, const tessera_kernel_call_t* call) {
  (void)user_data;
  const tessera_tensor_t* t = call->outputs[0];
  if (t->dtype != TESSERA_DTYPE_FLOAT32)
    return lt_host->status_make(TESSERA_STATUS_UNIMPLEMENTED, "lt_good_fill_: float32 only");
  float value = (float)call->attrs[0].u.d;
  float* data = (float*)((char*)t->data + t->byte_offset);
  for (int64_t i = 0; i < t->numel; ++i) data[i] = value;
  return NULL;
}

/* Registrations after init apply at once. Returns 0 when the host accepted them. */
TESSERA_PLUGIN_EXPORT int lt_good_register_late(void) {
  tessera_status_t st = lt_host->op_define(lt_host->host_ctx, "lt_good_late_(Tensor(a!) self, float value) -> Tensor(a!)", NULL);
  if (st) {
    lt_host->status_free(st);
    return 1;
  }
  st = lt_host->kernel_register(lt_host->host_ctx, "lt_good_late_", TESSERA_FUNCTIONALITY_DENSE,
                                TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32), lt_fill_kernel, NULL, TESSERA_KERNEL_FLAG_NONE);
  if (st) {
    lt_host->status_free(st);
    return 2;
  }
  return 0;
}

/* A kernel for an operator nobody defined is refused with a message. Returns 0 when it was. */
TESSERA_PLUGIN_EXPORT int lt_good_register_unknown(void) {
  tessera_status_t st = lt_host->kernel_register(lt_host->host_ctx, "lt_no_such_op", TESSERA_FUNCTIONALITY_DENSE,
                                                 TESSERA_DTYPE_MASK_ALL, lt_fill_kernel, NULL, TESSERA_KERNEL_FLAG_NONE);
  if (!st) return 1;
  int ok = lt_host->status_code(st) == TESSERA_STATUS_INVALID_ARGUMENT &&
           strstr(lt_host->status_message(st), "unknown operator 'lt_no_such_op'") != NULL;
  lt_host->status_free(st);
  return ok ? 0 : 2;
}

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_minor;
  if (host_abi_major != TESSERA_ABI_MAJOR)
    return host->status_make(TESSERA_STATUS_ABI_MISMATCH, "lt_good: incompatible ABI major version");
  lt_host = host;
  ++lt_init_calls;
  tessera_status_t st = host->op_define(host->host_ctx, "lt_good_fill_(Tensor(a!) self, float value) -> Tensor(a!)", NULL);
  if (st) return st;
  st = host->kernel_register(host->host_ctx, "lt_good_fill_", TESSERA_FUNCTIONALITY_DENSE,
                             TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32), lt_fill_kernel, NULL, TESSERA_KERNEL_FLAG_NONE);
  if (st) return st;
  host->log(TESSERA_LOG_INFO, "plugins", "lt_good: initialised");
  lt_plugin.struct_size = sizeof(tessera_plugin_t);
  lt_plugin.abi_major = TESSERA_ABI_MAJOR;
  lt_plugin.abi_minor = TESSERA_ABI_MINOR;
  lt_plugin.name = "lt_good";
  lt_plugin.version = "1.0.0";
  lt_plugin.features = 0;
  lt_plugin.self = &lt_plugin;
  lt_plugin.device = &lt_iface;
  lt_plugin.shutdown = lt_shutdown;
  *out_plugin = &lt_plugin;
  return NULL;
}
