// See cuda_backend.h.
#include "cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "cublaslt_loader.h"
#include "cudnn_attention.h"
#include "cudnn_loader.h"
#include "device_context.h"
#include "ops.h"
#include "tessera/cuda/cuda_plugin.h"
#include "tessera/sdk.hpp"
#include "tessera/text_escape.h"

namespace tessera::cuda {

namespace {
constexpr size_t kStagingChunk = size_t(4) << 20;  // bytes per pinned staging buffer (two per device)
constexpr int kMaxTrackedDevices = 64;
thread_local uint64_t t_used_devices = 0;  // bit d: this thread made device d current (Note [CUDA device guard])

// Logs a failed clean-up call (destroy/free paths cannot throw) and clears its error so that a
// later launch check does not report it.
void check_cleanup(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();
  sdk::log(TESSERA_LOG_ERROR, "cuda", cuda_error_message(err, what));
}

// An event created on the current device, destroyed at scope exit.
struct ScopedEvent {
  cudaEvent_t event = nullptr;
  int device;
  explicit ScopedEvent(int d) : device(d) {
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~ScopedEvent() {
    try {
      DeviceGuard guard(device);
      check_cleanup(cudaEventDestroy(event), "cudaEventDestroy");
    } catch (const std::exception& e) {
      sdk::log(TESSERA_LOG_ERROR, "cuda", std::string("cudaEventDestroy: ") + e.what());
    }
  }
  ScopedEvent(const ScopedEvent&) = delete;
  ScopedEvent& operator=(const ScopedEvent&) = delete;
};
}  // namespace

std::string cuda_error_message(cudaError_t err, const std::string& what) {
  return what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
}

void check_cuda(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return;
  const tessera_status_code_t code = err == cudaErrorMemoryAllocation ? TESSERA_STATUS_OUT_OF_MEMORY : TESSERA_STATUS_INTERNAL;
  throw sdk::Error(code, cuda_error_message(err, what));
}

// Two pinned buffers per device, used alternately so that staging chunk i+1 overlaps the device
// copy of chunk i. Each buffer's event marks when the device is done with it.
struct Backend::Staging {
  std::mutex mutex;
  void* buffer[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  bool ready = false;

  // All or nothing: a failure part-way releases what was already set up (pinned memory is scarce)
  // and the next copy tries again.
  cudaError_t init() {
    if (ready) return cudaSuccess;
    for (int i = 0; i < 2; ++i) {
      cudaError_t e = cudaHostAlloc(&buffer[i], kStagingChunk, cudaHostAllocDefault);
      if (e == cudaSuccess) e = cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming);
      if (e != cudaSuccess) {
        cudaGetLastError();
        release();
        return e;
      }
    }
    ready = true;
    return cudaSuccess;
  }
  void release() {
    for (int i = 0; i < 2; ++i) {
      if (done[i]) check_cleanup(cudaEventDestroy(done[i]), "staging: cudaEventDestroy");
      if (buffer[i]) check_cleanup(cudaFreeHost(buffer[i]), "staging: cudaFreeHost");
      done[i] = nullptr;
      buffer[i] = nullptr;
    }
    ready = false;
  }
};

Backend& Backend::instance() {
  static Backend* backend = new Backend();  // never destroyed: shutdown() releases the device state
  return *backend;
}

void Backend::discover() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaErrorInsufficientDriver) {
    int driver = 0;
    cudaDriverGetVersion(&driver);
    reason_ = driver == 0 ? "CUDA driver not found (cudaErrorInsufficientDriver): install the NVIDIA driver"
                          : "CUDA driver too old (cudaErrorInsufficientDriver, driver " + std::to_string(driver) +
                                ", runtime " + std::to_string(CUDART_VERSION) + "): update the NVIDIA driver";
    cudaGetLastError();
    return;
  }
  if (err == cudaErrorNoDevice || (err == cudaSuccess && n == 0)) {
    reason_ = "no CUDA device (cudaErrorNoDevice): check that a GPU is installed and visible (CUDA_VISIBLE_DEVICES)";
    cudaGetLastError();
    return;
  }
  if (err != cudaSuccess) {
    reason_ = cuda_error_message(err, "CUDA initialisation failed") + ": check the NVIDIA driver installation";
    cudaGetLastError();
    return;
  }
  n = std::min(n, kMaxTrackedDevices);
  devices_.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    if (const cudaError_t e = cudaGetDeviceProperties(&devices_[size_t(i)].prop, i); e != cudaSuccess) {
      cudaGetLastError();
      reason_ = cuda_error_message(e, "cudaGetDeviceProperties(" + std::to_string(i) + ")") +
                ": check the NVIDIA driver installation";
      devices_.clear();
      return;
    }
    devices_[size_t(i)].staging = std::make_unique<Staging>();
  }
  RawMemorySource source;
  source.allocate = [](void*, int device, size_t nbytes) -> void* {
    try {
      DeviceGuard guard(device);
      void* p = nullptr;
      // A stream capture in progress on this thread (Note [Device graphs]) prohibits cudaMalloc in
      // its thread-local mode: relaxed for this call only, as cudaMalloc is not recorded anyway.
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      cudaThreadExchangeStreamCaptureMode(&mode);
      const cudaError_t e = cudaMalloc(&p, nbytes);
      cudaThreadExchangeStreamCaptureMode(&mode);
      if (e != cudaSuccess) {
        cudaGetLastError();  // out of memory is not sticky: clear it, the allocator retries or reports
        if (e != cudaErrorMemoryAllocation) sdk::log(TESSERA_LOG_ERROR, "cuda", cuda_error_message(e, "cudaMalloc"));
        return nullptr;
      }
      return p;
    } catch (const std::exception& e) {
      sdk::log(TESSERA_LOG_ERROR, "cuda", std::string("cudaMalloc: ") + e.what());
      return nullptr;
    }
  };
  source.release = [](void*, int device, void* ptr) {
    try {
      DeviceGuard guard(device);
      check_cleanup(cudaFree(ptr), "cudaFree");
    } catch (const std::exception& e) {
      sdk::log(TESSERA_LOG_ERROR, "cuda", std::string("cudaFree: ") + e.what());
    }
  };
  // Events of the stream-ordered frees (Note [Stream-ordered allocation]): no timing, only completion.
  sdk::StreamEventOps events;
  events.record = [](void*, int device, void* stream) -> void* {
    try {
      DeviceGuard guard(device);
      cudaEvent_t e = nullptr;
      check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      if (const cudaError_t err = cudaEventRecord(e, static_cast<cudaStream_t>(stream)); err != cudaSuccess) {
        check_cleanup(cudaEventDestroy(e), "cudaEventDestroy");
        check_cuda(err, "cudaEventRecord");
      }
      return e;
    } catch (const std::exception& e) {
      sdk::log(TESSERA_LOG_ERROR, "cuda", std::string("record_stream: ") + e.what());
      return nullptr;
    }
  };
  events.query = [](void*, int, void* event) {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) cudaGetLastError();
    return true;
  };
  events.synchronize = [](void*, int, void* event) {
    if (cudaEventSynchronize(static_cast<cudaEvent_t>(event)) != cudaSuccess) cudaGetLastError();
  };
  events.destroy = [](void*, int device, void* event) {
    try {
      DeviceGuard guard(device);
      check_cleanup(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "cudaEventDestroy");
    } catch (const std::exception& e) {
      sdk::log(TESSERA_LOG_ERROR, "cuda", std::string("record_stream: ") + e.what());
    }
  };
  allocator_ = std::make_unique<CachingAllocator>(source, n, events);
  count_ = n;
}

