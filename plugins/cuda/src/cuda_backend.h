// The CUDA plugin's process-wide state: device discovery, the caching allocator, pinned staging
// buffers, cuBLASLt handles, and the device interface of the plugin ABI.
// Note [No CUDA call before first use]: loading the plugin and registering its kernels make no CUDA
// call; the first device query (device_count, allocation, ...) initialises the runtime, so the
// plugin loads on a machine without a driver and reports zero devices with the reason.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "caching_allocator.h"
#include "tessera/plugin_abi.h"
#include "tessera/sdk.hpp"

namespace tessera::cuda {

// "what: cudaErrorX (description)".
std::string cuda_error_message(cudaError_t err, const std::string& what);

class Backend {
 public:
  static Backend& instance();

  // Discovers the devices once; 0 and a one-line reason with a fix-it hint when none is usable.
  int device_count();
  const std::string& unavailable_reason();
  // Throws sdk::Error(UNAVAILABLE) with the reason when no device is usable, and
  // sdk::Error(INVALID_ARGUMENT) for an index out of range.
  void check_device(int device);

  CachingAllocator& allocator();  // requires device_count() > 0

  // Note [CUDA peer copies]: copies `nbytes` from `src` on `src_device` to `dst` on `dst_device`,
  // ordered after the work already queued on both devices (the source's producer and the
  // destination's pending readers/writers), and orders later work on both devices after the copy
  // (so the destination reads the bytes only once they arrived, and the source's memory is not
  // reused while the copy reads it). `stream` (nullptr: each device's legacy default stream) is
  // used on the device it belongs to; the other device uses its legacy default stream. Peer access
  // is enabled once per pair where the hardware allows it (otherwise the driver stages the copy).
  cudaError_t peer_copy(int dst_device, void* dst, int src_device, const void* src, size_t nbytes, cudaStream_t stream);

  // Copies between pageable host memory and the device through pinned staging buffers.
  // Host-to-device returns once the host bytes are staged (the device copy may still be running on
  // `stream`); device-to-host returns when the host buffer holds the bytes.
  cudaError_t copy_from_host(int device, void* dst, const void* src, size_t nbytes, cudaStream_t stream);
  cudaError_t copy_to_host(int device, void* dst, const void* src, size_t nbytes, cudaStream_t stream);

  std::string properties_json(int device);
  int sm_count(int device);
  int compute_capability(int device);  // major * 10 + minor

  void shutdown();

 private:
  Backend() = default;
  struct Staging;
  struct DeviceInfo {
    cudaDeviceProp prop{};
    std::unique_ptr<Staging> staging;
  };
  void discover();

  std::once_flag discover_once_;
  int count_ = 0;
  std::string reason_;
  std::vector<DeviceInfo> devices_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::mutex peer_mutex_;
  std::vector<std::pair<int, int>> peer_enabled_;  // (accessing device, peer) pairs already enabled
};

// Note [CUDA device guard]: cudaGetDevice answers 0 on a thread that never chose a device, without
// creating a context, but cudaSetDevice(0) creates device 0's primary context (hundreds of MB).
// So the guard restores the previous device only when the thread really used it: it made it
// current through the plugin (set_current or an earlier guard), or a context is current on it
// (the application chose it). A thread that only ever worked on cuda:1 never touches device 0.
inline bool guard_restores_previous(int previous, int device, bool thread_used_previous, bool context_current) {
  return previous >= 0 && previous != device && (thread_used_previous || context_current);
}

// Sets the current device for the scope; restores the previous one per Note [CUDA device guard].
// Throws sdk::Error when the device cannot be made current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  // Records that the calling thread made `device` current (iface set_current).
  static void mark_used(int device);

 private:
  int previous_ = -1;
  bool restore_ = false;
};

// Temporary device memory from the caching allocator, returned at scope exit (stream-ordered: safe
// for later work on the same stream). Throws sdk::Error(OUT_OF_MEMORY) naming the size.
class DeviceBuffer {
 public:
  DeviceBuffer(int device, size_t nbytes, cudaStream_t stream);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  int device_;
  void* ptr_ = nullptr;
};

// Throws sdk::Error(INTERNAL) with cuda_error_message when err != cudaSuccess.
void check_cuda(cudaError_t err, const std::string& what);

// An exception as the status a C entry point returns (an sdk::Error keeps its code).
inline tessera_status_t to_status(const std::exception& e) {
  if (auto* se = dynamic_cast<const sdk::Error*>(&e)) return sdk::make_status(se->code(), se->what());
  return sdk::make_status(TESSERA_STATUS_INTERNAL, std::string("cuda: ") + e.what());
}

// Runs `f` for a C entry point: nothing escapes, an exception becomes the returned status.
template <typename F>
tessera_status_t guarded(F&& f) noexcept {
  try {
    f();
    return nullptr;
  } catch (const std::exception& e) {
    return to_status(e);
  }
}

// The plugin ABI's device interface backed by Backend::instance().
const tessera_device_interface_t* device_interface();

}  // namespace tessera::cuda
