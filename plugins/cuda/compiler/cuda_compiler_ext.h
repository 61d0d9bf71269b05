// Extensions of the tessera_cuda_compiler plugin, for its tests and benchmarks
// (tessera::plugin_extension<...>("tessera_cuda_compiler", name)).
#pragma once

#include <cstdint>

// What the plugin did so far: fused kernels launched, kernels compiled by NVRTC, and compiles
// served from the disk cache. `self` is NULL.
#define TESSERA_EXT_CUDA_COMPILER_STATS "tessera.cuda_compiler.stats"
typedef struct tessera_cuda_compiler_stats_t {
  uint64_t launches;
  uint64_t compiles;
  uint64_t cache_hits;
} tessera_cuda_compiler_stats_t;
typedef void (*tessera_ext_cuda_compiler_stats_fn_t)(void* self, tessera_cuda_compiler_stats_t* out);