int Backend::device_count() {
  std::call_once(discover_once_, [this] { discover(); });
  return count_;
}

const std::string& Backend::unavailable_reason() {
  device_count();
  return reason_;
}

void Backend::check_device(int device) {
  const int n = device_count();
  if (n == 0) throw sdk::Error(TESSERA_STATUS_UNAVAILABLE, "cuda: " + reason_);
  if (device < 0 || device >= n)
    throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, "cuda: device index " + std::to_string(device) +
                                                          " out of range: expected 0.." + std::to_string(n - 1));
}

CachingAllocator& Backend::allocator() {
  device_count();
  if (!allocator_) throw sdk::Error(TESSERA_STATUS_UNAVAILABLE, "cuda: " + reason_);
  return *allocator_;
}

cudaError_t Backend::peer_copy(int dst_device, void* dst, int src_device, const void* src, size_t nbytes,
                               cudaStream_t stream) {
  if (nbytes == 0) return cudaSuccess;
  int stream_device = -1;
  if (stream) check_cuda(cudaStreamGetDevice(stream, &stream_device), "cudaStreamGetDevice");
  const cudaStream_t dst_stream = stream_device == dst_device ? stream : nullptr;
  const cudaStream_t src_stream = stream_device == src_device ? stream : nullptr;
  {
    std::lock_guard<std::mutex> lock(peer_mutex_);
    const std::pair<int, int> pair{dst_device, src_device};
    if (std::find(peer_enabled_.begin(), peer_enabled_.end(), pair) == peer_enabled_.end()) {
      int can = 0;
      check_cuda(cudaDeviceCanAccessPeer(&can, dst_device, src_device), "cudaDeviceCanAccessPeer");
      if (can) {
        DeviceGuard guard(dst_device);
        const cudaError_t e = cudaDeviceEnablePeerAccess(src_device, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
        else check_cuda(e, "cudaDeviceEnablePeerAccess(" + std::to_string(src_device) + ")");
      }
      peer_enabled_.push_back(pair);
    }
  }
  DeviceGuard guard(src_device);
  ScopedEvent produced(src_device);
  check_cuda(cudaEventRecord(produced.event, src_stream), "cudaEventRecord (peer copy source)");
  check_cuda(cudaSetDevice(dst_device), "cudaSetDevice(" + std::to_string(dst_device) + ")");
  DeviceGuard::mark_used(dst_device);
  ScopedEvent copied(dst_device);
  check_cuda(cudaStreamWaitEvent(dst_stream, produced.event, 0), "cudaStreamWaitEvent (peer copy destination)");
  if (const cudaError_t e = cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, dst_stream); e != cudaSuccess)
    return e;
  check_cuda(cudaEventRecord(copied.event, dst_stream), "cudaEventRecord (peer copy destination)");
  check_cuda(cudaSetDevice(src_device), "cudaSetDevice(" + std::to_string(src_device) + ")");
  check_cuda(cudaStreamWaitEvent(src_stream, copied.event, 0), "cudaStreamWaitEvent (peer copy source)");
  return cudaSuccess;
}

