// The random seed of a CPU test binary, apart from the runtime so that tests of the kernel tables
// alone (test_cpu_vec_accuracy) use it too.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace tessera::cpu_test {

// One seed per test binary: TESSERA_TEST_SEED when set (to rerun a failure), else from
// random_device; printed on failure through SCOPED_TRACE in each test (seed_trace()).
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("TESSERA_TEST_SEED")) return uint64_t(std::strtoull(s, nullptr, 10));
    return uint64_t(std::random_device{}()) << 32 | std::random_device{}();
  }();
  return seed;
}
inline std::string seed_trace() {
  return "random seed " + std::to_string(test_seed()) + " (rerun with TESSERA_TEST_SEED=" +
         std::to_string(test_seed()) + ")";
}

}  // namespace tessera::cpu_test
