// TESSERA_SPARSE_DENSE_BATCH, read by the CPU and CUDA sparse plugins (Note [Sparse dense
// threshold] in plugin.cpp). Private to the sparse plugins.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace tessera::sparse_env {

// The largest batch the variable may name: a batch is at most this in practice, and a larger value
// is more likely a typo than a wish to turn the dense path off.
inline constexpr int64_t kMaxDenseBatch = int64_t(1) << 31;

// The batch from which linear takes the dense path: the value of TESSERA_SPARSE_DENSE_BATCH, a
// whole number from 1 to 2^31, or 0 (no override) when the variable is unset or empty. Anything
// else gives 0 and sets `*warning` to a one-line message naming the variable and what it accepts.
inline int64_t parse_dense_batch(const char* value, std::string* warning) {
  if (!value || !*value) return 0;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  if (errno == 0 && end != value && *end == '\0' && v >= 1 && v <= kMaxDenseBatch) return v;
  if (warning)
    *warning = std::string("TESSERA_SPARSE_DENSE_BATCH='") + value +
               "' is not a batch size (a whole number from 1 to 2^31); ignoring it and keeping the measured "
               "thresholds";
  return 0;
}

}  // namespace tessera::sparse_env
