// How many threads a piece of CPU work gets: one below a measured grain per op kind, all of them
// above, the grain chosen by how busy the machine is (Note [Grain size]). Private to the CPU plugin.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string_view>

#include "machine_load.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tessera::cpu {

// Note [Grain size]
// A parallel region costs a few microseconds to start and join, and much more when the machine is
// busy: libgomp's team waits at the closing barrier for every member, so a member descheduled by
// another process holds up the whole call for a scheduler tick or more (a bf16 matmul at n=256 went
// from 23 us to 7-12 ms next to two busy processes, while a single-threaded call stays within a few
// times its quiet time; most of those milliseconds are libgomp's busy waiting, see "Grain size" in
// docs/performance.md). Small work therefore runs on the calling thread alone. The grain of an op
// kind is the work one thread must have before a second thread pays off: a call gets
// max_threads() threads when its work is at least 2 * grain (two threads with a grain each), and one
// thread below. Work is the op's natural size: elements for elementwise ops, reductions, softmax and
// normalisation (and pooling: outputs times the window), multiply-adds times two (flops) for matmul,
// linear, conv2d and attention.
//
// Where a second thread pays off depends on the machine's load: on a quiet machine two threads win
// from 2-130x less work (most for matmul, linear and attention) than on a loaded one, where a team
// member waits for a core. So each kind has two grains, measured with bench_cpu_grain
// (benchmarks/cpu) on a quiet and on a loaded machine (tables, dates and reasoning in
// docs/performance.md, "Grain size"): kGrainQuiet <= kGrainLoaded. Work below the quiet cut runs on
// one thread and work at or above the loaded cut on all, whatever the load; only work between the
// two cuts asks the machine load estimate (Note [Machine load estimate] in machine_load.h) whether
// other processes leave this one its cores, and takes the quiet grain if they do (the loaded one
// when it cannot tell). Small and large work never read the estimate; work between the cuts pays a
// coarse clock read and two relaxed atomic loads (10-16 ns), and one call in 50 ms the refresh.
//
// TESSERA_CPU_GRAIN (read at plugin load) overrides the automatic choice for tests and measurements:
// "quiet" and "loaded" use that table whatever the load, "force1" runs everything on one thread,
// "off" splits every loop that can be split and gives oneDNN all threads; unset keeps the automatic
// choice, and any other value keeps it with a warning under TESSERA_LOG=cpu.
enum class OpKind : uint8_t {
  Elementwise,     // add, mul, where, comparisons: a few cycles per element
  Transcendental,  // exp, sigmoid, gelu, tanh: tens of cycles per element
  Reduction,       // sum, mean, max over elements read
  Softmax,         // softmax / log_softmax, elements
  Normalization,   // layer_norm / rms_norm / group_norm, elements
  Pooling,         // outputs times the window size
  Matmul,          // matmul and linear on oneDNN, flops (int8 too: ops)
  Conv,            // conv2d on oneDNN, flops
  Sdpa,            // scaled dot-product attention, flops of both products
  kCount,
};

// Work per thread below which a second thread does not pay off on a loaded machine, per OpKind
// (Note [Grain size]).
inline constexpr int64_t kGrainLoaded[size_t(OpKind::kCount)] = {
    /* Elementwise    */ int64_t(1) << 17,
    /* Transcendental */ int64_t(1) << 16,
    /* Reduction      */ int64_t(1) << 17,
    /* Softmax        */ int64_t(1) << 16,
    /* Normalization  */ int64_t(1) << 17,
    /* Pooling        */ int64_t(1) << 16,
    /* Matmul         */ int64_t(1) << 25,
    /* Conv           */ int64_t(1) << 23,
    /* Sdpa           */ int64_t(1) << 24,
};

// The same on a quiet machine: half the least work from which two threads won at every larger size
// in the quiet sweep, rounded up to a power of two; the loaded grain where that sweep showed no
// clear win (add) or was not run (pooling). Matmul serves f32, bf16 and linear, whose quiet
// break-evens differ (4.2M, 33.5M, 0.5M flops): its cut of 16.8M puts 256^3 on two threads for both
// dtypes.
inline constexpr int64_t kGrainQuiet[size_t(OpKind::kCount)] = {
    /* Elementwise    */ int64_t(1) << 17,
    /* Transcendental */ int64_t(1) << 15,
    /* Reduction      */ int64_t(1) << 15,
    /* Softmax        */ int64_t(1) << 14,
    /* Normalization  */ int64_t(1) << 14,
    /* Pooling        */ int64_t(1) << 16,
    /* Matmul         */ int64_t(1) << 23,
    /* Conv           */ int64_t(1) << 22,
    /* Sdpa           */ int64_t(1) << 17,
};

