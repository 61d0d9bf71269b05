// The CUDA caching allocator's logic (size classes, per-stream pools, splitting, coalescing,
// empty_cache, out-of-memory retry, statistics) on host memory: the same code the plugin runs over
// cudaMalloc, with a raw source that counts and can be limited.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "caching_allocator.h"

namespace {

using tessera::cuda::AllocatorStats;
using tessera::cuda::CachingAllocator;
using tessera::cuda::RawMemorySource;

constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;

// Host memory with a capacity, counting raw calls.
struct HostMemory {
  size_t capacity = SIZE_MAX;
  size_t in_use = 0;
  int allocations = 0, releases = 0;
  std::mutex mutex;
  std::map<void*, size_t> live;

  RawMemorySource source() {
    RawMemorySource s;
    s.ctx = this;
    s.allocate = [](void* ctx, int, size_t n) -> void* {
      auto* self = static_cast<HostMemory*>(ctx);
      std::lock_guard<std::mutex> lock(self->mutex);
      if (self->in_use + n > self->capacity) return nullptr;
      void* p = std::aligned_alloc(512, n);
      if (!p) return nullptr;
      self->in_use += n;
      ++self->allocations;
      self->live[p] = n;
      return p;
    };
    s.release = [](void* ctx, int, void* p) {
      auto* self = static_cast<HostMemory*>(ctx);
      std::lock_guard<std::mutex> lock(self->mutex);
      auto it = self->live.find(p);
      ASSERT_NE(it, self->live.end()) << "released a pointer that is not a segment";
      self->in_use -= it->second;
      self->live.erase(it);
      ++self->releases;
      std::free(p);
    };
    return s;
  }
};

void* const kStreamA = reinterpret_cast<void*>(0x1000);
void* const kStreamB = reinterpret_cast<void*>(0x2000);

TEST(CachingAllocator, RoundsTo512BytesAndPicksSegmentSizes) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB), 2 * kMiB);             // largest small request
  EXPECT_EQ(CachingAllocator::segment_size(kMiB + 512), 20 * kMiB);      // large pool
  EXPECT_EQ(CachingAllocator::segment_size(9 * kMiB), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(11 * kMiB), 12 * kMiB);       // rounded to 2 MiB
  EXPECT_EQ(CachingAllocator::segment_size(12 * kMiB), 12 * kMiB);
}

// Note [Graph capture pools]: while this thread captures, every block it frees (any stream) is held,
// never handed out again, even to itself; another thread's frees are unaffected; end_capture lists
// the held blocks and release_held makes them reusable (a neighbour of a held block does not merge
// with it meanwhile).
TEST(CachingAllocator, BlocksFreedDuringACaptureAreHeldForTheGraph) {
  HostMemory mem;
  CachingAllocator alloc(mem.source(), 1);
  void* before = alloc.allocate(0, 4 * kKiB, nullptr);
  alloc.begin_capture(0);
  void* a = alloc.allocate(0, 4 * kKiB, nullptr);
  ASSERT_TRUE(alloc.free(0, a));
  ASSERT_TRUE(alloc.free(0, before));  // freed during the capture: the graph may have used it
  void* a2 = alloc.allocate(0, 4 * kKiB, nullptr);
  EXPECT_NE(a2, a) << "a block freed during the capture was handed out again";
  EXPECT_NE(a2, before);
  void* s = alloc.allocate(0, 4 * kKiB, kStreamA);
  ASSERT_TRUE(alloc.free(0, s));  // another stream, same thread: held too
  std::thread other([&] {
    void* b = alloc.allocate(0, 4 * kKiB, kStreamB);
    ASSERT_TRUE(alloc.free(0, b));
    EXPECT_EQ(alloc.allocate(0, 4 * kKiB, kStreamB), b) << "another thread's frees are not held";
    ASSERT_TRUE(alloc.free(0, b));
  });
  other.join();
  EXPECT_EQ(alloc.stats(0).held_blocks, 3u);
  ASSERT_TRUE(alloc.free(0, a2));
  std::vector<void*> held = alloc.end_capture(0);
  ASSERT_EQ(held.size(), 4u);
  EXPECT_NE(std::find(held.begin(), held.end(), a), held.end());
  EXPECT_NE(std::find(held.begin(), held.end(), before), held.end());
  EXPECT_NE(std::find(held.begin(), held.end(), s), held.end());
  EXPECT_FALSE(alloc.free(0, a)) << "a held block is no longer live";
  // Still held after the capture: a new request gets fresh memory.
  void* c = alloc.allocate(0, 4 * kKiB, nullptr);
  EXPECT_EQ(std::find(held.begin(), held.end(), c), held.end());
  ASSERT_TRUE(alloc.free(0, c));  // not capturing any more: back to the pool
  alloc.release_held(0, held);
  EXPECT_EQ(alloc.stats(0).held_blocks, 0u);
  EXPECT_EQ(alloc.stats(0).allocated_bytes, 0u);
  // Everything coalesced back: the segments are free and released by empty_cache.
  alloc.empty_cache(0);
  EXPECT_EQ(alloc.stats(0).reserved_bytes, 0u);
  EXPECT_TRUE(alloc.end_capture(0).empty()) << "no capture is open";
}

