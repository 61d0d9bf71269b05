// Extensions of the tessera_cuda_compiler plugin, for its tests and benchmarks
// (tessera::plugin_extension<...>("tessera_cuda_compiler", name)).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/plugin_abi.h"

// What the plugin did so far: fused kernels launched, kernels compiled by NVRTC, and compiles
// served from the disk cache. `self` is NULL.
#define TESSERA_EXT_CUDA_COMPILER_STATS "tessera.cuda_compiler.stats"
typedef struct tessera_cuda_compiler_stats_t {
  uint64_t launches;
  uint64_t compiles;
  uint64_t cache_hits;
} tessera_cuda_compiler_stats_t;
typedef void (*tessera_ext_cuda_compiler_stats_fn_t)(void* self, tessera_cuda_compiler_stats_t* out);

// The kernel source the plugin makes of a partition (a graph whose call nodes are one group of its
// get_capability), without compiling it: for NVRTC (host 0), or over the host prelude (host 1: an
// extern "C" tessera_fused(TsArgs) a C++ compiler builds; Note [Fused CUDA kernels]). Writes at most
// `capacity` bytes to `buffer` (NULL to ask the size) and the whole length to *length. For tests
// on machines without a GPU.
#define TESSERA_EXT_CUDA_COMPILER_SOURCE "tessera.cuda_compiler.source"
typedef tessera_status_t (*tessera_ext_cuda_compiler_source_fn_t)(void* self,
                                                                  const tessera_graph_t* partition,
                                                                  int32_t host, char* buffer, size_t capacity,
                                                                  size_t* length);
