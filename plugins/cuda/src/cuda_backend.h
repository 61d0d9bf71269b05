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
  // The stream the calling thread last used on `device` (nullptr: the legacy default stream);
  // allocations are tied to it (Note [CUDA caching allocator]).
  static void* thread_stream(int device);
  static void set_thread_stream(int device, void* stream);

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
};

// Sets the current device for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_;
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

// The plugin ABI's device interface backed by Backend::instance().
const tessera_device_interface_t* device_interface();

}  // namespace tessera::cuda