TEST(CachingAllocator, ReusesFreedBlocksAsHits) {
  HostMemory mem;
  CachingAllocator alloc(mem.source(), 1);
  void* p = alloc.allocate(0, 1000, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(alloc.block_size(0, p), 1024u);
  AllocatorStats s = alloc.stats(0);
  EXPECT_EQ(s.allocated_bytes, 1024u);
  EXPECT_EQ(s.requested_bytes, 1000u);
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 0u);
  ASSERT_TRUE(alloc.free(0, p));
  void* q = alloc.allocate(0, 900, nullptr);
  EXPECT_EQ(q, p) << "the best-fitting cached block is reused";
  s = alloc.stats(0);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(mem.allocations, 1);
  EXPECT_EQ(alloc.allocate(0, 0, nullptr), nullptr);
  ASSERT_TRUE(alloc.free(0, q));
  EXPECT_TRUE(alloc.free(0, nullptr));
  int local = 0;
  EXPECT_FALSE(alloc.free(0, &local)) << "a foreign pointer is refused";
}

TEST(CachingAllocator, SplitsSegmentsAndCoalescesFreeNeighbours) {
  HostMemory mem;
  CachingAllocator alloc(mem.source(), 1);
  char* a = static_cast<char*>(alloc.allocate(0, 4 * kKiB, nullptr));
  char* b = static_cast<char*>(alloc.allocate(0, 4 * kKiB, nullptr));
  char* c = static_cast<char*>(alloc.allocate(0, 4 * kKiB, nullptr));
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(b, a + 4 * kKiB) << "second block split from the same segment";
  EXPECT_EQ(c, b + 4 * kKiB);
  EXPECT_EQ(mem.allocations, 1);
  AllocatorStats s = alloc.stats(0);
  EXPECT_EQ(s.splits, 3u);
  EXPECT_EQ(s.segments, 1u);
  // Free the middle one, then its neighbours: everything merges back into one 2 MiB block.
  alloc.free(0, b);
  alloc.free(0, a);
  EXPECT_GE(alloc.stats(0).merges, 1u);
  alloc.free(0, c);
  s = alloc.stats(0);
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, 2 * kMiB);
  // A block of the whole segment is available again: 1 MiB + 1 MiB fit without a new segment.
  void* x = alloc.allocate(0, kMiB, nullptr);
  void* y = alloc.allocate(0, kMiB, nullptr);
  EXPECT_EQ(x, a);
  EXPECT_EQ(y, a + kMiB);
  EXPECT_EQ(mem.allocations, 1);
  alloc.free(0, x);
  alloc.free(0, y);
  alloc.empty_cache();
  s = alloc.stats(0);
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.segments, 0u);
  EXPECT_EQ(mem.releases, 1);
  EXPECT_EQ(mem.in_use, 0u);
}

TEST(CachingAllocator, LargePoolSplitsOnlyUsefulRemainders) {
  HostMemory mem;
  CachingAllocator alloc(mem.source(), 1);
  char* a = static_cast<char*>(alloc.allocate(0, 5 * kMiB, nullptr));  // 20 MiB segment, 15 MiB left
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(alloc.stats(0).reserved_bytes, 20 * kMiB);
  char* b = static_cast<char*>(alloc.allocate(0, 12 * kMiB, nullptr));  // from the remainder
  EXPECT_EQ(b, a + 5 * kMiB);
  EXPECT_EQ(mem.allocations, 1);
  EXPECT_EQ(alloc.stats(0).hits, 1u);
  // 3 MiB remain; a 2.5 MiB request takes all of it (0.5 MiB is not worth splitting off).
  char* c = static_cast<char*>(alloc.allocate(0, 2 * kMiB + 512 * kKiB, nullptr));
  EXPECT_EQ(c, b + 12 * kMiB);
  EXPECT_EQ(alloc.block_size(0, c), 3 * kMiB);
  // Small requests never take large-pool memory.
  void* small = alloc.allocate(0, 512, nullptr);
  EXPECT_EQ(mem.allocations, 2);
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c), small}) alloc.free(0, p);
  alloc.empty_cache(0);
  EXPECT_EQ(mem.in_use, 0u);
}