cudaError_t Backend::copy_from_host(int device, void* dst, const void* src, size_t nbytes, cudaStream_t stream) {
  if (nbytes == 0) return cudaSuccess;
  Staging& st = *devices_[size_t(device)].staging;
  std::lock_guard<std::mutex> lock(st.mutex);
  if (cudaError_t e = st.init(); e != cudaSuccess) return e;
  size_t done = 0;
  for (int i = 0; done < nbytes; i ^= 1) {
    const size_t len = std::min(kStagingChunk, nbytes - done);
    if (cudaError_t e = cudaEventSynchronize(st.done[i]); e != cudaSuccess) return e;  // buffer free again
    std::memcpy(st.buffer[i], static_cast<const char*>(src) + done, len);
    if (cudaError_t e = cudaMemcpyAsync(static_cast<char*>(dst) + done, st.buffer[i], len, cudaMemcpyHostToDevice, stream);
        e != cudaSuccess)
      return e;
    if (cudaError_t e = cudaEventRecord(st.done[i], stream); e != cudaSuccess) return e;
    done += len;
  }
  return cudaSuccess;
}

cudaError_t Backend::copy_to_host(int device, void* dst, const void* src, size_t nbytes, cudaStream_t stream) {
  if (nbytes == 0) return cudaSuccess;
  Staging& st = *devices_[size_t(device)].staging;
  std::lock_guard<std::mutex> lock(st.mutex);
  if (cudaError_t e = st.init(); e != cudaSuccess) return e;
  const size_t chunks = (nbytes + kStagingChunk - 1) / kStagingChunk;
  auto issue = [&](size_t c) -> cudaError_t {
    const int b = int(c & 1);
    const size_t off = c * kStagingChunk, len = std::min(kStagingChunk, nbytes - off);
    if (cudaError_t e = cudaEventSynchronize(st.done[b]); e != cudaSuccess) return e;
    if (cudaError_t e = cudaMemcpyAsync(st.buffer[b], static_cast<const char*>(src) + off, len, cudaMemcpyDeviceToHost, stream);
        e != cudaSuccess)
      return e;
    return cudaEventRecord(st.done[b], stream);
  };
  if (cudaError_t e = issue(0); e != cudaSuccess) return e;
  for (size_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks)
      if (cudaError_t e = issue(c + 1); e != cudaSuccess) return e;
    const int b = int(c & 1);
    const size_t off = c * kStagingChunk, len = std::min(kStagingChunk, nbytes - off);
    if (cudaError_t e = cudaEventSynchronize(st.done[b]); e != cudaSuccess) return e;
    std::memcpy(static_cast<char*>(dst) + off, st.buffer[b], len);
  }
  return cudaSuccess;
}

