// Core on its own: this program links the core objects and nothing else (no dispatcher, no
// plugin loader), so a core function that needs the dispatcher fails its link. It also covers the
// per-thread paths of tensor creation: small CPU blocks (Note [Small CPU blocks]), storage
// versions taken in blocks (Note [Storage version]), the refcount fast paths
// (Note [Refcount fast paths]), pooled TensorImpl/StorageImpl objects (Note [Pooled impls]) and
// the one-pass geometry check (Note [One-pass geometry check]), and the per-thread free lists both
// of the first and the pool share (Note [Per-thread free lists]).
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "tessera/allocator.h"
#include "tessera/tensor.h"
#include "thread_free_lists.h"

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

// Note [Pooled impls]: tensors made on one thread and dropped on another (whose lists then hold
// the objects), threads that exit with full lists, and objects dropped after their maker exited:
// every tensor keeps its own values and geometry throughout. (ASan and the leak checker watch the
// same test with the pool off; the release build runs it with the pool on.)
TEST(CoreStandalone, PooledImplsCrossThreadsAndOutliveTheirThreads) {
  constexpr int kPerRound = 300;  // more than one size class list holds
  for (int round = 0; round < 20; ++round) {
    std::vector<Tensor> made;
    std::thread maker([&] {
      for (int i = 0; i < kPerRound; ++i) {
        Tensor t = f32({1 + i % 5, 2});
        float* p = t.data_ptr<float>();
        for (int64_t j = 0; j < t.numel(); ++j) p[j] = float(round * 10000 + i * 10 + j);
        made.push_back(i % 3 == 0 ? t.transpose(0, 1) : t);  // views are impls too
      }
    });
    maker.join();  // the maker has exited; its objects live on
    std::vector<Tensor> kept;
    std::thread dropper([&] {
      for (int i = 0; i < kPerRound; ++i) {
        if (i % 2) kept.push_back(made[size_t(i)]);
        made[size_t(i)] = Tensor();  // freed on this thread unless kept
        Tensor fresh = f32({3});     // reuses what this thread just freed
        fresh.data_ptr<float>()[0] = -1.0f;
      }
    });
    dropper.join();
    for (int i = 1; i < kPerRound; i += 2) {
      const Tensor& t = kept[size_t(i / 2)];
      const int64_t rows = 1 + i % 5;
      ASSERT_EQ(t.numel(), rows * 2);
      const Tensor c = i % 3 == 0 ? t.transpose(0, 1) : t;
      ASSERT_EQ(c.sizes()[0], rows);
      ASSERT_EQ(c.sizes()[1], 2);
      const float* p = c.const_data_ptr<float>();
      for (int64_t j = 0; j < c.numel(); ++j) ASSERT_EQ(p[j], float(round * 10000 + i * 10 + j)) << i << " " << j;
    }
  }
}

// Note [Per-thread free lists]: blocks are kept per 64-byte class up to MaxBytes and PerClass
// blocks each, handed out last in first out, and release() gives back exactly the kept ones.
std::vector<void*> g_freed_blocks;
void record_free(void* p) noexcept { g_freed_blocks.push_back(p); }

TEST(CoreStandalone, SizeClassFreeListsKeepWithinTheirBoundsAndReleaseAll) {
  using Lists = detail::SizeClassFreeLists<256, 2, record_free>;
  EXPECT_EQ(Lists::round_up(1), 64u);
  EXPECT_EQ(Lists::round_up(64), 64u);
  EXPECT_EQ(Lists::round_up(65), 128u);
  alignas(64) static unsigned char blocks[6][320];
  Lists l{};
  g_freed_blocks.clear();
  EXPECT_EQ(l.take(64), nullptr);
  EXPECT_TRUE(l.keep(blocks[0], 64));
  EXPECT_TRUE(l.keep(blocks[1], 64));
  EXPECT_FALSE(l.keep(blocks[2], 64));   // the class holds PerClass blocks
  EXPECT_FALSE(l.keep(blocks[3], 320));  // above MaxBytes
  EXPECT_EQ(l.take(320), nullptr);
  EXPECT_TRUE(l.keep(blocks[4], 256));
  EXPECT_EQ(l.take(128), nullptr);  // another class
  EXPECT_EQ(l.take(64), blocks[1]);
  EXPECT_TRUE(l.keep(blocks[2], 64));  // room again
  EXPECT_TRUE(l.keep(blocks[5], 128));
  EXPECT_TRUE(g_freed_blocks.empty());
  l.release();
  const std::set<void*> freed(g_freed_blocks.begin(), g_freed_blocks.end());
  EXPECT_EQ(g_freed_blocks.size(), 4u);
  EXPECT_EQ(freed, (std::set<void*>{blocks[0], blocks[2], blocks[4], blocks[5]}));
  for (size_t bytes = 64; bytes <= 256; bytes += 64) EXPECT_EQ(l.take(bytes), nullptr) << bytes;
}

// PerThread<T>: one T per thread, released when the thread exits; a thread-local destroyed after
// that (constructed before the first get()) sees null, so its frees bypass the released lists.
struct CountedLists {
  int64_t uses;
  void release() { released.fetch_add(1); }
  static inline std::atomic<int> released{0};
};
struct LateFree {
  ~LateFree() { after_exit = detail::PerThread<CountedLists>::get(); }
  static inline CountedLists* after_exit = reinterpret_cast<CountedLists*>(1);
};

