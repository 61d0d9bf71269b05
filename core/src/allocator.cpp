// Allocator registry, the meta allocator and the caching CPU allocator. See Note [Allocator registry]
// in allocator.h and Note [Caching CPU allocator] below.
#include "tessera/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "hook_guard.h"
#include "tessera/error.h"
#include "thread_free_lists.h"

namespace tessera {

// Note [Caching CPU allocator]
// Writing a freshly mapped 64 MB buffer costs about 180 ms of first-touch page faults here; writing a
// reused one about 11 ms (docs/MACHINE-NOTES). glibc hands blocks above 32 MB back to the kernel on
// free, so every large temporary would pay the faults again. Blocks of kCacheMinBytes and more are
// therefore mapped by us, rounded up to a size class (8 classes per power of two, at most 12.5%
// slack), kept on free in a per-class free list and handed out again for a request of the same
// class. The cache is bounded (2 GiB, or TESSERA_CPU_CACHE_LIMIT in bytes, with optional K/M/G
// suffix); a block that does not fit is unmapped. Fresh blocks of 2 MiB and more are aligned to
// 2 MiB and marked MADV_HUGEPAGE so that transparent huge pages cut their faults by 512x where the
// kernel allows it. Small blocks come from the C heap, 64-byte aligned.
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kCacheMinBytes = size_t(1) << 20;
constexpr size_t kHugePage = size_t(2) << 20;
constexpr uint64_t kDefaultCacheLimit = uint64_t(2) << 30;

size_t size_class(size_t n) {
  // n >= 1 MiB: round up to a multiple of (highest power of two <= n) / 8.
  const int top = 63 - __builtin_clzll(uint64_t(n));
  const size_t step = size_t(1) << (top - 3);
  return (n + step - 1) & ~(step - 1);
}

uint64_t parse_cache_limit() {
  const char* env = env_value("TESSERA_CPU_CACHE_LIMIT");
  if (!env) return kDefaultCacheLimit;
  return parse_byte_count("TESSERA_CPU_CACHE_LIMIT", env);
}

[[noreturn]] void throw_cpu_oom(size_t nbytes, uint64_t allocated, uint64_t cached) {
  detail::throw_error(ErrorCode::OutOfMemory,
                      detail::str_cat("out of memory on device 'cpu': failed to allocate ", nbytes, " bytes (",
                                      double(nbytes) / double(1 << 20), " MiB) with ", allocated,
                                      " bytes in use and ", cached,
                                      " bytes cached; free tensors or lower TESSERA_CPU_CACHE_LIMIT"));
}

class CachingCpuAllocator final : public Allocator {
 public:
  CachingCpuAllocator() : cache_limit_(parse_cache_limit()) {}

  DataPtr allocate(size_t nbytes, int device_index) override {
    const Device device(DeviceType::CPU, device_index);
    if (nbytes < kCacheMinBytes) {
      // Never null, even for 0 bytes, so that a valid tensor always has a valid data pointer.
      const size_t rounded = nbytes == 0 ? kAlignment : (nbytes + kAlignment - 1) & ~(kAlignment - 1);
      ThreadBlocks* b = thread_blocks();
      void* p = b ? b->lists.take(rounded) : nullptr;
      if (!p && (posix_memalign(&p, kAlignment, rounded) != 0 || !p))
        throw_cpu_oom(nbytes, allocated_.load(), cached_.load());
      if (b) b->note(int64_t(rounded), 1);
      else note_allocated(rounded);
      return DataPtr(p, reinterpret_cast<void*>(uintptr_t(rounded)), &free_small, device);
    }
    const size_t cls = size_class(nbytes);
    {
      std::lock_guard lock(mutex_);
      auto it = free_blocks_.find(cls);
      if (it != free_blocks_.end()) {
        void* p = it->second;
        free_blocks_.erase(it);
        cached_.fetch_sub(cls, std::memory_order_relaxed);
        note_allocated(cls);
        hits_.fetch_add(1, std::memory_order_relaxed);
        return DataPtr(p, reinterpret_cast<void*>(uintptr_t(cls)), &free_large, device);
      }
    }
    misses_.fetch_add(1, std::memory_order_relaxed);
    void* p = map_block(cls);
    if (!p) {
      empty_cache();
      p = map_block(cls);
      if (!p) throw_cpu_oom(nbytes, allocated_.load(), cached_.load());
    }
    note_allocated(cls);
    return DataPtr(p, reinterpret_cast<void*>(uintptr_t(cls)), &free_large, device);
  }