TEST(CachingAllocator, BlocksOfOneStreamAreNotHandedToAnother) {
  HostMemory mem;
  CachingAllocator alloc(mem.source(), 1);
  void* a = alloc.allocate(0, 64 * kKiB, kStreamA);
  alloc.free(0, a);
  void* b = alloc.allocate(0, 64 * kKiB, kStreamB);
  EXPECT_NE(a, b);
  EXPECT_EQ(mem.allocations, 2) << "stream B gets its own segment";
  void* a2 = alloc.allocate(0, 64 * kKiB, kStreamA);
  EXPECT_EQ(a2, a) << "stream A reuses its cached block";
  alloc.free(0, a2);
  alloc.free(0, b);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetries) {
  HostMemory mem;
  mem.capacity = 40 * kMiB;
  CachingAllocator alloc(mem.source(), 1);
  void* a = alloc.allocate(0, 30 * kMiB, kStreamA);  // 30 MiB segment
  ASSERT_NE(a, nullptr);
  alloc.free(0, a);  // cached, not released
  EXPECT_EQ(mem.in_use, 30 * kMiB);
  void* b = alloc.allocate(0, 30 * kMiB, kStreamB);  // needs a new segment: only after the release
  ASSERT_NE(b, nullptr);
  const AllocatorStats s = alloc.stats(0);
  EXPECT_EQ(s.oom_retries, 1u);
  EXPECT_EQ(s.reserved_bytes, 30 * kMiB);
  EXPECT_EQ(mem.releases, 1);
  EXPECT_EQ(alloc.allocate(0, 30 * kMiB, kStreamA), nullptr) << "really out of memory";
  alloc.free(0, b);
}

TEST(CachingAllocator, DevicesHaveSeparatePools) {
  HostMemory mem;
  CachingAllocator alloc(mem.source(), 2);
  void* a = alloc.allocate(0, 4096, nullptr);
  void* b = alloc.allocate(1, 4096, nullptr);
  EXPECT_EQ(mem.allocations, 2);
  EXPECT_FALSE(alloc.free(1, a)) << "a block of device 0 is not device 1's";
  EXPECT_TRUE(alloc.free(0, a));
  EXPECT_TRUE(alloc.free(1, b));
  EXPECT_EQ(alloc.allocate(2, 16, nullptr), nullptr) << "device out of range";
  EXPECT_EQ(alloc.stats(1).misses, 1u);
}

// Random allocations and frees from several threads: live blocks never overlap (each is filled
// with its own byte and checked before it is freed), and everything coalesces back at the end.
TEST(CachingAllocator, ConcurrentRandomUseKeepsBlocksDisjointAndCoalescesFully) {
  HostMemory mem;
  CachingAllocator alloc(mem.source(), 1);
  std::random_device rd;
  const unsigned seed = rd();
  auto worker = [&](int id) {
    std::mt19937 rng(seed + unsigned(id));
    std::vector<std::pair<unsigned char*, size_t>> live;
    void* stream = id % 2 ? kStreamA : kStreamB;
    for (int step = 0; step < 3000; ++step) {
      if (live.empty() || (rng() % 3 != 0 && live.size() < 64)) {
        const size_t n = rng() % 4 == 0 ? 1 + rng() % (3 * kMiB) : 1 + rng() % (64 * kKiB);
        auto* p = static_cast<unsigned char*>(alloc.allocate(0, n, stream));
        ASSERT_NE(p, nullptr);
        std::memset(p, id * 16 + int(live.size() % 16), n);
        live.emplace_back(p, n);
      } else {
        const size_t i = rng() % live.size();
        auto [p, n] = live[i];
        const unsigned char expected = static_cast<unsigned char>(p[0]);
        for (size_t j = 0; j < n; j += 509) ASSERT_EQ(p[j], expected) << "block overwritten (seed " << seed << ")";
        ASSERT_EQ(p[n - 1], expected);
        ASSERT_TRUE(alloc.free(0, p));
        live.erase(live.begin() + long(i));
      }
    }
    for (auto [p, n] : live) alloc.free(0, p);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  AllocatorStats s = alloc.stats(0);
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.active_blocks, 0u);
  EXPECT_GT(s.hits, s.misses) << "the cache serves most requests";
  alloc.empty_cache();
  s = alloc.stats(0);
  EXPECT_EQ(s.reserved_bytes, 0u) << "every segment coalesced back into one free block (seed " << seed << ")";
  EXPECT_EQ(mem.in_use, 0u);
}

