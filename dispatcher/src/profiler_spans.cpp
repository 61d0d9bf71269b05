// Spans recorded by plugins: Note [Plugin spans] in tessera/plugin_abi.h.
#include "profiler_spans.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "host_api.h"
#include "profiler.h"
#include "tessera/profiler.h"
#include "tessera/text_escape.h"

namespace tessera {

namespace {

constexpr size_t kMaxSpanText = 1024;       // bytes of a name or category
constexpr size_t kMaxSpanArgs = 64 * 1024;  // bytes of args_json
constexpr int kFirstPluginTrack = 2000;     // host threads are 1, 2, ...; stream tracks 1000, ...

struct SpanRecord {
  ProfilerSpan span;    // times still on the profiler clock (made relative when read)
  nlohmann::json args;  // the plugin's args_json, parsed; null when none
};

struct SpanBuffer {
  std::mutex mutex;
  std::vector<SpanRecord> spans;
};

struct SpanState {
  std::mutex mutex;
  std::vector<std::shared_ptr<SpanBuffer>> buffers;  // kept after their thread exits
};

SpanState& span_state() {
  static SpanState* s = new SpanState();  // never destroyed: used at exit
  return *s;
}

thread_local std::shared_ptr<SpanBuffer> t_spans;

SpanBuffer& span_buffer() {
  if (!t_spans) {
    auto b = std::make_shared<SpanBuffer>();
    SpanState& s = span_state();
    std::lock_guard lock(s.mutex);
    s.buffers.push_back(b);
    t_spans = std::move(b);
  }
  return *t_spans;
}

// Every span recorded so far, in start order, with times made relative to the epoch.
std::vector<SpanRecord> span_snapshot() {
  std::vector<std::shared_ptr<SpanBuffer>> buffers;
  {
    SpanState& s = span_state();
    std::lock_guard lock(s.mutex);
    buffers = s.buffers;
  }
  std::vector<SpanRecord> out;
  for (const auto& b : buffers) {
    std::lock_guard lock(b->mutex);
    out.insert(out.end(), b->spans.begin(), b->spans.end());
  }
  const int64_t epoch = detail::profiler_epoch_ns();
  for (SpanRecord& r : out) {
    r.span.start_ns -= epoch;
    r.span.end_ns -= epoch;
  }
  std::stable_sort(out.begin(), out.end(), [](const SpanRecord& a, const SpanRecord& b) {
    return a.span.start_ns < b.span.start_ns;
  });
  return out;
}

tessera_status_t refuse(const std::string& plugin, const std::string& why) {
  return status_make(TESSERA_STATUS_INVALID_ARGUMENT,
                     "profiler_record_span from plugin '" + printable_text(plugin) + "': " + why);
}

// The length of `s` when it is at most `limit` bytes, else limit + 1.
size_t bounded_length(const char* s, size_t limit) { return ::strnlen(s, limit + 1); }

}  // namespace

namespace detail {

int64_t profiler_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

tessera_status_t record_plugin_span(const std::string& plugin, DeviceType type,
                                    const tessera_profiler_span_t* span) {
  try {
    if (!span) return refuse(plugin, "span is NULL; pass a filled tessera_profiler_span_t");
    if (span->struct_size < sizeof(tessera_profiler_span_t))
      return refuse(plugin, "struct_size is " + std::to_string(span->struct_size) + ", smaller than the " +
                                std::to_string(sizeof(tessera_profiler_span_t)) +
                                " bytes of an ABI 1.3 span; set it to sizeof(tessera_profiler_span_t)");
    if (!span->name || !*span->name) return refuse(plugin, "the span has no name; name the work it measured");
    if (bounded_length(span->name, kMaxSpanText) > kMaxSpanText)
      return refuse(plugin, "the span's name is longer than " + std::to_string(kMaxSpanText) + " bytes");
    if (span->category && bounded_length(span->category, kMaxSpanText) > kMaxSpanText)
      return refuse(plugin, "the span's category is longer than " + std::to_string(kMaxSpanText) + " bytes");
    if (span->end_ns < span->start_ns)
      return refuse(plugin, "span '" + printable_text(span->name) + "' ends before it starts (start_ns " +
                                std::to_string(span->start_ns) + ", end_ns " + std::to_string(span->end_ns) +
                                "); take both times from profiler_clock_ns, start first");
    if (span->device < -1)
      return refuse(plugin, "span '" + printable_text(span->name) + "' names device " +
                                std::to_string(span->device) +
                                "; give a device index of the plugin, or -1 for none");
    nlohmann::json args;
    if (span->args_json) {
      if (bounded_length(span->args_json, kMaxSpanArgs) > kMaxSpanArgs)
        return refuse(plugin, "args_json is longer than " + std::to_string(kMaxSpanArgs) + " bytes");
      args = nlohmann::json::parse(span->args_json, nullptr, false);
      if (args.is_discarded() || !args.is_object())
        return refuse(plugin, "args_json of span '" + printable_text(span->name) +
                                  "' is not a JSON object (valid UTF-8); pass {\"key\": value, ...} or NULL");
    }
    if (!profiler_on()) return nullptr;  // dropped: nothing is being recorded
    SpanRecord r;
    r.span.name = span->name;
    r.span.category = span->category && *span->category ? span->category : "device";
    r.span.plugin = plugin;
    r.span.device = span->device < 0 ? plugin : Device(type).str() + ":" + std::to_string(span->device);
    r.span.stream = span->stream;
    r.span.start_ns = span->start_ns;
    r.span.end_ns = span->end_ns;
    r.span.correlation_id = span->correlation_id;
    if (!args.is_null())
      r.span.args_json = args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    r.args = std::move(args);
    SpanBuffer& b = span_buffer();
    std::lock_guard lock(b.mutex);
    b.spans.push_back(std::move(r));
    return nullptr;
  } catch (const std::bad_alloc&) {
    return status_make(TESSERA_STATUS_OUT_OF_MEMORY, "profiler_record_span: out of host memory");
  } catch (const std::exception& e) {
    return status_make(TESSERA_STATUS_INTERNAL, std::string("profiler_record_span: ") + e.what());
  }
}

void append_plugin_spans(nlohmann::json& events, int pid,
                         const std::unordered_map<uint64_t, HostEventPlace>& host_events) {
  std::map<std::tuple<std::string, std::string, uint64_t>, int> tracks;  // (plugin, device, stream) -> tid
  uint64_t next_flow = 1;
  for (SpanRecord& r : span_snapshot()) {
    const ProfilerSpan& s = r.span;
    auto [it, fresh] =
        tracks.emplace(std::make_tuple(s.plugin, s.device, s.stream), kFirstPluginTrack + int(tracks.size()));
    const int tid = it->second;
    if (fresh)
      events.push_back(
          {{"name", "thread_name"},
           {"ph", "M"},
           {"pid", pid},
           {"tid", tid},
           {"args", {{"name", s.device + " stream " + std::to_string(s.stream) + " [" + s.plugin + "]"}}}});
    nlohmann::json args = r.args.is_object() ? std::move(r.args) : nlohmann::json::object();
    args["plugin"] = s.plugin;
    args["device"] = s.device;
    args["stream"] = s.stream;
    if (s.correlation_id) args["correlation"] = s.correlation_id;
    const double ts_us = double(s.start_ns) / 1000.0;
    events.push_back({{"name", s.name},
                      {"cat", s.category},
                      {"ph", "X"},
                      {"ts", ts_us},
                      {"dur", double(s.end_ns - s.start_ns) / 1000.0},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", std::move(args)}});
    auto host = s.correlation_id ? host_events.find(s.correlation_id) : host_events.end();
    if (host == host_events.end()) continue;
    // A flow arrow from the host event to the span (one id per arrow: a host op may issue several).
    const uint64_t id = next_flow++;
    events.push_back({{"name", "correlation"},
                      {"cat", "correlation"},
                      {"ph", "s"},
                      {"id", id},
                      {"pid", pid},
                      {"tid", host->second.tid},
                      {"ts", host->second.ts_us}});
    events.push_back({{"name", "correlation"},
                      {"cat", "correlation"},
                      {"ph", "f"},
                      {"bp", "e"},
                      {"id", id},
                      {"pid", pid},
                      {"tid", tid},
                      {"ts", ts_us}});
  }
}

std::string plugin_spans_summary() {
  struct Row {
    int64_t calls = 0, total_ns = 0, max_ns = 0;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Row> rows;
  for (const SpanRecord& r : span_snapshot()) {
    Row& row = rows[{r.span.name, r.span.category, r.span.device}];
    const int64_t d = r.span.end_ns - r.span.start_ns;
    ++row.calls;
    row.total_ns += d;
    row.max_ns = std::max(row.max_ns, d);
  }
  if (rows.empty()) return {};
  std::vector<std::pair<std::tuple<std::string, std::string, std::string>, Row>> sorted(rows.begin(),
                                                                                        rows.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second.total_ns > b.second.total_ns; });
  std::string out = "tessera profile: plugin spans (the plugins' own times: kernels, copies, partitions)\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%-28s %-10s %-22s %8s %12s %10s %10s\n", "span", "category", "device",
                "calls", "total ms", "mean us", "max us");
  out += line;
  for (const auto& [key, r] : sorted) {
    std::snprintf(line, sizeof(line), "%-28s %-10s %-22s %8lld %12.3f %10.2f %10.2f\n",
                  printable_text(std::get<0>(key)).c_str(), printable_text(std::get<1>(key)).c_str(),
                  printable_text(std::get<2>(key)).c_str(), static_cast<long long>(r.calls),
                  double(r.total_ns) / 1e6, double(r.total_ns) / 1e3 / double(r.calls),
                  double(r.max_ns) / 1e3);
    out += line;
  }
  return out;
}

void clear_plugin_spans() {
  std::vector<std::shared_ptr<SpanBuffer>> buffers;
  {
    SpanState& s = span_state();
    std::lock_guard lock(s.mutex);
    buffers = s.buffers;
  }
  for (const auto& b : buffers) {
    std::lock_guard lock(b->mutex);
    b->spans.clear();
  }
}

}  // namespace detail

std::vector<ProfilerSpan> profiler_plugin_spans() {
  std::vector<ProfilerSpan> out;
  for (SpanRecord& r : span_snapshot()) out.push_back(std::move(r.span));
  return out;
}

}  // namespace tessera
