// Private to the dispatcher: spans recorded by plugins (Note [Plugin spans] in tessera/plugin_abi.h;
// public API: tessera/profiler.h). The host API slots (host_api.cpp) record into per-thread buffers
// here; the op profiler (profiler.cpp) writes them into its trace and summary.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>

#include "tessera/device.h"
#include "tessera/plugin_abi.h"

namespace tessera::detail {

// The profiler clock of the ABI: the steady clock in nanoseconds (CLOCK_MONOTONIC on Linux).
int64_t profiler_clock_ns();
// The profiler clock at the trace's time 0.
int64_t profiler_epoch_ns();

// profiler_record_span for the plugin `plugin`, whose device type is `type`: validates `span`
// (Note [Plugin spans]) and records a copy of it while profiling is on. Never throws.
tessera_status_t record_plugin_span(const std::string& plugin, DeviceType type,
                                    const tessera_profiler_span_t* span);

// Where the host event of a correlation id lies in the trace (the start of its flow arrow).
struct HostEventPlace {
  int tid;
  double ts_us;
};
// Appends every plugin span to `events` ("X" events on a track per plugin, device and stream, with
// their thread_name records) and a flow arrow ("s" at the host event, "f" at the span) for each span
// whose correlation id is in `host_events`.
void append_plugin_spans(nlohmann::json& events, int pid,
                         const std::unordered_map<uint64_t, HostEventPlace>& host_events);
// The summary table of plugin spans per (name, category, device): "" when there are none.
std::string plugin_spans_summary();
void clear_plugin_spans();

}  // namespace tessera::detail