// Oversize blocks (>= kMaxSplitSize) are not carved up by smaller requests (fragmentation).
TEST(CachingAllocator, OversizeBlockIsNotSplitBySmallerRequests) {
  HostMemory mem;
  CachingAllocator a(mem.source(), 1);
  const size_t big = 128 * kMiB;
  ASSERT_GE(big, CachingAllocator::kMaxSplitSize);
  char* p = static_cast<char*>(a.allocate(0, big, nullptr));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(a.free(0, p));
  char* q = static_cast<char*>(a.allocate(0, 2 * kMiB, nullptr));
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(q < p || q >= p + big) << "a 2 MiB request was carved out of the cached 128 MiB block";
  EXPECT_EQ(mem.allocations, 2);  // a fresh 20 MiB segment for the 2 MiB request
  // The oversize block is still cached whole and serves a request of about its size.
  char* r = static_cast<char*>(a.allocate(0, big - 4 * kMiB, nullptr));
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.block_size(0, r), big) << "an oversize block is handed out whole, never split";
  EXPECT_EQ(mem.allocations, 2);
  a.free(0, q);
  a.free(0, r);
}

TEST(CachingAllocator, OversizeBlockIsReusedOnlyWhenLittleIsWasted) {
  HostMemory mem;
  CachingAllocator a(mem.source(), 1);
  void* p = a.allocate(0, 128 * kMiB, nullptr);
  ASSERT_NE(p, nullptr);
  a.free(0, p);
  // 128 - 100 = 28 MiB would be wasted (>= kOversizeWaste): a new segment instead.
  void* q = a.allocate(0, 100 * kMiB, nullptr);
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q, p);
  EXPECT_EQ(mem.allocations, 2);
  EXPECT_EQ(a.block_size(0, q), 100 * kMiB);
  a.free(0, q);
  // 128 - 112 = 16 MiB: reused.
  void* r = a.allocate(0, 112 * kMiB, nullptr);
  EXPECT_EQ(r, p);
  EXPECT_EQ(mem.allocations, 2);
  a.free(0, r);
}

TEST(CachingAllocator, RefusesASizeWhoseRoundingWouldOverflow) {
  HostMemory mem;
  CachingAllocator a(mem.source(), 1);
  EXPECT_EQ(a.allocate(0, SIZE_MAX - 100, nullptr), nullptr);
  EXPECT_EQ(mem.allocations, 0);
}

// Stream-ordered frees (record_stream): events that the test completes by hand, standing for the
// work queued on each stream up to the free.
struct StreamWork {
  struct Ev {
    void* stream;
    bool done = false;
  };
  std::vector<Ev*> live;
  int recorded = 0, synchronized = 0, destroyed = 0;

  tessera::sdk::StreamEventOps ops() {
    tessera::sdk::StreamEventOps o;
    o.ctx = this;
    o.record = [](void* ctx, int, void* stream) -> void* {
      auto* self = static_cast<StreamWork*>(ctx);
      ++self->recorded;
      self->live.push_back(new Ev{stream});
      return self->live.back();
    };
    o.query = [](void*, int, void* ev) { return static_cast<Ev*>(ev)->done; };
    o.synchronize = [](void* ctx, int, void* ev) {
      ++static_cast<StreamWork*>(ctx)->synchronized;
      static_cast<Ev*>(ev)->done = true;
    };
    o.destroy = [](void* ctx, int, void* ev) {
      auto* self = static_cast<StreamWork*>(ctx);
      ++self->destroyed;
      self->live.erase(std::find(self->live.begin(), self->live.end(), static_cast<Ev*>(ev)));
      delete static_cast<Ev*>(ev);
    };
    return o;
  }
  // The work queued on `stream` so far has completed.
  void finish(void* stream) {
    for (Ev* e : live)
      if (e->stream == stream) e->done = true;
  }
};

