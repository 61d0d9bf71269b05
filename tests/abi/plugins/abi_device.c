/* A backend plugin written in plain C against one plugin ABI header: built once from the frozen 1.0
 * header (libabi_v1_0.so: what a vendor compiled for 1.0 and never rebuilt), once from the frozen 1.2
 * header with ABI_DEVICE_FROZEN_1_2 (libabi_v1_2.so: built for the previous minor release), and once
 * from the live header with ABI_DEVICE_LIVE (libabi_v1_1.so). What it offers follows the header's
 * minor: from 1.1 memory statistics and the extension lookup; from 1.3 memory info, and random draws
 * from the host's generator (host->generator_reserve) when the host offers it, from its own counter
 * otherwise (the live build declares "min_host_minor": 2 and also loads in a 1.2 runtime). Its device
 * memory is host memory with a small cache of freed blocks; its kernels are add.Tensor and mul.Tensor
 * for contiguous float32 tensors of one shape. */
#if defined(ABI_DEVICE_LIVE)
#include "tessera/plugin_abi.h"
#define ABI_DEVICE_NAME "abi_v1_1"
#elif defined(ABI_DEVICE_FROZEN_1_2)
#include "tessera/abi/1.2/plugin_abi.h"
#define ABI_DEVICE_NAME "abi_v1_2"
#if TESSERA_ABI_MINOR != 2
#error "the 1.2 plugin must be built from the frozen 1.2 header"
#endif
#else
#include "tessera/abi/1.0/plugin_abi.h"
#define ABI_DEVICE_NAME "abi_v1_0"
#if TESSERA_ABI_MINOR != 0
#error "the 1.0 plugin must be built from the frozen 1.0 header"
#endif
#endif

#include <stdlib.h>
#include <string.h>

#define ABI_DEVICE_CACHE_SLOTS 8
#define ABI_DEVICE_HEADER 64 /* bytes before each block: its size (keeps 64-byte alignment of data) */

static const tessera_host_api_t* g_host;
static int g_kernel_calls;
static int g_empty_cache_calls;
static uint64_t g_allocated, g_cached, g_peak, g_live;
static uint64_t g_own_random_offset; /* the plugin's own counter when the host has no generator */
#define ABI_DEVICE_MEMORY_BYTES (UINT64_C(1) << 30)
static void* g_cache[ABI_DEVICE_CACHE_SLOTS];

TESSERA_PLUGIN_EXPORT int abi_device_kernel_calls(void) { return g_kernel_calls; }
TESSERA_PLUGIN_EXPORT int abi_device_empty_cache_calls(void) { return g_empty_cache_calls; }

static tessera_status_t fail(tessera_status_code_t code, const char* message) {
  return g_host->status_make(code, message);
}
static uint64_t block_size(void* handle) {
  uint64_t n;
  memcpy(&n, (char*)handle - ABI_DEVICE_HEADER, sizeof(n));
  return n;
}

