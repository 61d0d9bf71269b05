#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "tessera/allocator.h"
#include "tessera/error.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(CpuAllocator, SmallBlocksAreAlignedAndWritable) {
  Allocator* a = get_allocator(kCPU);
  ASSERT_EQ(a, cpu_allocator());
  for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(1000), size_t(100000)}) {
    DataPtr p = a->allocate(n, -1);
    ASSERT_NE(p.get(), nullptr) << n;
    EXPECT_EQ(uintptr_t(p.get()) % 64, 0u) << n;
    EXPECT_EQ(p.device(), Device(kCPU));
    std::memset(p.get(), 0xab, n);
  }
}

TEST(CpuAllocator, LargeBlocksAreCachedAndReused) {
  cpu_allocator_empty_cache();
  const CpuAllocatorStats s0 = cpu_allocator_stats();
  EXPECT_EQ(s0.cached_bytes, 0u);
  const size_t n = size_t(8) << 20;
  void* first = nullptr;
  {
    DataPtr p = cpu_allocator()->allocate(n, -1);
    first = p.get();
    EXPECT_EQ(uintptr_t(first) % 64, 0u);
    std::memset(p.get(), 1, n);
    const CpuAllocatorStats s1 = cpu_allocator_stats();
    EXPECT_EQ(s1.misses, s0.misses + 1);
    EXPECT_GE(s1.allocated_bytes, s0.allocated_bytes + n);
  }
  const CpuAllocatorStats s2 = cpu_allocator_stats();
  EXPECT_EQ(s2.cached_bytes, n);  // 8 MiB is its own size class
  EXPECT_EQ(s2.allocated_bytes, s0.allocated_bytes);
  {
    // A request of the same size class (8 MiB - 1000 rounds up to 8 MiB) reuses the block.
    DataPtr p = cpu_allocator()->allocate(n - 1000, -1);
    EXPECT_EQ(p.get(), first);
    const CpuAllocatorStats s3 = cpu_allocator_stats();
    EXPECT_EQ(s3.hits, s2.hits + 1);
    EXPECT_EQ(s3.cached_bytes, 0u);
    // A different size class (9 MiB) does not.
    DataPtr q = cpu_allocator()->allocate(n + (size_t(1) << 20), -1);
    EXPECT_NE(q.get(), first);
    EXPECT_EQ(cpu_allocator_stats().misses, s3.misses + 1);
  }
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, n + (size_t(9) << 20));
  cpu_allocator_empty_cache();
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, 0u);
  EXPECT_EQ(cpu_allocator_stats().allocated_bytes, s0.allocated_bytes);
}

TEST(CpuAllocator, SizeClassesHaveAtMostOneEighthSlack) {
  cpu_allocator_empty_cache();
  const uint64_t base = cpu_allocator_stats().allocated_bytes;
  for (size_t n : {size_t(1) << 20, (size_t(1) << 20) + 1, size_t(3) << 20, (size_t(5) << 20) + 12345}) {
    DataPtr p = cpu_allocator()->allocate(n, -1);
    const uint64_t used = cpu_allocator_stats().allocated_bytes - base;
    EXPECT_GE(used, n);
    EXPECT_LE(used, n + n / 8 + 1) << n;
  }
  cpu_allocator_empty_cache();
}

TEST(CpuAllocator, OutOfMemoryNamesDeviceAndSize) {
  try {
    cpu_allocator()->allocate(size_t(1) << 60, -1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("'cpu'"), HasSubstr("1152921504606846976 bytes")));
  }
}

TEST(CpuAllocator, ThreadSafe) {
  cpu_allocator_empty_cache();
  const uint64_t base = cpu_allocator_stats().allocated_bytes;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) {
        const size_t n = (size_t(1 + (i + t) % 4) << 20) + size_t(i % 3) * 100;
        DataPtr p = cpu_allocator()->allocate(n, -1);
        static_cast<char*>(p.get())[n - 1] = char(i);
        DataPtr small = cpu_allocator()->allocate(size_t(i * 17), -1);
      }
    });
  }
  for (auto& th : threads) th.join();
  const CpuAllocatorStats s = cpu_allocator_stats();
  EXPECT_EQ(s.allocated_bytes, base);
  EXPECT_GT(s.hits, 0u);
  cpu_allocator_empty_cache();
}

