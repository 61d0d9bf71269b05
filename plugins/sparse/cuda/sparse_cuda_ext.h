// Extensions of the sparse_cuda plugin beyond TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT, for its
// own tests and benchmarks (tessera::plugin_extension<...>("sparse_cuda", name)).
#pragma once

#include <cstdint>

// The number of kernels the plugin launched so far (a GPU test proves a call ran the sparse kernel
// rather than the dense path). `self` is NULL.
#define TESSERA_EXT_SPARSE_CUDA_KERNEL_LAUNCHES "tessera.sparse_cuda.kernel_launches"
typedef uint64_t (*tessera_ext_sparse_cuda_kernel_launches_fn_t)(void* self);
