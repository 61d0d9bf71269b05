// The plugin: the device interface over the emulator (emulator.h) and the entry point that
// registers the kernels (kernels.cpp). Built once per name: MHD_PLUGIN_NAME is the plugin's name
// (its manifest asks the runtime for the device name), MHD_NUM_DEVICES the number of devices.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <tessera/sdk.hpp>

#include "emulator.h"
#include "kernels.h"

#ifndef MHD_PLUGIN_NAME
#define MHD_PLUGIN_NAME "my_hardware_device"
#endif
#ifndef MHD_PLUGIN_VERSION
#define MHD_PLUGIN_VERSION "0.1.0"
#endif
#ifndef MHD_NUM_DEVICES
#define MHD_NUM_DEVICES 2
#endif
#ifndef MHD_DEVICE_MEMORY_BYTES
#define MHD_DEVICE_MEMORY_BYTES (uint64_t(1) << 30)
#endif

namespace mhd {
namespace {

tessera_status_t to_status(const std::exception& e) {
  tessera_status_code_t code = TESSERA_STATUS_INTERNAL;
  if (auto* emu = dynamic_cast<const EmuError*>(&e)) {
    code = emu->kind() == EmuError::Kind::OutOfMemory     ? TESSERA_STATUS_OUT_OF_MEMORY
           : emu->kind() == EmuError::Kind::InvalidArgument ? TESSERA_STATUS_INVALID_ARGUMENT
                                                          : TESSERA_STATUS_INTERNAL;
  }
  return tessera::sdk::make_status(code, std::string(MHD_PLUGIN_NAME ": ") + e.what());
}

// Runs `f` and turns an exception into a status (nothing throws across the C boundary).
template <typename F>
tessera_status_t guarded(F&& f) noexcept {
  try {
    if (!emulator()) return tessera::sdk::make_status(TESSERA_STATUS_UNAVAILABLE, MHD_PLUGIN_NAME ": shut down");
    f(*emulator());
    return nullptr;
  } catch (const std::exception& e) {
    return to_status(e);
  }
}

int32_t device_count(void*, char* reason, size_t capacity) {
  if (!emulator()) {
    if (reason && capacity) std::snprintf(reason, capacity, "%s", MHD_PLUGIN_NAME " is shut down");
    return 0;
  }
  return emulator()->num_devices();
}

tessera_status_t device_get_current(void*, int32_t* out_index) {
  *out_index = current_device();
  return nullptr;
}

tessera_status_t device_set_current(void*, int32_t index) {
  return guarded([&](Emulator& emu) {
    emu.device(index);  // range check
    current_device() = index;
  });
}

tessera_status_t memory_allocate(void*, int32_t device, uint64_t nbytes, void** out_handle) {
  return guarded([&](Emulator& emu) { *out_handle = emu.device(device).allocate(nbytes); });
}

void memory_free(void*, int32_t device, void* handle) {
  if (!emulator() || device < 0 || device >= emulator()->num_devices()) return;
  emulator()->device(device).free(handle);
}

// The buffer behind `handle`, which must hold [offset, offset + nbytes); throws InvalidArgument.
BufferRef resolve_range(Emulator& emu, const void* handle, uint64_t offset, uint64_t nbytes,
                        const char* what) {
  BufferRef buf = emu.resolve(handle);
  const uint64_t size = buf->bytes.size();
  if (offset > size || nbytes > size - offset) {
    throw EmuError(EmuError::Kind::InvalidArgument,
                   std::string(what) + " of " + std::to_string(nbytes) + " bytes at offset " +
                       std::to_string(offset) + " overruns a buffer of " + std::to_string(size) + " bytes");
  }
  return buf;
}

tessera_status_t memory_copy_from_host(void*, int32_t device, void* dst, uint64_t dst_offset, const void* src_host,
                                       uint64_t nbytes, void* stream) {
  return guarded([&](Emulator& emu) {
    BufferRef buf = resolve_range(emu, dst, dst_offset, nbytes, "copy from host");
    // Stage now: the host buffer may be reused as soon as this returns.
    auto staged = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src_host),
                                                           static_cast<const std::byte*>(src_host) + nbytes);
    Queue& q = emu.queue(device, stream);
    q.enqueue(traced(
        [buf, staged, dst_offset] {
          if (!staged->empty()) std::memcpy(buf->bytes.data() + dst_offset, staged->data(), staged->size());
        },
        "copy host to device", "copy", device, q, int64_t(nbytes)));
  });
}