inline constexpr bool quiet_grains_at_most_loaded() {
  for (size_t k = 0; k < size_t(OpKind::kCount); ++k)
    if (kGrainQuiet[k] > kGrainLoaded[k]) return false;
  return true;
}
static_assert(quiet_grains_at_most_loaded(), "work between the two cuts must be an interval");

// Auto: the quiet or the loaded grain by the machine load estimate (unset TESSERA_CPU_GRAIN).
enum class GrainMode : int { Auto, Quiet, Loaded, Force1, Off };

namespace detail {
inline std::atomic<int> grain_mode_value{int(GrainMode::Auto)};
}  // namespace detail

inline GrainMode grain_mode() { return GrainMode(detail::grain_mode_value.load(std::memory_order_relaxed)); }

// Sets the mode from TESSERA_CPU_GRAIN's value ("quiet", "loaded", "force1", "off"; anything else
// or null: automatic). Returns false for a value that is none of those (the automatic choice
// applies; the caller warns).
inline bool set_grain_mode(const char* value) {
  const std::string_view v = value ? value : "";
  GrainMode m = GrainMode::Auto;
  if (v == "quiet") m = GrainMode::Quiet;
  if (v == "loaded") m = GrainMode::Loaded;
  if (v == "force1") m = GrainMode::Force1;
  if (v == "off") m = GrainMode::Off;
  detail::grain_mode_value.store(int(m), std::memory_order_relaxed);
  return v.empty() || m != GrainMode::Auto;
}

inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

inline constexpr int64_t loaded_grain(OpKind kind) { return kGrainLoaded[size_t(kind)]; }
inline constexpr int64_t quiet_grain(OpKind kind) { return kGrainQuiet[size_t(kind)]; }

// The product of non-negative factors of a work count (2 * m * n * k), saturating at INT64_MAX.
inline int64_t work_product(std::initializer_list<int64_t> factors) {
  int64_t w = 1;
  for (const int64_t f : factors)
    if (__builtin_mul_overflow(w, std::max<int64_t>(f, 0), &w)) return std::numeric_limits<int64_t>::max();
  return w;
}

// The grain that decides a call of `work` units of `kind` under the current mode (Note [Grain
// size]). In the automatic mode the load estimate is read only for work between the two cuts:
// outside them both grains give the same thread count.
inline int64_t grain_for(OpKind kind, int64_t work) {
  switch (grain_mode()) {
    case GrainMode::Quiet:
      return quiet_grain(kind);
    case GrainMode::Auto:
      if (work >= 2 * quiet_grain(kind) && work < 2 * loaded_grain(kind) && machine_load().quiet())
        return quiet_grain(kind);
      return loaded_grain(kind);
    case GrainMode::Loaded:
    case GrainMode::Force1:
    case GrainMode::Off:
      break;
  }
  return loaded_grain(kind);
}

// Threads for `work` units of `kind` (Note [Grain size]): 1 below 2 * grain_for(kind, work), else
// every thread the calling thread may start. Inside a parallel region the caller decides (1).
inline int threads_for(OpKind kind, int64_t work) {
  const int all = max_threads();
  switch (grain_mode()) {
    case GrainMode::Force1:
      return 1;
    case GrainMode::Off:
      return all;
    default:
      break;
  }
  return work >= 2 * grain_for(kind, work) ? all : 1;
}

// The grain of a parallel_for over `items` items that each cost `work_per_item` units of `kind`:
// items per chunk such that a chunk holds at least grain_for(kind, items * work_per_item) units
// (1 under TESSERA_CPU_GRAIN=off).
inline int64_t grain_items(OpKind kind, int64_t work_per_item, int64_t items) {
  if (grain_mode() == GrainMode::Off) return 1;
  if (work_per_item < 1) work_per_item = 1;
  return std::max<int64_t>(1, grain_for(kind, work_product({items, work_per_item})) / work_per_item);
}

// Runs the enclosed code (oneDNN primitive creation and execution) with at most `threads` OpenMP
// threads: sets the calling thread's nthreads ICV and restores it on exit. The ICV is per thread,
// so other application threads are not affected. oneDNN 2.6 reads omp_get_max_threads() when it
// creates a primitive (the blocking, and the team its execute later starts, are planned for that
// count) and again for some kernels when it executes one, so both must happen inside the scope,
// and a primitive cached by the plugin must be keyed by the count it was created for.
class OmpThreadScope {
 public:
  explicit OmpThreadScope(int threads) {
#ifdef _OPENMP
    saved_ = omp_get_max_threads();
    if (threads >= 1 && threads < saved_)
      omp_set_num_threads(threads);
    else
      saved_ = 0;
#else
    (void)threads;
#endif
  }
  ~OmpThreadScope() {
#ifdef _OPENMP
    if (saved_ > 0) omp_set_num_threads(saved_);
#endif
  }
  OmpThreadScope(const OmpThreadScope&) = delete;
  OmpThreadScope& operator=(const OmpThreadScope&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace tessera::cpu
