// TensorOptions: dtype + device for factories, libtorch style:
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
  std::optional<DType> dtype_opt() const { return dtype_; }
  DType dtype_or(DType fallback) const { return dtype_.value_or(fallback); }
  Device device() const { return device_; }

 private:
  std::optional<DType> dtype_;
  Device device_{DeviceType::CPU, -1};
};

inline TensorOptions dtype(DType t) { return TensorOptions().dtype(t); }
inline TensorOptions device(Device d) { return TensorOptions().device(d); }

}  // namespace tessera
