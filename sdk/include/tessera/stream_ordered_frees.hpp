// Stream-ordered reuse of freed memory for a plugin's caching allocator (header-only, C++17; part
// of the C++ SDK, nothing of it crosses the ABI).
//
// Note [Stream-ordered allocation]
// A caching allocator hands a freed block to later work on the stream it was allocated on: work on
// one stream runs in order, so the block is free for that stream as soon as the host frees it. A
// block also used on another stream (the host's Tensor::record_stream -> the device interface's
// memory_record_stream) may still be read or written there when the host frees it. PyTorch's
// CUDACachingAllocator answers with record_stream, and so does this helper: the allocator tells it
// each extra stream a block is used on (record_use); on free (defer_free) it records one native
// event on each of those streams and keeps the block out of the pools until every event has
// completed (collect, polled without blocking on the next allocation; drain, blocking, before
// releasing memory to the device or retrying after out-of-memory). The host therefore frees without
// synchronising, and no block is handed out while a kernel on another stream still uses it.
//
// The allocator supplies its native events (cudaEvent_t, cl_event, the emulator's markers) as four
// functions. StreamOrderedFrees is not thread-safe: call it under the allocator's own lock.
#pragma once
#include <cstddef>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::sdk {

struct StreamEventOps {
  void* ctx = nullptr;
  // Records a new event at the current end of `stream` (nullptr: the default stream) of `device`.
  // Returns nullptr when it cannot (the device is lost): no work can then still use the block, and
  // it is reused at once.
  void* (*record)(void* ctx, int device, void* stream) = nullptr;
  // Without blocking: true once the work queued before the event has completed (also when the
  // query fails: the device is lost).
  bool (*query)(void* ctx, int device, void* event) = nullptr;
  // Blocks until the event has completed.
  void (*synchronize)(void* ctx, int device, void* event) = nullptr;
  void (*destroy)(void* ctx, int device, void* event) = nullptr;

  bool complete() const { return record && query && synchronize && destroy; }
};

// `Block` identifies a live block (the allocator's block pointer, or the device address).
template <typename Block>
class StreamOrderedFrees {
 public:
  explicit StreamOrderedFrees(StreamEventOps ops) : ops_(ops) {}
  // Destroys the events of pending blocks without waiting; the allocator releases those blocks
  // itself (abandon() hands them over first).
  ~StreamOrderedFrees() {
    abandon([](Block) {});
  }
  StreamOrderedFrees(const StreamOrderedFrees&) = delete;
  StreamOrderedFrees& operator=(const StreamOrderedFrees&) = delete;

  // False when the allocator gave no (or incomplete) event functions: record_use is then refused.
  bool enabled() const { return ops_.complete(); }

  // The live `block` is used by work on `stream` too. Recording a stream twice is one use.
  // Returns false when disabled.
  bool record_use(Block block, void* stream) {
    if (!enabled()) return false;
    std::vector<void*>& streams = uses_[block];
    for (void* s : streams)
      if (s == stream) return true;
    streams.push_back(stream);
    return true;
  }

  // The host frees the live `block`, allocated on `alloc_stream` of `device`. True: nothing else
  // may use it, reuse it at once. False: it is pending until collect()/drain() hands it back.
  bool defer_free(int device, Block block, void* alloc_stream) {
    auto it = uses_.find(block);
    if (it == uses_.end()) return true;
    std::vector<void*> streams = std::move(it->second);
    uses_.erase(it);
    Pending p{block, device, {}};
    for (void* s : streams) {
      if (s == alloc_stream) continue;  // in order with the allocating stream's own later work
      if (void* ev = ops_.record(ops_.ctx, device, s)) p.events.push_back(ev);
    }
    if (p.events.empty()) return true;
    pending_.push_back(std::move(p));
    return false;
  }

  // Hands every pending block whose events have all completed to `reuse(Block)`, without blocking.
  // Returns how many.
  template <typename F>
  size_t collect(F&& reuse) {
    return sweep(reuse, /*wait=*/false);
  }
  // Waits for every pending block's events and hands each block to `reuse(Block)`.
  template <typename F>
  size_t drain(F&& reuse) {
    return sweep(reuse, /*wait=*/true);
  }
  // Shutdown: destroys every pending event without waiting and hands the blocks to `release(Block)`.
  template <typename F>
  void abandon(F&& release) {
    for (Pending& p : pending_) {
      for (void* ev : p.events) ops_.destroy(ops_.ctx, p.device, ev);
      release(p.block);
    }
    pending_.clear();
    uses_.clear();
  }

  size_t pending() const { return pending_.size(); }
  // Live blocks with recorded extra streams.
  size_t recorded() const { return uses_.size(); }

 private:
  struct Pending {
    Block block;
    int device;
    std::vector<void*> events;
  };

  template <typename F>
  size_t sweep(F& reuse, bool wait) {
    size_t handed = 0;
    for (size_t i = 0; i < pending_.size();) {
      Pending& p = pending_[i];
      while (!p.events.empty()) {
        void* ev = p.events.back();
        if (!ops_.query(ops_.ctx, p.device, ev)) {
          if (!wait) break;
          ops_.synchronize(ops_.ctx, p.device, ev);
        }
        ops_.destroy(ops_.ctx, p.device, ev);
        p.events.pop_back();
      }
      if (!p.events.empty()) {
        ++i;
        continue;
      }
      Block b = p.block;
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
      reuse(b);
      ++handed;
    }
    return handed;
  }

  StreamEventOps ops_;
  std::unordered_map<Block, std::vector<void*>> uses_;
  std::vector<Pending> pending_;
};

}  // namespace tessera::sdk
