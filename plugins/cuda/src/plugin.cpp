// The CUDA backend plugin's entry point. Loading it makes no CUDA call (Note [No CUDA call before
// first use] in cuda_backend.h): it registers its kernels and hands the runtime its device interface.
#include "cuda_backend.h"
#include "ops.h"
#include "tessera/sdk.hpp"

namespace {

void cuda_shutdown(void*) { tessera::cuda::Backend::instance().shutdown(); }

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
  return p;
}

tessera_plugin_t g_plugin = make_plugin();

}  // namespace

TESSERA_PLUGIN_ENTRY(&g_plugin) { tessera::cuda::register_kernels(host); }
