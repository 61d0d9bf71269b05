/* lt_crash: dereferences NULL in its init (for `tessera doctor`; never loaded in a test process). */
#include "tessera/plugin_abi.h"

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_major;
  (void)host_abi_minor;
  (void)host;
  (void)out_plugin;
  volatile int* volatile nowhere = 0;
  *nowhere = 1;
  return 0;
}
