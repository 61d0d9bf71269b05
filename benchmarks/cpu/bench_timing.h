// Timing helpers shared by the CPU benchmarks that hold an op against a reference in the same run.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace tessera::bench {

using Clock = std::chrono::steady_clock;

// Seconds per call of `fn` over one trial of at least `seconds` (at least one call).
template <typename F>
double trial(F& fn, double seconds) {
  int64_t reps = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    fn();
    ++reps;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return elapsed / double(reps);
}

// Seconds per call of `op` and of `ref`: the fastest of `trials` trials each, the two interleaved
// so that both see the same machine; the minimum is robust to other processes taking the cores.
template <typename A, typename B>
void time_pair(A&& op, B&& ref, double* op_s, double* ref_s, int trials = 7, double seconds = 0.08) {
  op();
  ref();
  *op_s = *ref_s = 1e300;
  for (int t = 0; t < trials; ++t) {
    *ref_s = std::min(*ref_s, trial(ref, seconds));
    *op_s = std::min(*op_s, trial(op, seconds));
  }
}

// The median of `v` (the upper one of an even count); 0 when empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace tessera::bench
