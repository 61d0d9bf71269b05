// Extensions of the sparse_cuda plugin beyond TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT, for its
// own tests and benchmarks (tessera::plugin_extension<...>("sparse_cuda", name)).
#pragma once

#include <cstdint>

// The number of kernels the plugin launched so far (a GPU test proves a call ran the sparse kernel
// rather than the dense path). `self` is NULL.
#define TESSERA_EXT_SPARSE_CUDA_KERNEL_LAUNCHES "tessera.sparse_cuda.kernel_launches"
typedef uint64_t (*tessera_ext_sparse_cuda_kernel_launches_fn_t)(void* self);

// What the plugin's calls did so far, by path (Note [2:4 on cuSPARSELt]): a GPU test or benchmark
// reads it before and after a call to prove which path ran. `self` is NULL.
#define TESSERA_EXT_SPARSE_CUDA_STATS "tessera.sparse_cuda.stats"
typedef struct tessera_sparse_cuda_stats_t {
  uint64_t kernel_launches;          /* the plugin's own kernels */
  uint64_t cusparselt_matmuls;       /* cusparseLtMatmul calls */
  uint64_t cusparselt_compressions;  /* weights compressed for cuSPARSELt */
  uint64_t cusparselt_cached_weights;
  uint64_t dense_choices;            /* calls sent to the runtime's dense path */
} tessera_sparse_cuda_stats_t;
typedef void (*tessera_ext_sparse_cuda_stats_fn_t)(void* self, tessera_sparse_cuda_stats_t* out);

// cuSPARSELt as the plugin sees it, opening it if that was not yet tried: "cuSPARSELt 0.8.1 (path)",
// or why it cannot be used. The string lives as long as the process. `self` is NULL.
#define TESSERA_EXT_SPARSE_CUDA_CUSPARSELT "tessera.sparse_cuda.cusparselt"
typedef const char* (*tessera_ext_sparse_cuda_cusparselt_fn_t)(void* self);
