// Runs with TESSERA_CPU_CACHE_LIMIT=3M (set by CMake): the cache keeps at most 3 MiB.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "tessera/allocator.h"
#include "tessera/error.h"

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

TEST(CpuAllocatorCacheLimit, ByteCountsParseWithBinarySuffixes) {
  EXPECT_EQ(parse_byte_count("X", "0"), 0u);
  EXPECT_EQ(parse_byte_count("X", "512"), 512u);
  EXPECT_EQ(parse_byte_count("X", "3M"), 3u * 1024 * 1024);
  EXPECT_EQ(parse_byte_count("X", "1KiB"), 1024u);
  EXPECT_EQ(parse_byte_count("X", "2GB"), 2ull * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_byte_count("X", "18446744073709551615"), UINT64_MAX);
}

TEST(CpuAllocatorCacheLimit, MalformedByteCountsAreRefusedWithTheReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"abc", "does not start with a digit"},
      {"1.5G", "fractions are not allowed"},
      {"-1", "a sign is not allowed"},
      {"", "it is empty"},
      {"12 M", "unexpected characters"},
      {"4T", "unexpected characters"},
      {"18446744073709551616", "does not fit in 64 bits"},
      {"17179869184G", "does not fit in 64 bits"},  // 2^34 GiB wraps to 0 when shifted unchecked
  };
  for (const auto& [text, reason] : cases) {
    try {
      parse_byte_count("TESSERA_CPU_CACHE_LIMIT", text);
      ADD_FAILURE() << "'" << text << "' was accepted";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(std::string("TESSERA_CPU_CACHE_LIMIT='") + text + "'"), std::string::npos) << m;
      EXPECT_NE(m.find(reason), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace tessera
