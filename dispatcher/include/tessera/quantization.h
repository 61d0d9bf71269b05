// Quantized linear layers on int8 kernels (docs/quantization.md). The numerics follow PyTorch's
// quantized linear: int32 accumulation of (x_q - zp_x) * w_q, requantised by s_x * s_w / s_out with
// round half to even and saturation to the output type.
#pragma once
#include <cstdint>
#include <optional>

#include "tessera/tensor.h"

namespace tessera::quantization {

// Int8 weights of a linear layer [out_features, in_features], quantised per output channel
// (symmetric: zero point 0), packed once into the device's int8 layout. Immutable once made;
// copies share the packed bytes. Thread-safe to use from several calls at once.
class TESSERA_API PackedLinearWeight {
 public:
  PackedLinearWeight() = default;
  // weight: int8 [out, in]; scales: float32 [out], finite and positive. Throws tessera::Error on
  // any other input, naming it.
  PackedLinearWeight(const Tensor& weight, const Tensor& scales);

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  const Tensor& scales() const { return scales_; }
  // The backend's opaque packed bytes (Note [Packed int8 weights]).
  const Tensor& packed() const { return packed_; }
  bool defined() const { return packed_.defined(); }

 private:
  Tensor packed_, scales_;
  int64_t in_features_ = 0, out_features_ = 0;
};

// The int8 linear on integer representations: `input` is the uint8 representation [..., in] of
// activations with (input_scale, input_zero_point); the result is uint8 requantised to
// (output_scale, output_zero_point) when out_dtype is kUInt8, or the float32 value
// s_x * s_w * acc + bias when out_dtype is kFloat32 (output_scale/zero point unused). bias is
// float32 [out] or absent; relu clamps at zero before requantisation.
TESSERA_API Tensor linear_int8(const Tensor& input, double input_scale, int64_t input_zero_point,
                               const PackedLinearWeight& weight, const std::optional<Tensor>& bias,
                               double output_scale, int64_t output_zero_point, bool relu, DType out_dtype);

}  // namespace tessera::quantization
