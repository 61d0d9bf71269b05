// See Note [CUDA caching allocator] in caching_allocator.h.
#include "caching_allocator.h"

#include <algorithm>
#include <stdexcept>

namespace tessera::cuda {

struct CachingAllocator::Block {
  int device = 0;
  void* stream = nullptr;
  size_t size = 0;            // rounded size of this block
  size_t requested = 0;       // size asked for (live blocks)
  char* ptr = nullptr;
  bool allocated = false;
  bool small = false;         // which pool
  Block* prev = nullptr;      // neighbours within the same segment
  Block* next = nullptr;
};

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return reinterpret_cast<uintptr_t>(a->stream) < reinterpret_cast<uintptr_t>(b->stream);
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

CachingAllocator::CachingAllocator(RawMemorySource source, int num_devices, tessera::sdk::StreamEventOps events)
    : source_(source) {
  if (!source_.allocate || !source_.release) throw std::invalid_argument("CachingAllocator: raw memory source is incomplete");
  for (int i = 0; i < num_devices; ++i) {
    devices_.push_back(std::make_unique<DeviceState>());
    devices_.back()->frees = std::make_unique<tessera::sdk::StreamOrderedFrees<Block*>>(events);
  }
}

CachingAllocator::~CachingAllocator() {
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    DeviceState& d = *devices_[dev];
    std::lock_guard<std::mutex> lock(d.mutex);
    // Collect segment heads: every block reachable from the pools and the active map.
    std::vector<Block*> all;
    d.frees->abandon([&](Block* b) { all.push_back(b); });
    for (Block* b : d.small_pool) all.push_back(b);
    for (Block* b : d.large_pool) all.push_back(b);
    for (auto& [p, b] : d.active) all.push_back(b);
    for (auto& [p, b] : d.held) all.push_back(b);
    for (Block* b : all) {
      if (!b->prev) source_.release(source_.ctx, int(dev), b->ptr);
    }
    for (Block* b : all) delete b;
    d.small_pool.clear();
    d.large_pool.clear();
    d.active.clear();
    d.held.clear();
  }
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((nbytes + kMinBlockSize - 1) / kMinBlockSize);
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded < kLargeSegmentLimit) return kLargeSegment;
  return kLargeRounding * ((rounded + kLargeRounding - 1) / kLargeRounding);
}

bool CachingAllocator::should_split(const Block* block, size_t size) {
  const size_t remaining = block->size - size;
  if (block->small) return remaining >= kMinBlockSize;
  return block->size < kMaxSplitSize && remaining > kSmallRequest;
}

CachingAllocator::Block* CachingAllocator::find_free_block(Pool& pool, void* stream, size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  // Oversize blocks are never split: a smaller request does not take one, and a request of that
  // size takes one only when little of it is wasted (the pool is ordered by size, so no later
  // block of this stream fits better).
  if (!b->small && b->size >= kMaxSplitSize && (size < kMaxSplitSize || b->size - size >= kOversizeWaste)) return nullptr;
  pool.erase(it);
  return b;
}

void* CachingAllocator::allocate(int device, size_t nbytes, void* stream) {
  if (nbytes == 0) return nullptr;
  if (device < 0 || device >= int(devices_.size())) return nullptr;
  if (nbytes > kMaxRequest) return nullptr;  // the rounding below would overflow
  DeviceState& d = *devices_[size_t(device)];
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallRequest;
  std::lock_guard<std::mutex> lock(d.mutex);
  Pool& pool = small ? d.small_pool : d.large_pool;
  if (d.stats.pending_blocks) {
    d.stats.pending_blocks -= d.frees->collect([&](Block* b) { return_block(d, b); });
  }

  Block* block = find_free_block(pool, stream, size);
  if (block) {
    ++d.stats.hits;
  } else {
    size_t seg = segment_size(size);
    void* raw = source_.allocate(source_.ctx, device, seg);
    if (!raw) {
      ++d.stats.oom_retries;
      release_free_segments(device, d);
      raw = source_.allocate(source_.ctx, device, seg);
      if (!raw && seg > size) {  // the exact size may still fit
        seg = small ? size : kLargeRounding * ((size + kLargeRounding - 1) / kLargeRounding);
        raw = source_.allocate(source_.ctx, device, seg);
      }
      if (!raw) return nullptr;
    }
    ++d.stats.misses;
    ++d.stats.segments;
    d.stats.reserved_bytes += seg;
    block = new Block;
    block->device = device;
    block->stream = stream;
    block->size = seg;
    block->ptr = static_cast<char*>(raw);
    block->small = small;
  }

  if (should_split(block, size)) {
    Block* rest = new Block;
    rest->device = device;
    rest->stream = stream;
    rest->small = block->small;
    rest->ptr = block->ptr + size;
    rest->size = block->size - size;
    rest->prev = block;
    rest->next = block->next;
    if (rest->next) rest->next->prev = rest;
    block->next = rest;
    block->size = size;
    pool.insert(rest);
    ++d.stats.splits;
  }

  block->allocated = true;
  block->requested = nbytes;
  d.active.emplace(block->ptr, block);
  d.stats.allocated_bytes += block->size;
  d.stats.requested_bytes += nbytes;
  d.stats.peak_allocated_bytes = std::max(d.stats.peak_allocated_bytes, d.stats.allocated_bytes);
  ++d.stats.active_blocks;
  return block->ptr;
}

