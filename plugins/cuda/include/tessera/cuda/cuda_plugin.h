/* Extra C entry points exported by the CUDA plugin (libtessera_cuda.so) beyond the plugin ABI:
 * detailed memory statistics of its caching allocator and a kernel-launch counter, for tools, tests
 * and benchmarks that look them up with dlsym on the loaded plugin. Releasing the cache is the
 * typed extension TESSERA_EXT_EMPTY_CACHE (get_proc_address; tessera::empty_cache). The same statistics appear in the device
 * properties JSON under "allocator". Plain C; nothing here needs a GPU to be declared. */
#ifndef TESSERA_CUDA_CUDA_PLUGIN_H_
#define TESSERA_CUDA_CUDA_PLUGIN_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tessera_cuda_memory_stats_t {
  uint32_t struct_size;
  uint32_t reserved_;
  uint64_t allocated_bytes;      /* live blocks */
  uint64_t reserved_bytes;       /* segments obtained with cudaMalloc */
  uint64_t cached_bytes;         /* reserved - allocated */
  uint64_t peak_allocated_bytes;
  uint64_t hits;                 /* allocations served from the cache */
  uint64_t misses;               /* allocations that needed cudaMalloc */
  uint64_t splits;
  uint64_t merges;
  uint64_t segments;
} tessera_cuda_memory_stats_t;

/* Symbol names, for dlsym. */
#define TESSERA_CUDA_MEMORY_STATS_NAME "tessera_cuda_memory_stats"

/* Fills `out` for `device`; returns 0, or -1 when the device does not exist (no driver, no GPU or
 * an index out of range). out->struct_size must be set by the caller. */
typedef int (*tessera_cuda_memory_stats_fn_t)(int32_t device, tessera_cuda_memory_stats_t* out);

/* The number of CUDA kernels and cuBLASLt matmuls the plugin's ops have queued in this process:
 * tests compare it before and after a call to tell the CUDA kernel from the CPU fallback. */
#define TESSERA_CUDA_KERNEL_LAUNCHES_NAME "tessera_cuda_kernel_launches"
typedef uint64_t (*tessera_cuda_kernel_launches_fn_t)(void);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_CUDA_CUDA_PLUGIN_H_ */
