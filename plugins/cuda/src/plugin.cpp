// The CUDA backend plugin's entry point. Loading it makes no CUDA call (Note [No CUDA call before
// first use] in cuda_backend.h): it registers its kernels and hands the runtime its device interface.
#include <cstring>

#include "cuda_backend.h"
#include "device_graphs.h"
#include "ops.h"
#include "tessera/sdk.hpp"

namespace {

void cuda_shutdown(void*) { tessera::cuda::Backend::instance().shutdown(); }

// TESSERA_EXT_EMPTY_CACHE: returns every fully free cached segment of `device` (all devices when
// negative) to the driver; the number of bytes released.
uint64_t cuda_empty_cache(void*, int32_t device) {
  tessera::cuda::Backend& b = tessera::cuda::Backend::instance();
  if (b.device_count() == 0) return 0;
  uint64_t before = 0, after = 0;
  for (int i = 0; i < b.device_count(); ++i)
    if (device < 0 || i == device) before += b.allocator().stats(i).reserved_bytes;
  b.allocator().empty_cache(device);
  for (int i = 0; i < b.device_count(); ++i)
    if (device < 0 || i == device) after += b.allocator().stats(i).reserved_bytes;
  return before - after;
}

tessera_proc_t cuda_get_proc_address(void*, const char* name) {
  if (name && std::strcmp(name, TESSERA_EXT_EMPTY_CACHE) == 0)
    return reinterpret_cast<tessera_proc_t>(static_cast<tessera_ext_empty_cache_fn_t>(&cuda_empty_cache));
  if (name && std::strcmp(name, TESSERA_EXT_DEVICE_GRAPHS) == 0)
    return reinterpret_cast<tessera_proc_t>(
        static_cast<tessera_ext_device_graphs_fn_t>(&tessera::cuda::device_graphs));
  return nullptr;
}

tessera_plugin_t make_plugin() {
  tessera_plugin_t p{};
  p.struct_size = sizeof(tessera_plugin_t);
  p.abi_major = TESSERA_ABI_MAJOR;
  p.abi_minor = TESSERA_ABI_MINOR;
  p.name = "cuda";
  p.version = "0.1.0";
  p.features = TESSERA_PLUGIN_FEATURE_STREAMS | TESSERA_PLUGIN_FEATURE_EVENTS | TESSERA_PLUGIN_FEATURE_ASYNC;
  p.self = nullptr;
  p.device = tessera::cuda::device_interface();
  p.shutdown = &cuda_shutdown;
  p.get_proc_address = &cuda_get_proc_address;
  return p;
}

tessera_plugin_t g_plugin = make_plugin();

}  // namespace

TESSERA_PLUGIN_ENTRY(&g_plugin) { tessera::cuda::register_kernels(host); }