bool CachingAllocator::free(int device, void* ptr) {
  if (!ptr) return true;
  if (device < 0 || device >= int(devices_.size())) return false;
  DeviceState& d = *devices_[size_t(device)];
  std::lock_guard<std::mutex> lock(d.mutex);
  auto it = d.active.find(ptr);
  if (it == d.active.end()) return false;
  Block* block = it->second;
  d.active.erase(it);
  d.stats.allocated_bytes -= block->size;
  d.stats.requested_bytes -= block->requested;
  --d.stats.active_blocks;
  block->requested = 0;
  if (auto c = d.capturing.find(std::this_thread::get_id()); c != d.capturing.end()) {
    c->second.push_back(block->ptr);  // stays `allocated`: Note [Graph capture pools]
    d.held.emplace(block->ptr, block);
    ++d.stats.held_blocks;
    return true;
  }
  release_block(device, d, block);
  return true;
}

void CachingAllocator::release_block(int device, DeviceState& d, Block* block) {
  if (!d.frees->defer_free(device, block, block->stream)) {
    ++d.stats.pending_blocks;  // stays `allocated` so that no neighbour merges with it meanwhile
    return;
  }
  return_block(d, block);
}

void CachingAllocator::begin_capture(int device) {
  if (device < 0 || device >= int(devices_.size())) return;
  DeviceState& d = *devices_[size_t(device)];
  std::lock_guard<std::mutex> lock(d.mutex);
  d.capturing.emplace(std::this_thread::get_id(), std::vector<void*>{});
}

std::vector<void*> CachingAllocator::end_capture(int device) {
  if (device < 0 || device >= int(devices_.size())) return {};
  DeviceState& d = *devices_[size_t(device)];
  std::lock_guard<std::mutex> lock(d.mutex);
  auto it = d.capturing.find(std::this_thread::get_id());
  if (it == d.capturing.end()) return {};
  std::vector<void*> held = std::move(it->second);
  d.capturing.erase(it);
  return held;
}

void CachingAllocator::release_held(int device, const std::vector<void*>& blocks) {
  if (device < 0 || device >= int(devices_.size())) return;
  DeviceState& d = *devices_[size_t(device)];
  std::lock_guard<std::mutex> lock(d.mutex);
  for (void* p : blocks) {
    auto it = d.held.find(p);
    if (it == d.held.end()) continue;
    Block* block = it->second;
    d.held.erase(it);
    --d.stats.held_blocks;
    release_block(device, d, block);
  }
}

bool CachingAllocator::record_stream(int device, void* ptr, void* stream) {
  if (device < 0 || device >= int(devices_.size())) return false;
  DeviceState& d = *devices_[size_t(device)];
  std::lock_guard<std::mutex> lock(d.mutex);
  auto it = d.active.find(ptr);
  if (it == d.active.end()) return false;
  if (it->second->stream == stream) return true;  // its own stream: in order already
  return d.frees->record_use(it->second, stream);
}

void CachingAllocator::return_block(DeviceState& d, Block* block) {
  block->allocated = false;
  Pool& pool = block->small ? d.small_pool : d.large_pool;

  // Coalesce with free neighbours (they are in the pool; same segment, hence same stream).
  if (Block* prev = block->prev; prev && !prev->allocated) {
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (prev->next) prev->next->prev = prev;
    delete block;
    block = prev;
    ++d.stats.merges;
  }
  if (Block* next = block->next; next && !next->allocated) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (block->next) block->next->prev = block;
    delete next;
    ++d.stats.merges;
  }
  pool.insert(block);
}

size_t CachingAllocator::block_size(int device, void* ptr) const {
  if (device < 0 || device >= int(devices_.size())) return 0;
  const DeviceState& d = *devices_[size_t(device)];
  std::lock_guard<std::mutex> lock(d.mutex);
  auto it = d.active.find(ptr);
  return it == d.active.end() ? 0 : it->second->size;
}

void CachingAllocator::release_free_segments(int device, DeviceState& d) {
  if (d.stats.pending_blocks) {
    d.stats.pending_blocks -= d.frees->drain([&](Block* b) { return_block(d, b); });
  }
  for (Pool* pool : {&d.small_pool, &d.large_pool}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (!b->prev && !b->next) {  // the whole segment is one free block
        source_.release(source_.ctx, device, b->ptr);
        d.stats.reserved_bytes -= b->size;
        --d.stats.segments;
        delete b;
        it = pool->erase(it);
      } else {
        ++it;
      }
    }
  }
}

void CachingAllocator::empty_cache(int device) {
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (device >= 0 && int(i) != device) continue;
    DeviceState& d = *devices_[i];
    std::lock_guard<std::mutex> lock(d.mutex);
    release_free_segments(int(i), d);
  }
}

AllocatorStats CachingAllocator::stats(int device) const {
  if (device < 0 || device >= int(devices_.size())) return {};
  const DeviceState& d = *devices_[size_t(device)];
  std::lock_guard<std::mutex> lock(d.mutex);
  AllocatorStats s = d.stats;
  s.cached_bytes = s.reserved_bytes - s.allocated_bytes;
  return s;
}

}  // namespace tessera::cuda
