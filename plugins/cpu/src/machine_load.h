// Whether the machine is busy with other processes' work: a cheap estimate, refreshed at most every
// kLoadRefreshNs, that the grain rule reads for work between its quiet and its loaded cut
// (Note [Grain size] in grain.h, Note [Machine load estimate] below). Private to the CPU plugin.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera::cpu {

// Note [Machine load estimate]
// The question is whether a second OpenMP thread would get a core of its own now. A machine-wide
// runnable count (/proc/loadavg) cannot answer it: libgomp's threads spin for a while after every
// parallel region, so a process that just used two threads counts itself as two runnable tasks.
// Instead the estimate is the CPU time that OTHER processes used over the last interval: the busy
// time of all CPUs (/proc/stat's first line: every field but idle and iowait, in clock ticks; steal
// counts as busy, since a core the hypervisor gives to another guest is not ours either) minus this
// process's own CPU time (CLOCK_PROCESS_CPUTIME_ID, which includes our spinning threads), divided by
// the wall time. The machine is quiet while the others used less than kQuietOthersCpus CPUs
// (half a CPU): then every thread the process starts finds a core, as in the quiet sweep of
// docs/performance.md ("Grain size"). Half a CPU leaves room for the tick-based accounting of
// /proc/stat (a few ms per CPU per interval) and for short-lived daemons, and is far below what
// a single busy process costs (one CPU).
//
// Cost and freshness: a call reads a coarse monotonic clock (vDSO, no system call) and two relaxed
// atomics; at most once per kLoadRefreshNs one caller (a try-lock, the others keep the cached
// answer) reads /proc/stat and the process CPU clock, tens of microseconds. The interval a sample
// covers is the time since the previous one, so after a long pause the first answer is the average
// over the pause. Until two samples exist, and for good if /proc/stat cannot be read or parsed, the
// answer is "loaded", the safe side.

// Clock ticks since boot, summed over all CPUs (the "cpu" line of /proc/stat).
struct CpuTicks {
  uint64_t busy = 0;   // user, nice, system, irq, softirq, steal
  uint64_t total = 0;  // busy + idle + iowait
};

// One observation of the machine and of this process.
struct LoadSample {
  CpuTicks cpu;
  int64_t process_cpu_ns = 0;  // CLOCK_PROCESS_CPUTIME_ID
  int64_t wall_ns = 0;         // CLOCK_MONOTONIC
};

enum class MachineLoad : uint8_t { Quiet, Loaded };

inline constexpr int64_t kLoadRefreshNs = 50'000'000;
inline constexpr double kQuietOthersCpus = 0.5;

// Parses the aggregate "cpu ..." line at the start of /proc/stat's text; nullopt if it is missing
// or malformed (fewer than the four fields every kernel has, a value that is not a number).
std::optional<CpuTicks> parse_proc_stat(std::string_view text);

// CPUs' worth of time that processes other than this one used between two samples (may be slightly
// negative through tick rounding); nullopt when the samples cannot be compared (time or counters
// going backwards, no wall time between them, ticks_per_second < 1).
std::optional<double> others_cpus(const LoadSample& before, const LoadSample& after,
                                  int64_t ticks_per_second);

// Quiet when others_cpus < kQuietOthersCpus; Loaded otherwise and whenever others_cpus is nullopt.
MachineLoad classify_load(const LoadSample& before, const LoadSample& after, int64_t ticks_per_second);

// Reads /proc/stat and the clocks now; nullopt if /proc/stat cannot be read or parsed.
std::optional<LoadSample> sample_load();

// `clock` now in nanoseconds; -1 if it cannot be read.
inline int64_t clock_ns(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return -1;
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The cached estimate, shared by every thread of the process (Note [Machine load estimate]).
class MachineLoadEstimate {
 public:
  // Whether the machine was quiet over the last interval; refreshes the estimate first when it is
  // older than kLoadRefreshNs. Thread-safe, never blocks, never throws.
  bool quiet() {
    const int64_t now = clock_ns(CLOCK_MONOTONIC_COARSE);
    if (now >= next_refresh_ns_.load(std::memory_order_relaxed)) refresh(now);
    return quiet_.load(std::memory_order_relaxed);
  }

 private:
  void refresh(int64_t now_coarse_ns);

  std::atomic<int64_t> next_refresh_ns_{0};
  std::atomic<bool> quiet_{false};
  std::atomic_flag refreshing_;
  // Written only by the thread that holds refreshing_.
  LoadSample last_{};
  bool have_last_ = false;
};

// The process-wide estimate the grain rule reads.
MachineLoadEstimate& machine_load();

}  // namespace tessera::cpu
