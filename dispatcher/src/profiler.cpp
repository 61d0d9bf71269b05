// The op profiler: Note [Profiler] in profiler.h.
#include "profiler.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "profiler_spans.h"
#include "tessera/log.h"
#include "tessera/profiler.h"
#include "tessera/stream.h"

namespace tessera {

namespace detail {
std::atomic<bool> g_profiler_on{false};
}  // namespace detail

namespace {

struct TensorDesc {
  DType dtype;
  int ndim;
};

struct DeviceSpan {
  Stream stream;
  tessera::Event start, end;
};

// One dispatched call, or a ProfilerRange (op null, label its name). Sizes live inline for the usual
// few small tensors: recording allocates nothing beyond the thread buffer's amortised growth.
struct OpEvent {
  const OperatorEntry* op;  // entries are never freed; null for a ProfilerRange
  int64_t start_ns;
  int64_t dur_ns;
  Device device{DeviceType::CPU};
  const char* resolution;
  int num_inputs = 0;
  detail::SmallVector<TensorDesc, 4> tensors;  // inputs, then outputs
  detail::SmallVector<int64_t, 12> sizes;      // their sizes, concatenated
  std::string error;
  uint64_t correlation = 0;  // Note [Plugin spans] in tessera/plugin_abi.h
  const char* category = "op";
  std::string label;  // a ProfilerRange's name
  // Device time (Note [Profiler device times]): events around the call on the device's current
  // stream; not created for the CPU or a device that reports no event times.
  std::shared_ptr<DeviceSpan> span;

  void add(const TensorImpl& t) {
    tensors.push_back(TensorDesc{t.dtype(), int(t.dim())});
    for (int64_t d : t.sizes()) sizes.push_back(d);
  }
};

struct ThreadBuffer {
  std::mutex mutex;
  std::vector<OpEvent> events;
  int tid = 0;
};

struct ProfilerState {
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;  // kept after their thread exits
  std::string trace_path;
  bool summary = false;
  bool at_exit_registered = false;
  int next_tid = 1;
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();
  // Per device: an event whose device time is known on the host clock (Note [Profiler device times]).
  std::map<std::pair<int, int>, std::pair<tessera::Event, int64_t>> anchors;
};

ProfilerState& state() {
  static ProfilerState* s = new ProfilerState();  // never destroyed: used at exit
  return *s;
}

thread_local std::shared_ptr<ThreadBuffer> t_buffer;
thread_local const char** t_resolution = nullptr;  // of the innermost profiled call
thread_local uint64_t t_correlation = 0;             // of the innermost profiled call or range
std::atomic<uint64_t> g_next_correlation{1};

const std::string& event_name(const OpEvent& e) { return e.op ? e.op->name : e.label; }

ThreadBuffer& thread_buffer() {
  if (!t_buffer) {
    auto b = std::make_shared<ThreadBuffer>();
    ProfilerState& s = state();
    std::lock_guard lock(s.mutex);
    b->tid = s.next_tid++;
    s.buffers.push_back(b);
    t_buffer = std::move(b);
  }
  return *t_buffer;
}

constexpr int kFirstStreamTrack = 1000;  // host threads are 1, 2, ...

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - state().epoch)
      .count();
}

std::string device_label(Device d) { return d.is_cpu() ? std::string("cpu") : d.str(); }

// Every event recorded so far with its thread id, in start order.
std::vector<std::pair<int, OpEvent>> snapshot() {
  ProfilerState& s = state();
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  {
    std::lock_guard lock(s.mutex);
    buffers = s.buffers;
  }
  std::vector<std::pair<int, OpEvent>> out;
  for (const auto& b : buffers) {
    std::lock_guard lock(b->mutex);
    for (const OpEvent& e : b->events) out.emplace_back(b->tid, e);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second.start_ns < b.second.start_ns; });
  return out;
}

