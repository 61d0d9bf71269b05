// The CPU backend plugin: entry point, device interface (host memory, synchronous streams) and
// kernel registration.
#include <dlfcn.h>
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "isa.h"
#include "kernels.h"
#include "parallel.h"
#include "tessera/sdk.hpp"
#include "tessera/text_escape.h"
#include "vec_kernels.h"

#ifdef TESSERA_CPU_HAS_NN
#include "../nn/nn_kernels.h"
#include "../nn/onednn.h"
#endif

namespace tessera::cpu {

void Registrar::add(const char* op, uint64_t dtype_mask, tessera_kernel_fn_t fn, void* user_data) {
  host_.register_kernel(op, dtype_mask, fn, user_data);
  ++count_;
}

namespace {

constexpr uint64_t kAlignment = 64;

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t b = line.find_first_not_of(" \t", colon + 1);
        return b == std::string::npos ? std::string() : line.substr(b);
      }
    }
  }
  return "unknown x86-64 CPU";
}

tessera_status_t bad_device(int32_t device) {
  return sdk::make_status(TESSERA_STATUS_INVALID_ARGUMENT,
                          "cpu: device index " + std::to_string(device) + " does not exist; the CPU backend has device 0 only");
}

int32_t device_count(void*, char* reason, size_t cap) {
  if (reason && cap) reason[0] = '\0';
  return 1;
}
tessera_status_t device_get_current(void*, int32_t* out) {
  *out = 0;
  return nullptr;
}
tessera_status_t device_set_current(void*, int32_t index) { return index == 0 ? nullptr : bad_device(index); }

tessera_status_t memory_allocate(void*, int32_t device, uint64_t nbytes, void** out) {
  if (device != 0) return bad_device(device);
  const uint64_t n = nbytes == 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, n);
  if (!p)
    return sdk::make_status(TESSERA_STATUS_OUT_OF_MEMORY,
                            "cpu: failed to allocate " + std::to_string(nbytes) + " bytes of host memory");
  *out = p;
  return nullptr;
}
void memory_free(void*, int32_t, void* handle) { std::free(handle); }

tessera_status_t memory_copy_from_host(void*, int32_t device, void* dst, uint64_t dst_offset, const void* src,
                                       uint64_t nbytes, void*) {
  if (device != 0) return bad_device(device);
  if (nbytes) std::memcpy(static_cast<char*>(dst) + dst_offset, src, nbytes);
  return nullptr;
}
tessera_status_t memory_copy_to_host(void*, int32_t device, void* dst, const void* src, uint64_t src_offset,
                                     uint64_t nbytes, void*) {
  if (device != 0) return bad_device(device);
  if (nbytes) std::memcpy(dst, static_cast<const char*>(src) + src_offset, nbytes);
  return nullptr;
}
tessera_status_t memory_copy_device(void*, int32_t dst_device, void* dst, uint64_t dst_offset, int32_t src_device,
                                    const void* src, uint64_t src_offset, uint64_t nbytes, void*) {
  if (dst_device != 0) return bad_device(dst_device);
  if (src_device != 0) return bad_device(src_device);
  if (nbytes) std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, nbytes);
  return nullptr;
}

// Streams and events: the CPU runs every kernel synchronously, so a stream is a token and an
// event is complete as soon as it is recorded.
int g_stream_token, g_event_token;
tessera_status_t stream_create(void*, int32_t device, void** out) {
  if (device != 0) return bad_device(device);
  *out = &g_stream_token;
  return nullptr;
}
void stream_destroy(void*, int32_t, void*) {}
tessera_status_t stream_synchronize(void*, int32_t device, void*) { return device == 0 ? nullptr : bad_device(device); }
tessera_status_t event_create(void*, int32_t device, void** out) {
  if (device != 0) return bad_device(device);
  *out = &g_event_token;
  return nullptr;
}
void event_destroy(void*, int32_t, void*) {}
tessera_status_t event_record(void*, int32_t device, void*, void*) { return device == 0 ? nullptr : bad_device(device); }
tessera_status_t event_wait(void*, int32_t device, void*, void*) { return device == 0 ? nullptr : bad_device(device); }
tessera_status_t event_synchronize(void*, int32_t device, void*) { return device == 0 ? nullptr : bad_device(device); }
tessera_status_t device_synchronize(void*, int32_t device) { return device == 0 ? nullptr : bad_device(device); }

size_t device_properties(void*, int32_t device, char* buffer, size_t capacity) {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  const uint64_t memory = pages > 0 && page_size > 0 ? uint64_t(pages) * uint64_t(page_size) : 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores <= 0) cores = long(std::thread::hardware_concurrency());
  const std::string json = "{\"name\": \"" + json_escape(cpu_model_name()) + "\", \"capability\": \"" +
                           capability_name(capability()) + "\", \"cores\": " + std::to_string(cores) +
                           ", \"threads\": " + std::to_string(max_threads()) +
                           ", \"memory\": " + std::to_string(memory) +
                           // Note [bf16 without oneDNN support] in nn/onednn.h
                           ", \"onednn_bf16\": " + (nn::onednn_has_bf16() ? "true" : "false") + "}";
  if (buffer && capacity) {
    const size_t n = std::min(capacity - 1, json.size());
    std::memcpy(buffer, json.data(), n);
    buffer[n] = '\0';
  }
  (void)device;
  return json.size() + 1;
}

// CPU tensors come from the host's allocator; the plugin reports what it holds itself: prepacked
// weights (Note [Weight cache] in nn/onednn_ops.cpp), as reserved bytes.
tessera_status_t memory_stats(void*, int32_t device, tessera_memory_stats_t* out) {
  if (device != 0) return bad_device(device);
#ifdef TESSERA_CPU_HAS_NN
  const uint64_t held = nn::weight_cache_stats().bytes;
#else
  const uint64_t held = 0;
#endif
  if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, reserved_bytes)) out->reserved_bytes = held;
  return nullptr;
}