static int32_t device_count(void* self, char* reason, size_t capacity) {
  (void)self;
  if (reason && capacity) reason[0] = '\0';
  return 1;
}
static tessera_status_t memory_allocate(void* self, int32_t device, uint64_t nbytes, void** out_handle) {
  (void)self;
  if (device != 0) return fail(TESSERA_STATUS_INVALID_ARGUMENT, ABI_DEVICE_NAME ": only device 0 exists");
  if (nbytes > (UINT64_C(1) << 40)) return fail(TESSERA_STATUS_OUT_OF_MEMORY, ABI_DEVICE_NAME ": above 1 TiB");
  for (int i = 0; i < ABI_DEVICE_CACHE_SLOTS; ++i)
    if (g_cache[i] && block_size(g_cache[i]) == nbytes) {
      *out_handle = g_cache[i];
      g_cache[i] = NULL;
      g_cached -= nbytes;
      goto done;
    }
  {
    char* p = (char*)malloc((size_t)nbytes + ABI_DEVICE_HEADER);
    if (!p) return fail(TESSERA_STATUS_OUT_OF_MEMORY, ABI_DEVICE_NAME ": malloc failed");
    memcpy(p, &nbytes, sizeof(nbytes));
    *out_handle = p + ABI_DEVICE_HEADER;
  }
done:
  g_allocated += nbytes;
  ++g_live;
  if (g_allocated > g_peak) g_peak = g_allocated;
  return NULL;
}
static void memory_free(void* self, int32_t device, void* handle) {
  (void)self;
  (void)device;
  if (!handle) return;
  const uint64_t n = block_size(handle);
  g_allocated -= n;
  --g_live;
  for (int i = 0; i < ABI_DEVICE_CACHE_SLOTS; ++i)
    if (!g_cache[i]) {
      g_cache[i] = handle;
      g_cached += n;
      return;
    }
  free((char*)handle - ABI_DEVICE_HEADER);
}
static tessera_status_t copy_from_host(void* self, int32_t device, void* dst, uint64_t dst_offset,
                                       const void* src_host, uint64_t nbytes, void* stream) {
  (void)self, (void)device, (void)stream;
  if (nbytes) memcpy((char*)dst + dst_offset, src_host, (size_t)nbytes);
  return NULL;
}
static tessera_status_t copy_to_host(void* self, int32_t device, void* dst_host, const void* src,
                                     uint64_t src_offset, uint64_t nbytes, void* stream) {
  (void)self, (void)device, (void)stream;
  if (nbytes) memcpy(dst_host, (const char*)src + src_offset, (size_t)nbytes);
  return NULL;
}
static size_t device_properties(void* self, int32_t device, char* buffer, size_t capacity) {
  static const char json[] = "{\"name\": \"" ABI_DEVICE_NAME "\", \"memory\": 0}";
  const size_t len = sizeof(json) - 1;
  (void)self, (void)device;
  if (buffer && capacity) {
    const size_t n = len < capacity - 1 ? len : capacity - 1;
    memcpy(buffer, json, n);
    buffer[n] = '\0';
  }
#if TESSERA_ABI_MINOR >= 1
  return len;
#else
  return len + 1; /* counts the NUL, as some 1.0 plugins did: the host must not show it */
#endif
}

#if TESSERA_ABI_MINOR >= 1
static tessera_status_t memory_stats(void* self, int32_t device, tessera_memory_stats_t* out) {
  (void)self;
  if (device != 0) return fail(TESSERA_STATUS_INVALID_ARGUMENT, ABI_DEVICE_NAME ": only device 0 exists");
  if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, allocated_bytes)) out->allocated_bytes = g_allocated;
  if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, reserved_bytes)) out->reserved_bytes = g_allocated + g_cached;
  if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, peak_allocated_bytes)) out->peak_allocated_bytes = g_peak;
  if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, num_allocations)) out->num_allocations = g_live;
  return NULL;
}
static uint64_t empty_cache(void* self, int32_t device) {
  uint64_t released = 0;
  (void)self;
  ++g_empty_cache_calls;
  if (device > 0) return 0;
  for (int i = 0; i < ABI_DEVICE_CACHE_SLOTS; ++i)
    if (g_cache[i]) {
      released += block_size(g_cache[i]);
      free((char*)g_cache[i] - ABI_DEVICE_HEADER);
      g_cache[i] = NULL;
    }
  g_cached -= released;
  return released;
}
static tessera_proc_t get_proc_address(void* self, const char* name) {
  tessera_ext_empty_cache_fn_t fn = empty_cache;
  (void)self;
  if (name && strcmp(name, TESSERA_EXT_EMPTY_CACHE) == 0) return (tessera_proc_t)fn;
  return NULL;
}
#endif

#if TESSERA_ABI_MINOR >= 3
static tessera_status_t memory_info(void* self, int32_t device, uint64_t* out_free, uint64_t* out_total) {
  (void)self;
  if (device != 0) return fail(TESSERA_STATUS_INVALID_ARGUMENT, ABI_DEVICE_NAME ": only device 0 exists");
  *out_total = ABI_DEVICE_MEMORY_BYTES;
  *out_free = ABI_DEVICE_MEMORY_BYTES - g_allocated - g_cached;
  return NULL;
}
#endif

/* Reserves `count` random counter values for device 0: from the host's default generator when the
 * host table has generator_reserve (ABI 1.3), else from the plugin's own counter under seed 0.
 * Returns 1 when the host's generator answered, 0 for the plugin's own counter, -1 on error. */
TESSERA_PLUGIN_EXPORT int abi_device_reserve_random(uint64_t count, uint64_t* out_seed, uint64_t* out_offset) {
#if TESSERA_ABI_MINOR >= 3
  if (TESSERA_ABI_HAS_FIELD(g_host, tessera_host_api_t, generator_reserve) && g_host->generator_reserve) {
    tessera_status_t st = g_host->generator_reserve(g_host->host_ctx, 0, count, out_seed, out_offset);
    if (st) {
      g_host->status_free(st);
      return -1;
    }
    return 1;
  }
#endif
  *out_seed = 0;
  *out_offset = g_own_random_offset;
  g_own_random_offset += count;
  return 0;
}

