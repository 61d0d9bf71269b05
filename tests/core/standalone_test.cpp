// Core on its own: this program links the core objects and nothing else (no dispatcher, no
// plugin loader), so a core function that needs the dispatcher fails its link. It also covers the
// per-thread paths of tensor creation: small CPU blocks (Note [Small CPU blocks]), storage
// versions taken in blocks (Note [Storage version]) and the refcount fast paths
// (Note [Refcount fast paths]).
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "tessera/allocator.h"
#include "tessera/tensor.h"

namespace {

using namespace tessera;

Tensor f32(std::initializer_list<int64_t> sizes) {
  return make_tensor(IntArrayRef(sizes.begin(), sizes.size()), kFloat32, Device(kCPU));
}

TEST(CoreStandalone, TensorsAndViewsWorkWithoutTheDispatcher) {
  Tensor t = f32({2, 3});
  float* p = t.data_ptr<float>();
  for (int i = 0; i < 6; ++i) p[i] = float(i);
  const Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.sizes()[0], 3);
  EXPECT_EQ(tt.strides()[0], 1);
  EXPECT_EQ(tt.select(0, 2).select(0, 1).data_ptr<float>()[0], 5.0f);  // t[1][2]
  EXPECT_EQ(t.view({6}).data_ptr<float>()[4], 4.0f);
  EXPECT_THROW(t.view({4}), Error);
}

TEST(CoreStandalone, SmallBlockStatisticsAreExactOnTheAllocatingThread) {
  const CpuAllocatorStats before = cpu_allocator_stats();
  {
    std::vector<Tensor> ts;
    for (int i = 0; i < 100; ++i) ts.push_back(f32({3}));  // 12 bytes -> one 64-byte block each
    const CpuAllocatorStats during = cpu_allocator_stats();
    EXPECT_EQ(during.allocated_bytes, before.allocated_bytes + 100 * 64);
    EXPECT_EQ(during.num_allocations, before.num_allocations + 100);
    EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
  }
  const CpuAllocatorStats after = cpu_allocator_stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.num_allocations, before.num_allocations);
}

TEST(CoreStandalone, BlocksFreedOnAnotherThreadAreCountedOnce) {
  const CpuAllocatorStats before = cpu_allocator_stats();
  std::vector<Tensor> made(500);
  std::thread producer([&] {
    for (Tensor& t : made) t = f32({40});  // 160 bytes -> 192-byte blocks
  });
  producer.join();
  // Both the producer's figures (added when it exited) and ours are in the shared counters now.
  EXPECT_EQ(cpu_allocator_stats().allocated_bytes, before.allocated_bytes + 500 * 192);
  std::thread consumer([&] { made.clear(); });  // frees into the consumer's lists
  consumer.join();
  EXPECT_EQ(cpu_allocator_stats().allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(cpu_allocator_stats().num_allocations, before.num_allocations);
}

TEST(CoreStandalone, SmallBlocksStayAlignedAndDistinct) {
  std::set<const void*> seen;
  std::vector<Tensor> live;
  for (int round = 0; round < 3; ++round) {
    for (int64_t n : {1, 15, 16, 17, 100, 128}) {
      Tensor t = f32({n});
      const void* p = t.data_ptr<float>();
      EXPECT_EQ(uintptr_t(p) % 64, 0u) << n;
      EXPECT_TRUE(seen.insert(p).second) << "a live block was handed out twice";
      live.push_back(t);
    }
  }
  // Writing every live block fully must not disturb any other (the free-list link lives in a block).
  for (size_t i = 0; i < live.size(); ++i) {
    float* d = live[i].data_ptr<float>();
    for (int64_t k = 0; k < live[i].numel(); ++k) d[k] = float(i);
  }
  for (size_t i = 0; i < live.size(); ++i) {
    const float* d = live[i].data_ptr<float>();
    for (int64_t k = 0; k < live[i].numel(); ++k) ASSERT_EQ(d[k], float(i));
  }
}

TEST(CoreStandalone, StorageVersionsNeverRepeatAcrossThreads) {
  constexpr int kThreads = 4, kEach = 3000;
  std::vector<std::vector<uint64_t>> versions(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        Tensor x = f32({1});
        versions[size_t(t)].push_back(x.storage()->version());
        x.storage()->bump_version();
        versions[size_t(t)].push_back(x.storage()->version());
      }
    });
  for (std::thread& th : threads) th.join();
  std::set<uint64_t> all;
  for (const auto& v : versions) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), size_t(kThreads * kEach * 2));
}

struct Counted : RefCounted {
  static inline std::atomic<int> destroyed{0};
  ~Counted() override { destroyed.fetch_add(1); }
};

TEST(CoreStandalone, RefcountsStartAtOneAndTheLastOwnerDeletes) {
  Counted::destroyed = 0;
  {
    IntrusivePtr<Counted> a = make_intrusive<Counted>();
    EXPECT_EQ(a.use_count(), 1);
    IntrusivePtr<Counted> b = a;
    EXPECT_EQ(a.use_count(), 2);
    b = IntrusivePtr<Counted>();
    EXPECT_EQ(a.use_count(), 1);
    EXPECT_EQ(Counted::destroyed.load(), 0);
  }
  EXPECT_EQ(Counted::destroyed.load(), 1);
  // Handles copied and dropped on many threads at once: deleted exactly once, after the last.
  for (int round = 0; round < 50; ++round) {
    IntrusivePtr<Counted> shared = make_intrusive<Counted>();
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([copy = shared] {
        for (int i = 0; i < 1000; ++i) {
          IntrusivePtr<Counted> c = copy;
          (void)c;
        }
      });
    shared = IntrusivePtr<Counted>();
    for (std::thread& th : threads) th.join();
  }
  EXPECT_EQ(Counted::destroyed.load(), 51);
}

}  // namespace