tessera_status_t memory_copy_to_host(void*, int32_t device, void* dst_host, const void* src, uint64_t src_offset,
                                     uint64_t nbytes, void* stream) {
  return guarded([&](Emulator& emu) {
    BufferRef buf = resolve_range(emu, src, src_offset, nbytes, "copy to host");
    if (emu.device(device).recording())
      throw EmuError(
          EmuError::Kind::InvalidArgument,
          "a queue of device " + std::to_string(device) +
              " is being recorded into a graph: device memory cannot be read by the host before the "
              "recording ends");
    Queue& q = emu.queue(device, stream);
    q.enqueue(traced(
        [buf, dst_host, src_offset, nbytes] {
          if (nbytes) std::memcpy(dst_host, buf->bytes.data() + src_offset, nbytes);
        },
        "copy device to host", "copy", device, q, int64_t(nbytes)));
    q.synchronize();  // the host buffer is complete when this returns
  });
}

tessera_status_t memory_copy_device(void*, int32_t dst_device, void* dst, uint64_t dst_offset, int32_t src_device,
                                    const void* src, uint64_t src_offset, uint64_t nbytes, void* stream) {
  return guarded([&](Emulator& emu) {
    BufferRef d = emu.resolve(dst);
    BufferRef s = emu.resolve(src);
    if (dst_offset + nbytes > d->bytes.size() || src_offset + nbytes > s->bytes.size()) {
      throw EmuError(EmuError::Kind::InvalidArgument, "device copy of " + std::to_string(nbytes) + " bytes overruns a buffer");
    }
    // Work already queued on the source device must land before the copy reads it.
    if (src_device != dst_device) emu.device(src_device).synchronize();
    Queue& q = emu.queue(dst_device, stream);
    q.enqueue(traced(
        [d, s, dst_offset, src_offset, nbytes] {
          if (nbytes) std::memmove(d->bytes.data() + dst_offset, s->bytes.data() + src_offset, nbytes);
        },
        "copy device to device", "copy", dst_device, q, int64_t(nbytes)));
  });
}

tessera_status_t stream_create(void*, int32_t device, void** out_stream) {
  return guarded([&](Emulator& emu) { *out_stream = emu.device(device).create_queue(); });
}

void stream_destroy(void*, int32_t device, void* stream) {
  if (!emulator() || !stream || device < 0 || device >= emulator()->num_devices()) return;
  emulator()->device(device).destroy_queue(static_cast<Queue*>(stream));
}

tessera_status_t stream_synchronize(void*, int32_t device, void* stream) {
  return guarded([&](Emulator& emu) { emu.queue(device, stream).synchronize(); });
}

// An event handle owns a shared reference; queued markers hold their own.
using EventBox = std::shared_ptr<Event>;

// Every event handle handed out and not yet destroyed: shutdown frees what the host still holds
// (docs/plugins.md: after shutdown the host never calls event_destroy).
struct LiveEvents {
  std::mutex mutex;
  std::unordered_set<EventBox*> boxes;
};
LiveEvents& live_events() {
  static LiveEvents live;
  return live;
}

tessera_status_t event_create(void*, int32_t, void** out_event) {
  auto box = std::make_unique<EventBox>(std::make_shared<Event>());
  {
    std::lock_guard<std::mutex> lock(live_events().mutex);
    live_events().boxes.insert(box.get());
  }
  *out_event = box.release();
  return nullptr;
}

void event_destroy(void*, int32_t, void* event) {
  auto* box = static_cast<EventBox*>(event);
  {
    std::lock_guard<std::mutex> lock(live_events().mutex);
    live_events().boxes.erase(box);
  }
  delete box;
}

tessera_status_t event_record(void*, int32_t device, void* event, void* stream) {
  return guarded([&](Emulator& emu) {
    auto& ev = *static_cast<EventBox*>(event);
    ev->record(emu.queue(device, stream), ev);
  });
}

tessera_status_t event_wait(void*, int32_t device, void* event, void* stream) {
  return guarded([&](Emulator& emu) {
    auto& ev = *static_cast<EventBox*>(event);
    ev->wait_on(emu.queue(device, stream), ev);
  });
}

