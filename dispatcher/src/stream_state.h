// Private to the dispatcher: the current streams the call path reads (public API: tessera/stream.h,
// Note [Streams]).
//
// Note [Current stream lookup]
// A thread that has set a stream keeps a table of raw pointers, one per device type and index, so
// that the call path finds the current stream with thread-local loads and no allocation. The table
// is made by the first set_current_stream() of the thread, together with the shared owners it
// points into; until then the thread-local pointer to it is null, and the call path (every thread
// that never sets a stream) costs one initial-exec load (Note [Hot thread-locals]) and one
// predictable branch. A stream whose plugin generation has ended is caught on the cold path.
#pragma once
#include <cstdint>

#include "tessera/device.h"
#include "tessera/dispatcher.h"

namespace tessera {

inline constexpr int kMaxStreamDevices = 64;  // as PluginAllocator::kMaxDevices

namespace detail {

struct StreamState {
  Device device{DeviceType::CPU};
  void* handle = nullptr;
  const BackendDevice* owner = nullptr;  // its plugin generation (a registration is never reused)
  int id = 0;                            // 1, 2, ... per process, for names and profiler tracks
  ~StreamState();
};

using CurrentStreamTable = const StreamState* [kNumDeviceTypes][kMaxStreamDevices];
__attribute__((tls_model("initial-exec"))) inline thread_local CurrentStreamTable* t_current_stream = nullptr;

// Throws naming the stream: its plugin was shut down after it became current.
[[noreturn]] void throw_dead_stream(const StreamState& s);

}  // namespace detail

// The handle of the calling thread's current stream of (type, index); nullptr for the default.
inline void* current_stream_handle(DeviceType type, int32_t index) {
  const detail::CurrentStreamTable* table = detail::t_current_stream;
  if (__builtin_expect(table == nullptr, 1)) return nullptr;
  if (__builtin_expect(uint32_t(index) >= uint32_t(kMaxStreamDevices), 0)) return nullptr;
  const detail::StreamState* s = (*table)[size_t(type)][index];
  if (__builtin_expect(s == nullptr, 1)) return nullptr;
  if (__builtin_expect(backend_device_if_loaded(type) != s->owner, 0)) detail::throw_dead_stream(*s);
  return s->handle;
}

}  // namespace tessera
