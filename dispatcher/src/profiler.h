// Private to the dispatcher: the profiler's hook into the call path (public API: tessera/profiler.h).
//
// Note [Profiler]
// call_unboxed() tests one relaxed atomic flag; when it is set the call goes through profile_call(),
// which times the whole dispatch (shape rule, conversions, allocation, kernel) on the host clock and
// appends one event to a buffer owned by the calling thread (per-thread buffers: threads never
// contend while recording; flush takes each buffer's lock briefly). Nested dispatches (a composite's
// ops, the CPU op a fallback runs) are events of their own inside the outer one's time span.
// How the call was resolved is "kernel" unless the slow path names another (profile_resolution).
// Each profiled call, and each ProfilerRange (a cross-device copy, a compiled partition run), gets a
// correlation id that is the thread's current one for its length: spans that plugins record carry
// it (Note [Plugin spans] in tessera/plugin_abi.h; their buffers live in profiler_spans.cpp).
//
// Note [Profiler device times]
// The host time of a call on an asynchronous device is its launch. When the device's plugin reports
// event times (ABI 1.1 event_elapsed_time), profile_call also records a device event before and
// after the call on the device's current stream, and the trace gets a second event for the call,
// "cat": "device", on a track of its own per stream (tid 1000, 1001, ..., named by a thread_name
// record such as "my_hardware_device:0 stream 2"), so concurrent streams show as overlapping
// tracks. Device times are put on the host clock through an anchor per device: an event recorded
// and synchronised (once, at the first flush that needs it) whose completion is taken as the host
// time read right after; every other event is placed at anchor + elapsed_time(anchor, event).
// Nested calls record spans of their own too. Flushing synchronises the recorded events.
#pragma once
#include <atomic>

#include "op_registry.h"

namespace tessera {

namespace detail {
extern std::atomic<bool> g_profiler_on;
void profile_set_resolution(const char* how);
}  // namespace detail

inline bool profiler_on() { return detail::g_profiler_on.load(std::memory_order_relaxed); }

using DispatchFn = int (*)(OperatorEntry& op, const CallFrame& f, Tensor* outs);
// Runs `dispatch` and records its event (also when it throws: resolution "error").
int profile_call(OperatorEntry& op, const CallFrame& f, Tensor* outs, DispatchFn dispatch);

// Names how the innermost profiled call was resolved ("composite", "fallback", "shape only");
// `how` must be a string literal. Nothing when the profiler is off.
inline void profile_resolution(const char* how) {
  if (__builtin_expect(profiler_on(), 0)) detail::profile_set_resolution(how);
}

}  // namespace tessera
