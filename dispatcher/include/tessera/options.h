// TensorOptions: dtype + device (+ pinned host memory) for factories, libtorch style:
//   tessera::zeros({2, 3}, tessera::dtype(tessera::kFloat32).device("cpu"))
#pragma once
#include <optional>

#include "tessera/device.h"
#include "tessera/dtype.h"

namespace tessera {

class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}    // NOLINT(google-explicit-constructor)
  TensorOptions(Device d) : device_(d) {}  // NOLINT(google-explicit-constructor)
  TensorOptions(const char* d) : device_(Device(d)) {}  // NOLINT(google-explicit-constructor)
  TensorOptions dtype(DType t) const { TensorOptions o = *this; o.dtype_ = t; return o; }
  TensorOptions device(Device d) const { TensorOptions o = *this; o.device_ = d; return o; }
  // A host tensor in pinned memory for fast, asynchronous transfers to `accelerator`'s device
  // type, from its plugin's host allocator (pinned_allocate, ABI 1.3); ordinary host memory, with
  // Tensor::is_pinned() false, when the plugin offers none (the host default). The tensor's own
  // device stays the CPU (PyTorch's pin_memory=True). Factories that take it: empty, zeros, ones,
  // full.
  TensorOptions pinned_memory(Device accelerator) const {
    TensorOptions o = *this;
    o.pinned_for_ = accelerator;
    return o;
  }
  std::optional<Device> pinned_for() const { return pinned_for_; }
  std::optional<DType> dtype_opt() const { return dtype_; }
  DType dtype_or(DType fallback) const { return dtype_.value_or(fallback); }
  Device device() const { return device_; }

 private:
  std::optional<DType> dtype_;
  Device device_{DeviceType::CPU, -1};
  std::optional<Device> pinned_for_;
};

inline TensorOptions dtype(DType t) { return TensorOptions().dtype(t); }
inline TensorOptions device(Device d) { return TensorOptions().device(d); }

}  // namespace tessera
