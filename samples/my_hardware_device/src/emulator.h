// The emulated accelerator: devices with their own memory space, one in-order queue thread per
// stream, and events. Nothing here knows about Tessera's ABI; plugin.cpp adapts it.
//
// Note [Emulated device memory]
// Device memory lives in an arena per device. A buffer is reached only through an opaque handle:
// a 64-bit id with the top bit set (a non-canonical address on x86-64 and AArch64), so any attempt
// by the runtime to dereference it faults at once instead of silently reading host memory. The
// runtime moves bytes only through the copy functions of the device interface, exactly as it must
// for a real accelerator whose memory the host cannot address.
// The runtime allocates nothing for 0 bytes: an empty tensor's storage is the null handle, which
// resolves to a shared buffer of 0 bytes on every device (copies of 0 bytes and kernels over no
// elements then need no special case).
//
// Note [Emulated streams]
// A stream is a queue with its own worker thread. Kernels and copies enqueue a task that captures
// everything it needs by value (the kernel call's tensors are only valid during the call), including
// a shared reference to the buffers it touches, so that freeing a buffer while work on it is pending
// is safe. Copies to the host wait for the queue; copies from the host stage the bytes first and
// return at once. A task that fails records a sticky error that the next synchronisation reports.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace mhd {

// Thrown by the emulator; plugin.cpp turns it into a tessera_status_t.
class EmuError : public std::runtime_error {
 public:
  enum class Kind { InvalidArgument, OutOfMemory, Internal };
  EmuError(Kind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

struct Buffer {
  std::vector<std::byte> bytes;
  int device = 0;
};
using BufferRef = std::shared_ptr<Buffer>;

// An in-order queue with one worker thread. Thread-safe.
class Queue {
 public:
  // `number`: 0 for a device's default queue, 1, 2, ... for its streams (the profiler's stream).
  explicit Queue(std::string name, uint64_t number = 0);
  ~Queue();  // runs the pending tasks, then joins the worker
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  void enqueue(std::function<void()> task);
  // Device graphs (Note [Device graphs] in plugin_abi.h): between begin_recording and end_recording
  // the tasks enqueued are kept, not run, and end_recording hands them over (a replay enqueues
  // copies; each task holds its own buffers, Note [Emulated streams]). Synchronising the queue or
  // recording an event on it is refused meanwhile, as CUDA refuses it during stream capture.
  void begin_recording();
  std::vector<std::function<void()>> end_recording();
  bool recording() const;
  // Blocks until every task enqueued before the call has run. Throws the first sticky error of a
  // task that failed since the last synchronisation (and clears it).
  void synchronize();
  const std::string& name() const { return name_; }
  uint64_t number() const { return number_; }

 private:
  void run();
  std::string name_;
  uint64_t number_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::function<void()>> tasks_;
  bool recording_ = false;
  std::vector<std::function<void()>> recorded_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  bool stop_ = false;
  std::string error_;
  std::thread thread_;
};

// Host-visible completion marker. record() enqueues a marker; completion is observed by
// synchronize() (host) or wait_on() (another queue, without blocking the host). The queue's worker
// stamps the marker with the steady clock when it reaches it: the device time of the event.
class Event {
 public:
  void record(Queue& queue, const std::shared_ptr<Event>& self);
  void wait_on(Queue& queue, const std::shared_ptr<Event>& self);
  void synchronize();
  // Nanoseconds on the steady clock at which the latest recorded marker completed; throws
  // InvalidArgument when the event was never recorded or its latest marker has not completed.
  int64_t completed_ns();

 private:
  void complete(uint64_t generation);
  void wait_for(uint64_t generation);
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0;
  uint64_t completed_ = 0;
  int64_t completed_ns_ = 0;  // of generation completed_
};

// Number of kernel counters a device keeps (one per registered op; see kernels.cpp).
constexpr int kMaxCountedOps = 32;

class Device {
 public:
  Device(int index, uint64_t capacity_bytes, std::string name);
  ~Device();

  int index() const { return index_; }
  const std::string& name() const { return name_; }

  void* allocate(uint64_t nbytes);  // throws OutOfMemory naming the device and the size
  void free(void* handle);          // unknown handles are ignored (logged by the caller)
  uint64_t allocated_bytes() const;
  uint64_t live_buffers() const;
  uint64_t peak_allocated_bytes() const;  // highest allocated_bytes() so far
  uint64_t capacity_bytes() const { return capacity_; }

  Queue& default_queue() { return *default_queue_; }
  Queue* create_queue();
  void destroy_queue(Queue* queue);
  // Waits for the default queue and every stream of this device.
  void synchronize();
  // Whether one of its queues is being recorded into a graph: host reads of device memory are
  // refused meanwhile (they would read what the recorded tasks have not written).
  bool recording() const;

  std::atomic<int64_t>& kernel_count(int op_id) { return kernel_counts_[op_id]; }
  // Fused programs queued by mhd_fused_launch (include/my_hardware_device/fused.h).
  std::atomic<int64_t>& fused_launch_count() { return fused_launches_; }

 private:
  friend class Emulator;
  int index_;
  uint64_t capacity_;
  std::string name_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, BufferRef> buffers_;
  uint64_t next_id_ = 1;
  uint64_t allocated_ = 0;
  uint64_t peak_ = 0;
  std::unique_ptr<Queue> default_queue_;
  std::vector<std::unique_ptr<Queue>> streams_;
  std::atomic<int64_t> kernel_counts_[kMaxCountedOps] = {};
  std::atomic<int64_t> fused_launches_{0};
};

// Note [Emulated pinned memory]
// Pinned host memory is ordinary host memory here, 64-byte aligned, each block shared: a copy
// queued from it (memory_copy_from_pinned) holds a reference and reads the bytes when its queue
// reaches it, not when it is queued, so the copy is truly asynchronous and pinned_free while it is
// pending is safe. Blocks still allocated when the emulator is destroyed are left alone (the
// runtime may still hold them as tensors).
struct PinnedBlock {
  PinnedBlock(std::byte* d, uint64_t n) : data(d), size(n) {}
  ~PinnedBlock();
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;
  std::byte* data;
  uint64_t size;
  bool keep = false;  // set at emulator shutdown: never freed
};
using PinnedRef = std::shared_ptr<PinnedBlock>;

// All devices of the emulator.
class Emulator {
 public:
  Emulator(int num_devices, uint64_t capacity_bytes, const std::string& name);
  ~Emulator();  // joins every queue thread

  int num_devices() const { return int(devices_.size()); }
  Device& device(int index);  // throws InvalidArgument naming the valid range
  // The buffer behind a handle of any device (the null handle: an empty buffer); throws
  // InvalidArgument for an unknown handle.
  BufferRef resolve(const void* handle) const;
  // The queue behind a stream handle (nullptr = the device's default queue).
  Queue& queue(int device, void* stream);

  static int device_of_handle(const void* handle);

  // Pinned host memory (Note [Emulated pinned memory]). pinned_allocate throws OutOfMemory.
  void* pinned_allocate(uint64_t nbytes);
  void pinned_free(void* block);  // unknown pointers are ignored
  // The block holding [p, p + nbytes) and p's offset in it; throws InvalidArgument when no pinned
  // block holds the whole range.
  PinnedRef pinned_block(const void* p, uint64_t nbytes, uint64_t* out_offset) const;
  uint64_t pinned_bytes() const;

 private:
  std::vector<std::unique_ptr<Device>> devices_;
  mutable std::mutex pinned_mu_;
  std::map<uintptr_t, PinnedRef> pinned_;  // by start address
  uint64_t pinned_bytes_ = 0;
};

}  // namespace mhd
