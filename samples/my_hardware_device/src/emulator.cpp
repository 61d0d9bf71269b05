#include "emulator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace mhd {

namespace {
// See Note [Emulated device memory]: bit 63 set, device index + 1 in bits 48..55, id below.
constexpr uint64_t kHandleTag = uint64_t(1) << 63;
constexpr int kDeviceShift = 48;
constexpr uint64_t kIdMask = (uint64_t(1) << kDeviceShift) - 1;

uint64_t handle_bits(const void* handle) { return uint64_t(reinterpret_cast<uintptr_t>(handle)); }
}  // namespace

// ---------------------------------------------------------------- Queue

Queue::Queue(std::string name, uint64_t number)
    : name_(std::move(name)), number_(number), thread_([this] { run(); }) {}

Queue::~Queue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void Queue::enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (recording_) {
      recorded_.push_back(std::move(task));
      return;
    }
    tasks_.push_back(std::move(task));
    ++enqueued_;
  }
  work_cv_.notify_one();
}

void Queue::begin_recording() {
  std::lock_guard<std::mutex> lock(mu_);
  if (recording_)
    throw EmuError(EmuError::Kind::InvalidArgument, "queue '" + name_ + "' is already being recorded");
  recording_ = true;
  recorded_.clear();
}

std::vector<std::function<void()>> Queue::end_recording() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!recording_)
    throw EmuError(EmuError::Kind::InvalidArgument, "queue '" + name_ + "' is not being recorded");
  recording_ = false;
  return std::move(recorded_);
}

bool Queue::recording() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recording_;
}

void Queue::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  if (recording_)
    throw EmuError(EmuError::Kind::InvalidArgument,
                   "queue '" + name_ +
                       "' is being recorded into a graph: it cannot be synchronised "
                       "before the recording ends");
  const uint64_t target = enqueued_;
  done_cv_.wait(lock, [&] { return completed_ >= target; });
  if (!error_.empty()) {
    std::string e;
    e.swap(error_);
    throw EmuError(EmuError::Kind::Internal, "queue '" + name_ + "': " + e);
  }
}

void Queue::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stop_ and drained
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    std::string failure;
    try {
      task();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    lock.lock();
    if (!failure.empty() && error_.empty()) error_ = failure;
    ++completed_;
    done_cv_.notify_all();
  }
}

// ---------------------------------------------------------------- Event

void Event::record(Queue& queue, const std::shared_ptr<Event>& self) {
  if (queue.recording())
    throw EmuError(
        EmuError::Kind::InvalidArgument,
        "queue '" + queue.name() + "' is being recorded into a graph: no event can be recorded on it");
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = ++recorded_;
  }
  queue.enqueue([self, generation] { self->complete(generation); });
}

void Event::wait_on(Queue& queue, const std::shared_ptr<Event>& self) {
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = recorded_;
  }
  if (generation == 0) return;  // never recorded: nothing to wait for
  queue.enqueue([self, generation] { self->wait_for(generation); });
}

void Event::synchronize() {
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = recorded_;
  }
  wait_for(generation);
}

int64_t Event::completed_ns() {
  std::lock_guard<std::mutex> lock(mu_);
  if (recorded_ == 0) throw EmuError(EmuError::Kind::InvalidArgument, "the event was never recorded; record it first");
  if (completed_ < recorded_)
    throw EmuError(EmuError::Kind::InvalidArgument, "the event has not completed yet; synchronize it first");
  return completed_ns_;
}

void Event::complete(uint64_t generation) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation > completed_) {
      completed_ = generation;
      completed_ns_ = now;
    }
  }
  cv_.notify_all();
}

void Event::wait_for(uint64_t generation) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= generation; });
}

// ---------------------------------------------------------------- Device

Device::Device(int index, uint64_t capacity_bytes, std::string name)
    : index_(index), capacity_(capacity_bytes), name_(std::move(name)),
      default_queue_(std::make_unique<Queue>(name_ + ":" + std::to_string(index) + "/default")) {}

Device::~Device() {
  streams_.clear();
  default_queue_.reset();
}

void* Device::allocate(uint64_t nbytes) {
  auto buffer = std::make_shared<Buffer>();
  std::lock_guard<std::mutex> lock(mu_);
  if (nbytes > capacity_ - allocated_) {
    throw EmuError(EmuError::Kind::OutOfMemory,
                   name_ + ":" + std::to_string(index_) + ": out of device memory allocating " +
                       std::to_string(nbytes) + " bytes (" + std::to_string(allocated_) + " of " +
                       std::to_string(capacity_) + " bytes in use); free tensors or use smaller batches");
  }
  buffer->bytes.resize(nbytes);
  buffer->device = index_;
  const uint64_t id = next_id_++;
  buffers_.emplace(id, std::move(buffer));
  allocated_ += nbytes;
  peak_ = std::max(peak_, allocated_);
  const uint64_t bits = kHandleTag | (uint64_t(index_ + 1) << kDeviceShift) | id;
  return reinterpret_cast<void*>(uintptr_t(bits));
}

void Device::free(void* handle) {
  const uint64_t id = handle_bits(handle) & kIdMask;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.find(id);
  if (it == buffers_.end()) return;
  allocated_ -= it->second->bytes.size();
  buffers_.erase(it);  // pending tasks keep their own reference (Note [Emulated streams])
}

uint64_t Device::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

uint64_t Device::peak_allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

uint64_t Device::live_buffers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buffers_.size();
}

bool Device::recording() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (default_queue_->recording()) return true;
  for (const auto& q : streams_)
    if (q->recording()) return true;
  return false;
}

