// Runs with TESSERA_CPU_CACHE_LIMIT=3M (set by CMake): the cache keeps at most 3 MiB.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tessera/allocator.h"

namespace tessera {
namespace {

TEST(CpuAllocatorCacheLimit, FreedBlocksBeyondTheLimitAreReleased) {
  ASSERT_EQ(std::string(std::getenv("TESSERA_CPU_CACHE_LIMIT")), "3M");
  cpu_allocator_empty_cache();
  {
    DataPtr a = cpu_allocator()->allocate(size_t(2) << 20, -1);
    DataPtr b = cpu_allocator()->allocate(size_t(2) << 20, -1);
  }
  // The first freed block fits (2 MiB <= 3 MiB); the second would not and is unmapped.
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, size_t(2) << 20);
  const uint64_t hits = cpu_allocator_stats().hits;
  { DataPtr c = cpu_allocator()->allocate(size_t(2) << 20, -1); }
  EXPECT_EQ(cpu_allocator_stats().hits, hits + 1);
  { DataPtr big = cpu_allocator()->allocate(size_t(4) << 20, -1); }  // larger than the whole cache
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, size_t(2) << 20);
}

}  // namespace
}  // namespace tessera
