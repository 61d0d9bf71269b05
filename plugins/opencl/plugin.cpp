// Entry point of the OpenCL backend plugin.
#include "backend.h"
#include "kernels.h"
#include "tessera/sdk.hpp"

namespace {

void shutdown_plugin(void*) { tessera::opencl::Backend::instance().shutdown(); }

tessera_plugin_t g_plugin = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .name = "opencl",
    .version = "0.1.0",
    .features = TESSERA_PLUGIN_FEATURE_STREAMS | TESSERA_PLUGIN_FEATURE_EVENTS | TESSERA_PLUGIN_FEATURE_ASYNC,
    .shutdown = shutdown_plugin,
};

}  // namespace

// Releases the cached (freed) device memory of `device` (-1: every device). Returns the number of
// bytes released. Exported for applications that dlsym it from the loaded plugin.
extern "C" TESSERA_PLUGIN_EXPORT uint64_t tessera_opencl_empty_cache(int32_t device) {
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

TESSERA_PLUGIN_ENTRY(&g_plugin) {
  auto& backend = tessera::opencl::Backend::instance();
  backend.discover();
  g_plugin.device = tessera::opencl::device_interface();
  tessera::opencl::register_kernels(host);
}