tessera_status_t event_synchronize(void*, int32_t, void* event) {
  (*static_cast<EventBox*>(event))->synchronize();
  return nullptr;
}

tessera_status_t event_elapsed_time(void*, int32_t, void* start, void* end, double* out_ms) {
  return guarded([&](Emulator&) {
    const int64_t a = (*static_cast<EventBox*>(start))->completed_ns();
    const int64_t z = (*static_cast<EventBox*>(end))->completed_ns();
    *out_ms = double(z - a) / 1e6;
  });
}

tessera_status_t device_synchronize(void*, int32_t device) {
  return guarded([&](Emulator& emu) { emu.device(device).synchronize(); });
}

size_t device_properties(void*, int32_t device, char* buffer, size_t capacity) {
  std::string json;
  if (!emulator() || device < 0 || device >= emulator()->num_devices()) {
    json = "{\"name\": \"" MHD_PLUGIN_NAME "\", \"error\": \"no such device\"}";
  } else {
    Device& d = emulator()->device(device);
    json = "{\"name\": \"" MHD_PLUGIN_NAME ":" + std::to_string(device) + "\", \"vendor\": \"Tessera reference accelerator\"";
    json += ", \"memory\": {\"total\": " + std::to_string(d.capacity_bytes()) +
            ", \"allocated\": " + std::to_string(d.allocated_bytes()) +
            ", \"buffers\": " + std::to_string(d.live_buffers()) +
            ", \"pinned_host\": " + std::to_string(emulator()->pinned_bytes()) + "}";
    json += ", \"capability\": {\"streams\": true, \"events\": true, \"async\": true, \"host_addressable\": false}";
    json += ", \"kernel_counts\": {";
    int n = 0;
    const KernelSpec* specs = kernel_specs(&n);
    for (int i = 0; i < n; ++i) {
      json += std::string(i ? ", " : "") + "\"" + specs[i].op + "\": " + std::to_string(d.kernel_count(i).load());
    }
    int nb = 0;
    const KernelSpec* backward = backward_kernel_specs(&nb);
    for (int i = 0; i < nb; ++i)
      json += std::string(", \"") + backward[i].op + " (backward)\": " + std::to_string(d.kernel_count(n + i).load());
    json += "}, \"fused_launches\": " + std::to_string(d.fused_launch_count().load()) + "}";
  }
  if (buffer && capacity) {
    const size_t n = std::min(json.size(), capacity - 1);
    std::memcpy(buffer, json.data(), n);
    buffer[n] = '\0';
  }
  return json.size() + 1;
}

// The emulator keeps no cache: every byte it holds is in a live buffer.
tessera_status_t memory_stats(void*, int32_t device, tessera_memory_stats_t* out) {
  return guarded([&](Emulator& emu) {
    Device& d = emu.device(device);
    const uint64_t allocated = d.allocated_bytes();
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, allocated_bytes)) out->allocated_bytes = allocated;
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, reserved_bytes)) out->reserved_bytes = allocated;
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, peak_allocated_bytes))
      out->peak_allocated_bytes = d.peak_allocated_bytes();
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, num_allocations)) out->num_allocations = d.live_buffers();
  });
}

tessera_status_t memory_info(void*, int32_t device, uint64_t* out_free, uint64_t* out_total) {
  return guarded([&](Emulator& emu) {
    Device& d = emu.device(device);
    *out_total = d.capacity_bytes();
    *out_free = d.capacity_bytes() - std::min(d.allocated_bytes(), d.capacity_bytes());
  });
}

tessera_status_t pinned_allocate(void*, uint64_t nbytes, void** out_host_ptr) {
  return guarded([&](Emulator& emu) { *out_host_ptr = emu.pinned_allocate(nbytes); });
}

void pinned_free(void*, void* host_ptr) {
  if (emulator()) emulator()->pinned_free(host_ptr);
}