void* const kSideStream = reinterpret_cast<void*>(uintptr_t(0x5000));

bool disjoint(void* a, void* b, size_t n) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x + n <= y || y + n <= x;
}

TEST(CachingAllocator, BlockUsedOnAnotherStreamIsReusedOnlyAfterThatStreamsWork) {
  HostMemory mem;
  StreamWork work;
  {
    CachingAllocator a(mem.source(), 1, work.ops());
    void* p = a.allocate(0, 4 * kKiB, nullptr);
    ASSERT_TRUE(a.record_stream(0, p, kSideStream));
    EXPECT_TRUE(a.free(0, p));
    EXPECT_EQ(work.recorded, 1);
    EXPECT_EQ(a.stats(0).pending_blocks, 1u);
    // The side stream may still use p: a request of the same size gets other memory.
    void* q = a.allocate(0, 4 * kKiB, nullptr);
    ASSERT_NE(q, nullptr);
    EXPECT_TRUE(disjoint(p, q, 4 * kKiB));
    EXPECT_EQ(a.stats(0).pending_blocks, 1u);
    // Once that work has completed, p is back in the pool and reused.
    work.finish(kSideStream);
    void* r = a.allocate(0, 4 * kKiB, nullptr);
    EXPECT_EQ(r, p);
    EXPECT_EQ(a.stats(0).pending_blocks, 0u);
    EXPECT_EQ(work.destroyed, 1);
    EXPECT_EQ(work.synchronized, 0);  // polled, never waited for
    a.free(0, q);
    a.free(0, r);
    EXPECT_EQ(a.stats(0).allocated_bytes, 0u);
  }
  EXPECT_EQ(mem.in_use, 0u);
}

TEST(CachingAllocator, RecordingTheAllocatingStreamOrNothingReusesAtOnce) {
  HostMemory mem;
  StreamWork work;
  CachingAllocator a(mem.source(), 1, work.ops());
  void* p = a.allocate(0, 4 * kKiB, kSideStream);
  EXPECT_TRUE(a.record_stream(0, p, kSideStream));  // its own stream: in order already
  a.free(0, p);
  EXPECT_EQ(a.allocate(0, 4 * kKiB, kSideStream), p);
  a.free(0, p);
  EXPECT_EQ(work.recorded, 0);
  EXPECT_FALSE(a.record_stream(0, p, nullptr));  // no longer live
  int not_ours = 0;
  EXPECT_FALSE(a.record_stream(0, &not_ours, nullptr));
  EXPECT_FALSE(a.record_stream(3, p, nullptr));
  // Without events record_stream is refused (the plugin then has to synchronise itself).
  CachingAllocator plain(mem.source(), 1);
  void* x = plain.allocate(0, 4 * kKiB, nullptr);
  EXPECT_FALSE(plain.record_stream(0, x, kSideStream));
  plain.free(0, x);
}

TEST(CachingAllocator, EmptyCacheWaitsForPendingBlocksBeforeReleasing) {
  HostMemory mem;
  StreamWork work;
  CachingAllocator a(mem.source(), 1, work.ops());
  void* p = a.allocate(0, 4 * kKiB, nullptr);
  a.record_stream(0, p, kSideStream);
  a.free(0, p);
  EXPECT_EQ(mem.in_use, CachingAllocator::kSmallSegment);
  a.empty_cache(0);
  EXPECT_EQ(work.synchronized, 1);
  EXPECT_EQ(a.stats(0).pending_blocks, 0u);
  EXPECT_EQ(mem.in_use, 0u);
  EXPECT_EQ(a.stats(0).reserved_bytes, 0u);
}

TEST(CachingAllocator, ShutdownWithPendingBlocksReleasesEverySegment) {
  HostMemory mem;
  StreamWork work;
  {
    CachingAllocator a(mem.source(), 1, work.ops());
    void* p = a.allocate(0, 4 * kKiB, nullptr);
    void* q = a.allocate(0, 64 * kKiB, nullptr);
    a.record_stream(0, p, kSideStream);
    a.free(0, p);
    (void)q;  // still live at shutdown
  }
  EXPECT_EQ(mem.in_use, 0u);
  EXPECT_EQ(work.destroyed, 1);
  EXPECT_TRUE(work.live.empty());
}

}  // namespace
