// Streams and events, in the shape of libtorch's c10::Stream / at::cuda::CUDAEvent.
//
// Note [Streams]
// A Stream is an in-order queue of work on one device: the device's default stream (handle NULL,
// what every call used before streams existed) or one made by Stream::create() through the
// plugin's stream_create. Each thread has a current stream per device (the default stream until
// set_current_stream or a StreamGuard changes it); every kernel the dispatcher calls on a device
// receives that device's current stream in tessera_kernel_call_t::stream, and copies to, from and
// between devices run on it. Work on two streams may run concurrently: order it with an Event
// (`event.record(a); b.wait(event);`) or by synchronising.
// The CPU (whose kernels are synchronous) and a device whose plugin has no streams run everything
// on their default stream: Stream::create() returns that stream, and events fall back to synchronising the
// device and reading the host clock (Note [Host events]).
// A stream belongs to the plugin generation that created it: after shutdown_plugins() it is dead,
// and using it (also as a thread's current stream) throws.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/device.h"
#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera {

class Event;

namespace detail {
struct StreamState;
struct EventState;
}  // namespace detail

class TESSERA_API Stream {
 public:
  // The default stream of `device` (index -1 means index 0).
  explicit Stream(Device device);
  // A new stream on `device` from its plugin (the default stream when the plugin has no streams).
  // Throws naming the device when the plugin fails to create one. The plugin's stream is destroyed
  // when the last Stream copy (and the last thread that has it current) lets go of it.
  static Stream create(Device device);

  Device device() const { return device_; }
  // The plugin's opaque handle; nullptr for the default stream.
  void* handle() const;
  bool is_default() const { return state_ == nullptr; }
  // Blocks the host until all work queued on this stream so far has completed. Throws the error of
  // a failed asynchronous kernel, naming the device.
  void synchronize() const;
  // Work queued on this stream after the call waits for `event` (does not block the host). An event
  // never recorded is complete. Throws when the event belongs to another device.
  void wait(const Event& event) const;
  // "my_hardware_device:0 stream 2", "cpu default stream"
  std::string str() const;

  friend bool operator==(const Stream& a, const Stream& b) { return a.device_ == b.device_ && a.state_ == b.state_; }
  friend bool operator!=(const Stream& a, const Stream& b) { return !(a == b); }

 private:
  friend TESSERA_API Stream current_stream(Device device);
  Stream(Device device, std::shared_ptr<detail::StreamState> state) : device_(device), state_(std::move(state)) {}
  friend TESSERA_API void set_current_stream(const Stream& stream);
  friend class Event;
  friend TESSERA_API void record_stream(const Tensor& tensor, const Stream& stream);
  Device device_;
  std::shared_ptr<detail::StreamState> state_;
};

// The calling thread's current stream of `device` (its default stream unless set).
TESSERA_API Stream current_stream(Device device);
// Makes `stream` the calling thread's current stream of its device. Throws for a dead stream or a
// device index beyond 63.
TESSERA_API void set_current_stream(const Stream& stream);

// Sets the current stream of `stream`'s device for a scope and restores the previous one.
class TESSERA_API StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
  const Stream& original_stream() const { return original_; }
  const Stream& current_stream() const { return current_; }

 private:
  Stream original_;
  Stream current_;
};

// A marker in a stream. Created on its first record() (it takes the stream's device then), like
// at::cuda::CUDAEvent. Copies share the same plugin event.
class TESSERA_API Event {
 public:
  Event();
  // Marks the point in `stream` reached by the work queued so far. Recording again moves the
  // marker. Throws when the event already belongs to another device.
  void record(const Stream& stream);
  // Blocks the host until the recorded work has completed (nothing to wait for when never recorded).
  void synchronize() const;
  // Milliseconds of device time from this event to `end` (recorded later). Synchronises both first.
  // Throws when either was never recorded, they belong to different devices, or the device reports
  // no event times.
  double elapsed_time(const Event& end) const;
  bool is_created() const { return state_ != nullptr; }
  Device device() const;
  // The plugin's event handle (nullptr before the first record or on a device without events).
  void* handle() const;

 private:
  friend class Stream;
  std::shared_ptr<detail::EventState> state_;
};

// Tensor::record_stream, as a function: marks `tensor`'s memory as used by work on `stream`, so
// that when the tensor's storage is freed its memory is not handed out again before the work
// queued on `stream` up to then has completed (Note [Stream-ordered allocation] in docs/plugins.md).
// Does nothing on a device whose plugin has no memory_record_stream (its memory_free is safe on its
// own) and for a tensor without memory. Throws when `stream` is on another device than the tensor.
TESSERA_API void record_stream(const Tensor& tensor, const Stream& stream);

}  // namespace tessera