TEST(CoreStandalone, PerThreadListsAreOnePerThreadAndReleasedAtExit) {
  CountedLists* here = detail::PerThread<CountedLists>::get();
  EXPECT_EQ(detail::PerThread<CountedLists>::get(), here);
  CountedLists* there = nullptr;
  const int released_before = CountedLists::released.load();
  std::thread t([&] {
    static thread_local LateFree late;  // destroyed after PerThread's release
    (void)late;
    there = detail::PerThread<CountedLists>::get();
    if (there) ++there->uses;
  });
  t.join();
  if (!TESSERA_KEEP_FREED_BLOCKS) {  // AddressSanitizer: nothing is kept
    EXPECT_EQ(here, nullptr);
    EXPECT_EQ(there, nullptr);
    EXPECT_EQ(CountedLists::released.load(), released_before);
  } else {
    ASSERT_NE(here, nullptr);
    ASSERT_NE(there, nullptr);
    EXPECT_NE(here, there);
    EXPECT_EQ(here->uses, 0);  // the other thread's T is its own
    EXPECT_EQ(CountedLists::released.load(), released_before + 1);
  }
  EXPECT_EQ(LateFree::after_exit, nullptr);
}

TEST(CoreStandalone, CheckedGeometryAgreesWithTheSlowChecks) {
  detail::CheckedGeometry g;
  // sizes (2, 3) strides (3, 1) offset 4, float32: 4 + 1*3 + 2*1 + 1 = 10 elements = 40 bytes.
  ASSERT_TRUE(detail::CheckedGeometry::check(std::vector<int64_t>{2, 3}, std::vector<int64_t>{3, 1}, 4, 4, g));
  EXPECT_EQ(g.numel(), 6);
  EXPECT_EQ(g.nbytes(), 40u);
  EXPECT_TRUE(g.is_contiguous());
  EXPECT_EQ(g.storage_offset(), 4);
  // transposed: not contiguous, same extent.
  ASSERT_TRUE(detail::CheckedGeometry::check(std::vector<int64_t>{3, 2}, std::vector<int64_t>{1, 3}, 0, 4, g));
  EXPECT_FALSE(g.is_contiguous());
  EXPECT_EQ(g.nbytes(), 24u);
  // empty: contiguous, no bytes, whatever the strides.
  ASSERT_TRUE(detail::CheckedGeometry::check(std::vector<int64_t>{0, 5}, std::vector<int64_t>{7, 100}, 0, 8, g));
  EXPECT_EQ(g.numel(), 0);
  EXPECT_EQ(g.nbytes(), 0u);
  EXPECT_TRUE(g.is_contiguous());
  // 0-dim: one element.
  ASSERT_TRUE(detail::CheckedGeometry::check({}, {}, 0, 2, g));
  EXPECT_EQ(g.numel(), 1);
  EXPECT_EQ(g.nbytes(), 2u);
  // refused: negative size or stride, rank mismatch, too many dims, overflow of the extent or bytes.
  EXPECT_FALSE(detail::CheckedGeometry::check(std::vector<int64_t>{-1}, std::vector<int64_t>{1}, 0, 4, g));
  EXPECT_FALSE(g.checked());
  EXPECT_FALSE(detail::CheckedGeometry::check(std::vector<int64_t>{2}, std::vector<int64_t>{-1}, 0, 4, g));
  EXPECT_FALSE(detail::CheckedGeometry::check(std::vector<int64_t>{2, 2}, std::vector<int64_t>{1}, 0, 4, g));
  EXPECT_FALSE(detail::CheckedGeometry::check(std::vector<int64_t>(7, 1), std::vector<int64_t>(7, 1), 0, 4, g));
  EXPECT_FALSE(detail::CheckedGeometry::check(std::vector<int64_t>{int64_t(1) << 62, 4},
                                              std::vector<int64_t>{4, 1}, 0, 4, g));
  EXPECT_FALSE(detail::CheckedGeometry::check(std::vector<int64_t>{int64_t(1) << 61}, std::vector<int64_t>{1}, 0, 8, g));
  EXPECT_FALSE(detail::CheckedGeometry::check(std::vector<int64_t>{1}, std::vector<int64_t>{1}, -1, 4, g));
  // An unchecked geometry, or a storage smaller than the geometry needs, is refused by the impl.
  detail::CheckedGeometry unchecked;
  Storage small = f32({2}).storage();
  EXPECT_THROW(TensorImpl(small, kFloat32, Device(kCPU), unchecked), Error);
  ASSERT_TRUE(detail::CheckedGeometry::check(std::vector<int64_t>{3}, std::vector<int64_t>{1}, 0, 4, g));
  EXPECT_THROW(TensorImpl(small, kFloat32, Device(kCPU), g), Error);
  ASSERT_TRUE(detail::CheckedGeometry::check(std::vector<int64_t>{2}, std::vector<int64_t>{1}, 0, 4, g));
  TensorImpl ok(small, kFloat32, Device(kCPU), g);
  EXPECT_EQ(ok.numel(), 2);
  // The factories' errors still name what is wrong.
  EXPECT_THROW(make_tensor_strided(std::vector<int64_t>{2}, std::vector<int64_t>{-1}, kFloat32, Device(kCPU)), Error);
  EXPECT_THROW(make_tensor(std::vector<int64_t>{int64_t(1) << 62, 8}, kFloat32, Device(kCPU)), Error);
}

}  // namespace