// The dtypes and shapes of the event's inputs (outputs: false).
std::pair<nlohmann::json, nlohmann::json> describe_json(const OpEvent& e, bool inputs) {
  nlohmann::json dtypes = nlohmann::json::array(), shapes = nlohmann::json::array();
  size_t offset = 0;
  for (size_t i = 0; i < e.tensors.size(); ++i) {
    const TensorDesc& t = e.tensors[i];
    if ((int(i) < e.num_inputs) == inputs) {
      dtypes.push_back(std::string(dtype_name(t.dtype)));
      shapes.push_back(std::vector<int64_t>(e.sizes.begin() + offset, e.sizes.begin() + offset + size_t(t.ndim)));
    }
    offset += size_t(t.ndim);
  }
  return {std::move(dtypes), std::move(shapes)};
}

// The device's anchor: an event recorded and synchronised at a known host time.
std::pair<tessera::Event, int64_t> anchor_of(const Stream& stream) {
  ProfilerState& s = state();
  const std::pair<int, int> key{int(stream.device().type()), stream.device().index()};
  {
    std::lock_guard lock(s.mutex);
    auto it = s.anchors.find(key);
    if (it != s.anchors.end()) return it->second;
  }
  tessera::Event anchor;
  anchor.record(stream);
  anchor.synchronize();
  const int64_t host_ns = now_ns();
  std::lock_guard lock(s.mutex);
  return s.anchors.emplace(key, std::make_pair(anchor, host_ns)).first->second;
}

// Appends the device-time event of `e` on its stream's track (skipped when the device cannot time it).
void add_device_event(nlohmann::json& events, std::map<std::string, int>& tracks, int pid, const OpEvent& e) {
  double ts_us = 0, dur_us = 0;
  try {
    const auto [anchor, anchor_ns] = anchor_of(e.span->stream);
    ts_us = (double(anchor_ns) + anchor.elapsed_time(e.span->start) * 1e6) / 1000.0;
    dur_us = e.span->start.elapsed_time(e.span->end) * 1000.0;
  } catch (const std::exception& ex) {
    if (log_enabled("dispatch"))
      log_message(LogLevel::Info, "dispatch", "profiler: no device time for '" + event_name(e) + "': " + ex.what());
    return;
  }
  const std::string name = e.span->stream.str();
  auto [it, fresh] = tracks.emplace(name, kFirstStreamTrack + int(tracks.size()));
  if (fresh)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", it->second}, {"args", {{"name", name}}}});
  events.push_back({{"name", event_name(e)},
                    {"cat", "device"},
                    {"ph", "X"},
                    {"ts", ts_us},
                    {"dur", std::max(dur_us, 0.0)},
                    {"pid", pid},
                    {"tid", it->second},
                    {"args", {{"op", event_name(e)}, {"device", device_label(e.device)}, {"stream", name}}}});
}

std::string trace_json() {
  nlohmann::json events = nlohmann::json::array();
  const int pid = int(::getpid());
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", "tessera"}}}});
  std::map<std::string, int> tracks;  // stream name -> tid of its track
  std::unordered_map<uint64_t, detail::HostEventPlace> host_events;  // correlation id -> its event
  for (const auto& [tid, e] : snapshot()) {
    if (e.span) add_device_event(events, tracks, pid, e);
    auto [in_dtypes, in_shapes] = describe_json(e, true);
    auto [out_dtypes, out_shapes] = describe_json(e, false);
    nlohmann::json args = {{"op", event_name(e)},
                           {"device", device_label(e.device)},
                           {"resolution", e.resolution},
                           {"dtypes", std::move(in_dtypes)},
                           {"shapes", std::move(in_shapes)},
                           {"output_dtypes", std::move(out_dtypes)},
                           {"output_shapes", std::move(out_shapes)}};
    if (!e.error.empty()) args["error"] = e.error;
    if (e.correlation) {
      args["correlation"] = e.correlation;
      host_events.emplace(e.correlation, detail::HostEventPlace{tid, double(e.start_ns) / 1000.0});
    }
    events.push_back({{"name", event_name(e)},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"ts", double(e.start_ns) / 1000.0},
                      {"dur", double(e.dur_ns) / 1000.0},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", std::move(args)}});
  }
  detail::append_plugin_spans(events, pid, host_events);
  // Plugin text is untrusted (Note [Untrusted text]): bytes that are not UTF-8 become U+FFFD.
  return nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  TESSERA_CHECK(f, "profiler: cannot write the trace to '", tmp, "': ", std::strerror(errno),
                "; set TESSERA_PROFILE to a path in a writable folder");
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    TESSERA_CHECK(false, "profiler: writing the trace '", tmp, "' failed: ", std::strerror(written ? errno : write_errno),
                  "; check the free space of its folder");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    TESSERA_CHECK(false, "profiler: cannot rename '", tmp, "' to '", path, "': ", std::strerror(e));
  }
}