Queue* Device::create_queue() {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t number = streams_.size() + 1;
  streams_.push_back(std::make_unique<Queue>(name_ + ":" + std::to_string(index_) + "/stream" + std::to_string(number),
                                             number));
  return streams_.back().get();
}

void Device::destroy_queue(Queue* queue) {
  std::unique_ptr<Queue> doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(streams_.begin(), streams_.end(), [&](const auto& q) { return q.get() == queue; });
    if (it == streams_.end()) return;
    doomed = std::move(*it);
    streams_.erase(it);
  }
  // ~Queue runs the pending work and joins, outside the lock.
}

void Device::synchronize() {
  default_queue_->synchronize();
  std::vector<Queue*> queues;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& q : streams_) queues.push_back(q.get());
  }
  for (Queue* q : queues) q->synchronize();
}

// ---------------------------------------------------------------- Emulator

Emulator::Emulator(int num_devices, uint64_t capacity_bytes, const std::string& name) {
  for (int i = 0; i < num_devices; ++i) devices_.push_back(std::make_unique<Device>(i, capacity_bytes, name));
}

Emulator::~Emulator() {
  devices_.clear();  // runs every pending task, so no queued copy reads a pinned block after this
  std::lock_guard<std::mutex> lock(pinned_mu_);
  for (auto& [start, block] : pinned_) block->keep = true;
  pinned_.clear();
}

PinnedBlock::~PinnedBlock() {
  if (!keep) std::free(data);
}

void* Emulator::pinned_allocate(uint64_t nbytes) {
  // aligned_alloc wants a multiple of the alignment, and at least one byte: never NULL for 0.
  const uint64_t rounded = (nbytes + 63) / 64 * 64 + (nbytes == 0 ? 64 : 0);
  if (nbytes > (uint64_t(1) << 40))
    throw EmuError(EmuError::Kind::OutOfMemory,
                   "pinned allocation of " + std::to_string(nbytes) + " bytes is above 1 TiB");
  auto* data = static_cast<std::byte*>(std::aligned_alloc(64, rounded));
  if (!data)
    throw EmuError(EmuError::Kind::OutOfMemory,
                   "pinned allocation of " + std::to_string(nbytes) + " bytes failed");
  std::lock_guard<std::mutex> lock(pinned_mu_);
  pinned_[reinterpret_cast<uintptr_t>(data)] = std::make_shared<PinnedBlock>(data, nbytes);
  pinned_bytes_ += nbytes;
  return data;
}

void Emulator::pinned_free(void* block) {
  std::lock_guard<std::mutex> lock(pinned_mu_);
  auto it = pinned_.find(reinterpret_cast<uintptr_t>(block));
  if (it == pinned_.end()) return;
  pinned_bytes_ -= it->second->size;
  pinned_.erase(it);  // a queued copy may still hold the block: it is freed after that copy ran
}

PinnedRef Emulator::pinned_block(const void* p, uint64_t nbytes, uint64_t* out_offset) const {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(pinned_mu_);
  auto it = pinned_.upper_bound(addr);
  if (it != pinned_.begin()) {
    --it;
    const uint64_t offset = addr - it->first;
    if (offset <= it->second->size && nbytes <= it->second->size - offset) {
      *out_offset = offset;
      return it->second;
    }
  }
  throw EmuError(EmuError::Kind::InvalidArgument,
                 "asynchronous copy of " + std::to_string(nbytes) +
                     " bytes from host memory that no pinned block holds; allocate "
                     "the source with pinned_allocate");
}

uint64_t Emulator::pinned_bytes() const {
  std::lock_guard<std::mutex> lock(pinned_mu_);
  return pinned_bytes_;
}

Device& Emulator::device(int index) {
  if (index < 0 || index >= int(devices_.size())) {
    throw EmuError(EmuError::Kind::InvalidArgument,
                   "device index " + std::to_string(index) + " is out of range; this emulator has " +
                       std::to_string(devices_.size()) + " devices (0.." +
                       std::to_string(int(devices_.size()) - 1) + ")");
  }
  return *devices_[size_t(index)];
}

int Emulator::device_of_handle(const void* handle) {
  const uint64_t bits = handle_bits(handle);
  if (!(bits & kHandleTag)) return -1;
  return int((bits >> kDeviceShift) & 0xff) - 1;
}

BufferRef Emulator::resolve(const void* handle) const {
  if (handle == nullptr) {  // Note [Emulated device memory]: the storage of an empty tensor
    static const BufferRef empty = std::make_shared<Buffer>();
    return empty;
  }
  const int dev = device_of_handle(handle);
  if (dev < 0 || dev >= int(devices_.size())) {
    throw EmuError(EmuError::Kind::InvalidArgument,
                   "memory handle " + std::to_string(handle_bits(handle)) +
                       " does not belong to this device; pass tensors allocated on it");
  }
  const Device& d = *devices_[size_t(dev)];
  std::lock_guard<std::mutex> lock(d.mu_);
  auto it = d.buffers_.find(handle_bits(handle) & kIdMask);
  if (it == d.buffers_.end()) {
    throw EmuError(EmuError::Kind::InvalidArgument,
                   d.name_ + ":" + std::to_string(dev) + ": memory handle " + std::to_string(handle_bits(handle)) +
                       " is unknown (freed or never allocated)");
  }
  return it->second;
}

Queue& Emulator::queue(int device_index, void* stream) {
  Device& d = device(device_index);
  return stream ? *static_cast<Queue*>(stream) : d.default_queue();
}

}  // namespace mhd