int Backend::sm_count(int device) {
  if (device_count() == 0 || device < 0 || device >= count_) return 1;
  return devices_[size_t(device)].prop.multiProcessorCount;
}

int Backend::compute_capability(int device) {
  if (device_count() == 0 || device < 0 || device >= count_) return 0;
  const cudaDeviceProp& p = devices_[size_t(device)].prop;
  return p.major * 10 + p.minor;
}

std::string Backend::properties_json(int device) {
  std::ostringstream os;
  if (device_count() == 0) {
    os << R"({"available": false, "reason": ")" << json_escape(reason_) << "\"}";
    return os.str();
  }
  if (device < 0 || device >= count_) {
    os << R"({"available": false, "reason": "device index )" << device << " out of range (0.." << count_ - 1 << ")\"}";
    return os.str();
  }
  const cudaDeviceProp& p = devices_[size_t(device)].prop;
  int driver = 0, runtime = 0;
  check_cuda(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  check_cuda(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  const AllocatorStats s = allocator_->stats(device);
  const CublasLtApi& lt = cublaslt_api();
  const CudnnApi& dnn = cudnn_api();
  os << "{\"available\": true"
     << ", \"name\": \"" << json_escape(p.name) << "\""
     << ", \"memory\": " << p.totalGlobalMem << ", \"sm_count\": " << p.multiProcessorCount
     << ", \"compute_capability\": \"" << p.major << "." << p.minor << "\""
     << ", \"capability\": {\"major\": " << p.major << ", \"minor\": " << p.minor << "}"
     << ", \"l2_cache_bytes\": " << p.l2CacheSize
     << ", \"shared_memory_per_block_optin\": " << p.sharedMemPerBlockOptin
     << ", \"warp_size\": " << p.warpSize << ", \"pci_bus_id\": " << p.pciBusID
     << ", \"driver_version\": " << driver << ", \"runtime_version\": " << runtime << ", \"cublaslt\": \""
     << json_escape(lt.loaded ? lt.path + " (version " + std::to_string(lt.version) + ")" : lt.error) << "\""
     << ", \"cudnn\": \""
     << json_escape(dnn.loaded ? dnn.path + " (version " + std::to_string(dnn.version) + ")" : dnn.error)
     << "\""
     << ", \"cudnn_attention\": \""
     << json_escape(!cudnn_attention_built()
                        ? "built without cudnn-frontend (pip install nvidia-cudnn-frontend)"
                    : dnn.loaded ? "float16/bfloat16 SDPA through cuDNN's fused attention"
                                 : "off: " + dnn.error)
     << "\", \"cudnn_sdpa_calls\": " << cudnn_sdpa_calls()
     << ", \"cudnn_poolings\": " << cudnn_poolings_total()
     << ", \"cudnn_batch_norms\": " << cudnn_batch_norms_total()
     << ", \"allocator\": {\"allocated\": " << s.allocated_bytes << ", \"reserved\": " << s.reserved_bytes
     << ", \"cached\": " << s.cached_bytes << ", \"peak_allocated\": " << s.peak_allocated_bytes
     << ", \"hits\": " << s.hits << ", \"misses\": " << s.misses << ", \"splits\": " << s.splits
     << ", \"merges\": " << s.merges << ", \"segments\": " << s.segments << "}}";
  return os.str();
}

void Backend::shutdown() {
  if (count_ == 0) return;
  for (int d = 0; d < count_; ++d) {
    try {
      DeviceGuard guard(d);
      check_cleanup(cudaDeviceSynchronize(), "shutdown: cudaDeviceSynchronize");
      if (devices_[size_t(d)].staging) devices_[size_t(d)].staging->release();
    } catch (const std::exception& e) {
      sdk::log(TESSERA_LOG_ERROR, "cuda", std::string("shutdown: ") + e.what());
    }
  }
  if (allocator_) allocator_->empty_cache();
}

DeviceGuard::DeviceGuard(int device) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) {
    const bool used = previous_ >= 0 && previous_ < kMaxTrackedDevices && ((t_used_devices >> previous_) & 1u);
    restore_ = guard_restores_previous(previous_, device, used, !used && context_current());
    check_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }
  mark_used(device);
}
DeviceGuard::~DeviceGuard() {
  if (restore_) check_cleanup(cudaSetDevice(previous_), "cudaSetDevice (restoring the previous device)");
}
void DeviceGuard::mark_used(int device) {
  if (device >= 0 && device < kMaxTrackedDevices) t_used_devices |= uint64_t(1) << device;
}

