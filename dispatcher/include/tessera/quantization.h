// Quantized linear layers on int8 kernels (docs/quantization.md). The numerics follow PyTorch's
// quantized linear: int32 accumulation of (x_q - zp_x) * w_q, requantised by s_x * s_w / s_out with
// round half to even and saturation to the output type.
#pragma once
#include <cstdint>
#include <optional>

#include "tessera/tensor.h"

namespace tessera {

// ---- quantized tensors (PyTorch's torch.quantize_per_tensor & co.); CPU only.
// A quantized tensor of `dtype` (kQInt8, kQUInt8, kQInt32) from float32 `x`:
// clamp(round_half_even(x * (1.0f / scale)) + zero_point, qmin, qmax), in float32 as PyTorch.
// Throws tessera::Error for a non-float32 x, a non-quantized dtype, a scale that is not finite and
// positive, or a zero point outside the dtype's range.
TESSERA_API Tensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, DType dtype);
// One (scale, zero point) per index of dim `axis` (0 <= axis < x.dim()); `scales` 1-D floating and
// `zero_points` 1-D integer, both of x.size(axis) values.
TESSERA_API Tensor quantize_per_channel(const Tensor& x, const Tensor& scales, const Tensor& zero_points,
                                        int64_t axis, DType dtype);
// float32 values of a quantized tensor; a tensor that is not quantized is returned as it is.
TESSERA_API Tensor dequantize(const Tensor& q);
// The integer representation (int8 / uint8 / int32) of a quantized tensor, as a new tensor.
TESSERA_API Tensor int_repr(const Tensor& q);

}  // namespace tessera

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
  // Quantizes float weights [out, in] per output channel, symmetric qint8 as PyTorch's
  // PerChannelMinMaxObserver (per_channel_symmetric): scale_c = max(|w_c|) / 127.5 (at least
  // float32 epsilon), zero point 0, then packs them.
  static PackedLinearWeight from_float(const Tensor& weight);

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

// linear_int8 on quantized tensors: `input` is quint8 per-tensor affine [..., in]; the result is
// quint8 per-tensor affine with (output_scale, output_zero_point). What the lowering of
// dequantize -> linear (-> relu) -> quantize runs.
TESSERA_API Tensor quantized_linear(const Tensor& input, const PackedLinearWeight& weight,
                                    const std::optional<Tensor>& bias, double output_scale,
                                    int64_t output_zero_point, bool relu = false);

// PyTorch's choice of per-tensor affine parameters for values in [min_val, max_val] (its
// MinMaxObserver): the range is widened to include 0, scale = (max - min) / (qmax - qmin) (at least
// float32 epsilon), zero_point = qmin - round(min / scale) clamped to [qmin, qmax].
struct QParams {
  double scale;
  int64_t zero_point;
};
TESSERA_API QParams choose_qparams(double min_val, double max_val, DType dtype);

// Dynamic quantisation of a linear layer: int8 weights quantised and packed once (from_float),
// activations quantised per call to quint8 from their own min and max (choose_qparams), float32
// output s_x * s_w * acc + bias. Thread-safe: forward() keeps no state.
class TESSERA_API DynamicQuantizedLinear {
 public:
  // weight float [out, in]; bias float [out] or absent.
  explicit DynamicQuantizedLinear(const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt);
  // x float32 [..., in] -> float32 [..., out].
  Tensor forward(const Tensor& x) const;
  const PackedLinearWeight& weight() const { return weight_; }

 private:
  PackedLinearWeight weight_;
  std::optional<Tensor> bias_;
};

}  // namespace tessera::quantization
