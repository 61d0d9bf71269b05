// How many threads a piece of CPU work gets: one below a measured grain per op kind, all of them
// above (Note [Grain size]). Private to the CPU plugin.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string_view>

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
// linear, conv2d and attention. The constants were chosen from bench_cpu_grain (benchmarks/cpu),
// which times each kind on one thread and on all threads; the table, the date, the load of the
// machine and the reasoning are in docs/performance.md ("Grain size"). TESSERA_CPU_GRAIN (read
// at plugin load) overrides the rule for measurements: "force1" runs everything on one thread, "off"
// splits every loop that can be split and gives oneDNN all threads; unset keeps the rule, and any
// other value keeps it with a warning under TESSERA_LOG=cpu.
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

// Work per thread below which a second thread does not pay off, per OpKind (Note [Grain size]).
inline constexpr int64_t kGrain[size_t(OpKind::kCount)] = {
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

enum class GrainMode : int { Rule, Force1, Off };

namespace detail {
inline std::atomic<int> grain_mode_value{int(GrainMode::Rule)};
}  // namespace detail

inline GrainMode grain_mode() { return GrainMode(detail::grain_mode_value.load(std::memory_order_relaxed)); }

// Sets the mode from TESSERA_CPU_GRAIN's value ("force1", "off"; anything else or null: the rule).
// Returns false for a value that is none of those (the rule applies; the caller warns).
inline bool set_grain_mode(const char* value) {
  const std::string_view v = value ? value : "";
  const GrainMode m = v == "force1" ? GrainMode::Force1 : v == "off" ? GrainMode::Off : GrainMode::Rule;
  detail::grain_mode_value.store(int(m), std::memory_order_relaxed);
  return v.empty() || m != GrainMode::Rule;
}

inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

inline constexpr int64_t grain(OpKind kind) { return kGrain[size_t(kind)]; }

// The product of non-negative factors of a work count (2 * m * n * k), saturating at INT64_MAX.
inline int64_t work_product(std::initializer_list<int64_t> factors) {
  int64_t w = 1;
  for (const int64_t f : factors)
    if (__builtin_mul_overflow(w, std::max<int64_t>(f, 0), &w)) return std::numeric_limits<int64_t>::max();
  return w;
}

// Threads for `work` units of `kind` (Note [Grain size]): 1 below 2 * grain(kind), else every
// thread the calling thread may start. Inside a parallel region the caller decides (1).
inline int threads_for(OpKind kind, int64_t work) {
  const int all = max_threads();
  switch (grain_mode()) {
    case GrainMode::Force1:
      return 1;
    case GrainMode::Off:
      return all;
    case GrainMode::Rule:
      break;
  }
  return work >= 2 * grain(kind) ? all : 1;
}

// The grain of a parallel_for over items that each cost `work_per_item` units of `kind`: items per
// chunk such that a chunk holds at least grain(kind) units (1 under TESSERA_CPU_GRAIN=off).
inline int64_t grain_items(OpKind kind, int64_t work_per_item) {
  if (grain_mode() == GrainMode::Off) return 1;
  if (work_per_item < 1) work_per_item = 1;
  return std::max<int64_t>(1, grain(kind) / work_per_item);
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