  void empty_cache() {
    std::multimap<size_t, void*> blocks;
    {
      std::lock_guard lock(mutex_);
      blocks.swap(free_blocks_);
      for (auto& [cls, p] : blocks) cached_.fetch_sub(cls, std::memory_order_relaxed);
    }
    for (auto& [cls, p] : blocks) ::munmap(p, cls);
  }

  CpuAllocatorStats stats() {
    if (ThreadBlocks* b = thread_blocks()) b->flush();  // this thread's figures are exact
    CpuAllocatorStats s;
    s.allocated_bytes = allocated_.load(std::memory_order_relaxed);
    s.cached_bytes = cached_.load(std::memory_order_relaxed);
    s.hits = hits_.load(std::memory_order_relaxed);
    s.misses = misses_.load(std::memory_order_relaxed);
    s.peak_allocated_bytes = peak_.load(std::memory_order_relaxed);
    s.num_allocations = live_.load(std::memory_order_relaxed);
    return s;
  }

  static CachingCpuAllocator& instance() {
    static CachingCpuAllocator* a = new CachingCpuAllocator();  // leaked: tensors may die after main
    return *a;
  }

 private:
  static void* map_block(size_t cls) {
    if (cls < kHugePage) {
      void* p = ::mmap(nullptr, cls, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      return p == MAP_FAILED ? nullptr : p;
    }
    // Over-map by one huge page and trim, so that the block starts on a 2 MiB boundary.
    const size_t span = cls + kHugePage;
    void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const uintptr_t base = uintptr_t(raw);
    const uintptr_t aligned = (base + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
    if (aligned > base) ::munmap(raw, aligned - base);
    const uintptr_t tail = aligned + cls, end = base + span;
    if (end > tail) ::munmap(reinterpret_cast<void*>(tail), end - tail);
#ifdef MADV_HUGEPAGE
    ::madvise(reinterpret_cast<void*>(aligned), cls, MADV_HUGEPAGE);
#endif
    return reinterpret_cast<void*>(aligned);
  }

  void note_allocated(size_t n) {
    const uint64_t now = allocated_.fetch_add(n, std::memory_order_relaxed) + n;
    live_.fetch_add(1, std::memory_order_relaxed);
    raise_peak(now);
  }
  void raise_peak(uint64_t now) {
    uint64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  void note_freed(size_t n) {
    allocated_.fetch_sub(n, std::memory_order_relaxed);
    live_.fetch_sub(1, std::memory_order_relaxed);
  }

  static void free_small(void* ctx, void* p) {
    const size_t rounded = size_t(uintptr_t(ctx));
    ThreadBlocks* b = thread_blocks();
    if (!b) {
      instance().note_freed(rounded);
      std::free(p);
      return;
    }
    b->note(-int64_t(rounded), -1);
    if (!b->lists.keep(p, rounded)) std::free(p);
  }

  // Note [Small CPU blocks]
  // Every operator output is allocated and most die a few calls later. glibc's posix_memalign
  // splits a larger chunk for each 64-byte-aligned block and its free merges the pieces back, and
  // that took about a quarter of a call on 1-element tensors (docs/performance.md). So blocks of up
  // to kThreadBlockMax bytes are kept in per-thread free lists (Note [Per-thread free lists] in
  // thread_free_lists.h: 64-byte size classes, at most kThreadBlocksPerClass blocks each) and
  // handed out again without the C heap; a thread's lists go back to free() when it exits.
  //
  // The statistics of small blocks are counted per thread too and added to the shared counters
  // every kStatsFlushOps blocks, when kStatsFlushBytes have accumulated, when the thread reads the
  // statistics and when it exits: the figures a thread reads include all of its own blocks, and
  // other threads' blocks up to those bounds (peak_allocated_bytes is taken at the flushes).
  static constexpr size_t kThreadBlockMax = 512;
  static constexpr uint32_t kThreadBlocksPerClass = 32;
  static constexpr int kStatsFlushOps = 64;
  static constexpr int64_t kStatsFlushBytes = int64_t(256) << 10;
  static void free_block(void* p) noexcept { std::free(p); }
  struct ThreadBlocks {
    detail::SizeClassFreeLists<kThreadBlockMax, kThreadBlocksPerClass, free_block> lists;
    int64_t pending_bytes, pending_count;
    int ops;
    void release() {
      flush();
      lists.release();
    }
    void note(int64_t bytes, int64_t n) {
      pending_bytes += bytes;
      pending_count += n;
      if (++ops >= kStatsFlushOps || pending_bytes >= kStatsFlushBytes || pending_bytes <= -kStatsFlushBytes)
        flush();
    }
    void flush() {
      CachingCpuAllocator& a = instance();
      if (pending_bytes != 0 || pending_count != 0) {
        const uint64_t now = a.allocated_.fetch_add(uint64_t(pending_bytes), std::memory_order_relaxed) +
                             uint64_t(pending_bytes);
        a.live_.fetch_add(uint64_t(pending_count), std::memory_order_relaxed);
        if (pending_bytes > 0) a.raise_peak(now);
      }
      pending_bytes = pending_count = 0;
      ops = 0;
    }
  };
  static ThreadBlocks* thread_blocks() { return detail::PerThread<ThreadBlocks>::get(); }

  static void free_large(void* ctx, void* p) {
    CachingCpuAllocator& a = instance();
    const size_t cls = size_t(uintptr_t(ctx));
    a.note_freed(cls);
    {
      std::lock_guard lock(a.mutex_);
      if (a.cached_.load(std::memory_order_relaxed) + cls <= a.cache_limit_) {
        a.free_blocks_.emplace(cls, p);
        a.cached_.fetch_add(cls, std::memory_order_relaxed);
        return;
      }
    }
    ::munmap(p, cls);
  }

  const uint64_t cache_limit_;
  std::mutex mutex_;
  std::multimap<size_t, void*> free_blocks_;  // size class -> block
  std::atomic<uint64_t> allocated_{0}, cached_{0}, hits_{0}, misses_{0};
  std::atomic<uint64_t> peak_{0}, live_{0};  // highest allocated_; live allocations
};

// Meta tensors have sizes and a dtype but no data: the handle is null and nothing is freed.
class MetaAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t, int device_index) override {
    return DataPtr(nullptr, nullptr, nullptr, Device(DeviceType::Meta, device_index));
  }
};

// Note [Allocator registry]: a fixed array indexed by DeviceType, read lock-free on every tensor
// creation; writes are rare (plugin load and shutdown).
std::array<std::atomic<Allocator*>, kNumDeviceTypes>& registry() {
  static std::array<std::atomic<Allocator*>, kNumDeviceTypes>* r = [] {
    auto* a = new std::array<std::atomic<Allocator*>, kNumDeviceTypes>();
    for (auto& slot : *a) slot.store(nullptr);
    (*a)[size_t(DeviceType::CPU)].store(&CachingCpuAllocator::instance());
    static MetaAllocator meta;
    (*a)[size_t(DeviceType::Meta)].store(&meta);
    return a;
  }();
  return *r;
}

std::atomic<BackendLoaderHook> g_backend_loader_hook{nullptr};

void check_type(DeviceType t) {
  TESSERA_CHECK(int(t) >= 0 && int(t) < kNumDeviceTypes, "device type ", int(t), " is out of range; expected 0..",
                kNumDeviceTypes - 1);
}

}  // namespace

void set_allocator(DeviceType t, Allocator* allocator) {
  check_type(t);
  registry()[size_t(t)].store(allocator, std::memory_order_release);
}

Allocator* get_allocator(DeviceType t) {
  check_type(t);
  auto& slot = registry()[size_t(t)];
  Allocator* a = slot.load(std::memory_order_acquire);
  if (a) return a;
  if (t == DeviceType::CPU) return cpu_allocator();  // the core's own; never absent
  BackendLoaderHook hook = g_backend_loader_hook.load(std::memory_order_acquire);
  if (hook && !detail::in_plugin_hook()) {
    // The hook reports its own failure (e.g. the plugin failed to load) by throwing; that reason
    // reaches the caller unchanged.
    {
      detail::PluginHookScope scope;
      hook(t);
    }
    a = slot.load(std::memory_order_acquire);
    if (a) return a;
  }
  detail::throw_error(
      ErrorCode::Unavailable,
      detail::str_cat("no backend plugin provides device type '", device_type_name(t),
                      "'; install or enable a plugin for it (TESSERA_PLUGIN_PATH, TESSERA_PLUGINS_SELECT, "
                      "TESSERA_PLUGINS_DISABLE) and run `tessera plugins` to see why a plugin was rejected"));
}

Allocator* cpu_allocator() { return &CachingCpuAllocator::instance(); }

void set_backend_loader_hook(BackendLoaderHook hook) { g_backend_loader_hook.store(hook, std::memory_order_release); }

CpuAllocatorStats cpu_allocator_stats() { return CachingCpuAllocator::instance().stats(); }

void cpu_allocator_empty_cache() { CachingCpuAllocator::instance().empty_cache(); }

}  // namespace tessera