TEST(MetaAllocator, GivesNullHandles) {
  DataPtr p = get_allocator(kMeta)->allocate(1 << 20, 0);
  EXPECT_EQ(p.get(), nullptr);
  EXPECT_EQ(p.device(), Device(kMeta, 0));
}

TEST(AllocatorRegistry, MissingBackendIsUnavailable) {
  set_backend_loader_hook(nullptr);
  try {
    get_allocator(kCUDA);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unavailable);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("no backend plugin provides device type 'cuda'"),
                                HasSubstr("TESSERA_PLUGIN_PATH")));
  }
}

class CountingAllocator : public Allocator {
 public:
  DataPtr allocate(size_t nbytes, int device_index) override {
    ++count;
    return DataPtr(reinterpret_cast<void*>(uintptr_t(0x1000)), this, &deleter, Device(DeviceType::PrivateUse3, 0));
  }
  static void deleter(void* ctx, void*) { ++static_cast<CountingAllocator*>(ctx)->freed; }
  int count = 0, freed = 0;
};

CountingAllocator g_counting;
int g_loader_calls = 0;

TEST(AllocatorRegistry, LoaderHookRegistersLazily) {
  g_loader_calls = 0;
  set_backend_loader_hook([](DeviceType t) {
    ++g_loader_calls;
    if (t == DeviceType::PrivateUse3) set_allocator(t, &g_counting);
  });
  Allocator* a = get_allocator(DeviceType::PrivateUse3);
  EXPECT_EQ(a, &g_counting);
  EXPECT_EQ(g_loader_calls, 1);
  EXPECT_EQ(get_allocator(DeviceType::PrivateUse3), &g_counting);
  EXPECT_EQ(g_loader_calls, 1);  // registered now: no more hook calls
  { DataPtr p = a->allocate(10, 0); }
  EXPECT_EQ(g_counting.freed, 1);
  // The hook ran but registered nothing: the registry's own error.
  EXPECT_THROW(get_allocator(DeviceType::PrivateUse2), Error);
  EXPECT_EQ(g_loader_calls, 2);
  set_allocator(DeviceType::PrivateUse3, nullptr);
  set_backend_loader_hook(nullptr);
}

TEST(AllocatorRegistry, LoaderHookReasonReachesCaller) {
  set_backend_loader_hook([](DeviceType) {
    throw Error(ErrorCode::Unavailable, "plugin 'npu' failed to load: libnpu.so: missing symbol");
  });
  EXPECT_THAT([] { get_allocator(DeviceType::PrivateUse1); },
              ::testing::ThrowsMessage<Error>(HasSubstr("missing symbol")));
  set_backend_loader_hook(nullptr);
}

int g_name_hook_calls = 0;

TEST(AllocatorRegistry, LoaderHooksDoNotNestOnAThread) {
  // The plugin loader holds its lock inside either hook; a nested hook call would deadlock.
  g_name_hook_calls = 0;
  set_unknown_device_name_hook([] { ++g_name_hook_calls; });
  set_backend_loader_hook([](DeviceType) { EXPECT_THROW(Device("unknown_inside_hook"), Error); });
  EXPECT_THROW(get_allocator(DeviceType::PrivateUse2), Error);
  EXPECT_EQ(g_name_hook_calls, 0);
  EXPECT_THROW(Device("unknown_outside_hook"), Error);
  EXPECT_EQ(g_name_hook_calls, 1);
  set_unknown_device_name_hook(nullptr);
  set_backend_loader_hook(nullptr);
}

}  // namespace
}  // namespace tessera
