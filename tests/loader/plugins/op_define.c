/* lt_op_define: calls op_define during its init with schemas that the commit would refuse, each of
 * which must be refused at the call, and with two good ones (the second shaped like the first, still
 * pending). Then it loads normally. lt_op_define_results() says which calls were refused. */
#include <string.h>

#include "host_device.h"

static tessera_device_interface_t lt_iface = LT_DEVICE_INTERFACE_INIT;
static tessera_plugin_t lt_plugin;
static int lt_results;

/* Bit `bit` of lt_results: set when op_define(schema, meta_like) was refused with INVALID_ARGUMENT
 * and a message containing `fragment` (or accepted, when `fragment` is NULL). */
static void lt_try(const tessera_host_api_t* host, int bit, const char* schema, const char* meta_like,
                   const char* fragment) {
  tessera_status_t st = host->op_define(host->host_ctx, schema, meta_like);
  int as_expected;
  if (!fragment) {
    as_expected = st == NULL;
  } else {
    as_expected = st != NULL && host->status_code(st) == TESSERA_STATUS_INVALID_ARGUMENT &&
                  strstr(host->status_message(st), fragment) != NULL;
  }
  if (st) host->status_free(st);
  if (as_expected) lt_results |= 1 << bit;
}

TESSERA_PLUGIN_EXPORT int lt_op_define_results(void) { return lt_results; }

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_major;
  (void)host_abi_minor;
  lt_host = host;
  lt_results = 0;
  lt_try(host, 0, "add.Tensor(Tensor self) -> Tensor", "neg", "is already defined as");
  lt_try(host, 1, "lt_opdef_big(Tensor self, int n=99999999999999999999) -> Tensor", "neg", "out of range");
  lt_try(host, 2, "lt_opdef_nometa(Tensor self) -> Tensor", NULL, "needs `meta_like`");
  lt_try(host, 3, "lt_opdef_like(Tensor self) -> Tensor", "lt_no_such_op", "meta_like names unknown operator");
  lt_try(host, 4, "lt_opdef_lists(Tensor[] a, Tensor[] b) -> Tensor", "neg", "two Tensor[] arguments");
  lt_try(host, 5, "lt_opdef_ok(Tensor self) -> Tensor", "neg", NULL);
  lt_try(host, 6, "lt_opdef_ok(Tensor self, int k) -> Tensor", "neg", "already being defined by this plugin");
  lt_try(host, 7, "lt_opdef_chain(Tensor self) -> Tensor", "lt_opdef_ok", NULL);
  lt_try(host, 8, "lt_opdef_dtype(Tensor self, ScalarType t=no_such_dtype) -> Tensor", "neg", "no_such_dtype");
  ++lt_init_calls;
  lt_plugin.struct_size = sizeof(tessera_plugin_t);
  lt_plugin.abi_major = TESSERA_ABI_MAJOR;
  lt_plugin.abi_minor = TESSERA_ABI_MINOR;
  lt_plugin.name = "lt_op_define";
  lt_plugin.version = "1.0.0";
  lt_plugin.self = &lt_plugin;
  lt_plugin.device = &lt_iface;
  lt_plugin.shutdown = lt_shutdown;
  *out_plugin = &lt_plugin;
  return NULL;
}
