// Parallel loops of the CPU plugin over OpenMP (libgomp, the runtime oneDNN uses too, so both
// share one thread pool).
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>

#include "grain.h"

namespace tessera::cpu {

inline bool in_parallel_region() {
#ifdef _OPENMP
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

namespace detail {
// Runs f over [begin, end) cut into `chunks` pieces of `step` elements on `team` threads, with a
// static (one piece per thread) or dynamic (pieces to whichever thread is free) schedule. An
// exception is caught on its thread and the first one is rethrown after the loop.
template <bool Dynamic, typename F>
void run_chunks(int64_t begin, int64_t end, int64_t step, int64_t chunks, int team, F& f) {
  std::exception_ptr error;
  auto run = [&](int64_t c) {
    const int64_t b = begin + c * step;
    const int64_t e = std::min(end, b + step);
    if (b >= e) return;
    try {
      f(b, e);
    } catch (...) {
#pragma omp critical(tessera_cpu_parallel_error)
      if (!error) error = std::current_exception();
    }
  };
  if constexpr (Dynamic) {
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) run(c);
  } else {
#pragma omp parallel for num_threads(team) schedule(static, 1)
    for (int64_t c = 0; c < chunks; ++c) run(c);
  }
  if (error) std::rethrow_exception(error);
}
}  // namespace detail

namespace detail {
// The shared front of both loops: serial below 2*grain (Note [Grain size]; TESSERA_CPU_GRAIN=force1
// makes every loop serial, =off splits every loop of two or more elements), with one thread, or
// inside a parallel region; otherwise a static plan (one chunk per thread) or a dynamic one (about 8 chunks per
// thread, multiples of 64 elements, handed to whichever thread is free).
template <bool Dynamic, typename F>
void parallel_loop(int64_t begin, int64_t end, int64_t grain, F& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const GrainMode mode = grain_mode();
  if (grain < 1 || mode == GrainMode::Off) grain = 1;
  const int threads = max_threads();
  if (mode == GrainMode::Force1 || n < 2 * grain || threads <= 1 || in_parallel_region()) {
    f(begin, end);
    return;
  }
#ifdef _OPENMP
  if constexpr (Dynamic) {
    const int64_t team = std::min<int64_t>(threads, n / grain);
    int64_t step = std::max<int64_t>(grain, n / (team * 8));
    step = (step + 63) / 64 * 64;
    run_chunks<true>(begin, end, step, (n + step - 1) / step, int(team), f);
  } else {
    const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
    run_chunks<false>(begin, end, (n + chunks - 1) / chunks, chunks, int(chunks), f);
  }
#else
  f(begin, end);
#endif
}
}  // namespace detail

// Calls f(chunk_begin, chunk_end) over [begin, end) split into at most max_threads() contiguous
// chunks of at least `grain` elements. Runs serially (one call f(begin, end)) when the range is
// below 2*grain, when there is one thread, or when already inside a parallel region. f must not
// throw across threads: exceptions are caught per thread and the first is rethrown after the loop.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F f) {
  detail::parallel_loop</*Dynamic=*/false>(begin, end, grain, f);
}

// Like parallel_for, but hands out smaller chunks (about 8 per thread, at least `grain` elements,
// multiples of 64 elements) to whichever thread is free (dynamic schedule), so a thread that
// shares its core with another process does not hold up the whole loop: the others take over
// its remaining chunks. For loops whose chunks are independent (elementwise work); f may be
// called with any number of chunks.
template <typename F>
void parallel_for_dynamic(int64_t begin, int64_t end, int64_t grain, F f) {
  detail::parallel_loop</*Dynamic=*/true>(begin, end, grain, f);
}

}  // namespace tessera::cpu
