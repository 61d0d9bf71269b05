/* lt_init_error: defines an operator and registers a kernel for it and for add.Tensor, then fails
 * its init. Nothing of it may stay registered. */
#include <stdlib.h>

#include "tessera/plugin_abi.h"

static tessera_status_t lt_never_called(void* user_data, const tessera_kernel_call_t* call) {
  (void)user_data;
  (void)call;
  abort();
}

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_major;
  (void)host_abi_minor;
  (void)out_plugin;
  tessera_status_t st = host->op_define(host->host_ctx, "lt_init_error_op(Tensor self) -> Tensor", "neg");
  host->status_free(st);
  st = host->kernel_register(host->host_ctx, "lt_init_error_op", TESSERA_FUNCTIONALITY_DENSE, TESSERA_DTYPE_MASK_ALL,
                             lt_never_called, NULL, TESSERA_KERNEL_FLAG_NONE);
  host->status_free(st);
  /* add.Tensor exists in every runtime that has the core op set; a refusal is fine too. */
  st = host->kernel_register(host->host_ctx, "add.Tensor", TESSERA_FUNCTIONALITY_DENSE, TESSERA_DTYPE_MASK_ALL,
                             lt_never_called, NULL, TESSERA_KERNEL_FLAG_NONE);
  host->status_free(st);
  st = host->fallback_register(host->host_ctx, TESSERA_FUNCTIONALITY_DENSE, lt_never_called, NULL);
  host->status_free(st);
  return host->status_make(TESSERA_STATUS_UNAVAILABLE, "lt_init_error: the device is on fire");
}