// Unlike memory_copy_from_host, nothing is staged: the queue reads the pinned block when it reaches
// the copy (Note [Emulated pinned memory]).
tessera_status_t memory_copy_from_pinned(void*, int32_t device, void* dst, uint64_t dst_offset,
                                         const void* src_host, uint64_t nbytes, void* stream) {
  return guarded([&](Emulator& emu) {
    BufferRef buf = resolve_range(emu, dst, dst_offset, nbytes, "copy from pinned memory");
    uint64_t src_offset = 0;
    PinnedRef block = emu.pinned_block(src_host, nbytes, &src_offset);
    emu.queue(device, stream).enqueue([buf, block, dst_offset, src_offset, nbytes] {
      if (nbytes) std::memcpy(buf->bytes.data() + dst_offset, block->data + src_offset, nbytes);
    });
  });
}

void shutdown(void*) {
  delete emulator();  // joins every queue thread after running what is pending
  emulator() = nullptr;
  std::lock_guard<std::mutex> lock(live_events().mutex);
  for (EventBox* box : live_events().boxes) delete box;
  live_events().boxes.clear();
}

const tessera_device_interface_t kDeviceInterface = {
    .struct_size = sizeof(tessera_device_interface_t),
    .reserved_ = 0,
    .device_count = device_count,
    .device_get_current = device_get_current,
    .device_set_current = device_set_current,
    .memory_allocate = memory_allocate,
    .memory_free = memory_free,
    .memory_copy_from_host = memory_copy_from_host,
    .memory_copy_to_host = memory_copy_to_host,
    .memory_copy_device = memory_copy_device,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_synchronize = stream_synchronize,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_wait = event_wait,
    .event_synchronize = event_synchronize,
    .device_synchronize = device_synchronize,
    .device_properties = device_properties,
    .memory_stats = memory_stats,
    .event_elapsed_time = event_elapsed_time,
    // A queued task holds its own reference to every buffer it touches (Note [Emulated streams]),
    // so freeing while another stream still works on it is safe: nothing to record.
    .memory_record_stream = nullptr,
    .memory_info = memory_info,
    .pinned_allocate = pinned_allocate,
    .pinned_free = pinned_free,
    .memory_copy_from_pinned = memory_copy_from_pinned,
};

// Note [Autocast policies in code] (plugin_abi.h): the emulator evaluates sigmoid in double and
// stores float32 at best, so under autocast sigmoid runs on float32 inputs here; the manifest's
// "autocast" says the same of gelu as data.
#ifdef MHD_BAD_AUTOCAST_ENTRIES
// (The second accelerator of the tests also gives two bad entries, which the runtime skips.)
const tessera_autocast_entry_t kAutocastEntries[] = {
    {"sigmoid", TESSERA_AUTOCAST_FLOAT32}, {"no_such_op", TESSERA_AUTOCAST_FLOAT32}, {"relu", 7}};
#else
const tessera_autocast_entry_t kAutocastEntries[] = {{"sigmoid", TESSERA_AUTOCAST_FLOAT32}};
#endif

int32_t autocast_policy(void*, tessera_autocast_entry_t* out, int32_t capacity) {
  constexpr int32_t n = int32_t(sizeof(kAutocastEntries) / sizeof(kAutocastEntries[0]));
  if (!out) return n;
  const int32_t written = capacity < n ? capacity : n;
  for (int32_t i = 0; i < written; ++i) out[i] = kAutocastEntries[i];
  return written;
}

// ---- device graphs (Note [Device graphs] in plugin_abi.h): a recorded queue's tasks, replayed
struct RecordedGraph {
  int32_t device = 0;
  void* stream = nullptr;
  std::vector<std::function<void()>> tasks;
};

tessera_status_t graph_begin(int32_t device, void* stream) {
  return guarded([&](Emulator& emu) {
    if (!stream)
      throw EmuError(EmuError::Kind::InvalidArgument,
                     "the default stream cannot be recorded into a graph; record a stream made with "
                     "tessera::Stream::create");
    emu.queue(device, stream).begin_recording();
  });
}

tessera_status_t graph_end(int32_t device, void* stream, void** graph) {
  *graph = nullptr;
  return guarded([&](Emulator& emu) {
    auto g = std::make_unique<RecordedGraph>();
    g->device = device;
    g->stream = stream;
    g->tasks = emu.queue(device, stream).end_recording();
    *graph = g.release();
  });
}