void at_exit() {
  ProfilerState& s = state();
  bool summary;
  {
    std::lock_guard lock(s.mutex);
    summary = s.summary;
  }
  try {
    profiler_flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: %s\n", e.what());
  }
  if (summary) std::fputs(profiler_summary().c_str(), stderr);
}

// TESSERA_PROFILE is read once, when the library loads.
const bool g_env_read = [] {
  const char* v = secure_env("TESSERA_PROFILE");
  try {
    if (v && *v) profiler_enable(v);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: %s; profiling is off\n", e.what());
  }
  return true;
}();

}  // namespace

namespace detail {
void profile_set_resolution(const char* how) {
  if (t_resolution) *t_resolution = how;
}
}  // namespace detail

namespace {
// Records the start event of a call on `device` when its plugin reports event times.
std::shared_ptr<DeviceSpan> begin_device_span(Device device) {
  const BackendDevice* b = backend_device_if_loaded(device.type());
  if (!b || !b->iface || !b->iface->event_create || !b->iface->event_record ||
      !TESSERA_ABI_HAS_FIELD(b->iface, tessera_device_interface_t, event_elapsed_time) || !b->iface->event_elapsed_time)
    return nullptr;
  try {
    auto span = std::make_shared<DeviceSpan>(DeviceSpan{current_stream(device), {}, {}});
    span->start.record(span->stream);
    return span;
  } catch (const std::exception&) {
    return nullptr;  // an unusable device: the call itself reports it
  }
}
}  // namespace

int profile_call(OperatorEntry& op, const CallFrame& f, Tensor* outs, DispatchFn dispatch) {
  OpEvent e;
  e.op = &op;
  e.resolution = "kernel";
  for (int i = 0; i < f.num_tensors; ++i)
    if (f.tensors[i]) {
      e.add(*f.tensors[i]);
      if (e.device.is_cpu()) e.device = f.tensors[i]->device();
    }
  e.num_inputs = int(e.tensors.size());
  if (f.device && e.device.is_cpu()) e.device = *f.device;
  const char** outer = t_resolution;
  t_resolution = &e.resolution;
  const uint64_t outer_correlation = t_correlation;
  e.correlation = g_next_correlation.fetch_add(1, std::memory_order_relaxed);
  t_correlation = e.correlation;
  int n = 0;
  if (!e.device.is_cpu()) e.span = begin_device_span(e.device);
  e.start_ns = now_ns();
  try {
    n = dispatch(op, f, outs);
  } catch (const std::exception& ex) {
    e.dur_ns = now_ns() - e.start_ns;
    t_resolution = outer;
    t_correlation = outer_correlation;
    e.resolution = "error";
    e.error = ex.what();
    ThreadBuffer& b = thread_buffer();
    std::lock_guard lock(b.mutex);
    b.events.push_back(std::move(e));
    throw;
  }
  e.dur_ns = now_ns() - e.start_ns;
  t_resolution = outer;
  t_correlation = outer_correlation;
  if (e.span) {
    try {
      e.span->end.record(e.span->stream);
    } catch (const std::exception&) {
      e.span.reset();
    }
  }
  for (int o = 0; o < n; ++o)
    if (outs[o].defined()) e.add(*outs[o].impl());
  if (n > 0 && outs[0].defined()) e.device = outs[0].device();  // where it ran (Note [Profiler])
  ThreadBuffer& b = thread_buffer();
  std::lock_guard lock(b.mutex);
  b.events.push_back(std::move(e));
  return n;
}

