// The calling thread's CUDA device, shared by the CUDA plugin and its companion plugins
// (sparse_cuda, tessera_cuda_compiler), which link their own static CUDA runtime. Header-only.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace tessera::cuda {

// True when a CUDA context is current on the calling thread (driver cuCtxGetCurrent, reached
// through the runtime so that a plugin does not link the driver). False when unknown.
inline bool context_current() {
  using CtxGetCurrent = int (*)(void**);
  static CtxGetCurrent fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return CtxGetCurrent(nullptr);
    }
    return reinterpret_cast<CtxGetCurrent>(f);
  }();
  void* ctx = nullptr;
  return fn && fn(&ctx) == 0 && ctx != nullptr;
}

// The device guard of the companion plugins: makes `device` current for the scope and, by the rule
// of Note [CUDA device guard] (cuda_backend.h), restores the previous device only when a context is
// current on it, so that a thread working on cuda:1 does not create device 0's context on the way
// out. (The CUDA plugin's own DeviceGuard also remembers which devices the thread made current; a
// companion plugin has no such record.) `Fail` builds the exception thrown when `device` cannot be
// made current, from the message "cannot select cuda:<device>".
template <typename Fail>
class ScopedDevice {
 public:
  ScopedDevice(int device, Fail fail) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ == device) return;
    restore_ = previous_ >= 0 && context_current();
    if (cudaSetDevice(device) != cudaSuccess) {
      cudaGetLastError();
      throw fail("cannot select cuda:" + std::to_string(device));
    }
  }
  ~ScopedDevice() {
    if (restore_) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
  bool restore_ = false;
};

}  // namespace tessera::cuda
