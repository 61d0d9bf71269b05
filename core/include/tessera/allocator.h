// Allocators: one per device type. Note [Allocator registry]
// The CPU allocator is the core's own (a caching allocator: large blocks are reused so that a big
// output does not page-fault afresh on every call). Other device types get theirs from the backend
// plugin that provides them; when none is registered yet, get_allocator() calls the backend-loader
// hook (installed by the dispatcher's plugin loader) so that the plugin loads lazily on first use.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "tessera/device.h"
#include "tessera/env.h"
#include "tessera/export.h"

namespace tessera {

// Owning pointer to device memory. `handle` is opaque for devices other than the CPU.
// Note [Plugin generations]: `live` (optional, may be null = always live) is a flag owned by the
// allocator that made the handle; a plugin allocator clears it for good when its plugin shuts down.
// Handles are only meaningful to the plugin instance that made them (a reloaded plugin may hand out
// the same values for new memory), so a tensor whose flag is cleared is unusable, never aliased.
class DataPtr {
 public:
  using Deleter = void (*)(void* ctx, void* handle);
  DataPtr() = default;
  DataPtr(void* handle, void* ctx, Deleter deleter, Device device, const std::atomic<bool>* live = nullptr)
      : handle_(handle), ctx_(ctx), deleter_(deleter), device_(device), live_(live) {}
  DataPtr(DataPtr&& o) noexcept { swap(o); }
  DataPtr& operator=(DataPtr&& o) noexcept {
    DataPtr(std::move(o)).swap(*this);
    return *this;
  }
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  ~DataPtr() {
    if (deleter_) deleter_(ctx_, handle_);
  }
  void* get() const { return handle_; }
  Device device() const { return device_; }
  // False once the plugin generation that made the handle has ended (Note [Plugin generations]).
  bool live() const { return !live_ || live_->load(std::memory_order_acquire); }
  void swap(DataPtr& o) noexcept {
    std::swap(handle_, o.handle_);
    std::swap(ctx_, o.ctx_);
    std::swap(deleter_, o.deleter_);
    std::swap(device_, o.device_);
    std::swap(live_, o.live_);
  }

 private:
  void* handle_ = nullptr;
  void* ctx_ = nullptr;
  Deleter deleter_ = nullptr;
  Device device_{DeviceType::CPU, -1};
  const std::atomic<bool>* live_ = nullptr;
};

class TESSERA_API Allocator {
 public:
  virtual ~Allocator() = default;
  // Throws Error(OutOfMemory) naming the device and the size on failure. nbytes may be 0.
  virtual DataPtr allocate(size_t nbytes, int device_index) = 0;
};

// Thread-safe. The allocator must outlive every DataPtr it made (plugins unregister at shutdown).
TESSERA_API void set_allocator(DeviceType t, Allocator* allocator);
// The registered allocator; calls the backend-loader hook once if none is registered. Throws when
// no plugin provides the device type: the hook's own exception (its reason) passes through
// unchanged; when the hook returns without registering one, Error(Unavailable). CPU and meta always
// have the core's allocators.
TESSERA_API Allocator* get_allocator(DeviceType t);
TESSERA_API Allocator* cpu_allocator();

using BackendLoaderHook = void (*)(DeviceType t);
TESSERA_API void set_backend_loader_hook(BackendLoaderHook hook);


// Statistics of the caching CPU allocator (Note [Caching CPU allocator] in allocator.cpp): blocks of
// 1 MiB and more are rounded to a size class (at most 1/8 slack) and kept on free for reuse, up to
// 2 GiB in all or TESSERA_CPU_CACHE_LIMIT bytes (parse_byte_count; 0 disables the cache; a malformed
// value makes CPU allocations throw, naming it). Smaller
// blocks come from the C heap. Every block is 64-byte aligned, never null (even for 0 bytes).
struct CpuAllocatorStats {
  uint64_t allocated_bytes = 0;  // live, in rounded block sizes
  uint64_t cached_bytes = 0;     // freed and kept for reuse
  uint64_t hits = 0;             // cacheable (>= 1 MiB) allocations served from the cache
  uint64_t misses = 0;           // cacheable allocations that mapped fresh memory
  uint64_t peak_allocated_bytes = 0;  // highest allocated_bytes since the start
  uint64_t num_allocations = 0;       // live allocations
};
TESSERA_API CpuAllocatorStats cpu_allocator_stats();
TESSERA_API void cpu_allocator_empty_cache();

}  // namespace tessera
