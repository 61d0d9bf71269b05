/* The plugin ABI header compiles as C11 and its layout rules hold: every versioned struct starts
 * with its size, and TESSERA_ABI_HAS_FIELD reads only the common prefix. */
#include <assert.h>
#include <stdio.h>

#include "tessera/plugin_abi.h"

_Static_assert(offsetof(tessera_plugin_t, struct_size) == 0, "tessera_plugin_t starts with struct_size");
_Static_assert(offsetof(tessera_host_api_t, struct_size) == 0, "tessera_host_api_t starts with struct_size");
_Static_assert(offsetof(tessera_device_interface_t, struct_size) == 0, "device interface starts with struct_size");
_Static_assert(offsetof(tessera_tensor_t, struct_size) == 0, "tessera_tensor_t starts with struct_size");
_Static_assert(offsetof(tessera_kernel_call_t, struct_size) == 0, "tessera_kernel_call_t starts with struct_size");
_Static_assert(TESSERA_ABI_MAJOR >= 1, "ABI major starts at 1");
_Static_assert(TESSERA_DTYPE_COUNT_ == 10, "ten dtypes");

static int check(int cond, const char* what) {
  if (!cond) fprintf(stderr, "abi_c_test: %s\n", what);
  return cond ? 0 : 1;
}

int main(void) {
  int failures = 0;
  tessera_plugin_t plugin = {0};
  plugin.struct_size = (uint32_t)offsetof(tessera_plugin_t, shutdown);
  failures += check(TESSERA_ABI_HAS_FIELD(&plugin, tessera_plugin_t, device), "an older header has `device`");
  failures += check(!TESSERA_ABI_HAS_FIELD(&plugin, tessera_plugin_t, shutdown), "an older header lacks `shutdown`");
  plugin.struct_size = sizeof(tessera_plugin_t);
  failures += check(TESSERA_ABI_HAS_FIELD(&plugin, tessera_plugin_t, shutdown), "a current header has `shutdown`");
  const tessera_plugin_t* none = NULL;
  failures += check(!TESSERA_ABI_HAS_FIELD(none, tessera_plugin_t, name), "NULL has no field");
  failures += check(TESSERA_DTYPE_MASK_ALL == ((UINT64_C(1) << TESSERA_DTYPE_COUNT_) - 1), "mask of all dtypes");
  failures += check(sizeof(TESSERA_PLUGIN_ENTRY_NAME) > 1, "entry point name");
  tessera_plugin_init_fn_t entry = NULL;
  failures += check(entry == NULL, "entry point type");
  if (failures == 0) printf("abi_c_test: ok (ABI %d.%d)\n", TESSERA_ABI_MAJOR, TESSERA_ABI_MINOR);
  return failures == 0 ? 0 : 1;
}