DeviceBuffer::DeviceBuffer(int device, size_t nbytes, cudaStream_t stream) : device_(device) {
  if (nbytes == 0) return;
  ptr_ = Backend::instance().allocator().allocate(device, nbytes, stream);
  if (!ptr_)
    throw sdk::Error(TESSERA_STATUS_OUT_OF_MEMORY, "cuda:" + std::to_string(device) + ": out of memory allocating " +
                                                       std::to_string(nbytes) + " bytes of temporary storage");
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) Backend::instance().allocator().free(device_, ptr_);
}

// ---------------------------------------------------------------- device interface

namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

int32_t iface_device_count(void*, char* reason, size_t capacity) {
  Backend& b = Backend::instance();
  const int n = b.device_count();
  if (n == 0 && reason && capacity > 0) {
    const std::string& r = b.unavailable_reason();
    const size_t len = std::min(capacity - 1, r.size());
    std::memcpy(reason, r.data(), len);
    reason[len] = '\0';
  } else if (reason && capacity > 0) {
    reason[0] = '\0';
  }
  return n;
}

tessera_status_t iface_get_current(void*, int32_t* out) {
  return guarded([&] {
    Backend::instance().check_device(0);
    int d = 0;
    check_cuda(cudaGetDevice(&d), "cudaGetDevice");
    *out = d;
  });
}

tessera_status_t iface_set_current(void*, int32_t index) {
  return guarded([&] {
    Backend::instance().check_device(index);
    check_cuda(cudaSetDevice(index), "cudaSetDevice(" + std::to_string(index) + ")");
    DeviceGuard::mark_used(index);
  });
}

tessera_status_t iface_allocate(void*, int32_t device, uint64_t nbytes, void** out) {
  return guarded([&] {
    Backend& b = Backend::instance();
    b.check_device(device);
    *out = nullptr;
    if (nbytes == 0) return;
    // Tagged with the legacy default stream, the one the runtime's calls use (Note [CUDA caching
    // allocator]): the stream of the kernel that will write the block is not known here.
    *out = b.allocator().allocate(device, size_t(nbytes), nullptr);
    if (!*out) {
      const AllocatorStats s = b.allocator().stats(device);
      throw sdk::Error(TESSERA_STATUS_OUT_OF_MEMORY,
                       "cuda:" + std::to_string(device) + ": out of memory allocating " + std::to_string(nbytes) +
                           " bytes (allocated " + std::to_string(s.allocated_bytes) + ", reserved " +
                           std::to_string(s.reserved_bytes) + " bytes): free tensors or use smaller batches");
    }
  });
}

tessera_status_t iface_memory_stats(void*, int32_t device, tessera_memory_stats_t* out) {
  return guarded([&] {
    Backend& b = Backend::instance();
    b.check_device(device);
    const AllocatorStats s = b.allocator().stats(device);
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, allocated_bytes)) out->allocated_bytes = s.allocated_bytes;
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, reserved_bytes)) out->reserved_bytes = s.reserved_bytes;
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, peak_allocated_bytes))
      out->peak_allocated_bytes = s.peak_allocated_bytes;
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, num_allocations)) out->num_allocations = s.active_blocks;
  });
}

void iface_free(void*, int32_t device, void* handle) {
  if (!handle) return;
  Backend& b = Backend::instance();
  if (b.device_count() == 0) return;
  if (!b.allocator().free(device, handle))
    sdk::log(TESSERA_LOG_ERROR, "cuda", "memory_free: pointer not allocated by the cuda plugin on device " + std::to_string(device));
}

