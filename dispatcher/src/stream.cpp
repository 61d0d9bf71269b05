// Streams and events: Note [Streams] in tessera/stream.h, Note [Current stream lookup] in
// stream_state.h.
#include "tessera/stream.h"

#include <atomic>
#include <chrono>
#include <new>

#include "host_api.h"
#include "op_registry.h"
#include "stream_state.h"
#include "tessera/dispatcher.h"

namespace tessera {

namespace {

int32_t index_of(Device d) { return d.index() < 0 ? 0 : d.index(); }
Device normalized(Device d) { return Device(d.type(), index_of(d)); }

std::atomic<int> g_next_stream_id{1};

// Note [Current stream lookup] (stream_state.h).
struct OwnerTable {
  std::shared_ptr<detail::StreamState> owners[kNumDeviceTypes][kMaxStreamDevices];
  detail::CurrentStreamTable current = {};
  OwnerTable() { detail::t_current_stream = &current; }
  ~OwnerTable() { detail::t_current_stream = nullptr; }
};
thread_local std::unique_ptr<OwnerTable> t_owners;

bool alive(const BackendDevice* owner, DeviceType type) { return backend_device_if_loaded(type) == owner; }

}  // namespace

namespace detail {

StreamState::~StreamState() {
  PluginCallGuard in_flight(std::nothrow);
  if (!in_flight.entered() || !alive(owner, device.type())) return;  // the plugin freed it at shutdown
  if (owner->iface->stream_destroy) owner->iface->stream_destroy(owner->self, index_of(device), handle);
}

void throw_dead_stream(const StreamState& s) {
  detail::throw_error(ErrorCode::Unavailable,
                      str_cat("stream ", s.id, " of '", s.device.str(),
                              "' is dead: its plugin was shut down (shutdown_plugins()) after the stream was made; "
                              "create a new stream with Stream::create"));
}

struct EventState {
  Device device{DeviceType::CPU};
  void* handle = nullptr;  // nullptr: a host event (Note [Host events])
  const BackendDevice* owner = nullptr;
  bool recorded = false;
  int64_t host_ns = 0;
  ~EventState() {
    if (!handle) return;
    PluginCallGuard in_flight(std::nothrow);
    if (!in_flight.entered() || !alive(owner, device.type())) return;
    if (owner->iface->event_destroy) owner->iface->event_destroy(owner->self, index_of(device), handle);
  }
};

}  // namespace detail

namespace {

void check_alive(const detail::StreamState* s) {
  if (s && !alive(s->owner, s->device.type())) detail::throw_dead_stream(*s);
}

void check_event_alive(const detail::EventState& e) {
  TESSERA_CHECK_CODE(!e.handle || alive(e.owner, e.device.type()), ErrorCode::Unavailable, "the event of '",
                     e.device.str(), "' is dead: its plugin was shut down after it was recorded; record a new event");
}

}  // namespace

// ---------------------------------------------------------------- Stream

Stream::Stream(Device device) : device_(normalized(device)) {}

Stream Stream::create(Device device) {
  device = normalized(device);
  PluginCallGuard in_flight;  // Note [In-flight plugin calls]
  if (device.is_cpu()) return Stream(device);  // Note [Host events]
  const BackendDevice& b = backend_device(device.type());
  if (!b.iface || !b.iface->stream_create) return Stream(device);
  void* handle = nullptr;
  throw_status(b.iface->stream_create(b.self, device.index(), &handle), "Stream::create(" + device.str() + ")");
  if (!handle) return Stream(device);
  auto state = std::make_shared<detail::StreamState>();
  state->device = device;
  state->handle = handle;
  state->owner = &b;
  state->id = g_next_stream_id.fetch_add(1, std::memory_order_relaxed);
  return Stream(device, std::move(state));
}

void* Stream::handle() const { return state_ ? state_->handle : nullptr; }

void Stream::synchronize() const {
  PluginCallGuard in_flight;
  check_alive(state_.get());
  const BackendDevice& b = backend_device(device_.type());
  if (!b.iface) return;
  if (b.iface->stream_synchronize) {
    throw_status(b.iface->stream_synchronize(b.self, device_.index(), handle()), "synchronize(" + str() + ")");
  } else if (b.iface->device_synchronize) {
    throw_status(b.iface->device_synchronize(b.self, device_.index()), "synchronize(" + str() + ")");
  }
}

void Stream::wait(const Event& event) const {
  if (!event.state_ || !event.state_->recorded || !event.state_->handle) return;  // complete (Note [Host events])
  const detail::EventState& e = *event.state_;
  TESSERA_CHECK(e.device == device_, "Stream::wait: the event was recorded on '", e.device.str(), "' but the stream is ",
                str(), "; wait on an event of the stream's own device, or synchronize the event on the host");
  PluginCallGuard in_flight;
  check_alive(state_.get());
  check_event_alive(e);
  const BackendDevice& b = *e.owner;
  if (b.iface->event_wait) {
    throw_status(b.iface->event_wait(b.self, device_.index(), e.handle, handle()), "wait(" + str() + ")");
  } else {
    event.synchronize();
  }
}

std::string Stream::str() const {
  return device_.str() + (state_ ? " stream " + std::to_string(state_->id) : std::string(" default stream"));
}

Stream current_stream(Device device) {
  device = normalized(device);
  if (device.index() >= kMaxStreamDevices || !t_owners) return Stream(device);
  const std::shared_ptr<detail::StreamState>& s = t_owners->owners[size_t(device.type())][device.index()];
  return s ? Stream(device, s) : Stream(device);
}

void set_current_stream(const Stream& stream) {
  const Device d = stream.device();
  TESSERA_CHECK(d.index() < kMaxStreamDevices, "set_current_stream: device index ", d.index(), " of '",
                device_type_name(d.type()), "' is out of range (0..", kMaxStreamDevices - 1, ")");
  check_alive(stream.state_.get());
  if (!t_owners) {
    if (!stream.state_) return;
    t_owners = std::make_unique<OwnerTable>();
  }
  t_owners->owners[size_t(d.type())][d.index()] = stream.state_;
  t_owners->current[size_t(d.type())][d.index()] = stream.state_.get();
}

StreamGuard::StreamGuard(const Stream& stream) : original_(tessera::current_stream(stream.device())), current_(stream) {
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() {
  try {
    set_current_stream(original_);
  } catch (const Error&) {
    // The original stream died meanwhile (its plugin shut down): the default stream is current.
    set_current_stream(Stream(original_.device()));
  }
}

// ---------------------------------------------------------------- Event

// Note [Host events]
// A device whose plugin has no events (event_create or event_record left out) still gets working
// events: record() synchronises the stream and reads the host clock, so the event is complete as
// soon as it is recorded, waiting on it is free, and elapsed_time() is the host time between the
// two records. The CPU always works this way, whatever its plugin offers: the runtime reads CPU
// memory directly once a call returns (Note [Device memory]), so CPU kernels are synchronous and
// the CPU has only its default stream; for it the host clock is exact.

Event::Event() = default;

namespace {
int64_t host_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void Event::record(const Stream& stream) {
  PluginCallGuard in_flight;
  check_alive(stream.state_.get());
  const Device d = stream.device();
  const BackendDevice& b = backend_device(d.type());
  if (!state_) {
    auto s = std::make_shared<detail::EventState>();
    s->device = d;
    s->owner = &b;
    if (!d.is_cpu() && b.iface && b.iface->event_create && b.iface->event_record)
      throw_status(b.iface->event_create(b.self, d.index(), &s->handle), "Event::record on " + stream.str());
    state_ = std::move(s);
  }
  detail::EventState& e = *state_;
  TESSERA_CHECK(e.device == d, "Event::record: the event belongs to '", e.device.str(), "' and cannot be recorded on ",
                stream.str(), "; use one event per device");
  check_event_alive(e);
  if (e.handle) {
    throw_status(b.iface->event_record(b.self, d.index(), e.handle, stream.handle()), "Event::record on " + stream.str());
  } else {
    stream.synchronize();
    e.host_ns = host_now_ns();
  }
  e.recorded = true;
}

void Event::synchronize() const {
  if (!state_ || !state_->recorded || !state_->handle) return;
  const detail::EventState& e = *state_;
  PluginCallGuard in_flight;
  check_event_alive(e);
  const BackendDevice& b = *e.owner;
  if (b.iface->event_synchronize) {
    throw_status(b.iface->event_synchronize(b.self, index_of(e.device), e.handle),
                 "Event::synchronize on '" + e.device.str() + "'");
  } else if (b.iface->device_synchronize) {
    throw_status(b.iface->device_synchronize(b.self, index_of(e.device)), "Event::synchronize on '" + e.device.str() + "'");
  }
}

double Event::elapsed_time(const Event& end) const {
  TESSERA_CHECK(state_ && state_->recorded && end.state_ && end.state_->recorded,
                "Event::elapsed_time: both events must be recorded first (", (state_ && state_->recorded ? "end" : "start"),
                " was not); call record(stream) on each");
  const detail::EventState& a = *state_;
  const detail::EventState& z = *end.state_;
  TESSERA_CHECK(a.device == z.device, "Event::elapsed_time: the events belong to different devices ('", a.device.str(),
                "' and '", z.device.str(), "'); time events of one device");
  if (!a.handle && !z.handle) return double(z.host_ns - a.host_ns) / 1e6;
  synchronize();
  end.synchronize();
  PluginCallGuard in_flight;
  check_event_alive(a);
  const BackendDevice& b = *a.owner;
  const bool has = TESSERA_ABI_HAS_FIELD(b.iface, tessera_device_interface_t, event_elapsed_time) &&
                   b.iface->event_elapsed_time && a.handle && z.handle;
  const std::string no_times = "Event::elapsed_time: device '" + a.device.str() + "' (plugin '" + b.plugin +
                               "') reports no event times (its device interface leaves event_elapsed_time out); "
                               "time on the host around Event::synchronize instead";
  TESSERA_CHECK_CODE(has, ErrorCode::Unimplemented, no_times);
  double ms = 0;
  bool unimplemented = false;
  throw_status(b.iface->event_elapsed_time(b.self, index_of(a.device), a.handle, z.handle, &ms),
               "Event::elapsed_time on '" + a.device.str() + "'", &unimplemented);
  TESSERA_CHECK_CODE(!unimplemented, ErrorCode::Unimplemented, no_times);
  return ms;
}

Device Event::device() const {
  TESSERA_CHECK(state_, "Event::device: the event was never recorded, so it has no device yet");
  return state_->device;
}

void* Event::handle() const { return state_ ? state_->handle : nullptr; }

// ---------------------------------------------------------------- record_stream

void record_stream(const Tensor& tensor, const Stream& stream) {
  TESSERA_CHECK(tensor.defined(), "record_stream: the tensor is undefined (default-constructed)");
  const Device td = normalized(tensor.device());
  TESSERA_CHECK(td == stream.device(), "record_stream: the tensor is on '", td.str(), "' but the stream is ",
                stream.str(), "; record a stream of the tensor's own device");
  void* handle = tensor.storage()->data();
  if (td.is_cpu() || !handle) return;
  PluginCallGuard in_flight;
  check_alive(stream.state_.get());
  TESSERA_CHECK_CODE(tensor.storage()->live(), ErrorCode::Unavailable, "record_stream: the tensor's storage is unusable because ",
                     tensor.storage()->unusable_reason());
  const BackendDevice& b = backend_device(td.type());
  if (!TESSERA_ABI_HAS_FIELD(b.iface, tessera_device_interface_t, memory_record_stream) || !b.iface->memory_record_stream)
    return;
  throw_status(b.iface->memory_record_stream(b.self, td.index(), handle, stream.handle()),
               "record_stream(" + stream.str() + ")");
}

}  // namespace tessera
