/* A device whose memory is host memory, shared by the loader-test plugins (plain C). Each plugin
 * that includes it gets its own copy (static functions), its own allocation counter and its own
 * device interface table. */
#ifndef TESSERA_TESTS_LOADER_HOST_DEVICE_H_
#define TESSERA_TESTS_LOADER_HOST_DEVICE_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/plugin_abi.h"

/* Not every plugin uses every function. */
#pragma GCC diagnostic ignored "-Wunused-function"

static const tessera_host_api_t* lt_host;
static int lt_live_allocations;
static int lt_shutdown_calls;
static int lt_init_calls;

/* Exported so that tests can look at the plugin from outside (dlsym on the loaded library). */
TESSERA_PLUGIN_EXPORT int lt_plugin_live_allocations(void) { return lt_live_allocations; }
TESSERA_PLUGIN_EXPORT int lt_plugin_shutdown_calls(void) { return lt_shutdown_calls; }
TESSERA_PLUGIN_EXPORT int lt_plugin_init_calls(void) { return lt_init_calls; }

#define LT_MAX_ALLOCATION (UINT64_C(1) << 40)

static int32_t lt_device_count(void* self, char* reason, size_t capacity) {
  (void)self;
  (void)reason;
  (void)capacity;
  return 1;
}
static tessera_status_t lt_device_get_current(void* self, int32_t* out_index) {
  (void)self;
  *out_index = 0;
  return NULL;
}
static tessera_status_t lt_device_set_current(void* self, int32_t index) {
  (void)self;
  return index == 0 ? NULL : lt_host->status_make(TESSERA_STATUS_INVALID_ARGUMENT, "host test device: only index 0");
}
static tessera_status_t lt_memory_allocate(void* self, int32_t device, uint64_t nbytes, void** out_handle) {
  (void)self;
  (void)device;
  if (nbytes > LT_MAX_ALLOCATION)
    return lt_host->status_make(TESSERA_STATUS_OUT_OF_MEMORY, "host test device: request above 1 TiB");
  void* p = malloc(nbytes ? (size_t)nbytes : 1);
  if (!p) return lt_host->status_make(TESSERA_STATUS_OUT_OF_MEMORY, "host test device: malloc failed");
  ++lt_live_allocations;
  *out_handle = p;
  return NULL;
}
static void lt_memory_free(void* self, int32_t device, void* handle) {
  (void)self;
  (void)device;
  if (!handle) return;
  free(handle);
  --lt_live_allocations;
}
static tessera_status_t lt_copy_from_host(void* self, int32_t device, void* dst, uint64_t dst_offset,
                                          const void* src_host, uint64_t nbytes, void* stream) {
  (void)self;
  (void)device;
  (void)stream;
  memcpy((char*)dst + dst_offset, src_host, (size_t)nbytes);
  return NULL;
}
static tessera_status_t lt_copy_to_host(void* self, int32_t device, void* dst_host, const void* src,
                                        uint64_t src_offset, uint64_t nbytes, void* stream) {
  (void)self;
  (void)device;
  (void)stream;
  memcpy(dst_host, (const char*)src + src_offset, (size_t)nbytes);
  return NULL;
}
static tessera_status_t lt_copy_device(void* self, int32_t dst_device, void* dst, uint64_t dst_offset,
                                       int32_t src_device, const void* src, uint64_t src_offset, uint64_t nbytes,
                                       void* stream) {
  (void)self;
  (void)dst_device;
  (void)src_device;
  (void)stream;
  memmove((char*)dst + dst_offset, (const char*)src + src_offset, (size_t)nbytes);
  return NULL;
}
static tessera_status_t lt_stream_create(void* self, int32_t device, void** out_stream) {
  (void)self;
  (void)device;
  *out_stream = NULL;
  return NULL;
}
static void lt_stream_destroy(void* self, int32_t device, void* stream) {
  (void)self;
  (void)device;
  (void)stream;
}
static tessera_status_t lt_stream_synchronize(void* self, int32_t device, void* stream) {
  (void)self;
  (void)device;
  (void)stream;
  return NULL;
}
static tessera_status_t lt_event_create(void* self, int32_t device, void** out_event) {
  (void)self;
  (void)device;
  *out_event = NULL;
  return NULL;
}
static void lt_event_destroy(void* self, int32_t device, void* event) {
  (void)self;
  (void)device;
  (void)event;
}
static tessera_status_t lt_event_record(void* self, int32_t device, void* event, void* stream) {
  (void)self;
  (void)device;
  (void)event;
  (void)stream;
  return NULL;
}
static tessera_status_t lt_event_wait(void* self, int32_t device, void* event, void* stream) {
  (void)self;
  (void)device;
  (void)event;
  (void)stream;
  return NULL;
}
static tessera_status_t lt_event_synchronize(void* self, int32_t device, void* event) {
  (void)self;
  (void)device;
  (void)event;
  return NULL;
}
static tessera_status_t lt_device_synchronize(void* self, int32_t device) {
  (void)self;
  (void)device;
  return NULL;
}
static size_t lt_device_properties(void* self, int32_t device, char* buffer, size_t capacity) {
  (void)self;
  int n = snprintf(buffer, capacity, "{\"name\": \"host test device %d\", \"memory\": %llu, \"capability\": \"test\"}",
                   (int)device, (unsigned long long)LT_MAX_ALLOCATION);
  return n < 0 ? 0 : (size_t)n;
}

static void lt_shutdown(void* self) {
  (void)self;
  ++lt_shutdown_calls;
}

#define LT_DEVICE_INTERFACE_INIT                       \
  {                                                    \
    .struct_size = sizeof(tessera_device_interface_t), \
    .reserved_ = 0,                                    \
    .device_count = lt_device_count,                   \
    .device_get_current = lt_device_get_current,       \
    .device_set_current = lt_device_set_current,       \
    .memory_allocate = lt_memory_allocate,             \
    .memory_free = lt_memory_free,                     \
    .memory_copy_from_host = lt_copy_from_host,        \
    .memory_copy_to_host = lt_copy_to_host,            \
    .memory_copy_device = lt_copy_device,              \
    .stream_create = lt_stream_create,                 \
    .stream_destroy = lt_stream_destroy,               \
    .stream_synchronize = lt_stream_synchronize,       \
    .event_create = lt_event_create,                   \
    .event_destroy = lt_event_destroy,                 \
    .event_record = lt_event_record,                   \
    .event_wait = lt_event_wait,                       \
    .event_synchronize = lt_event_synchronize,         \
    .device_synchronize = lt_device_synchronize,       \
    .device_properties = lt_device_properties,         \
    .memory_stats = NULL,                              \
    .event_elapsed_time = NULL,                        \
    .memory_record_stream = NULL,                      \
  }

#endif /* TESSERA_TESTS_LOADER_HOST_DEVICE_H_ */
