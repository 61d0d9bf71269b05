/* lt_spans: a backend plugin in plain C that records profiler spans (ABI 1.3, Note [Plugin spans]
 * in plugin_abi.h) from its kernel, and exported checks that the host refuses bad spans. */
#include <stddef.h>

#include "host_device.h"

static tessera_device_interface_t lt_iface = LT_DEVICE_INTERFACE_INIT;
static tessera_plugin_t lt_plugin = {.struct_size = sizeof(tessera_plugin_t),
                                     .abi_major = TESSERA_ABI_MAJOR,
                                     .abi_minor = TESSERA_ABI_MINOR,
                                     .name = "lt_spans",
                                     .version = "1.0.0",
                                     .self = &lt_plugin,
                                     .device = &lt_iface,
                                     .shutdown = lt_shutdown};

/* True when `host` offers the span slots (a 1.2 runtime does not). */
static int lt_has_spans(const tessera_host_api_t* host) {
  return TESSERA_ABI_HAS_FIELD(host, tessera_host_api_t, profiler_record_span) &&
         host->profiler_record_span != NULL;
}

/* The name holds a quote, a backslash, a control character and a byte that is not UTF-8: the trace
 * must still be valid JSON. */
#define LT_SPAN_NAME "lt \"mark\"\\ \x01\xff"

/* lt_spans_mark_(Tensor(a!) self): every element of a contiguous float32 tensor = 1, timed as one
 * span that carries the correlation id of the host op. */
static tessera_status_t lt_mark_kernel(void* user_data, const tessera_kernel_call_t* call) {
  (void)user_data;
  const tessera_tensor_t* t = call->outputs[0];
  const int on = lt_has_spans(lt_host) && lt_host->profiler_enabled();
  tessera_profiler_span_t span = {0};
  if (on) {
    span.struct_size = sizeof span;
    span.device = call->device_index < 0 ? 0 : call->device_index;
    span.name = LT_SPAN_NAME;
    span.category = "kernel";
    span.correlation_id = lt_host->profiler_correlation_id();
    span.args_json = "{\"elements\": 6}";
    span.start_ns = lt_host->profiler_clock_ns();
  }
  float* data = (float*)((char*)t->data + t->byte_offset);
  for (int64_t i = 0; i < t->numel; ++i) data[i] = 1.0f;
  if (on) {
    span.end_ns = lt_host->profiler_clock_ns();
    tessera_status_t st = lt_host->profiler_record_span(lt_host->host_ctx, &span);
    if (st) return st; /* a refusal would be a bug here: let the test see it */
  }
  return NULL;
}

/* 0 when `st` is an INVALID_ARGUMENT status whose message holds `fragment` (freed either way). */
static int lt_refused(tessera_status_t st, const char* fragment) {
  if (!st) return 1;
  int ok = lt_host->status_code(st) == TESSERA_STATUS_INVALID_ARGUMENT &&
           strstr(lt_host->status_message(st), fragment) != NULL;
  lt_host->status_free(st);
  return ok ? 0 : 1;
}

/* Each bad span is refused with a reason; a good one is accepted. Returns 0, or the number of the
 * first case that went wrong. */
TESSERA_PLUGIN_EXPORT int lt_spans_bad_arguments(void) {
  if (!lt_has_spans(lt_host)) return 100;
  void* ctx = lt_host->host_ctx;
  const int64_t now = lt_host->profiler_clock_ns();
  tessera_profiler_span_t good = {0};
  good.struct_size = sizeof good;
  good.name = "good";
  good.start_ns = now;
  good.end_ns = now + 10;
  tessera_profiler_span_t s;
  if (lt_refused(lt_host->profiler_record_span(ctx, NULL), "span is NULL")) return 1;
  s = good, s.name = NULL;
  if (lt_refused(lt_host->profiler_record_span(ctx, &s), "no name")) return 2;
  s = good, s.name = "";
  if (lt_refused(lt_host->profiler_record_span(ctx, &s), "no name")) return 3;
  s = good, s.end_ns = now - 1;
  if (lt_refused(lt_host->profiler_record_span(ctx, &s), "ends before it starts")) return 4;
  s = good, s.struct_size = (uint32_t)offsetof(tessera_profiler_span_t, args_json);
  if (lt_refused(lt_host->profiler_record_span(ctx, &s), "struct_size")) return 5;
  s = good, s.device = -2;
  if (lt_refused(lt_host->profiler_record_span(ctx, &s), "device -2")) return 6;
  s = good, s.args_json = "[1, 2]";
  if (lt_refused(lt_host->profiler_record_span(ctx, &s), "not a JSON object")) return 7;
  s = good, s.args_json = "{\"unterminated\": ";
  if (lt_refused(lt_host->profiler_record_span(ctx, &s), "not a JSON object")) return 8;
  if (lt_refused(lt_host->profiler_record_span(NULL, &good), "host_ctx is NULL")) return 9;
  static char long_name[1100];
  memset(long_name, 'x', sizeof long_name - 1);
  s = good, s.name = long_name;
  if (lt_refused(lt_host->profiler_record_span(ctx, &s), "longer than 1024")) return 10;
  tessera_status_t st = lt_host->profiler_record_span(ctx, &good);
  if (st) {
    lt_host->status_free(st);
    return 11;
  }
  return 0;
}

/* The host table this plugin was given: the test drives the SDK's span helpers through it. */
TESSERA_PLUGIN_EXPORT const tessera_host_api_t* lt_spans_host_api(void) { return lt_host; }

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_minor;
  if (host_abi_major != TESSERA_ABI_MAJOR)
    return host->status_make(TESSERA_STATUS_ABI_MISMATCH, "lt_spans: incompatible ABI major version");
  lt_host = host;
  tessera_status_t st =
      host->op_define(host->host_ctx, "lt_spans_mark_(Tensor(a!) self) -> Tensor(a!)", NULL);
  if (st) return st;
  st = host->kernel_register(host->host_ctx, "lt_spans_mark_", TESSERA_FUNCTIONALITY_DENSE,
                             TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32), lt_mark_kernel, NULL,
                             TESSERA_KERNEL_FLAG_NONE);
  if (st) return st;
  *out_plugin = &lt_plugin;
  return NULL;
}
