// Private to the dispatcher: the current streams the call path reads (public API: tessera/stream.h,
// Note [Streams]).
//
// Note [Current stream lookup]
// Each thread keeps a fixed table of raw pointers, one per device type and index, so that the call
// path finds the current stream with one thread-local load and no allocation; nullptr (the default
// stream) is the common case and costs one predictable branch. The table holds no ownership: the
// shared owners live in a second, lazily made thread-local table that only set_current_stream()
// touches. A stream whose plugin generation has ended is caught on the cold, non-null path.
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

inline thread_local const StreamState* t_current_stream[kNumDeviceTypes][kMaxStreamDevices] = {};

// Throws naming the stream: its plugin was shut down after it became current.
[[noreturn]] void throw_dead_stream(const StreamState& s);

}  // namespace detail

// The handle of the calling thread's current stream of (type, index); nullptr for the default.
inline void* current_stream_handle(DeviceType type, int32_t index) {
  if (__builtin_expect(uint32_t(index) >= uint32_t(kMaxStreamDevices), 0)) return nullptr;
  const detail::StreamState* s = detail::t_current_stream[size_t(type)][index];
  if (__builtin_expect(s == nullptr, 1)) return nullptr;
  if (__builtin_expect(backend_device_if_loaded(type) != s->owner, 0)) detail::throw_dead_stream(*s);
  return s->handle;
}

}  // namespace tessera
