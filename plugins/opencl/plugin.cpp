// Entry point of the OpenCL backend plugin.
#include <cstring>

#include "backend.h"
#include "kernels.h"
#include "tessera/sdk.hpp"

namespace {

void shutdown_plugin(void*) { tessera::opencl::Backend::instance().shutdown(); }

// TESSERA_EXT_EMPTY_CACHE: releases the cached (freed) device memory of `device` (-1: every
// device) and returns the number of bytes released.
uint64_t empty_cache(void*, int32_t device) {
  auto& backend = tessera::opencl::Backend::instance();
  uint64_t released = 0;
  for (int32_t i = 0; i < backend.count(); ++i) {
    if (device >= 0 && i != device) continue;
    auto& allocator = backend.device(i).allocator;
    released += allocator.stats().cached;
    allocator.empty_cache();
  }
  return released;
}

tessera_proc_t get_proc_address(void*, const char* name) {
  if (name && std::strcmp(name, TESSERA_EXT_EMPTY_CACHE) == 0)
    return reinterpret_cast<tessera_proc_t>(static_cast<tessera_ext_empty_cache_fn_t>(&empty_cache));
  return nullptr;
}


tessera_plugin_t g_plugin = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = "opencl",
    .version = "0.1.0",
    .features = TESSERA_PLUGIN_FEATURE_STREAMS | TESSERA_PLUGIN_FEATURE_EVENTS | TESSERA_PLUGIN_FEATURE_ASYNC,
    .self = nullptr,
    .device = nullptr,  // set at init, once the backend has discovered its devices
    .shutdown = shutdown_plugin,
    .get_proc_address = get_proc_address,
};

}  // namespace


TESSERA_PLUGIN_ENTRY(&g_plugin) {
  auto& backend = tessera::opencl::Backend::instance();
  backend.discover();
  g_plugin.device = tessera::opencl::device_interface();
  tessera::opencl::register_kernels(host);
}
