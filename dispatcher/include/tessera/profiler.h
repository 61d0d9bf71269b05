// The op profiler (Note [Profiler] in dispatcher/src/profiler.h). Off unless TESSERA_PROFILE is set
// or profiler_enable() is called; when off, a dispatched call pays one predictable branch.
//
// TESSERA_PROFILE is a comma-separated list: a file path writes a Chrome/Perfetto trace (JSON,
// "traceEvents" of ph "X" events: one per dispatched op on its host thread, "cat": "op", and on a
// device that reports event times one more per op, "cat": "device", on a track per stream with
// device times; Note [Profiler device times]) at exit; `summary` prints a table per op
// (calls, total, mean and max time) to stderr at exit. Both may be given: "trace.json,summary".
//
// Plugins add spans of their own (kernel launches, copies, compiled partition runs; Note [Plugin
// spans] in tessera/plugin_abi.h): in the trace they are "X" events on a track per plugin, device
// and stream, linked to the host op that issued them by args.correlation (on both events) and a flow
// arrow; here they are listed by profiler_plugin_spans() and counted in the summary.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/device.h"
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

// A span a plugin recorded through the host API (profiler_record_span, ABI 1.3).
struct ProfilerSpan {
  std::string name;      // as the plugin gave it (untrusted text: escape it before printing)
  std::string category;  // "kernel", "copy", "partition", ...; "device" when the plugin gave none
  std::string plugin;    // the plugin that recorded it
  std::string device;    // "my_hardware_device:0"; the plugin's name for a span of no device
  uint64_t stream = 0;   // the plugin's number for the queue; 0: the default stream
  int64_t start_ns = 0;  // on the trace's clock: nanoseconds since profiling started ("ts" * 1000)
  int64_t end_ns = 0;
  uint64_t correlation_id = 0;  // of the host op or range that issued the work; 0: none
  std::string args_json;        // the plugin's extra fields, a JSON object, or ""
};
// Every plugin span recorded since the last profiler_clear(), in start order. Thread-safe.
TESSERA_API std::vector<ProfilerSpan> profiler_plugin_spans();
// The correlation id of the innermost host op or ProfilerRange being profiled on the calling
// thread (its "args.correlation" in the trace); 0 when none or when profiling is off.
TESSERA_API uint64_t profiler_correlation_id();

// A span of host work that is not an op (a cross-device copy, a compiled partition run) in the
// profile: while alive it is the calling thread's current host op for correlation (plugin spans
// recorded under it carry its id), and when it ends it is an event of category `category` named
// `name` on `device`, with args.correlation. Costs one relaxed load when profiling is off.
class TESSERA_API ProfilerRange {
 public:
  ProfilerRange() = default;
  ProfilerRange(const char* category, std::string name, Device device) {
    if (profiler_enabled()) begin(category, std::move(name), device);
  }
  ~ProfilerRange() {
    if (active_) end();
  }
  ProfilerRange(const ProfilerRange&) = delete;
  ProfilerRange& operator=(const ProfilerRange&) = delete;
  // Starts the range when profiling is on and it has not started (for names built only then).
  void begin(const char* category, std::string name, Device device);
  uint64_t correlation_id() const { return correlation_; }

 private:
  void end();
  bool active_ = false;
  const char* category_ = nullptr;  // a string literal
  std::string name_;
  Device device_{DeviceType::CPU};
  uint64_t correlation_ = 0, outer_ = 0;
  int64_t start_ns_ = 0;
};

}  // namespace tessera
