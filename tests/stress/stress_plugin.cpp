// A small backend plugin for the stress and failure-injection suites: a "device" whose memory is
// host memory behind opaque handles (the runtime reaches it only through the copy functions), with
// an add kernel for float32 and failures that the tests switch on through the environment:
//   STRESS_FAIL_ALLOC_ABOVE=<bytes>  memory_allocate fails (out of memory) above that size
//   STRESS_FAIL_COPY_AFTER=<bytes>   memory_copy_from_host copies that many bytes, then fails
//   STRESS_FAIL_INIT=1               init registers a kernel, then fails
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tessera/sdk.hpp"

namespace {

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_init_count{0};
std::atomic<int64_t> g_add_count{0};

struct Block {
  uint64_t nbytes;
  unsigned char bytes[1];
};

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = tessera::sdk::host_api()->getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

tessera_status_t status(tessera_status_code_t code, const std::string& msg) {
  return tessera::sdk::make_status(code, msg);
}

int32_t device_count(void*, char*, size_t) { return 1; }
tessera_status_t get_current(void*, int32_t* out) {
  *out = 0;
  return nullptr;
}
tessera_status_t set_current(void*, int32_t index) {
  return index == 0 ? nullptr : status(TESSERA_STATUS_INVALID_ARGUMENT, "stressdev has one device");
}
tessera_status_t allocate(void*, int32_t, uint64_t nbytes, void** out) {
  int64_t limit = env_int("STRESS_FAIL_ALLOC_ABOVE", -1);
  if (limit >= 0 && int64_t(nbytes) > limit)
    return status(TESSERA_STATUS_OUT_OF_MEMORY, "stressdev: out of device memory");
  auto* b = static_cast<Block*>(std::malloc(sizeof(Block) + nbytes));
  if (!b) return status(TESSERA_STATUS_OUT_OF_MEMORY, "stressdev: out of device memory");
  b->nbytes = nbytes;
  g_live_bytes += int64_t(nbytes);
  *out = b;
  return nullptr;
}
void release(void*, int32_t, void* handle) {
  if (!handle) return;
  auto* b = static_cast<Block*>(handle);
  g_live_bytes -= int64_t(b->nbytes);
  std::free(b);
}
tessera_status_t copy_from_host(void*, int32_t, void* dst, uint64_t off, const void* src, uint64_t n, void*) {
  auto* b = static_cast<Block*>(dst);
  if (off + n > b->nbytes) return status(TESSERA_STATUS_INVALID_ARGUMENT, "stressdev: copy out of bounds");
  int64_t fail_after = env_int("STRESS_FAIL_COPY_AFTER", -1);
  if (fail_after >= 0 && uint64_t(fail_after) < n) {
    std::memcpy(b->bytes + off, src, size_t(fail_after));  // a partial transfer, then the link drops
    return status(TESSERA_STATUS_INTERNAL, "stressdev: transfer aborted (injected)");
  }
  std::memcpy(b->bytes + off, src, n);
  return nullptr;
}
tessera_status_t copy_to_host(void*, int32_t, void* dst, const void* src, uint64_t off, uint64_t n, void*) {
  auto* b = static_cast<const Block*>(src);
  if (off + n > b->nbytes) return status(TESSERA_STATUS_INVALID_ARGUMENT, "stressdev: copy out of bounds");
  std::memcpy(dst, b->bytes + off, n);
  return nullptr;
}
tessera_status_t copy_device(void*, int32_t, void* dst, uint64_t doff, int32_t, const void* src, uint64_t soff,
                             uint64_t n, void*) {
  std::memcpy(static_cast<Block*>(dst)->bytes + doff, static_cast<const Block*>(src)->bytes + soff, n);
  return nullptr;
}
tessera_status_t no_stream(void*, int32_t, void** out) {
  *out = nullptr;
  return nullptr;
}
void no_destroy(void*, int32_t, void*) {}
tessera_status_t sync_stream(void*, int32_t, void*) { return nullptr; }
tessera_status_t event_op(void*, int32_t, void*, void*) { return nullptr; }
tessera_status_t event_sync(void*, int32_t, void*) { return nullptr; }
tessera_status_t device_sync(void*, int32_t) { return nullptr; }
size_t properties(void*, int32_t, char* buffer, size_t capacity) {
  char text[256];
  int n = std::snprintf(text, sizeof text, R"({"name": "stressdev", "live_bytes": %lld, "init_count": %lld, "add_count": %lld})",
                        (long long)g_live_bytes.load(), (long long)g_init_count.load(), (long long)g_add_count.load());
  if (buffer && capacity) std::snprintf(buffer, capacity, "%s", text);
  return size_t(n);
}

const tessera_device_interface_t kInterface = {
    .struct_size = sizeof(tessera_device_interface_t),
    .reserved_ = 0,
    .device_count = device_count,
    .device_get_current = get_current,
    .device_set_current = set_current,
    .memory_allocate = allocate,
    .memory_free = release,
    .memory_copy_from_host = copy_from_host,
    .memory_copy_to_host = copy_to_host,
    .memory_copy_device = copy_device,
    .stream_create = no_stream,
    .stream_destroy = no_destroy,
    .stream_synchronize = sync_stream,
    .event_create = no_stream,
    .event_destroy = no_destroy,
    .event_record = event_op,
    .event_wait = event_op,
    .event_synchronize = event_sync,
    .device_synchronize = device_sync,
    .device_properties = properties,
    .memory_stats = nullptr,
    .event_elapsed_time = nullptr,
    .memory_record_stream = nullptr,
};

const tessera_plugin_t kPlugin = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = "stressdev",
    .version = "0.1.0",
    .features = 0,
    .self = nullptr,
    .device = &kInterface,
    .shutdown = nullptr,
    .get_proc_address = nullptr,
};

// out = a + alpha * b for float32 tensors of one shape, contiguous (else: unimplemented -> fallback).
void add_kernel(const tessera::sdk::KernelCall& call) {
  auto a = call.input(0), b = call.input(1), out = call.output(0);
  if (!a.is_contiguous() || !b.is_contiguous() || a.numel() != out.numel() || b.numel() != out.numel() ||
      a.dtype() != TESSERA_DTYPE_FLOAT32 || b.dtype() != TESSERA_DTYPE_FLOAT32)
    throw tessera::sdk::Error(TESSERA_STATUS_UNIMPLEMENTED, "stressdev add: same-shape contiguous float32 only");
  const float alpha = float(call.attr_double(0));
  auto* pa = reinterpret_cast<const float*>(static_cast<Block*>(a.handle())->bytes + a.byte_offset());
  auto* pb = reinterpret_cast<const float*>(static_cast<Block*>(b.handle())->bytes + b.byte_offset());
  auto* po = reinterpret_cast<float*>(static_cast<Block*>(out.handle())->bytes + out.byte_offset());
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] + alpha * pb[i];
  ++g_add_count;
}

}  // namespace

TESSERA_PLUGIN_ENTRY(&kPlugin) {
  ++g_init_count;
  host.register_kernel("add.Tensor", TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32), TESSERA_SDK_KERNEL(add_kernel));
  const char* fail = host.getenv("STRESS_FAIL_INIT");
  if (fail && std::string(fail) == "1")
    throw tessera::sdk::Error(TESSERA_STATUS_INTERNAL, "stressdev: firmware did not answer (injected)");
}