tessera_status_t iface_copy_from_host(void*, int32_t device, void* dst, uint64_t dst_offset, const void* src,
                                      uint64_t nbytes, void* stream) {
  return guarded([&] {
    Backend& b = Backend::instance();
    b.check_device(device);
    DeviceGuard guard(device);
    check_cuda(b.copy_from_host(device, static_cast<char*>(dst) + dst_offset, src, size_t(nbytes), as_stream(stream)),
               "cuda:" + std::to_string(device) + ": copy of " + std::to_string(nbytes) + " bytes from the host");
  });
}

tessera_status_t iface_copy_to_host(void*, int32_t device, void* dst, const void* src, uint64_t src_offset,
                                    uint64_t nbytes, void* stream) {
  return guarded([&] {
    Backend& b = Backend::instance();
    b.check_device(device);
    DeviceGuard guard(device);
    check_cuda(b.copy_to_host(device, dst, static_cast<const char*>(src) + src_offset, size_t(nbytes), as_stream(stream)),
               "cuda:" + std::to_string(device) + ": copy of " + std::to_string(nbytes) + " bytes to the host");
  });
}

tessera_status_t iface_copy_device(void*, int32_t dst_device, void* dst, uint64_t dst_offset, int32_t src_device,
                                   const void* src, uint64_t src_offset, uint64_t nbytes, void* stream) {
  return guarded([&] {
    Backend& b = Backend::instance();
    b.check_device(dst_device);
    b.check_device(src_device);
    char* d = static_cast<char*>(dst) + dst_offset;
    const char* s = static_cast<const char*>(src) + src_offset;
    if (dst_device == src_device) {
      DeviceGuard guard(src_device);
      check_cuda(cudaMemcpyAsync(d, s, size_t(nbytes), cudaMemcpyDeviceToDevice, as_stream(stream)), "cudaMemcpyAsync (device to device)");
    } else {
      check_cuda(b.peer_copy(dst_device, d, src_device, s, size_t(nbytes), as_stream(stream)),
                 "cudaMemcpyPeerAsync (cuda:" + std::to_string(src_device) + " to cuda:" + std::to_string(dst_device) + ")");
    }
  });
}

tessera_status_t iface_stream_create(void*, int32_t device, void** out) {
  return guarded([&] {
    Backend::instance().check_device(device);
    DeviceGuard guard(device);
    cudaStream_t s = nullptr;
    // Blocking with respect to the legacy default stream, which the runtime's default work uses.
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamDefault), "cudaStreamCreate");
    *out = s;
  });
}

void iface_stream_destroy(void*, int32_t device, void* stream) {
  if (!stream || Backend::instance().device_count() == 0) return;
  try {
    DeviceGuard guard(device);
    check_cleanup(cudaStreamDestroy(as_stream(stream)), "cudaStreamDestroy");
  } catch (const std::exception& e) {
    sdk::log(TESSERA_LOG_ERROR, "cuda", std::string("stream_destroy: ") + e.what());
  }
}

tessera_status_t iface_stream_synchronize(void*, int32_t device, void* stream) {
  return guarded([&] {
    Backend::instance().check_device(device);
    DeviceGuard guard(device);
    check_cuda(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
  });
}

tessera_status_t iface_event_create(void*, int32_t device, void** out) {
  return guarded([&] {
    Backend::instance().check_device(device);
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    // With timing: Event::elapsed_time and the profiler's device times read it (event_elapsed_time).
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreate");
    *out = e;
  });
}

void iface_event_destroy(void*, int32_t device, void* event) {
  if (!event || Backend::instance().device_count() == 0) return;
  try {
    DeviceGuard guard(device);
    check_cleanup(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "cudaEventDestroy");
  } catch (const std::exception& e) {
    sdk::log(TESSERA_LOG_ERROR, "cuda", std::string("event_destroy: ") + e.what());
  }
}

tessera_status_t iface_event_record(void*, int32_t device, void* event, void* stream) {
  return guarded([&] {
    Backend::instance().check_device(device);
    DeviceGuard guard(device);
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(event), as_stream(stream)), "cudaEventRecord");
  });
}

tessera_status_t iface_event_wait(void*, int32_t device, void* event, void* stream) {
  return guarded([&] {
    Backend::instance().check_device(device);
    DeviceGuard guard(device);
    check_cuda(cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(event), 0), "cudaStreamWaitEvent");
  });
}