static const tessera_device_interface_t g_device = {
    .struct_size = sizeof(tessera_device_interface_t),
    .device_count = device_count,
    .memory_allocate = memory_allocate,
    .memory_free = memory_free,
    .memory_copy_from_host = copy_from_host,
    .memory_copy_to_host = copy_to_host,
    .device_properties = device_properties,
#if TESSERA_ABI_MINOR >= 1
    .memory_stats = memory_stats,
#endif
#if TESSERA_ABI_MINOR >= 3
    .memory_info = memory_info,
#endif
};

static void shutdown_plugin(void* self) {
  (void)self;
  for (int i = 0; i < ABI_DEVICE_CACHE_SLOTS; ++i)
    if (g_cache[i]) {
      g_cached -= block_size(g_cache[i]);
      free((char*)g_cache[i] - ABI_DEVICE_HEADER);
      g_cache[i] = NULL;
    }
}

static const tessera_plugin_t g_plugin = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .name = ABI_DEVICE_NAME,
    .version = "1.0.0",
    .device = &g_device,
    .shutdown = shutdown_plugin,
#if TESSERA_ABI_MINOR >= 1
    .get_proc_address = get_proc_address,
#endif
};

/* out = a OP b for contiguous float32 tensors of one shape; anything else is UNIMPLEMENTED. */
static int same_contiguous_f32(const tessera_tensor_t* a, const tessera_tensor_t* b) {
  if (!a || !b || a->dtype != TESSERA_DTYPE_FLOAT32 || b->dtype != TESSERA_DTYPE_FLOAT32 || a->ndim != b->ndim)
    return 0;
  int64_t expected = 1;
  for (int32_t i = a->ndim - 1; i >= 0; --i) {
    if (a->sizes[i] != b->sizes[i]) return 0;
    if (a->sizes[i] != 1 && (a->strides[i] != expected || b->strides[i] != expected)) return 0;
    expected *= a->sizes[i];
  }
  return 1;
}
static tessera_status_t binary_f32(const tessera_kernel_call_t* call, int is_mul) {
  const tessera_tensor_t *a = call->inputs[0], *b = call->inputs[1], *out = call->outputs[0];
  if (!same_contiguous_f32(a, b) || !same_contiguous_f32(a, out))
    return fail(TESSERA_STATUS_UNIMPLEMENTED, ABI_DEVICE_NAME ": same-shape contiguous float32 only");
  const double alpha = !is_mul && call->num_attrs > 0
                           ? (call->attrs[0].kind == TESSERA_VALUE_DOUBLE ? call->attrs[0].u.d : (double)call->attrs[0].u.i)
                           : 1.0;
  const float* pa = (const float*)((const char*)a->data + a->byte_offset);
  const float* pb = (const float*)((const char*)b->data + b->byte_offset);
  float* po = (float*)((char*)out->data + out->byte_offset);
  for (int64_t i = 0; i < out->numel; ++i) po[i] = is_mul ? pa[i] * pb[i] : (float)(pa[i] + alpha * pb[i]);
  ++g_kernel_calls;
  return NULL;
}
static tessera_status_t add_kernel(void* user_data, const tessera_kernel_call_t* call) {
  (void)user_data;
  return binary_f32(call, 0);
}
static tessera_status_t mul_kernel(void* user_data, const tessera_kernel_call_t* call) {
  (void)user_data;
  return binary_f32(call, 1);
}

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_minor;
  if (host_abi_major != TESSERA_ABI_MAJOR)
    return host->status_make(TESSERA_STATUS_ABI_MISMATCH, ABI_DEVICE_NAME ": incompatible ABI major version");
  g_host = host;
  tessera_status_t st = host->kernel_register(host->host_ctx, "add.Tensor", TESSERA_FUNCTIONALITY_DENSE,
                                              TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32), add_kernel, NULL,
                                              TESSERA_KERNEL_FLAG_NONE);
  if (st) return st;
  st = host->kernel_register(host->host_ctx, "mul.Tensor", TESSERA_FUNCTIONALITY_DENSE,
                             TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32), mul_kernel, NULL, TESSERA_KERNEL_FLAG_NONE);
  if (st) return st;
  *out_plugin = &g_plugin;
  return NULL;
}