void profiler_enable(const std::string& spec) {
  ProfilerState& s = state();
  std::string path;
  bool summary = false;
  for (size_t start = 0; start <= spec.size();) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    std::string item = spec.substr(start, comma - start);
    if (item == "summary") {
      summary = true;
    } else if (!item.empty()) {
      TESSERA_CHECK(path.empty(), "TESSERA_PROFILE='", spec, "' names two trace files ('", path, "' and '", item,
                    "'); give one path, optionally with ',summary'");
      path = item;
    }
    start = comma + 1;
  }
  {
    std::lock_guard lock(s.mutex);
    s.trace_path = path;
    s.summary = summary;
    if (!s.at_exit_registered && (summary || !path.empty())) {
      s.at_exit_registered = true;
      std::atexit(at_exit);
    }
  }
  detail::g_profiler_on.store(summary || !path.empty(), std::memory_order_relaxed);
}

bool profiler_enabled() { return profiler_on(); }

void profiler_flush() {
  std::string path;
  {
    ProfilerState& s = state();
    std::lock_guard lock(s.mutex);
    path = s.trace_path;
  }
  if (path.empty()) return;
  write_atomically(path, trace_json());
}

std::string profiler_summary() {
  struct Row {
    int64_t calls = 0, total_ns = 0, max_ns = 0;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Row> rows;
  for (const auto& [tid, e] : snapshot()) {
    Row& r = rows[{event_name(e), device_label(e.device), e.resolution}];
    ++r.calls;
    r.total_ns += e.dur_ns;
    r.max_ns = std::max(r.max_ns, e.dur_ns);
  }
  std::vector<std::pair<std::tuple<std::string, std::string, std::string>, Row>> sorted(rows.begin(), rows.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second.total_ns > b.second.total_ns; });
  std::string out = "tessera profile: time per op (host clock, nested ops counted in their caller too)\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%-28s %-22s %-10s %8s %12s %10s %10s\n", "op", "device", "resolution", "calls",
                "total ms", "mean us", "max us");
  out += line;
  for (const auto& [key, r] : sorted) {
    std::snprintf(line, sizeof(line), "%-28s %-22s %-10s %8lld %12.3f %10.2f %10.2f\n", std::get<0>(key).c_str(),
                  std::get<1>(key).c_str(), std::get<2>(key).c_str(), static_cast<long long>(r.calls),
                  double(r.total_ns) / 1e6, double(r.total_ns) / 1e3 / double(r.calls), double(r.max_ns) / 1e3);
    out += line;
  }
  return out + detail::plugin_spans_summary();
}

void profiler_clear() {
  ProfilerState& s = state();
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  {
    std::lock_guard lock(s.mutex);
    buffers = s.buffers;
  }
  for (const auto& b : buffers) {
    std::lock_guard lock(b->mutex);
    b->events.clear();
  }
  detail::clear_plugin_spans();
}

uint64_t profiler_correlation_id() { return profiler_on() ? t_correlation : 0; }

namespace detail {
int64_t profiler_epoch_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(state().epoch.time_since_epoch()).count();
}
}  // namespace detail

void ProfilerRange::begin(const char* category, std::string name, Device device) {
  if (active_ || !profiler_on()) return;
  active_ = true;
  category_ = category;
  name_ = std::move(name);
  device_ = device;
  outer_ = t_correlation;
  correlation_ = g_next_correlation.fetch_add(1, std::memory_order_relaxed);
  t_correlation = correlation_;
  start_ns_ = now_ns();
}

void ProfilerRange::end() {
  active_ = false;
  t_correlation = outer_;
  OpEvent e;
  e.op = nullptr;
  e.start_ns = start_ns_;
  e.dur_ns = now_ns() - start_ns_;
  e.device = device_;
  e.resolution = category_;
  e.category = category_;
  e.correlation = correlation_;
  e.label = std::move(name_);
  ThreadBuffer& b = thread_buffer();
  std::lock_guard lock(b.mutex);
  b.events.push_back(std::move(e));
}

}  // namespace tessera
