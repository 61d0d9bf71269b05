// The CUDA plugin's caching device allocator. Note [CUDA caching allocator]
// -----------------------------------------------------------------------
// Modelled on PyTorch's CUDACachingAllocator:
// - Two pools per device: requests of at most kSmallRequest (1 MiB) are served from 2 MiB segments
//   (the small pool); larger ones from the large pool (20 MiB segments below kLargeSegmentLimit,
//   else the request rounded up to a multiple of 2 MiB). Every size is rounded up to kMinBlockSize
//   (512 B), so blocks are always 512-byte aligned.
// - A free block belongs to the stream it was allocated on; a request only reuses free blocks of its
//   own stream. Work on one stream runs in order, so a block freed on the host while a kernel still
//   uses it is only handed to later work on that same stream: no synchronisation is needed.
//   A block also used on another stream is declared with record_stream (the host's
//   Tensor::record_stream): its free then records an event on each such stream and the block
//   returns to its pool only once they have completed (Note [Stream-ordered allocation] in
//   tessera/stream_ordered_frees.hpp), polled at the next allocation, waited for before memory is
//   released (empty_cache, the out-of-memory retry).
// - The best-fitting free block (smallest size >= request) is split when the remainder is worth
//   keeping (>= 512 B in the small pool, > 1 MiB in the large pool); on free, a block merges with
//   its free neighbours of the same segment (coalescing).
// - Oversize blocks (>= kMaxSplitSize, PyTorch's max_split_size) are never split: a cached 1 GiB
//   block carved up by small requests would otherwise pin the whole segment for the process's
//   life (fragmentation). Requests below kMaxSplitSize never take one; larger requests take one
//   only when it wastes less than kOversizeWaste.
// - When the raw allocation fails, every fully free cached segment is released and the raw
//   allocation is tried once more before reporting out-of-memory.
// - empty_cache() releases every segment that is entirely free.
// The raw memory source and the events are function pointers so that this logic is the same code
// with cudaMalloc and cudaEvent_t (the plugin) and with host memory (the unit tests, which run
// without a GPU).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include <tessera/stream_ordered_frees.hpp>

namespace tessera::cuda {

struct RawMemorySource {
  void* ctx = nullptr;
  // Returns nullptr when the device is out of memory.
  void* (*allocate)(void* ctx, int device, size_t nbytes) = nullptr;
  void (*release)(void* ctx, int device, void* ptr) = nullptr;
};

struct AllocatorStats {
  uint64_t allocated_bytes = 0;       // live blocks (rounded sizes)
  uint64_t requested_bytes = 0;       // live blocks (sizes asked for)
  uint64_t reserved_bytes = 0;        // all segments obtained from the raw source
  uint64_t cached_bytes = 0;          // reserved - allocated
  uint64_t peak_allocated_bytes = 0;
  uint64_t hits = 0;                  // allocations served from a cached block
  uint64_t misses = 0;                // allocations that needed a new segment
  uint64_t splits = 0;
  uint64_t merges = 0;
  uint64_t segments = 0;              // live segments
  uint64_t oom_retries = 0;           // raw allocations retried after releasing the cache
  uint64_t active_blocks = 0;
  uint64_t pending_blocks = 0;        // freed, waiting for events on other streams (record_stream)
  uint64_t held_blocks = 0;           // freed while a graph captured their stream, kept for the graph
};

class CachingAllocator {
 public:
  static constexpr size_t kMinBlockSize = 512;
  static constexpr size_t kSmallRequest = size_t(1) << 20;       // <= 1 MiB: small pool
  static constexpr size_t kSmallSegment = size_t(2) << 20;       // small pool grows by 2 MiB
  static constexpr size_t kLargeSegment = size_t(20) << 20;      // large requests < 10 MiB
  static constexpr size_t kLargeSegmentLimit = size_t(10) << 20;
  static constexpr size_t kLargeRounding = size_t(2) << 20;
  static constexpr size_t kMaxSplitSize = size_t(64) << 20;
  static constexpr size_t kOversizeWaste = size_t(20) << 20;
  static constexpr size_t kMaxRequest = ~size_t(0) - kLargeRounding;

  // `events` (optional): without them record_stream is refused.
  explicit CachingAllocator(RawMemorySource source, int num_devices, tessera::sdk::StreamEventOps events = {});
  ~CachingAllocator();  // releases every cached segment; live blocks are released too (shutdown)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nullptr for nbytes == 0 and when the device is out of memory (after releasing the cache).
  // Thread-safe.
  void* allocate(int device, size_t nbytes, void* stream);
  // Returns a block of `device` to its pool. nullptr is ignored. Returns false for a pointer this
  // allocator did not hand out on that device (the caller reports it). Thread-safe.
  bool free(int device, void* ptr);
  // The live block at `ptr` is also used by work on `stream`: see the note above. Returns false for
  // a pointer this allocator did not hand out on that device, or when it has no events. Thread-safe.
  bool record_stream(int device, void* ptr, void* stream);
  // The rounded size of a live block (0 when unknown).
  size_t block_size(int device, void* ptr) const;
  // Releases every fully free segment of `device` (or of all devices when device < 0).
  void empty_cache(int device = -1);
  // Note [Graph capture pools]: a CUDA graph replays the writes its capture made, into the same
  // addresses, long after the host freed the tensors of that capture. So between begin_capture and
  // end_capture on a thread (CUDA's thread-local capture mode records that thread's work), every
  // block of `device` that thread frees is held instead of returned to its pool: nothing else is
  // given it, and the capture itself does not reuse it. (Tensor blocks are tagged with the default
  // stream whatever stream writes them, so the thread, not the stream, says what the capture freed.)
  // end_capture hands the held blocks to the caller (the graph), which gives them back with
  // release_held once its replays have completed. Blocks still live at the end of the capture (the
  // graph's outputs and static inputs) stay with the tensors that own them. Thread-safe.
  void begin_capture(int device);
  std::vector<void*> end_capture(int device);
  void release_held(int device, const std::vector<void*>& blocks);
  AllocatorStats stats(int device) const;
  int num_devices() const { return int(devices_.size()); }

  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t rounded);

 private:
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;
  struct DeviceState {
    mutable std::mutex mutex;
    Pool small_pool, large_pool;
    std::unordered_map<void*, Block*> active;
    std::unordered_map<std::thread::id, std::vector<void*>> capturing;  // thread -> blocks its capture holds
    std::unordered_map<void*, Block*> held;                             // every held block, by address
    AllocatorStats stats;
    std::unique_ptr<tessera::sdk::StreamOrderedFrees<Block*>> frees;
  };

  Block* find_free_block(Pool& pool, void* stream, size_t size);
  void release_free_segments(int device, DeviceState& d);
  // Puts a freed block back in its pool, merging it with free neighbours.
  void return_block(DeviceState& d, Block* block);
  // A block the host freed: to its pool, or pending its other streams' events (record_stream).
  void release_block(int device, DeviceState& d, Block* block);
  static bool should_split(const Block* block, size_t size);

  RawMemorySource source_;
  std::vector<std::unique_ptr<DeviceState>> devices_;
};

}  // namespace tessera::cuda