tessera_status_t graph_replay(void* graph, void* stream) {
  return guarded([&](Emulator& emu) {
    const auto* g = static_cast<const RecordedGraph*>(graph);
    if (!g || stream != g->stream)
      throw EmuError(EmuError::Kind::InvalidArgument, "a graph replays on the stream it was recorded on");
    Queue& q = emu.queue(g->device, stream);
    for (const std::function<void()>& task : g->tasks) q.enqueue(task);
  });
}

void graph_destroy(void* graph) { delete static_cast<RecordedGraph*>(graph); }

const tessera_device_graphs_t kDeviceGraphs = {.struct_size = sizeof(tessera_device_graphs_t),
                                               .begin_capture = &graph_begin,
                                               .end_capture = &graph_end,
                                               .replay = &graph_replay,
                                               .destroy = &graph_destroy};
const tessera_device_graphs_t* device_graphs() { return &kDeviceGraphs; }

tessera_proc_t get_proc_address(void*, const char* name) {
  if (std::strcmp(name, TESSERA_EXT_DEVICE_GRAPHS) == 0)
    return reinterpret_cast<tessera_proc_t>(static_cast<tessera_ext_device_graphs_fn_t>(&device_graphs));
  if (std::strcmp(name, TESSERA_EXT_AUTOCAST_POLICY) == 0) return reinterpret_cast<tessera_proc_t>(&autocast_policy);
  return nullptr;
}

tessera_plugin_t plugin_header = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = MHD_PLUGIN_NAME,
    .version = MHD_PLUGIN_VERSION,
    .features = TESSERA_PLUGIN_FEATURE_STREAMS | TESSERA_PLUGIN_FEATURE_EVENTS | TESSERA_PLUGIN_FEATURE_ASYNC,
    .self = nullptr,
    .device = &kDeviceInterface,
    .shutdown = shutdown,
    .get_proc_address = get_proc_address,
};

}  // namespace
}  // namespace mhd

// Test hooks of the emulator's driver (exported like fused.h): mhd_queue_hold makes the queue of
// `stream` (NULL: the default one) of `device` wait, from the tasks queued so far on, until
// mhd_queue_release; tests use it to see that a copy returned before the device ran it. Returns 0,
// or -1 for a device or stream that does not exist.
namespace mhd {
namespace {
struct QueueGate {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t generation = 0;
};
QueueGate& queue_gate() {
  static QueueGate g;
  return g;
}
}  // namespace
}  // namespace mhd

extern "C" __attribute__((visibility("default"))) int32_t mhd_queue_hold(int32_t device, void* stream) {
  using namespace mhd;
  tessera_status_t st = guarded([&](Emulator& emu) {
    QueueGate& g = queue_gate();
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(g.mu);
      generation = g.generation;
    }
    emu.queue(device, stream).enqueue([&g, generation] {
      std::unique_lock<std::mutex> lock(g.mu);
      g.cv.wait(lock, [&] { return g.generation != generation; });
    });
  });
  if (!st) return 0;
  tessera::sdk::host_api()->status_free(st);
  return -1;
}

extern "C" __attribute__((visibility("default"))) void mhd_queue_release(void) {
  mhd::QueueGate& g = mhd::queue_gate();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    ++g.generation;
  }
  g.cv.notify_all();
}

TESSERA_PLUGIN_ENTRY(&mhd::plugin_header) {
  using namespace mhd;
  if (!emulator()) emulator() = new Emulator(MHD_NUM_DEVICES, MHD_DEVICE_MEMORY_BYTES, MHD_PLUGIN_NAME);
  int n = 0;
  const KernelSpec* specs = kernel_specs(&n);
  // A registration the host refuses (an op the contract does not define) fails the load (Note
  // [Dangling registrations]): nothing to catch here.
  for (int i = 0; i < n; ++i) host.register_kernel(specs[i].op, specs[i].dtype_mask, specs[i].fn, nullptr);
  // Fused backward kernels: autograd runs them instead of the generic formula on this device.
  int nb = 0;
  const KernelSpec* backward = backward_kernel_specs(&nb);
  for (int i = 0; i < nb; ++i)
    host.register_kernel_under(kFunctionalityAutograd, backward[i].op, backward[i].dtype_mask, backward[i].fn);
  // conv2d must never round-trip through the host on this device (Note in docs/plugin-guide.md,
  // "Forbidding the fallback"): a missing kernel is an error, not a silent copy.
  host.forbid_fallback("conv2d");
}
