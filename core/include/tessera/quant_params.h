// The quantization parameters a quantized tensor carries (docs/quantization.md): per-tensor affine
// (one scale and zero point) or per-channel affine (a scale and zero point per index of `axis`).
// Immutable once made and shared by views; a plain tensor has none (a null pointer in TensorImpl).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/dtype.h"
#include "tessera/export.h"
#include "tessera/intrusive_ptr.h"

namespace tessera {

enum class QScheme : int8_t { PerTensorAffine = 0, PerChannelAffine = 1 };

class TESSERA_API QuantParams : public RefCounted {
 public:
  // Throws tessera::Error naming the bad value: `dtype` not quantized, a scale that is not finite
  // and positive (or does not fit float32), a zero point outside the dtype's range.
  static IntrusivePtr<const QuantParams> per_tensor(DType dtype, double scale, int64_t zero_point);
  // As per_tensor, and `scales` and `zero_points` must have the same non-zero length; `axis` >= 0.
  static IntrusivePtr<const QuantParams> per_channel(DType dtype, std::vector<double> scales,
                                                   std::vector<int64_t> zero_points, int64_t axis);

  DType dtype() const { return dtype_; }
  QScheme qscheme() const { return qscheme_; }
  // Per-tensor: the one scale / zero point.
  double scale() const { return scales_[0]; }
  int64_t zero_point() const { return zero_points_[0]; }
  // Per-channel: one entry per index of axis() (per-tensor: one entry).
  const std::vector<double>& scales() const { return scales_; }
  const std::vector<int64_t>& zero_points() const { return zero_points_; }
  int64_t axis() const { return axis_; }

 private:
  QuantParams(DType dtype, QScheme q, std::vector<double> scales, std::vector<int64_t> zero_points, int64_t axis);
  DType dtype_;
  QScheme qscheme_;
  std::vector<double> scales_;
  std::vector<int64_t> zero_points_;
  int64_t axis_ = -1;
};

// The representable range of a quantized dtype: qint8 [-128, 127], quint8 [0, 255], qint32
// [-2^31, 2^31 - 1].
TESSERA_API int64_t quant_min(DType t);
TESSERA_API int64_t quant_max(DType t);
// PyTorch's quantize_val: clamp(nearbyint(x * (1.0f / float(scale))) + zero_point, qmin, qmax),
// the product and the rounding (half to even) in float32; NaN gives qmax as PyTorch's CPU kernel.
TESSERA_API int64_t quantize_value(float x, double scale, int64_t zero_point, DType dtype);

class Tensor;
namespace detail {
// The reference kernels of quantize_per_tensor / quantize_per_channel and dequantize, on CPU
// tensors of any strides (docs/quantization.md). `x` is float32; the result is a contiguous
// quantized tensor carrying `q`. Per-channel parameters must match x's size at q->axis().
TESSERA_API Tensor quantize_reference(const Tensor& x, IntrusivePtr<const QuantParams> q);
// float32: per-tensor float(q - zp) * float(scale); per-channel float(double(q - zp) * scale[c]),
// as PyTorch's CPU kernels compute them.
TESSERA_API Tensor dequantize_reference(const Tensor& q);
}  // namespace detail

// "qscheme per_tensor_affine, scale 0.5, zero_point 3" or "qscheme per_channel_affine, axis 0, scales [...],
// zero_points [...]".
TESSERA_API std::string qparams_str(const QuantParams& q);

}  // namespace tessera
