// The OpenCL backend's device layer: platforms and devices, the caching allocator, streams (in-order
// command queues), events, the program cache, and the tessera_device_interface_t over them.
//
// Threading: every function may be called from any thread. Each device serialises kernel launches
// (a cl_kernel's arguments are shared state) with its own mutex; the allocator and the program cache
// have their own locks.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cl_api.h"
#include "tessera/plugin_abi.h"
#include "tessera/sdk.hpp"
#include "tessera/stream_ordered_frees.hpp"

namespace tessera::opencl {

// Throws sdk::Error naming `what` and the OpenCL error when `code` is not CL_SUCCESS.
void check_cl(cl_int code, const std::string& what);

// Note [Stream and event handles]
// A stream handle given to the runtime is a Stream*; NULL means the device's default stream.
// An event handle is an Event*; it holds the cl_event of its last record (NULL before the first).
struct Stream {
  cl_command_queue queue = nullptr;
  int32_t device = 0;
};
struct Event {
  cl_event event = nullptr;
  int32_t device = 0;
};

// Note [Caching allocator]
// Device memory is a cl_mem per allocation; the handle given to the runtime is the cl_mem itself.
// Freed buffers go to a free list keyed by size class (powers of two up to 4 MiB, then multiples of
// 2 MiB) and are handed out again for a request of the same class, so that a loop allocating
// temporaries does not call clCreateBuffer every iteration. empty_cache() releases the free lists;
// an allocation that fails empties the cache and tries once more.
// Reuse is safe for work on the default queue, which the allocator's buffers belong to. A buffer
// also used on another stream is declared with record_stream (memory_record_stream): its free then
// enqueues a marker on each such queue and the buffer returns to its free list only once they have
// completed (Note [Stream-ordered allocation] in tessera/stream_ordered_frees.hpp), polled at the
// next allocation and waited for by empty_cache().
class CachingAllocator {
 public:
  CachingAllocator();
  struct Stats {
    uint64_t allocated = 0;  // bytes (by size class) handed out and not freed
    uint64_t cached = 0;     // bytes held in the free lists
    uint64_t hits = 0;       // requests served from the free lists
    uint64_t misses = 0;     // requests that called clCreateBuffer
    uint64_t peak = 0;       // highest `allocated` so far
    uint64_t live = 0;       // allocations handed out and not freed
  };
  static uint64_t size_class(uint64_t nbytes);

  void set_context(cl_context context, cl_command_queue default_queue) {
    context_ = context;
    default_queue_ = default_queue;
  }
  cl_mem allocate(uint64_t nbytes);  // throws sdk::Error (TESSERA_STATUS_OUT_OF_MEMORY)
  void free(cl_mem buffer);
  // `buffer` (live) is also used on `stream` (a Stream*; NULL: the default queue). False when this
  // allocator did not hand it out.
  bool record_stream(cl_mem buffer, void* stream);
  void empty_cache();
  Stats stats() const;
  // Releases everything (shutdown).
  void release_all();

 private:
  void collect_locked();  // pending buffers whose markers completed -> free lists

  cl_context context_ = nullptr;
  cl_command_queue default_queue_ = nullptr;
  mutable std::mutex mutex_;
  std::unordered_map<cl_mem, uint64_t> live_;
  std::unordered_map<cl_mem, uint64_t> pending_;  // freed, waiting for other streams (size class)
  sdk::StreamOrderedFrees<cl_mem> frees_;
  std::map<uint64_t, std::vector<cl_mem>> free_lists_;
  Stats stats_;
};

// Note [Program cache]
// Programs are compiled at first use, per device, and kept for the life of the process. Their
// binaries (clGetProgramInfo CL_PROGRAM_BINARIES) are stored in <dir>/<program>-<hash>.clbin where
// <dir> is $TESSERA_CACHE_DIR/opencl, else $XDG_CACHE_HOME/tessera/opencl, else
// ~/.cache/tessera/opencl, and <hash> covers the device name, driver version, OpenCL version,
// build options and the full source, so a new driver or a changed kernel never reuses a stale
// binary. A file is "TSCLBIN1" + payload size + FNV-1a checksum + payload, written to a temporary
// name and renamed into place; one that fails any check (or that the driver refuses) is deleted
// and the program is compiled from source again, never a crash.
struct ProgramCacheStats {
  uint64_t memory_hits = 0;  // program already built in this process
  uint64_t disk_hits = 0;    // program created from a cached binary
  uint64_t disk_misses = 0;  // program compiled from source (and then stored)
  uint64_t corrupt = 0;      // cache files rejected (bad header, checksum, or driver refused them)
  uint64_t store_failures = 0;
};

struct DeviceState {
  int32_t index = 0;
  cl_platform_id platform = nullptr;
  cl_device_id id = nullptr;
  cl_context context = nullptr;
  Stream default_stream;
  std::string name, vendor, driver_version, device_version, platform_name;
  uint64_t global_memory = 0;
  uint64_t max_alloc = 0;
  size_t max_work_group_size = 1;
  uint32_t compute_units = 0;
  bool fp64 = false;
  bool fp16 = false;
  CachingAllocator allocator;

  // Launches are serialised per device (see the file comment).
  std::mutex launch_mutex;
  // Program key -> built program; (program key + '/' + kernel name) -> kernel.
  std::mutex program_mutex;
  std::unordered_map<std::string, cl_program> programs;
  std::unordered_map<std::string, cl_kernel> kernels;

  cl_command_queue queue(void* stream) const {
    return stream ? static_cast<Stream*>(stream)->queue : default_stream.queue;
  }
};

// The program source of one family of kernels for one dtype combination. `key` names it in logs
// and cache file names ("binary_f32_f32_f32"); the disk cache keys on the full source text.
struct ProgramSource {
  std::string key;
  std::string source;
};
using SourceFn = std::function<std::string()>;

class Backend {
 public:
  static Backend& instance();

  // Finds every device of every platform. Never throws; on failure count() is 0 and reason() says why.
  void discover();
  int32_t count() const { return int32_t(devices_.size()); }
  const std::string& reason() const { return reason_; }
  // Throws sdk::Error naming the index and the valid range.
  DeviceState& device(int32_t index);
  bool all_devices_have_fp64() const;

  // The kernel `kernel_name` of the program `program_key`, built for `dev` on first use from
  // `source()` (or from the disk cache when a valid binary is there; see Note [Program cache]).
  // Throws sdk::Error with the build log on a compile error.
  cl_kernel kernel(DeviceState& dev, const std::string& program_key, const char* kernel_name, const SourceFn& source);
  ProgramCacheStats program_cache_stats() const;
  std::string cache_dir() const;

  // JSON properties of a device (tessera_device_interface_t::device_properties).
  std::string properties_json(int32_t index);
  void shutdown();

  int32_t current_device() const;
  void set_current_device(int32_t index);

 private:
  cl_program build_program(DeviceState& dev, const ProgramSource& program);
  cl_program load_cached_binary(DeviceState& dev, const std::string& path);
  void store_binary(DeviceState& dev, cl_program program, const std::string& path);

  std::vector<std::unique_ptr<DeviceState>> devices_;
  std::string reason_;
  mutable std::mutex stats_mutex_;
  ProgramCacheStats cache_stats_;
};

// The device interface table over Backend::instance().
const tessera_device_interface_t* device_interface();

// Logs under TESSERA_LOG=opencl.
void log_info(const std::string& message);
void log_warning(const std::string& message);

// 64-bit FNV-1a, used for cache keys and file checksums.
uint64_t fnv1a64(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace tessera::opencl