uint64_t empty_cache(void*, int32_t) {
#ifdef TESSERA_CPU_HAS_NN
  return nn::weight_cache_clear();
#else
  return 0;
#endif
}

tessera_proc_t get_proc_address(void*, const char* name) {
  if (name && std::strcmp(name, TESSERA_EXT_EMPTY_CACHE) == 0)
    return reinterpret_cast<tessera_proc_t>(static_cast<tessera_ext_empty_cache_fn_t>(&empty_cache));
  return nullptr;
}

const tessera_device_interface_t kDeviceInterface = {
    .struct_size = sizeof(tessera_device_interface_t),
    .reserved_ = 0,
    .device_count = device_count,
    .device_get_current = device_get_current,
    .device_set_current = device_set_current,
    .memory_allocate = memory_allocate,
    .memory_free = memory_free,
    .memory_copy_from_host = memory_copy_from_host,
    .memory_copy_to_host = memory_copy_to_host,
    .memory_copy_device = memory_copy_device,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_synchronize = stream_synchronize,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_wait = event_wait,
    .event_synchronize = event_synchronize,
    .device_synchronize = device_synchronize,
    .device_properties = device_properties,
    .memory_stats = memory_stats,
    .event_elapsed_time = nullptr,
    .memory_record_stream = nullptr,
    // ABI 1.3: CPU tensors come from the host's allocator; the host answers memory_info for the CPU.
    .memory_info = nullptr,
    .pinned_allocate = nullptr,
    .pinned_free = nullptr,
    .memory_copy_from_pinned = nullptr,
};

tessera_plugin_t g_plugin = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = "cpu",
    .version = "0.1.0",
    .features = 0,
    .self = nullptr,
    .device = &kDeviceInterface,
    .shutdown = nullptr,
    .get_proc_address = get_proc_address,
};

}  // namespace

// Selects the ISA level from CPUID and TESSERA_CPU_CAPABILITY; throws when the request cannot
// be met (Note [CPU ISA selection]).
void init_capability(const sdk::Host& host) {
  const CpuFeatures f = detect_cpu_features();
  TESSERA_SDK_CHECK(f.sse4_2, "cpu: this CPU lacks SSE4.2, which the CPU backend requires");
  const char* env = host.getenv("TESSERA_CPU_CAPABILITY");
  Capability c;
  std::string error;
  if (!select_capability(f, env ? std::string(env) : std::string(), &c, &error))
    throw sdk::Error(TESSERA_STATUS_UNAVAILABLE, "cpu: " + error);
  set_capability(c);
  sdk::log(TESSERA_LOG_INFO, "cpu",
           std::string("capability ") + capability_name(c) + " (best on this CPU: " +
               capability_name(max_capability(f)) + (env ? std::string(", TESSERA_CPU_CAPABILITY=") + env : "") +
               "); kernels " + kernels_for(c)->name + ", " + std::to_string(max_threads()) + " threads" +
               (f.avx512bf16 ? ", avx512_bf16 present" : ""));
}

// TESSERA_CPU_GRAIN (Note [Grain size] in src/grain.h): a forced mode is logged, an unknown value
// warned about and ignored.
void init_grain_mode(const sdk::Host& host) {
  const char* env = host.getenv("TESSERA_CPU_GRAIN");
  if (!set_grain_mode(env))
    sdk::log(TESSERA_LOG_WARNING, "cpu",
             std::string("TESSERA_CPU_GRAIN='") + env +
                 "' is not a known mode; expected 'quiet', 'loaded', 'force1' or 'off'; using the automatic "
                 "grain rule");
  else if (env && *env)
    sdk::log(TESSERA_LOG_INFO, "cpu",
             std::string("TESSERA_CPU_GRAIN=") + env + ": the grain-size rule is overridden");
}

// Note [libgomp stays loaded]
// OpenMP's worker threads outlive the parallel regions that started them and sleep inside libgomp.
// Unloading this plugin would unload libgomp with them (nothing else holds it) and leave those
// threads parked in unmapped code; libgomp also keeps allocations from its start-up that only its
// own globals point to. So the first load pins libgomp for the life of the process, as the C
// runtime does for libraries loaded with RTLD_NODELETE; the plugin itself still unloads cleanly.
void pin_openmp_runtime() {
  void* self = nullptr;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&omp_get_max_threads), &info) && info.dli_fname)
    self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  if (!self)
    sdk::log(TESSERA_LOG_WARNING, "cpu", "could not pin the OpenMP runtime in memory; unloading this plugin may unload it");
  // The handle is deliberately not closed: RTLD_NODELETE already makes the library permanent.
}

}  // namespace tessera::cpu

TESSERA_PLUGIN_ENTRY(&tessera::cpu::g_plugin) {
  using namespace tessera::cpu;
  pin_openmp_runtime();
  init_capability(host);
  init_grain_mode(host);
  Registrar r(host);
  register_creation_kernels(r);
  register_elementwise_kernels(r);
  register_onnx_elementwise_kernels(r);
  register_reduction_kernels(r);
  register_index_kernels(r);
  register_shape_kernels(r);
  register_onnx_nn_kernels(r);
  register_fake_quantize_kernels(r);
  register_optimizer_kernels(r);
#ifdef TESSERA_CPU_HAS_NN
  register_nn_kernels(host);
#endif
  tessera::sdk::log(TESSERA_LOG_INFO, "cpu", std::to_string(r.count()) + " kernels registered");
}
