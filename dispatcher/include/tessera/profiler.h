// The op profiler (Note [Profiler] in dispatcher/src/profiler.h). Off unless TESSERA_PROFILE is set
// or profiler_enable() is called; when off, a dispatched call pays one predictable branch.
//
// TESSERA_PROFILE is a comma-separated list: a file path writes a Chrome/Perfetto trace (JSON,
// "traceEvents" of ph "X" events: one per dispatched op on its host thread, "cat": "op", and on a
// device that reports event times one more per op, "cat": "device", on a track per stream with
// device times; Note [Profiler device times]) at exit; `summary` prints a table per op
// (calls, total, mean and max time) to stderr at exit. Both may be given: "trace.json,summary".
#pragma once
#include <string>

#include "tessera/export.h"

namespace tessera {

// Starts recording with a TESSERA_PROFILE-style spec ("trace.json", "summary" or both). Replaces
// the trace path and summary flag of an earlier spec; events recorded so far are kept. An empty
// spec stops recording. Thread-safe.
TESSERA_API void profiler_enable(const std::string& spec);
TESSERA_API bool profiler_enabled();
// Writes the trace file (every event recorded since the start, atomically: a temporary file renamed
// over the path). Called at exit and by shutdown_plugins(); a no-op without a trace path. Throws
// tessera::Error when the file cannot be written.
TESSERA_API void profiler_flush();
// The per-op summary table of the events recorded so far ("op  device  resolution  calls  total
// mean  max"), as printed at exit under TESSERA_PROFILE=summary.
TESSERA_API std::string profiler_summary();
// Forgets the events recorded so far. Events are kept in memory until then (a few hundred bytes
// each), so a long-running program flushes and clears after the phase it profiles.
TESSERA_API void profiler_clear();

}  // namespace tessera