tessera_status_t iface_event_synchronize(void*, int32_t device, void* event) {
  return guarded([&] {
    Backend::instance().check_device(device);
    check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize");
  });
}

tessera_status_t iface_event_elapsed_time(void*, int32_t device, void* start, void* end, double* out_ms) {
  return guarded([&] {
    Backend::instance().check_device(device);
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)),
               "cudaEventElapsedTime");
    *out_ms = double(ms);
  });
}

tessera_status_t iface_memory_record_stream(void*, int32_t device, void* handle, void* stream) {
  return guarded([&] {
    Backend& b = Backend::instance();
    b.check_device(device);
    if (!b.allocator().record_stream(device, handle, stream))
      throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, "cuda:" + std::to_string(device) +
                                                            ": record_stream: the memory was not allocated by the "
                                                            "cuda plugin on this device");
  });
}

tessera_status_t iface_device_synchronize(void*, int32_t device) {
  return guarded([&] {
    Backend::instance().check_device(device);
    DeviceGuard guard(device);
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  });
}

size_t iface_properties(void*, int32_t device, char* buffer, size_t capacity) {
  std::string json;
  try {
    json = Backend::instance().properties_json(device);
  } catch (const std::exception& e) {
    json = std::string(R"({"available": false, "reason": "properties failed"})");
  }
  if (buffer && capacity > 0) {
    const size_t len = std::min(capacity - 1, json.size());
    std::memcpy(buffer, json.data(), len);
    buffer[len] = '\0';
  }
  return json.size();
}

const tessera_device_interface_t kInterface = {
    .struct_size = sizeof(tessera_device_interface_t),
    .reserved_ = 0,
    .device_count = iface_device_count,
    .device_get_current = iface_get_current,
    .device_set_current = iface_set_current,
    .memory_allocate = iface_allocate,
    .memory_free = iface_free,
    .memory_copy_from_host = iface_copy_from_host,
    .memory_copy_to_host = iface_copy_to_host,
    .memory_copy_device = iface_copy_device,
    .stream_create = iface_stream_create,
    .stream_destroy = iface_stream_destroy,
    .stream_synchronize = iface_stream_synchronize,
    .event_create = iface_event_create,
    .event_destroy = iface_event_destroy,
    .event_record = iface_event_record,
    .event_wait = iface_event_wait,
    .event_synchronize = iface_event_synchronize,
    .device_synchronize = iface_device_synchronize,
    .device_properties = iface_properties,
    .memory_stats = iface_memory_stats,
    .event_elapsed_time = iface_event_elapsed_time,
    .memory_record_stream = iface_memory_record_stream,
    // ABI 1.3 (memory info, pinned host memory): not yet provided here (docs/cuda.md).
    .memory_info = nullptr,
    .pinned_allocate = nullptr,
    .pinned_free = nullptr,
    .memory_copy_from_pinned = nullptr,
};

}  // namespace

const tessera_device_interface_t* device_interface() { return &kInterface; }

}  // namespace tessera::cuda

// ---------------------------------------------------------------- extra exported entry points

extern "C" TESSERA_PLUGIN_EXPORT int tessera_cuda_memory_stats(int32_t device, tessera_cuda_memory_stats_t* out) {
  using tessera::cuda::Backend;
  Backend& b = Backend::instance();
  if (!out || b.device_count() == 0 || device < 0 || device >= b.device_count()) return -1;
  const tessera::cuda::AllocatorStats s = b.allocator().stats(device);
  tessera_cuda_memory_stats_t r{};
  r.struct_size = sizeof(r);
  r.allocated_bytes = s.allocated_bytes;
  r.reserved_bytes = s.reserved_bytes;
  r.cached_bytes = s.cached_bytes;
  r.peak_allocated_bytes = s.peak_allocated_bytes;
  r.hits = s.hits;
  r.misses = s.misses;
  r.splits = s.splits;
  r.merges = s.merges;
  r.segments = s.segments;
  // A caller built against an older, shorter struct gets the common prefix.
  const size_t n = std::min<size_t>(out->struct_size ? out->struct_size : sizeof(r), sizeof(r));
  r.struct_size = uint32_t(n);
  std::memcpy(out, &r, n);
  return 0;
}

